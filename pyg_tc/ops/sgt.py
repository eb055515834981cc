"""TC-GNN ops: tensor-core SpMM / SDDMM over SGT blocks, and the rules that
decide when to use them (warps per CTA, ``backend='auto'``).

Precision (decision, docs/tcgnn.md): fp32 inputs follow PyTorch's matmul
setting: ``torch.get_float32_matmul_precision() == 'highest'`` (PyTorch's
default) runs 3xTF32 (split operands, fp32-accurate); ``'high'`` or
``'medium'`` runs plain TF32 (inputs truncated to a 10-bit mantissa by the
MMA, as the published TC-GNN; about 1e-3 relative error). fp16/bf16 inputs
run the k16 half MMA with the edge values split into hi + lo halves, so the
weights keep about fp32 precision. fp32 accumulation
everywhere; float64 runs the pure-torch reference.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from .._cuda_graph import capture_graph
from ..formats.csr import CSRGraph, stale_error
from ..formats.sgt import SGT, SGTDir, sgt_sddmm_reference, sgt_spmm_reference
from . import _registry

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def sgt_of(g: CSRGraph) -> SGT:
    """The graph's SGT (attached by :class:`~pyg_tc.transforms.SGTTransform`),
    built on the graph's device on first use and kept on the graph."""
    if g.sgt is None:
        g.sgt = SGT.build(g)
    elif g.sgt.num_edges != g.num_edges or g.sgt.device != g.device:
        raise stale_error('SGT', {'edges': (g.sgt.num_edges, g.num_edges),
                                  'device': (g.sgt.device, g.device)}, 're-apply SGTTransform')
    return g.sgt


def precision_of(dtype: torch.dtype) -> int:
    """1 = fp32-accurate (3xTF32 / split half weights), 0 = plain TF32."""
    if dtype == torch.float32:
        return 1 if torch.get_float32_matmul_precision() == 'highest' else 0
    return 1


