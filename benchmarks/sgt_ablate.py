"""Where the TCU SpMM's time goes (experiment): kernel-only times of the SpMM
with parts switched off through PYG_TC_ABL (bit 0: no MMA work, bit 1: no
feature-row copies, bit 2: no reduce kernel, bit 3: no output stores; results
wrong, times only), against the CSR kernel and a one-kernel floor, plus warps
1/2/4/8 and 4-block stages for 32-float slices (PYG_TC_KS4).
  python benchmarks/sgt_ablate.py [graph:order,...]"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyg_tc import ops  # noqa: E402
from pyg_tc.bench.graphs import load_graph  # noqa: E402
from pyg_tc.bench.timing import bench_graph_replay  # noqa: E402
from pyg_tc.formats import CSRGraph  # noqa: E402
from pyg_tc.ops.sgt import warps_for  # noqa: E402
from pyg_tc.transforms import rcm_order  # noqa: E402

specs = (sys.argv[1] if len(sys.argv) > 1 else 'proteins:native,proteins:rcm,tolokers:rcm').split(',')
ops.ensure()


def t(fn):
    return bench_graph_replay([fn] * 10, warmup=2, rep=10, device='cuda').median_ms * 1e3


z = torch.zeros(16, device='cuda')
print(f'floor (one tiny kernel): {t(lambda: z.add_(1)):.2f} us', flush=True)
loaded = {}
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
    print(f'{name} {order}: units={s.fwd.sched.units.size(0)} blocks={s.fwd.num_blocks} '
          f'slots={s.fwd.sched.num_slots}', flush=True)
    for F in (16, 32):
        for dt in (torch.float32, torch.float16):
            x = torch.randn(N, F, device='cuda', dtype=dt)
            csr = t(lambda: ops.spmm_graph(g, x, w))
            row = {}
            for abl in (0, 1, 2, 3, 4, 8, 15):
                os.environ['PYG_TC_ABL'] = str(abl)
                row[abl] = t(lambda: ops.sgt_spmm_cells(g, x, cells))
            os.environ['PYG_TC_ABL'] = '0'
            wr = {wp: t(lambda: ops.sgt_spmm_cells(g, x, cells, warps=wp)) for wp in (1, 2, 4, 8)}
            extra = ''
            if dt == torch.float32 and F == 32:
                os.environ['PYG_TC_KS4'] = '1'
                extra = ' ks4 ' + ' '.join(f'{wp}:{t(lambda: ops.sgt_spmm_cells(g, x, cells, warps=wp)):.2f}'
                                           for wp in (1, 2, 4, 8))
                os.environ['PYG_TC_KS4'] = '0'
            print(f'  F={F} {str(dt)[6:]}: csr {csr:.2f} tcu {row[0]:.2f} (x{csr / row[0]:.2f}) | '
                  f'no-mma {row[1]:.2f} no-rows {row[2]:.2f} neither {row[3]:.2f} no-reduce {row[4]:.2f} '
                  f'no-store {row[8]:.2f} skeleton {row[15]:.2f} | warps(rule {warps_for(s, F, dt)}) '
                  + ' '.join(f'{k}:{v:.2f}' for k, v in wr.items()) + extra, flush=True)
