"""Registration of the ``torch.ops.pyg_tc`` ops: schemas, the pure-PyTorch
reference (CPU implementation and test oracle), fake kernels and autograd.

Schemas come from ``kernels/registration.cpp`` (``TORCH_LIBRARY``) when the
CUDA extension is loaded; otherwise the identical strings below are defined
from Python, so the op path, ``torch.compile`` and ``opcheck`` behave the same
on every machine. ``tests/test_registry.py`` checks both lists agree.
"""
from __future__ import annotations

import threading
from typing import Optional

import torch
from torch import Tensor

from .. import _kernels
from ..formats.cbsr import cbsr_spmm_reference, cbsr_sspmm_reference, index_dtype
from ..formats.csr import inverse_perm
from ..formats.sgt import sgt_sddmm_reference, sgt_spmm_reference

SCHEMAS = {
    'spmm_csr': (
        'spmm_csr(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor units, '
        'Tensor heavy_rows, Tensor heavy_ptr, Tensor? diag, int num_slots, str reduce, '
        'Tensor t_rowptr, Tensor t_col, Tensor t_perm, Tensor? t_value, Tensor t_units, '
        'Tensor t_heavy_rows, Tensor t_heavy_ptr, int t_num_slots) -> Tensor'),
    'sddmm_csr': (
        'sddmm_csr(Tensor col, Tensor a, Tensor b, Tensor units, Tensor rowptr, '
        'Tensor heavy_rows, Tensor heavy_ptr, int num_slots, Tensor t_rowptr, Tensor t_col, '
        'Tensor t_perm, Tensor t_units, Tensor t_heavy_rows, Tensor t_heavy_ptr, '
        'int t_num_slots) -> Tensor'),
    'maxk_select': 'maxk_select(Tensor x, int k) -> (Tensor, Tensor)',
    'cbsr_spmm': (
        'cbsr_spmm(Tensor rowptr, Tensor col, Tensor? value, Tensor values, Tensor indices, '
        'int width, Tensor units, Tensor heavy_rows, Tensor heavy_ptr, int num_slots, '
        'Tensor? diag, str reduce) -> Tensor'),
    'cbsr_sspmm': (
        'cbsr_sspmm(Tensor rowptr, Tensor col, Tensor? value, Tensor grad, Tensor indices, '
        'Tensor units, Tensor heavy_rows, Tensor heavy_ptr, int num_slots, Tensor? diag, '
        'str reduce) -> Tensor'),
    'sort_int32': 'sort_int32(Tensor keys, int end_bit) -> (Tensor, Tensor)',
    'sgt_spmm': (
        'sgt_spmm(Tensor units, Tensor cols, Tensor mask, Tensor cell_ptr, Tensor heavy, '
        'Tensor heavy_ptr, int num_slots, Tensor cell_val, Tensor x, Tensor? diag, int num_rows, '
        'int precision, int warps, Tensor t_units, Tensor t_cols, Tensor t_mask, Tensor t_cell_ptr, '
        'Tensor t_heavy, Tensor t_heavy_ptr, int t_num_slots, Tensor t_cell) -> Tensor'),
    'sgt_sddmm': (
        'sgt_sddmm(Tensor units, Tensor cols, Tensor mask, Tensor cell_ptr, Tensor heavy, '
        'Tensor heavy_ptr, int num_slots, Tensor a, Tensor b, int num_cells, int precision, '
        'int warps, Tensor t_units, Tensor t_cols, Tensor t_mask, Tensor t_cell_ptr, '
        'Tensor t_heavy, Tensor t_heavy_ptr, int t_num_slots, Tensor t_cell) -> Tensor'),
}

_LOCK = threading.Lock()
_READY = False
_LIBS: list = []  # keep torch.library.Library objects alive
CUDA_KERNELS = False  # True once the CUDA implementations are registered


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


# ---------------------------------------------------------------------------
# Reference implementations (device-agnostic torch; the oracle)

