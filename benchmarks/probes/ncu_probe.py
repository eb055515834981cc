"""Workload for Nsight Compute: one call of pyg_tc's SpMM per case and one of
cuSPARSE, on the Reddit-shaped graph, so `ncu` can tell what bounds them.

    ncu --clock-control none -k regex:"spmm_units|csrmm|cusparse|sgt_spmm" \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \\
        --section WarpStateStats python benchmarks/probes/ncu_probe.py [--sgt]

--sgt[=GRAPH,...]: the tensor-core SpMM against the CSR kernel instead, on
each graph (default the Reddit-shaped one) in RCM order, or in its own order
as `graph:native`; cases F = 16 / 32 in fp32 / fp16, narrowed by
--cases=float32:32,..., e.g. `NCU_ARGS=--sgt=tolokers bash benchmarks/gpu_run.sh OUTDIR ncu`;
without --sgt, --cases=dtype:F,... picks the CSR SpMM cases on the Reddit-shaped graph
(default float32:32,float32:256,float16:32,float16:256).
--sampled=S[,S...]: ES-SpMM instead, fp32 F = 32 on the Reddit-shaped graph, per cap: the
in-kernel uniform and bucket sampled SpMM, then pyg_tc's exact kernel on the pre-sampled graph
(`NCU_ARGS=--sampled=8,128 bash benchmarks/gpu_run.sh OUTDIR ncu`).
"""

import sys

import torch

from pyg_tc.bench.graphs import load_graph
from pyg_tc.formats import CSRGraph
from pyg_tc.ops import spmm_graph


def sgt_cases(name: str, cases=None):
    from pyg_tc.ops import sgt_of, sgt_spmm_cells
    from pyg_tc.transforms import rcm_order

    name, _, order = name.partition(':')
    bg = load_graph(name, device='cuda')
    n = bg.num_nodes
    ei = bg.edge_index if order == 'native' else torch.argsort(rcm_order(bg.edge_index, n))[bg.edge_index]
    g = CSRGraph.from_coo(ei[0], ei[1], n, n)
    w = torch.rand(g.num_edges, device='cuda')
    cells = sgt_of(g).cell_values(w)
    for dt, F in ((torch.float32, 16), (torch.float16, 16), (torch.float32, 32), (torch.float16, 32)):
        if cases is not None and f'{str(dt)[6:]}:{F}' not in cases:
            continue
        x = torch.randn(n, F, device='cuda', dtype=dt)
        spmm_graph(g, x, w)
        sgt_spmm_cells(g, x, cells)
        torch.cuda.synchronize()
        print(f'sgt case {dt} F={F}', flush=True)


def sampled_cases(caps):
    from pyg_tc.ops.es_spmm import row_order, sample_csr, sampled_spmm

    bg = load_graph('reddit', device='cuda')
    n = bg.num_nodes
    g = bg.csr()
    order = row_order(g)
    x = torch.randn(n, 32, device='cuda')
    for S in caps:
        rs, edge, scale = sample_csr(g.rowptr, S, 'uniform', seed=0)
        gs = CSRGraph.from_csr(rs, g.col.index_select(0, edge), n, g.chunk)
        w = scale.index_select(0, gs.row().long()).float()
        for code in (0, 1):  # uniform, bucket
            sampled_spmm(g.rowptr, g.col, None, x, None, order, S, code, 0, 'sum')
        spmm_graph(gs, x, w)
        torch.cuda.synchronize()
        print(f'sampled case S={S}: uniform, bucket, pre-sampled', flush=True)


def main():
    cases = None
    for a in sys.argv[1:]:
        if a.startswith('--cases='):  # e.g. float32:16,float32:32
            cases = a.partition('=')[2].split(',')
    for a in sys.argv[1:]:
        if a.startswith('--sampled='):
            sampled_cases([int(v) for v in a.partition('=')[2].split(',')])
            return
        if a == '--sgt' or a.startswith('--sgt='):
            for name in (a.partition('=')[2] or 'reddit').split(','):  # graph[:native]
                sgt_cases(name, cases)
            return
    bg = load_graph('reddit', device='cuda')
    n = bg.num_nodes
    g = CSRGraph.from_coo(bg.edge_index[0], bg.edge_index[1], n, n)
    A = torch.sparse_csr_tensor(g.rowptr.long(), g.col.long(), torch.ones(g.num_edges, device='cuda'), (n, n))
    dts = {'float32': torch.float32, 'float16': torch.float16, 'bfloat16': torch.bfloat16}
    for c in cases or ['float32:32', 'float32:256', 'float16:32', 'float16:256']:
        d, _, f = c.partition(':')
        dt, F = dts[d], int(f)
        x = torch.randn(n, F, device='cuda', dtype=dt)
        spmm_graph(g, x)
        torch.cuda.synchronize()
        print(f'case {dt} F={F}', flush=True)
    x = torch.randn(n, 256, device='cuda')
    torch.sparse.mm(A, x)
    torch.cuda.synchronize()


if __name__ == '__main__':
    main()
