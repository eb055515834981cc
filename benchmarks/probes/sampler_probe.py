"""Where the time of one GPU-sampled batch goes: the sampling op alone, the
batch's CSR (transpose and schedules), the edge-id map and the rest of
``NeighborSampler._sample``, each synchronised; then a torch.profiler table of
one ``_sample`` (host time per op, launches, synchronisations).

``python benchmarks/probes/sampler_probe.py [--graph products] [--batches 20]``
"""

import argparse
import time

import torch
from torch_geometric.data import Data

from pyg_tc.bench.graphs import load_graph
from pyg_tc.formats.csr import CSRGraph
from pyg_tc.loader import NeighborSampler
from pyg_tc.ops import neighbor as ops


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--graph', default='products')
    p.add_argument('--batches', type=int, default=20)
    p.add_argument('--fanout', default='15,10,5')
    a = p.parse_args()
    fan = [int(k) for k in a.fanout.split(',')]
    bg = load_graph(a.graph, 'cuda')
    s = NeighborSampler(Data(edge_index=bg.edge_index, num_nodes=bg.num_nodes), fan, device='cuda')
    seeds = [torch.randperm(bg.num_nodes)[:1024] for _ in range(a.batches)]
    phases = {}

    def tick(name, t):
        torch.cuda.synchronize()
        now = time.perf_counter()
        phases[name] = phases.get(name, 0.0) + now - t
        return now

    for rep in range(2):
        phases.clear()
        for sd in seeds:
            torch.cuda.synchronize()
            t = time.perf_counter()
            dev = sd.to('cuda')
            t = tick('seeds to GPU', t)
            nodes, ei, rowptr, col, eid, counts = ops.neighbor_sample(
                s.colptr, s.row, dev, fan, False, 7, s._node_map, s._first
            )
            t = tick('neighbor_sample op', t)
            counts.tolist()
            ops.gather_rows(s.perm, eid).to(torch.int64)
            t = tick('edge ids (perm)', t)
            rows = ei[1].to(torch.int32)
            t = tick('rows int32', t)
            g = CSRGraph.from_sampled(rowptr, col, rows, nodes.numel(), max_degree=max(fan))
            t = tick('CSR transpose + schedules', t)
            s._sample(sd)
            t = tick('whole _sample', t)
    for k, v in phases.items():
        print(f'{k:28s} {1e3 * v / a.batches:8.3f} ms')
    print(g)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for sd in seeds[:5]:
            s._sample(sd)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=30))


if __name__ == '__main__':
    main()