def spmm_reference(rowptr: Tensor, col: Tensor, value: Optional[Tensor], x: Tensor,
                   diag: Optional[Tensor] = None, reduce: str = 'sum') -> Tensor:
    """out[i] = reduce_{e in row i} value[e] * x[col[e]] (+ diag[i] * x[i]),
    accumulated in fp32 (fp64 for fp64 inputs); empty rows give 0."""
    R = rowptr.numel() - 1
    F = x.size(1)
    acc = _acc_dtype(x.dtype)
    deg = (rowptr[1:] - rowptr[:-1]).long()
    row = torch.repeat_interleave(torch.arange(R, device=x.device), deg, output_size=col.numel())
    msg = x.index_select(0, col.long()).to(acc)
    if value is not None:
        msg = msg * value.to(acc).unsqueeze(1)
    out = torch.zeros(R, F, dtype=acc, device=x.device)
    if reduce == 'max':
        out = out.scatter_reduce(0, row.unsqueeze(1).expand(-1, F), msg, 'amax', include_self=False)
    else:
        out = out.index_add(0, row, msg)
        if reduce == 'mean':
            out = out / deg.clamp(min=1).unsqueeze(1).to(acc)
    if diag is not None:
        out = out + diag.to(acc).view(-1, 1) * x.to(acc)
    return out.to(x.dtype)