def warps_for(s: SGT, width: int, dtype: torch.dtype, op: str = 'spmm') -> int:
    """Warps per unit. TC-GNN's rule is ``avg edges per row window / 32``; on
    the H200 the sweep (docs/tcgnn.md, benchmarks/sgt_probe.py: 64-block units
    with 1, 4 and 8 warps) finds:

    * SpMM on graphs with fewer than ``SPMM_COOP_WARPS`` (unit, feature
      slice) pairs: 8 warps share each unit (Cora and CiteSeer: 2-2.4x faster
      than one warp).
    * otherwise enough warps per unit to start about ``SPMM_FILL_WARPS``
      warps (a power of two, at most 8), but no more than leave each warp 8
      blocks (two stages): Tolokers (1413-2023 units of 45-52 blocks) gets 4,
      1.11-1.63x faster than one warp on the same units and within 6% of the
      best (unit size, warps) pair of the sweep; PROTEINS_full (3.5-4.7 blocks
      per unit), ogbn-arxiv and the Reddit-shaped graph (11650+ units) get one.
    * SDDMM: one CTA per unit, 4 warps when there are few units, two warps
      for half inputs wider than 32 (the k16 MMA walks block pairs).

    TC-GNN's rule picked 2-8 warps, the slowest choice on every large graph.
    With one warp per unit the SpMM's CTA holds four units, each over feature
    slices of up to 32 elements."""
    u = s.fwd.sched.units
    if u.numel() == 0:
        return 1
    U = u.size(0)
    if op == 'spmm':
        pairs = U * max(1, -(-width // 32))
        if pairs < SPMM_COOP_WARPS:
            return 8
        w, blocks = 1, s.fwd.num_blocks / U
        while w < 8 and pairs * w < SPMM_FILL_WARPS and blocks >= 8 * (2 * w):
            w *= 2
        return w
    ctas = U * max(1, (width + 63) // 64)
    if ctas < 4 * 132:
        return 4
    return 2 if (dtype != torch.float32 and width > 32) else 1


# SpMM warps per unit (warps_for): below SPMM_COOP_WARPS (unit, feature
# slice) pairs 8 warps share each unit (about 8 warps per SM of an H200
# otherwise); above, warps are added until about SPMM_FILL_WARPS are started
# (two waves of an H200's 132 SMs x 28 resident warps).
SPMM_COOP_WARPS = 1024
SPMM_FILL_WARPS = 8192


def _dir(d: SGTDir):
    return (d.sched.units, d.cols, d.mask, d.cell_ptr, d.sched.heavy_rows, d.sched.heavy_ptr,
            d.sched.num_slots)


def _reference_only(t: Tensor) -> bool:
    """float64 on a GPU with kernels: the kernels have no fp64 path. (On the
    CPU the registered op runs the reference itself, autograd formulas included.)"""
    return t.is_cuda and t.dtype == torch.float64 and _registry.CUDA_KERNELS


def sgt_spmm_cells(g: CSRGraph, x: Tensor, cell_val: Tensor, diag: Optional[Tensor] = None,
                   warps: Optional[int] = None) -> Tensor:
    """``out[i] = sum_cells(i, j) cell_val * x[j] (+ diag[i] x[i])`` on tensor
    cores; ``cell_val`` fp32 in forward cell order. Differentiable in x,
    cell_val and diag."""
    from . import _call
    s = sgt_of(g)
    if cell_val.numel() != s.num_cells:
        raise ValueError(f'pyg_tc: expected {s.num_cells} cell values, got {cell_val.numel()}')
    cell_val = cell_val.float() if x.dtype != torch.float64 else cell_val.double()
    if _reference_only(x):
        d = s.fwd
        return sgt_spmm_reference(d.sched.units, d.cols, d.mask, cell_val, x, diag, g.num_rows)
    w = warps if warps is not None else warps_for(s, x.size(1), x.dtype)
    args = (*_dir(s.fwd), cell_val, x.contiguous(), diag, g.num_rows, precision_of(x.dtype), w,
            *_dir(s.bwd), s.t_cell)
    return _call(torch.ops.pyg_tc.sgt_spmm.default, args, (x, cell_val, diag))


def sgt_sddmm_cells(g: CSRGraph, a: Tensor, b: Tensor, warps: Optional[int] = None) -> Tensor:
    """``<a[row], b[col]>`` for every cell (forward cell order), on tensor cores."""
    from . import _call
    s = sgt_of(g)
    if _reference_only(a):
        d = s.fwd
        return sgt_sddmm_reference(d.sched.units, d.cols, d.mask, a, b)
    w = warps if warps is not None else warps_for(s, a.size(1), a.dtype, 'sddmm')
    args = (*_dir(s.fwd), a.contiguous(), b.contiguous(), s.num_cells, precision_of(a.dtype), w,
            *_dir(s.bwd), s.t_cell)
    return _call(torch.ops.pyg_tc.sgt_sddmm.default, args, (a, b))


# ---------------------------------------------------------------------------
# backend='auto'

# Tensor cores are chosen when measured faster at all (margin 1.0): the
# requirement is symmetric (within 5% of the faster backend), and a margin of
# 0.95 made auto keep CSR where the TCU was 5-7% faster (measured, docs/tcgnn.md).
AUTO_MARGIN = 1.0


def choose_backend(g: CSRGraph, width: int, dtype: torch.dtype, op: str = 'spmm') -> str:
    """'sgt' or 'csr' for one graph, feature width, dtype and op ('spmm' or
    'sddmm').

    Rule (measured, docs/tcgnn.md): no static threshold on the SGT statistics
    separated the graphs where tensor cores win from those where they lose
    (nonzeros per block decides the bytes, but the CSR kernel's schedule and
    L2 reuse move the break-even by graph), so ``auto`` measures: the first
    call per (graph, op, width, dtype) times both kernels on the graph (ten
    calls in a CUDA graph, best of five alternating runs each, like
    ``cudnn.benchmark``) and keeps the faster (``AUTO_MARGIN``). Only graphs
    that carry SGT metadata (from :class:`~pyg_tc.transforms.SGTTransform` or
    an earlier ``'sgt'`` call) are considered; without kernels, on the CPU,
    for float64 or while a CUDA graph is being captured or compiled before
    tuning, the answer is 'csr'."""
    if g.sgt is None or dtype == torch.float64 or not _registry.CUDA_KERNELS:
        return 'csr'  # (cheapest tests first: this runs on every layer call)
    if g.device.type != 'cuda':
        return 'csr'
    key = ('auto', op, int(width), dtype)
    if key in g._memo:
        return g._memo[key]
    if torch.compiler.is_compiling() or torch.cuda.is_current_stream_capturing():
        return 'csr'
    return g.memo(key, lambda: _tune(g, int(width), dtype, op))


TUNE_CALLS = 10  # calls per timed run
TUNE_TRIALS = 5  # timed runs per backend, alternating; the best counts


def _replayable(fn):
    """``fn`` TUNE_CALLS times as one callable: a CUDA graph of the calls when
    capturable (device time without the Python launch cost, which would
    otherwise hide the kernels' difference on small graphs), else eager."""
    try:
        run = capture_graph([fn] * TUNE_CALLS).replay
    except RuntimeError:
        torch.cuda.synchronize()

        def run():
            for _ in range(TUNE_CALLS):
                fn()
    run()
    return run


def _tune(g: CSRGraph, width: int, dtype: torch.dtype, op: str) -> str:
    from . import sddmm_graph, spmm_graph
    gen = torch.Generator(device=g.device).manual_seed(0)
    b = torch.randn(g.num_cols, max(width, 1), device=g.device, dtype=dtype, generator=gen)
    with torch.no_grad():
        if op == 'sddmm':
            a = torch.randn(g.num_rows, b.size(1), device=g.device, dtype=dtype, generator=gen)
            fns = {'csr': lambda: sddmm_graph(g, a, b), 'sgt': lambda: sgt_sddmm_cells(g, a, b)}
        else:
            w = torch.rand(g.num_edges, device=g.device, generator=gen)
            cells = sgt_of(g).cell_values(w)
            fns = {'csr': lambda: spmm_graph(g, b, w), 'sgt': lambda: sgt_spmm_cells(g, b, cells)}
        runs = {name: _replayable(fn) for name, fn in fns.items()}
        times = {name: math.inf for name in runs}
        for _ in range(TUNE_TRIALS):  # alternating, best of the trials
            for name, run in runs.items():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run()
                end.record()
                end.synchronize()
                times[name] = min(times[name], start.elapsed_time(end))
        del runs
    return 'sgt' if times['sgt'] < AUTO_MARGIN * times['csr'] else 'csr'


def sgt_spmm_graph(g: CSRGraph, x: Tensor, value: Optional[Tensor] = None, reduce: str = 'sum',
                   diag: Optional[Tensor] = None) -> Tensor:
    """:func:`pyg_tc.ops.spmm_graph` on tensor cores: edge values in CSR order
    (duplicate edges summed into their cell), ``reduce`` 'sum' or 'mean'
    (the edge values scaled by 1 / in-degree; ``diag`` stays outside the
    mean, as on the CSR path)."""
    from . import _REDUCE, _check_features, _diag, _edge_values
    if reduce not in ('sum', 'add', 'mean'):
        raise ValueError(f"pyg_tc: the tensor-core SpMM supports reduce 'sum' and 'mean', got {reduce!r}")
    _check_features(x, g)
    value = _edge_values(value, g, x, 'edge values')
    diag = _diag(diag, g, x)
    _registry.ensure()
    if _REDUCE[reduce] == 'mean':
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        scale = g.per_edge(1.0 / g.degree().clamp(min=1).to(acc))
        value = scale if value is None else value * scale
    return sgt_spmm_cells(g, x, sgt_of(g).cell_values(value), diag)


def sgt_sddmm_graph(g: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    """:func:`pyg_tc.ops.sddmm_graph` on tensor cores (per edge, CSR order)."""
    from . import _check_sddmm
    _check_sddmm(g, a, b)
    _registry.ensure()
    return sgt_of(g).edge_values(sgt_sddmm_cells(g, a, b))
