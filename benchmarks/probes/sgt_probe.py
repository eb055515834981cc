"""Quick TC-GNN kernel probe: TCU vs CSR kernel vs cuSPARSE SpMM/SDDMM per
graph, order (native / RCM) and width, plus the warps and unit-size sweeps
(SGT rebuilt with unit_blocks = 16 .. 4096, i.e. up to whole windows, each
with 1, 4 and 8 warps per unit; the default is marked *).
  python benchmarks/probes/sgt_probe.py [graphs] [widths]"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from pyg_tc import ops  # noqa: E402
from pyg_tc.bench.graphs import load_graph  # noqa: E402
from pyg_tc.bench.timing import kernel_time  # noqa: E402
from pyg_tc.formats import CSRGraph  # noqa: E402
from pyg_tc.formats.sgt import DEFAULT_UNIT_BLOCKS, SGT  # noqa: E402
from pyg_tc.ops.sgt import warps_for  # noqa: E402
from pyg_tc.transforms import rcm_order  # noqa: E402

graphs = (sys.argv[1] if len(sys.argv) > 1 else 'cora,proteins,tolokers,arxiv,reddit').split(',')
widths = [int(w) for w in (sys.argv[2] if len(sys.argv) > 2 else '16,32,64').split(',')]
ops.ensure()


def t(fn):  # kernel-only: CUDA-graph replay (short calls 10x per graph), per-call time
    return kernel_time(fn, 'cuda', rep=10).median_ms


UNIT_BLOCKS = (16, 32, 64, 128, 256, 4096)

for name in graphs:
    bg = load_graph(name, 'cuda')
    for order in ('native', 'rcm'):
        ei, N = bg.edge_index, bg.num_nodes
        if order == 'rcm':
            inv = torch.argsort(rcm_order(ei, N))
            ei = inv[ei]
        g = CSRGraph.from_coo(ei[0], ei[1], N, N)
        torch.cuda.synchronize()
        import time

        t0 = time.perf_counter()
        s = ops.sgt_of(g)
        torch.cuda.synchronize()
        tb = (time.perf_counter() - t0) * 1e3
        st = s.stats(g)
        variants = {u: (s if u == DEFAULT_UNIT_BLOCKS else SGT.build(g, unit_blocks=u)) for u in UNIT_BLOCKS}
        w = torch.rand(g.num_edges, device='cuda')
        A = torch.sparse_csr_tensor(g.rowptr, g.col, w, (N, N))
        cells = s.cell_values(w)
        print(
            f'{name} {order}: N={N} E={g.num_edges} blocks={st["blocks"]} w/o={st["blocks_without_sgt"]} '
            f'nnz/blk={st["nnz_per_block"]:.2f} blk/unit={s.fwd.num_blocks / max(1, s.fwd.sched.units.size(0)):.1f} '
            f'units={s.fwd.sched.units.size(0)} build={tb:.1f}ms',
            flush=True,
        )
        for F in widths:
            for dt in (torch.float32, torch.float16):
                x = torch.randn(N, F, device='cuda', dtype=dt)
                tc = t(lambda: ops.spmm_graph(g, x, w))
                tcu = t(lambda: ops.sgt_spmm_cells(g, x, cells))
                torch.set_float32_matmul_precision('high')
                tcu32 = t(lambda: ops.sgt_spmm_cells(g, x, cells))
                torch.set_float32_matmul_precision('highest')
                try:
                    tcs = t(lambda: torch.sparse.mm(A.to(dt) if dt != torch.float32 else A, x))
                except Exception:
                    tcs = float('nan')
                sw = {wp: t(lambda: ops.sgt_spmm_cells(g, x, cells, warps=wp)) for wp in (1, 4, 8)}
                su = {}
                for u, v in variants.items():
                    g.cache.sgt = v
                    su[u] = '/'.join(f'{t(lambda: ops.sgt_spmm_cells(g, x, cells, warps=wp)):.4f}' for wp in (1, 4, 8))
                g.cache.sgt = s
                sd_c = t(lambda: ops.sddmm_graph(g, x, x))
                sd_t = t(lambda: ops.sgt_sddmm_cells(g, x, x))
                print(
                    f'  F={F} {str(dt)[6:]}: csr {tc:.4f} tcu {tcu:.4f} tcu_tf32 {tcu32:.4f} cusparse {tcs:.4f} | '
                    f'tcu/cusp x{tcs / tcu:.2f} csr/tcu x{tc / tcu:.2f} | warps {" ".join(f"{k}:{v:.4f}" for k, v in sw.items())} '
                    f'rule={warps_for(s, F, dt)} | unit_blocks '
                    f'(w1/w4/w8) {" ".join(f"{k}{chr(42) * (k == DEFAULT_UNIT_BLOCKS)}:{v}" for k, v in su.items())} '
                    f'| sddmm csr {sd_c:.4f} tcu {sd_t:.4f}',
                    flush=True,
                )
        g = s = A = variants = None
        torch.cuda.empty_cache()