def sddmm_reference(rowptr: Tensor, col: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """out[e] = <a[row(e)], b[col[e]]> for every CSR edge, fp32 accumulation."""
    R = rowptr.numel() - 1
    acc = _acc_dtype(a.dtype)
    deg = (rowptr[1:] - rowptr[:-1]).long()
    row = torch.repeat_interleave(torch.arange(R, device=a.device), deg, output_size=col.numel())
    return (a.index_select(0, row).to(acc) * b.index_select(0, col.long()).to(acc)).sum(1).to(a.dtype)


def maxk_reference(x: Tensor, k: int):
    """The k largest entries of every row (torch.sort's order: NaN largest,
    ties in column order), as (values [N, k], column indices [N, k]) with the
    columns ascending; indices uint8 for widths <= 256, int16 above."""
    F = x.size(1)
    top = torch.sort(x, dim=1, descending=True, stable=True)[1][:, :k]
    cols = torch.sort(top, dim=1)[0]
    return x.gather(1, cols), cols.to(index_dtype(F))


def _maxk_impl(x, k):
    return maxk_reference(x, k)


def _cbsr_spmm_impl(rowptr, col, value, values, indices, width, units, hr, hp, ns, diag, reduce):
    return cbsr_spmm_reference(rowptr, col, value, values, indices, width, diag, reduce)


def _cbsr_sspmm_impl(rowptr, col, value, grad, indices, units, hr, hp, ns, diag, reduce):
    return cbsr_sspmm_reference(rowptr, col, value, grad, indices, diag, reduce)


def _sort_impl(keys, end_bit):
    values, perm = torch.sort(keys, stable=True)
    return values, perm.to(torch.int32)


def _spmm_impl(rowptr, col, value, x, units, heavy_rows, heavy_ptr, diag, num_slots, reduce,
               *transpose):
    return spmm_reference(rowptr, col, value, x, diag, reduce)


def _sddmm_impl(col, a, b, units, rowptr, *rest):
    return sddmm_reference(rowptr, col, a, b)


def _sgt_spmm_impl(units, cols, mask, cell_ptr, heavy, heavy_ptr, num_slots, cell_val, x, diag,
                   num_rows, precision, warps, *transpose):
    return sgt_spmm_reference(units, cols, mask, cell_val, x, diag, num_rows)


def _sgt_sddmm_impl(units, cols, mask, cell_ptr, heavy, heavy_ptr, num_slots, a, b, *rest):
    return sgt_sddmm_reference(units, cols, mask, a, b)


# ---------------------------------------------------------------------------
# Autograd

def _spmm_setup(ctx, inputs, output):
    (rowptr, col, value, x, units, hr, hp, diag, ns, reduce,
     t_rowptr, t_col, t_perm, t_value, t_units, t_hr, t_hp, t_ns) = inputs
    ctx.reduce, ctx.ns, ctx.t_ns = reduce, ns, t_ns
    ctx.has_value, ctx.has_diag, ctx.has_t_value = value is not None, diag is not None, t_value is not None
    ctx.save_for_backward(rowptr, col, value, x, units, hr, hp, diag, t_rowptr, t_col, t_perm,
                          t_value, t_units, t_hr, t_hp, output if reduce == 'max' else None)


def _spmm_backward(ctx, grad):
    (rowptr, col, value, x, units, hr, hp, diag, t_rowptr, t_col, t_perm,
     t_value, t_units, t_hr, t_hp, out) = ctx.saved_tensors
    reduce, ns, t_ns = ctx.reduce, ctx.ns, ctx.t_ns
    need_value, need_x, need_diag = ctx.needs_input_grad[2], ctx.needs_input_grad[3], ctx.needs_input_grad[7]
    grads = [None] * 18
    grad = grad.contiguous()
    if reduce == 'max':
        gv, gx = _max_backward(rowptr, col, value, x, out, grad, t_rowptr, t_perm)
        grads[2] = gv.to(value.dtype) if (need_value and value is not None) else None
        grads[3] = gx if need_x else None
        return tuple(grads)
    deg = (rowptr[1:] - rowptr[:-1])
    gs = grad / deg.clamp(min=1).unsqueeze(1).to(grad.dtype) if reduce == 'mean' else grad
    if need_x:
        tv = t_value
        if value is not None and tv is None:
            tv = value[t_perm.long()]
        inv = inverse_perm(t_perm) if torch.is_grad_enabled() else t_perm
        fused_diag = diag if reduce == 'sum' else None
        gx = torch.ops.pyg_tc.spmm_csr(t_rowptr, t_col, tv, gs, t_units, t_hr, t_hp, fused_diag,
                                       t_ns, 'sum', rowptr, col, inv, value, units, hr, hp, ns)
        if diag is not None and reduce == 'mean':
            gx = gx + (diag.view(-1, 1) * grad.to(diag.dtype)).to(gx.dtype)
        grads[3] = gx
    if need_value and value is not None:
        gv = torch.ops.pyg_tc.sddmm_csr(col, gs, x, units, rowptr, hr, hp, ns, t_rowptr, t_col,
                                        t_perm, t_units, t_hr, t_hp, t_ns)
        grads[2] = gv.to(value.dtype)
    if need_diag and diag is not None:
        acc = _acc_dtype(x.dtype)
        gd = (grad.to(acc) * x.to(acc)).sum(1)
        grads[7] = (gd.sum().view(1) if diag.numel() == 1 else gd).to(diag.dtype)
    return tuple(grads)


def _max_backward(rowptr, col, value, x, out, grad, t_rowptr, t_perm):
    """Gradient of max aggregation, exactly as PyG computes it without
    torch_scatter: torch's ``zeros.scatter_reduce_(..., 'amax',
    include_self=False)``, whose backward splits the gradient evenly among the
    tied maxima and also counts the zero initial value as one more tie when the
    maximum is exactly 0 (so a row whose messages are all 0 passes on
    1/(ties+1) of its gradient). Builds E x F intermediates: max is not on the
    fast path."""
    R = rowptr.numel() - 1
    acc = _acc_dtype(x.dtype)
    deg = (rowptr[1:] - rowptr[:-1]).long()
    row = torch.repeat_interleave(torch.arange(R, device=x.device), deg, output_size=col.numel())
    c = col.long()
    xs = x.index_select(0, c).to(acc)
    msg = xs * value.to(acc).unsqueeze(1) if value is not None else xs
    mask = (msg.to(x.dtype) == out.index_select(0, row)).to(acc)
    cnt = (out == 0).to(acc).index_add_(0, row, mask)
    gm = mask * (grad.to(acc) / cnt.clamp(min=1)).index_select(0, row)
    gx_msg = gm * value.to(acc).unsqueeze(1) if value is not None else gm
    # Ordered segment sum over the transpose (no atomics: deterministic).
    gx = torch.segment_reduce(gx_msg.index_select(0, t_perm.long()), 'sum',
                              offsets=t_rowptr.long(), axis=0).to(x.dtype)
    gv = (gm * xs).sum(1)
    return gv, gx


def _sddmm_setup(ctx, inputs, output):
    (col, a, b, units, rowptr, hr, hp, ns, t_rowptr, t_col, t_perm, t_units, t_hr, t_hp, t_ns) = inputs
    ctx.ns, ctx.t_ns = ns, t_ns
    ctx.save_for_backward(col, a, b, units, rowptr, hr, hp, t_rowptr, t_col, t_perm, t_units, t_hr, t_hp)


def _sddmm_backward(ctx, grad):
    (col, a, b, units, rowptr, hr, hp, t_rowptr, t_col, t_perm, t_units, t_hr, t_hp) = ctx.saved_tensors
    ns, t_ns = ctx.ns, ctx.t_ns
    grads = [None] * 15
    g = grad.to(_acc_dtype(a.dtype)).contiguous()
    inv = inverse_perm(t_perm) if torch.is_grad_enabled() else t_perm
    gt = g[t_perm.long()]
    if ctx.needs_input_grad[1]:  # grad_a[i] = sum_e g_e b[col_e]
        grads[1] = torch.ops.pyg_tc.spmm_csr(rowptr, col, g, b, units, hr, hp, None, ns, 'sum',
                                             t_rowptr, t_col, t_perm, gt, t_units, t_hr, t_hp, t_ns)
    if ctx.needs_input_grad[2]:  # grad_b[j] = sum_{e: col_e = j} g_e a[row_e]
        grads[2] = torch.ops.pyg_tc.spmm_csr(t_rowptr, t_col, gt, a, t_units, t_hr, t_hp, None, t_ns,
                                             'sum', rowptr, col, inv, g, units, hr, hp, ns)
    return tuple(grads)


def _maxk_setup(ctx, inputs, output):
    x, k = inputs
    ctx.width = x.size(1)
    ctx.save_for_backward(output[1])
    ctx.set_materialize_grads(False)


def _maxk_backward(ctx, grad_values, grad_indices):
    (indices,) = ctx.saved_tensors
    if grad_values is None:
        return None, None
    gx = grad_values.new_zeros(grad_values.size(0), ctx.width)
    return gx.scatter_(1, indices.long(), grad_values), None


def _cbsr_spmm_setup(ctx, inputs, output):
    rowptr, col, value, values, indices, width, units, hr, hp, ns, diag, reduce = inputs
    ctx.ns, ctx.reduce = ns, reduce
    ctx.save_for_backward(rowptr, col, value, values, indices, units, hr, hp, diag)


def _sspmm(rowptr, col, value, grad, indices, units, hr, hp, ns, diag, reduce):
    """The SSpMM op, or its deterministic reference when
    torch.use_deterministic_algorithms(True) (the kernel uses global atomics)."""
    if grad.is_cuda and torch.are_deterministic_algorithms_enabled():
        return cbsr_sspmm_reference(rowptr, col, value, grad, indices, diag, reduce)
    return torch.ops.pyg_tc.cbsr_sspmm(rowptr, col, value, grad, indices, units, hr, hp, ns,
                                       diag, reduce)


def _cbsr_edge_grads(rowptr, col, value, values, indices, grad, diag, reduce):
    """Gradients of the SpGEMM for edge weights and the diagonal, by gathers
    (E x k temporaries: edge-weight gradients are not on the fast path)."""
    acc = _acc_dtype(values.dtype)
    G = grad.to(acc)
    if reduce == 'mean':
        deg = (rowptr[1:] - rowptr[:-1]).clamp(min=1).to(acc)
        G = G / deg.unsqueeze(1)
    idx = indices.long()
    gv = gd = None
    if value is not None:
        deg = (rowptr[1:] - rowptr[:-1]).long()
        tgt = torch.repeat_interleave(torch.arange(deg.numel(), device=deg.device), deg,
                                      output_size=col.numel())
        c = col.long()
        gv = (values.to(acc).index_select(0, c) *
              G.index_select(0, tgt).gather(1, idx.index_select(0, c))).sum(1)
    if diag is not None:
        gd = (values.to(acc) * G.gather(1, idx)).sum(1)
        gd = gd.sum().view(1) if diag.numel() == 1 else gd
    return gv, gd


def _cbsr_spmm_backward(ctx, grad):
    rowptr, col, value, values, indices, units, hr, hp, diag = ctx.saved_tensors
    grads = [None] * 12
    grad = grad.contiguous()
    if ctx.needs_input_grad[3]:
        grads[3] = _sspmm(rowptr, col, value, grad, indices, units, hr, hp, ctx.ns, diag, ctx.reduce)
    need_v = ctx.needs_input_grad[2] and value is not None
    need_d = ctx.needs_input_grad[10] and diag is not None
    if need_v or need_d:
        gv, gd = _cbsr_edge_grads(rowptr, col, value if need_v else None, values, indices, grad,
                                  diag if need_d else None, ctx.reduce)
        grads[2] = gv.to(value.dtype) if need_v else None
        grads[10] = gd.to(diag.dtype) if need_d else None
    return tuple(grads)


def _cbsr_sspmm_setup(ctx, inputs, output):
    rowptr, col, value, grad, indices, units, hr, hp, ns, diag, reduce = inputs
    ctx.ns, ctx.reduce, ctx.width = ns, reduce, grad.size(1)
    ctx.save_for_backward(rowptr, col, value, indices, units, hr, hp, diag)


def _cbsr_sspmm_backward(ctx, h):
    """SSpMM and SpGEMM are adjoint: the gradient for the dense input is the
    SpGEMM of the incoming CBSR-shaped gradient."""
    rowptr, col, value, indices, units, hr, hp, diag = ctx.saved_tensors
    if (ctx.needs_input_grad[2] and value is not None) or (ctx.needs_input_grad[9] and diag is not None):
        raise NotImplementedError('pyg_tc: second derivatives of the CBSR SpGEMM with respect to '
                                  'edge weights or the diagonal are not implemented')
    grads = [None] * 11
    if ctx.needs_input_grad[3]:
        grads[3] = torch.ops.pyg_tc.cbsr_spmm(rowptr, col, value, h.contiguous(), indices, ctx.width,
                                              units, hr, hp, ctx.ns, diag, ctx.reduce)
    return tuple(grads)


# SGT (TC-GNN): the backward of each tensor-core op is the other op, on the
# forward SGT or its transpose (cells map through t_cell).

def _sgt_swap(fwd, bwd, t_cell):
    """Argument groups of the transpose direction: (its own 7, the forward's 7
    as its transpose, the map of its transpose cells = forward cells)."""
    inv = inverse_perm(t_cell) if torch.is_grad_enabled() else t_cell
    return bwd, fwd, inv


def _sgt_spmm_setup(ctx, inputs, output):
    fwd, bwd = inputs[0:7], inputs[13:20]
    cell_val, x, diag, num_rows, precision, warps, t_cell = inputs[7], inputs[8], inputs[9], \
        inputs[10], inputs[11], inputs[12], inputs[20]
    ctx.ns, ctx.t_ns, ctx.precision, ctx.warps = fwd[6], bwd[6], precision, warps
    ctx.save_for_backward(*fwd[:6], *bwd[:6], cell_val, x, diag, t_cell)


def _sgt_groups(ctx, saved):
    fwd = tuple(saved[0:6]) + (ctx.ns,)
    bwd = tuple(saved[6:12]) + (ctx.t_ns,)
    return fwd, bwd


def _sgt_spmm_backward(ctx, grad):
    saved = ctx.saved_tensors
    fwd, bwd = _sgt_groups(ctx, saved)
    cell_val, x, diag, t_cell = saved[12:16]
    grads = [None] * 21
    grad = grad.contiguous()
    p, w = ctx.precision, ctx.warps
    if ctx.needs_input_grad[8]:
        tb, tf, inv = _sgt_swap(fwd, bwd, t_cell)
        grads[8] = torch.ops.pyg_tc.sgt_spmm(*tb, cell_val[t_cell.long()], grad, diag, x.size(0), p, w,
                                             *tf, inv)
    if ctx.needs_input_grad[7]:
        grads[7] = torch.ops.pyg_tc.sgt_sddmm(*fwd, grad, x, cell_val.numel(), p, w, *bwd,
                                              t_cell).to(cell_val.dtype)
    if ctx.needs_input_grad[9] and diag is not None:
        acc = _acc_dtype(x.dtype)
        gd = (grad.to(acc) * x.to(acc)).sum(1)
        grads[9] = (gd.sum().view(1) if diag.numel() == 1 else gd).to(diag.dtype)
    return tuple(grads)


def _sgt_sddmm_setup(ctx, inputs, output):
    fwd, bwd = inputs[0:7], inputs[12:19]
    a, b, precision, warps, t_cell = inputs[7], inputs[8], inputs[10], inputs[11], inputs[19]
    ctx.ns, ctx.t_ns, ctx.precision, ctx.warps = fwd[6], bwd[6], precision, warps
    ctx.save_for_backward(*fwd[:6], *bwd[:6], a, b, t_cell)


def _sgt_sddmm_backward(ctx, grad):
    saved = ctx.saved_tensors
    fwd, bwd = _sgt_groups(ctx, saved)
    a, b, t_cell = saved[12:15]
    grads = [None] * 20
    g = grad.to(torch.float32 if a.dtype != torch.float64 else torch.float64).contiguous()
    p, w = ctx.precision, ctx.warps
    if ctx.needs_input_grad[7]:  # grad_a[i] = sum_cells g * b[col]
        grads[7] = torch.ops.pyg_tc.sgt_spmm(*fwd, g, b, None, a.size(0), p, w, *bwd, t_cell)
    if ctx.needs_input_grad[8]:  # grad_b[j] = sum_cells g * a[row], on the transpose
        tb, tf, inv = _sgt_swap(fwd, bwd, t_cell)
        grads[8] = torch.ops.pyg_tc.sgt_spmm(*tb, g[t_cell.long()], a, None, b.size(0), p, w, *tf, inv)
    return tuple(grads)


# ---------------------------------------------------------------------------

def _op_defined(name: str) -> bool:
    try:
        getattr(torch.ops.pyg_tc, name)
        return True
    except (AttributeError, RuntimeError):
        return False


def ensure() -> None:
    """Define / load the ops once: CUDA extension if possible, Python schemas
    otherwise; then CPU reference, fake kernels and autograd."""
    global _READY, CUDA_KERNELS
    if _READY:
        return
    with _LOCK:
        if _READY:
            return
        loaded = _kernels.load()
        if not _op_defined('spmm_csr'):
            lib = torch.library.Library('pyg_tc', 'DEF')
            for schema in SCHEMAS.values():
                lib.define(schema)
            _LIBS.append(lib)
        impl_lib = torch.library.Library('pyg_tc', 'IMPL')
        _LIBS.append(impl_lib)
        keys = ['CPU'] if loaded else ['CPU', 'CUDA']  # reference on CUDA only without kernels
        for key in keys:
            impl_lib.impl('spmm_csr', _spmm_impl, key)
            impl_lib.impl('sddmm_csr', _sddmm_impl, key)
            impl_lib.impl('sort_int32', _sort_impl, key)
            impl_lib.impl('maxk_select', _maxk_impl, key)
            impl_lib.impl('cbsr_spmm', _cbsr_spmm_impl, key)
            impl_lib.impl('cbsr_sspmm', _cbsr_sspmm_impl, key)
            impl_lib.impl('sgt_spmm', _sgt_spmm_impl, key)
            impl_lib.impl('sgt_sddmm', _sgt_sddmm_impl, key)
        CUDA_KERNELS = loaded

        @torch.library.register_fake('pyg_tc::spmm_csr')
        def _spmm_fake(rowptr, col, value, x, *rest):
            return x.new_empty(rowptr.size(0) - 1, x.size(1))

        @torch.library.register_fake('pyg_tc::sddmm_csr')
        def _sddmm_fake(col, a, b, *rest):
            return a.new_empty(col.size(0))

        @torch.library.register_fake('pyg_tc::sort_int32')
        def _sort_fake(keys, end_bit):
            return keys.new_empty(keys.shape), keys.new_empty(keys.shape)

        @torch.library.register_fake('pyg_tc::maxk_select')
        def _maxk_fake(x, k):
            return (x.new_empty(x.size(0), k),
                    x.new_empty(x.size(0), k, dtype=index_dtype(x.size(1))))

        @torch.library.register_fake('pyg_tc::cbsr_spmm')
        def _cbsr_spmm_fake(rowptr, col, value, values, indices, width, *rest):
            return values.new_empty(rowptr.size(0) - 1, width)

        @torch.library.register_fake('pyg_tc::cbsr_sspmm')
        def _cbsr_sspmm_fake(rowptr, col, value, grad, indices, *rest):
            return grad.new_empty(indices.size(0), indices.size(1))

        @torch.library.register_fake('pyg_tc::sgt_spmm')
        def _sgt_spmm_fake(units, cols, mask, cell_ptr, heavy, heavy_ptr, ns, cell_val, x, diag,
                           num_rows, *rest):
            return x.new_empty(num_rows, x.size(1))

        @torch.library.register_fake('pyg_tc::sgt_sddmm')
        def _sgt_sddmm_fake(units, cols, mask, cell_ptr, heavy, heavy_ptr, ns, a, b, num_cells, *rest):
            return a.new_empty(num_cells)

        torch.library.register_autograd('pyg_tc::sgt_spmm', _sgt_spmm_backward,
                                        setup_context=_sgt_spmm_setup)
        torch.library.register_autograd('pyg_tc::sgt_sddmm', _sgt_sddmm_backward,
                                        setup_context=_sgt_sddmm_setup)
        torch.library.register_autograd('pyg_tc::maxk_select', _maxk_backward, setup_context=_maxk_setup)
        torch.library.register_autograd('pyg_tc::cbsr_spmm', _cbsr_spmm_backward,
                                        setup_context=_cbsr_spmm_setup)
        torch.library.register_autograd('pyg_tc::cbsr_sspmm', _cbsr_sspmm_backward,
                                        setup_context=_cbsr_sspmm_setup)
        torch.library.register_autograd('pyg_tc::spmm_csr', _spmm_backward, setup_context=_spmm_setup)
        torch.library.register_autograd('pyg_tc::sddmm_csr', _sddmm_backward, setup_context=_sddmm_setup)
        _READY = True
