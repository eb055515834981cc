"""Run the TC-GNN kernels (forward and backward, every dtype, odd widths,
N not a multiple of 16, split windows, dense blocks, 1 / 4 / 8 warps per unit) for compute-sanitizer:
  compute-sanitizer --tool memcheck python benchmarks/probes/sanitize_sgt.py [quick]
Any out-of-bounds load or store is reported by the tool (exit code != 0).
``quick``: widths 16 and 33, fp32 and fp16 only (for racecheck, which is slow)."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from pyg_tc import ops  # noqa: E402
from pyg_tc.formats import CSRGraph  # noqa: E402
from pyg_tc.formats.sgt import SGT  # noqa: E402

torch.manual_seed(0)
quick = 'quick' in sys.argv[1:]
for N, E, ub in ((17, 120, 1), (33, 900, 2), (1000, 20000, None), (64, 4000, None)):  # last: dense stages
    ei = torch.randint(0, N, (2, E), device='cuda')
    ei[1, : E // 4] = N - 1  # a heavy last row in the partial last window
    for dt in (torch.float32, torch.float16) if quick else (torch.float32, torch.float16, torch.bfloat16):
        for F in (16, 33) if quick else (1, 3, 16, 33, 72):
            g = CSRGraph.from_coo(ei[0], ei[1], N, N)
            g.cache.sgt = SGT.build(g, ub)
            x = torch.randn(N, F, device='cuda', dtype=dt, requires_grad=True)
            w = torch.rand(E, device='cuda', requires_grad=True)
            out = ops.sgt_spmm_graph(g, x, w[g.perm.long()], diag=torch.rand(N, device='cuda'))
            s = ops.sgt_sddmm_graph(g, x, x)
            (out.float().sum() + s.float().sum()).backward()
            cells = g.cache.sgt.cell_values(w.detach()[g.perm.long()])
            for wp in (1, 4):  # the rule picks 8 on these small graphs: one warp per unit, and 4 sharing one
                ops.sgt_spmm_cells(g, x.detach(), cells, warps=wp)
torch.cuda.synchronize()
print('sanitize_sgt: done')
