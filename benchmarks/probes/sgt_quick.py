"""Quick TCU-vs-CSR SpMM table (kernel-only times in us, CUDA-graph replay):
per graph and order, width 16 / 32, fp32 / fp16: the CSR kernel, the TCU
SpMM with the warps rule and with 1 / 2 / 4 / 8 warps per unit.
  python benchmarks/probes/sgt_quick.py [graph:order,...]
(docs/sgt.md says which recorded runs came from this script.)"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from pyg_tc import ops  # noqa: E402
from pyg_tc.bench.graphs import load_graph  # noqa: E402
from pyg_tc.bench.timing import kernel_time  # noqa: E402
from pyg_tc.formats import CSRGraph  # noqa: E402
from pyg_tc.ops.sgt import warps_for  # noqa: E402
from pyg_tc.transforms import rcm_order  # noqa: E402

specs = (
    sys.argv[1]
    if len(sys.argv) > 1
    else 'cora:rcm,citeseer:rcm,proteins:native,proteins:rcm,tolokers:native,tolokers:rcm'
).split(',')
ops.ensure()


def t(fn):
    return kernel_time(fn, 'cuda', rep=10).median_ms * 1e3


z = torch.zeros(16, device='cuda')
print(f'floor (one tiny kernel): {t(lambda: z.add_(1)):.2f} us', flush=True)
loaded = {}
wins = total = 0
for spec in specs:
    name, _, order = spec.partition(':')
    if name not in loaded:
        loaded[name] = load_graph(name, 'cuda')
    bg = loaded[name]
    ei, N = bg.edge_index, bg.num_nodes
    if order == 'rcm':
        ei = torch.argsort(rcm_order(ei, N))[ei]
    g = CSRGraph.from_coo(ei[0], ei[1], N, N)
    s = ops.sgt_of(g)
    w = torch.rand(g.num_edges, device='cuda')
    cells = s.cell_values(w)
    print(
        f'{name} {order}: units={s.fwd.sched.units.size(0)} blocks={s.fwd.num_blocks} slots={s.fwd.sched.num_slots}',
        flush=True,
    )
    for F in (16, 32):
        for dt in (torch.float32, torch.float16):
            x = torch.randn(N, F, device='cuda', dtype=dt)
            csr = t(lambda: ops.spmm_graph(g, x, w))
            tcu = t(lambda: ops.sgt_spmm_cells(g, x, cells))
            wr = {wp: t(lambda: ops.sgt_spmm_cells(g, x, cells, warps=wp)) for wp in (1, 2, 4, 8)}
            wins += tcu < csr
            total += 1
            print(
                f'  F={F} {str(dt)[6:]}: csr {csr:.2f} tcu {tcu:.2f} (x{csr / tcu:.2f}) | warps(rule '
                f'{warps_for(s, F, dt)}) ' + ' '.join(f'{k}:{v:.2f}' for k, v in wr.items()),
                flush=True,
            )
print(f'TCU faster than CSR in {wins} of {total}')
