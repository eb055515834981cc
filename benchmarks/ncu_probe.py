"""Workload for Nsight Compute: one call of pyg_tc's SpMM per case and one of
cuSPARSE, on the Reddit-shaped graph, so `ncu` can tell what bounds them.

    ncu --clock-control none -k regex:"spmm_units|csrmm|cusparse" \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \\
        --section WarpStateStats python benchmarks/ncu_probe.py
"""
import torch

from pyg_tc.bench.graphs import load_graph
from pyg_tc.formats import CSRGraph
from pyg_tc.ops import spmm_graph


def main():
    bg = load_graph('reddit', device='cuda')
    n = bg.num_nodes
    g = CSRGraph.from_coo(bg.edge_index[0], bg.edge_index[1], n, n)
    A = torch.sparse_csr_tensor(g.rowptr.long(), g.col.long(), torch.ones(g.num_edges, device='cuda'),
                                (n, n))
    for dt, F in ((torch.float32, 32), (torch.float32, 256), (torch.float16, 32), (torch.float16, 256)):
        x = torch.randn(n, F, device='cuda', dtype=dt)
        spmm_graph(g, x)
        torch.cuda.synchronize()
        print(f'case {dt} F={F}', flush=True)
    x = torch.randn(n, 256, device='cuda')
    torch.sparse.mm(A, x)
    torch.cuda.synchronize()


if __name__ == '__main__':
    main()
