"""The layers' dense epilogue (``pyg_tc.ops.dense``): the fused ``bias_sum``
kernel against PyTorch's unfused additions (the same values), in one run.

1. The op alone: ``sum_r (x_r + b_r)`` of ``k`` half outputs ``[M, 512]`` with
   fp32 biases, forward and forward + backward, ms per call (CUDA events,
   the median of 20: the host's work included), the GPU time of forward +
   backward (kernels summed) and the bytes the fused forward moves.
2. MLPerf's R-GAT training step, trimmed by layer, under fp16 autocast
   (``pyg_tc.bench.models.RGAT`` on ``pyg_tc.loader.NeighborLoader`` batches
   of an IGBH-shaped graph): GPU time per eager step (kernels summed),
   launches and the longest kernels, fused and unfused.

    python benchmarks/probes/epilogue_probe.py [--papers 300000] [--out F]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch
import torch.nn.functional as F

import pyg_tc.nn
from pyg_tc.bench.graphs import igbh_shaped
from pyg_tc.bench.models import RGAT
from pyg_tc.bench.timing import kernel_profile
from pyg_tc.capture import trimmed_forward
from pyg_tc.loader import NeighborLoader
from pyg_tc.ops import dense

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


class fused_off:
    """Within: :func:`pyg_tc.ops.dense.biased_sum` runs PyTorch's additions."""

    def __enter__(self):
        self.saved = dense._fused
        dense._fused = lambda terms: False

    def __exit__(self, *exc):
        dense._fused = self.saved


def _ms(fn, reps: int = 20) -> float:
    fn()
    if DEV.type != 'cuda':  # (a check of the code; the times mean nothing)
        t0 = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - t0)
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def op_records(rows, width: int = 512):
    for M in rows:
        for k in (1, 2, 3, 4):
            xs = [torch.randn(M, width, device=DEV, dtype=torch.float16, requires_grad=True) for _ in range(k)]
            bs = [torch.randn(width, device=DEV, requires_grad=True) for _ in range(k)]
            terms = [(x, b, torch.float16) for x, b in zip(xs, bs)]
            grad = torch.randn(M, width, device=DEV)
            rec = dict(kind='op', rows=M, width=width, k=k, fused_bytes=M * width * (2 * k + 4))
            for name, ctx in (('fused', None), ('unfused', fused_off)):
                with ctx() if ctx else contextlib.nullcontext():
                    rec[f'{name}_fwd_ms'] = _ms(lambda: dense.biased_sum(terms))
                    rec[f'{name}_fwd_bwd_ms'] = _ms(lambda: dense.biased_sum(terms).backward(grad))
                    prof = kernel_profile(lambda _: dense.biased_sum(terms).backward(grad), range(5), DEV)
                    rec[f'{name}_fwd_bwd_gpu_ms'], rec[f'{name}_launches'] = prof['gpu_ms'], prof['launches']
            rec['fwd_x'] = rec['unfused_fwd_ms'] / rec['fused_fwd_ms']
            rec['fwd_bwd_x'] = rec['unfused_fwd_bwd_ms'] / rec['fused_fwd_bwd_ms']
            print(json.dumps(rec), flush=True)
            yield rec


def step_records(papers: int, batches: int = 3, top: int = 12):
    data = igbh_shaped(papers, 1024, torch.float16, 19)
    on_dev = data.to(DEV)
    loader = NeighborLoader(
        on_dev, [15, 10, 5], input_nodes=('paper', torch.arange(papers)), batch_size=1024, device=DEV, shuffle=True
    )
    items = [b for _, b in zip(range(batches + 1), loader)]
    torch.manual_seed(0)
    model = RGAT(pyg_tc.nn, data.edge_types, 1024, 512, 4, 19).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(b):
        n = b['paper'].batch_size
        opt.zero_grad()
        with torch.autocast(DEV.type, dtype=torch.float16):
            out = trimmed_forward(model, b)[:n]
        F.cross_entropy(out.float(), b['paper'].y[:n]).backward()
        opt.step()

    for name, ctx in (('fused', None), ('unfused', fused_off), ('fused again', None)):
        with ctx() if ctx else contextlib.nullcontext():
            step(items[0])
            prof = kernel_profile(step, items[1:], DEV, top=top)
        rec = dict(
            kind='rgat_step', epilogue=name, papers=papers, **{k: prof[k] for k in ('gpu_ms', 'dense_ms', 'launches')}
        )
        rec['kernels'] = prof['kernels']
        print(json.dumps(rec), flush=True)
        yield rec


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--papers', type=int, default=300_000)
    p.add_argument('--rows', default='50000,200000')
    p.add_argument('--out', default='epilogue_probe.jsonl')
    p.add_argument('--top', type=int, default=12, help='kernels listed per R-GAT step')
    p.add_argument('--no-op', dest='op', action='store_false', help='the R-GAT step only')
    a = p.parse_args()
    with open(a.out, 'w') as out:
        for rec in op_records([int(r) for r in a.rows.split(',')]) if a.op else ():
            out.write(json.dumps(rec) + '\n')
        for rec in step_records(a.papers, top=a.top):
            out.write(json.dumps(rec) + '\n')


if __name__ == '__main__':
    main()
