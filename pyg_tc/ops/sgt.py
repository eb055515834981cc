"""TC-GNN ops: tensor-core SpMM / SDDMM over SGT blocks, and the rules that
decide when to use them (warps per CTA, ``backend='auto'``).

Precision (decision, docs/tcgnn.md): fp32 inputs follow PyTorch's matmul
setting: ``torch.get_float32_matmul_precision() == 'highest'`` (PyTorch's
default) runs 3xTF32 (split operands, fp32-accurate); ``'high'`` or
``'medium'`` runs plain TF32 (10-bit mantissa inputs, as the published
TC-GNN). fp16/bf16 inputs run the k16 half MMA with the edge values split into
hi + lo halves, so the weights keep about fp32 precision. fp32 accumulation
everywhere; float64 runs the pure-torch reference.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..formats.csr import CSRGraph
from ..formats.sgt import SGT, SGTDir, sgt_sddmm_reference, sgt_spmm_reference
from . import _registry

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def sgt_of(g: CSRGraph) -> SGT:
    """The graph's SGT (attached by :class:`~pyg_tc.transforms.SGTTransform`),
    built on the graph's device on first use and kept on the graph."""
    if g.sgt is None:
        g.sgt = SGT.build(g)
    elif g.sgt.num_edges != g.num_edges or g.sgt.device != g.device:
        raise ValueError(f'pyg_tc: stale SGT metadata: built for {g.sgt.num_edges} edges on '
                         f'{g.sgt.device}, the graph has {g.num_edges} on {g.device}; re-apply SGTTransform')
    return g.sgt


def precision_of(dtype: torch.dtype) -> int:
    """1 = fp32-accurate (3xTF32 / split half weights), 0 = plain TF32."""
    if dtype == torch.float32:
        return 1 if torch.get_float32_matmul_precision() == 'highest' else 0
    return 1


def warps_for(s: SGT, width: int, dtype: torch.dtype) -> int:
    """Warps per CTA. TC-GNN's rule is ``avg edges per row window / 32``; ours
    counts what a warp actually walks: blocks per unit (pairs for the k16
    half MMA), at least two steps per warp, at most 8 warps (measured sweep in
    docs/tcgnn.md)."""
    u = s.fwd.sched.units
    if u.numel() == 0:
        return 1
    steps = s.fwd.num_blocks / u.size(0) / (1 if dtype == torch.float32 else 2)
    w = 1
    while w < 8 and steps >= 4 * w:
        w *= 2
    return w


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
    w = warps if warps is not None else warps_for(s, a.size(1), a.dtype)
    args = (*_dir(s.fwd), a.contiguous(), b.contiguous(), s.num_cells, precision_of(a.dtype), w,
            *_dir(s.bwd), s.t_cell)
    return _call(torch.ops.pyg_tc.sgt_sddmm.default, args, (a, b))


# ---------------------------------------------------------------------------
# backend='auto'

def choose_backend(g: CSRGraph, width: int, dtype: torch.dtype) -> str:
    """'sgt' or 'csr' for one graph and feature width (module doc of
    docs/tcgnn.md has the measurements behind it). Tensor cores win when a
    16 x 8 block gathers fewer feature rows than the CSR kernel would, i.e.
    when SGT packs many nonzeros per block; only with kernels on a GPU."""
    if not (g.device.type == 'cuda' and _registry.CUDA_KERNELS and dtype != torch.float64):
        return 'csr'
    s = g.sgt
    if s is None:  # no SGT attached: deciding would cost a build; stay on CSR
        return 'csr'
    st = s.stats()
    return 'sgt' if st['nnz_per_block'] >= AUTO_MIN_NNZ_PER_BLOCK and width <= AUTO_MAX_WIDTH else 'csr'


AUTO_MIN_NNZ_PER_BLOCK = 12.0
AUTO_MAX_WIDTH = 256


def sgt_spmm_graph(g: CSRGraph, x: Tensor, value: Optional[Tensor] = None, reduce: str = 'sum',
                   diag: Optional[Tensor] = None) -> Tensor:
    """:func:`pyg_tc.ops.spmm_graph` on tensor cores: edge values in CSR order
    (duplicate edges summed into their cell), ``reduce`` 'sum' or 'mean'."""
    from . import _REDUCE, _check_features, _diag, _edge_values
    if reduce not in ('sum', 'add', 'mean'):
        raise ValueError(f"pyg_tc: the tensor-core SpMM supports reduce 'sum' and 'mean', got {reduce!r}")
    _check_features(x, g)
    value = _edge_values(value, g, x, 'edge values')
    diag = _diag(diag, g, x)
    if diag is not None and _REDUCE[reduce] == 'mean':
        raise ValueError("pyg_tc: diag is supported with reduce='sum' only on the tensor-core path")
    _registry.ensure()
    out = sgt_spmm_cells(g, x, sgt_of(g).cell_values(value), diag)
    if _REDUCE[reduce] == 'mean':
        deg = g.degree().clamp(min=1).to(out.dtype if out.dtype == torch.float64 else torch.float32)
        out = (out.to(deg.dtype) / deg.unsqueeze(1)).to(x.dtype)
    return out


def sgt_sddmm_graph(g: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    """:func:`pyg_tc.ops.sddmm_graph` on tensor cores (per edge, CSR order)."""
    from . import _check_features
    if not isinstance(a, Tensor) or a.dim() != 2 or a.size(0) != g.num_rows:
        raise ValueError(f'pyg_tc: a must be [{g.num_rows}, F] (one row per target node)')
    _check_features(b, g, 'b')
    if a.dtype != b.dtype or a.size(1) != b.size(1) or a.device != b.device:
        raise ValueError('pyg_tc: a and b must share dtype, device and width')
    _registry.ensure()
    return sgt_of(g).edge_values(sgt_sddmm_cells(g, a, b))
