"""The layers' dense output epilogue: biases added and outputs summed in one pass.

Under ``torch.autocast`` a pyg_tc layer aggregates in half precision and
PyG's output is ``out + bias`` with the fp32 bias, an fp32 result. PyTorch runs
that mixed-dtype addition element by element, and ``HeteroConv`` then sums
the fp32 outputs of the edge types that share a destination in further
passes. :func:`biased_sum` computes ``sum_r (x_r + b_r)`` in one kernel
(``bias_sum``, ``kernels/dense/dense_bias_sum.cu``) with the same fp32
roundings in the same order, so the result equals the unfused expression bit
for bit; its backward casts the gradient once per dtype and sums it over the
rows once for all biases.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .._library import Op, _use_kernel

#: inputs one ``bias_sum`` launch takes (more are summed in launches of this many)
MAX_INPUTS = 8

#: elements from which one half output plus its fp32 bias (one term) runs the
#: kernel: below, either pass takes a few microseconds of GPU time and the
#: kernel's host work (its checks and autograd function) is the larger cost
ONE_TERM_FROM = 1 << 22

#: one term of :func:`biased_sum`: an output, its bias (or None) and the
#: dtype PyG's output has before its bias is added
Term = Tuple[Tensor, Optional[Tensor], Optional[torch.dtype]]


def _bias_sum_reference(xs: List[Tensor], bias: Optional[Tensor], init: Optional[Tensor]) -> Tensor:
    """``init + sum_r (float(xs[r]) + bias[r])`` added left to right, in fp32."""
    _check_bias_sum(xs, bias, init)
    out = init
    for r, x in enumerate(xs):
        t = x.to(torch.float32, copy=out is None and bias is None)  # (an output never aliases an input)
        if bias is not None:
            t = t + bias[r]
        out = t if out is None else out + t
    return out


def _check_bias_sum(xs: List[Tensor], bias: Optional[Tensor], init: Optional[Tensor]) -> None:
    if not 1 <= len(xs) <= MAX_INPUTS:
        raise ValueError(f'pyg_tc: bias_sum: takes 1 to {MAX_INPUTS} inputs, got {len(xs)}')
    x0 = xs[0]
    if x0.dim() != 2 or any(x.shape != x0.shape or x.dtype != x0.dtype or x.device != x0.device for x in xs):
        raise ValueError('pyg_tc: bias_sum: inputs must be [N, F] tensors of one shape, dtype and device')
    if bias is not None and (bias.dtype != torch.float32 or bias.shape != (len(xs), x0.size(1))):
        raise ValueError(
            f'pyg_tc: bias_sum: bias must be fp32 [k, F] = {[len(xs), x0.size(1)]}, got {bias.dtype} {list(bias.shape)}'
        )
    if init is not None and (init.dtype != torch.float32 or init.shape != x0.shape):
        raise ValueError(f'pyg_tc: bias_sum: init must be fp32 {list(x0.shape)}, got {init.dtype} {list(init.shape)}')


bias_sum_op = Op(
    'bias_sum(Tensor[] xs, Tensor? bias, Tensor? init) -> Tensor',
    reference=_bias_sum_reference,
    fake=lambda a: a.xs[0].new_empty(a.xs[0].shape, dtype=torch.float32),
)


def add_bias_as(out: Tensor, bias: Optional[Tensor], dtype: Optional[torch.dtype]) -> Tensor:
    """PyG's ``out + bias`` where PyG's ``out`` is ``dtype`` and ours may
    be half (the half aggregation): the result has PyG's dtype, with one
    cast at most. A half ``out`` and an fp32 bias, the autocast case, give
    fp32 in the addition itself (no separate cast)."""
    if bias is None:
        return out if dtype is None else out.to(dtype)
    if torch.promote_types(out.dtype, bias.dtype) != torch.promote_types(dtype, bias.dtype):
        out = out.to(dtype)
    return out + bias


def biased_sum(terms: Sequence[Term]) -> Tensor:
    """``sum_r add_bias_as(x_r, b_r, dtype_r)``, added left to right: one
    layer's output with its bias (one term), or the outputs of the edge types
    that ``HeteroConv`` sums. On CUDA, where every term's result is fp32 (an
    fp32 bias, or fp32 outputs), the outputs share one dtype and shape and
    every term has a bias or none has, one kernel computes it (the same
    values); otherwise PyTorch's operations do. One term runs the kernel
    when it is a half output of at least :data:`ONE_TERM_FROM` elements with
    an fp32 bias (PyTorch's mixed-dtype addition is the slow case)."""
    if not _fused(terms):
        out = add_bias_as(*terms[0])
        for t in terms[1:]:
            out = out + add_bias_as(*t)
        return out
    xs = [t[0] for t in terms]
    biases = [t[1] for t in terms if t[1] is not None]
    if xs[0].dim() == 2:
        return _BiasSum.apply(len(xs), *xs, *biases)
    shape, F = xs[0].shape, xs[0].size(-1)
    return _BiasSum.apply(len(xs), *(x.reshape(-1, F) for x in xs), *biases).view(shape)


def _fused(terms: Sequence[Term]) -> bool:
    """Whether :func:`biased_sum` runs the ``bias_sum`` kernel."""
    x0 = terms[0][0]
    if not isinstance(x0, Tensor):
        return False
    if len(terms) == 1 and (terms[0][1] is None or x0.dtype == torch.float32 or x0.numel() < ONE_TERM_FROM):
        return False  # (no bias: a cast at most; fp32 + fp32: one vectorised addition; small: host-bound)
    if not _use_kernel(x0) or torch.compiler.is_compiling() or x0.dim() == 0 or x0.numel() == 0:
        return False
    with_bias = terms[0][1] is not None
    for x, b, dtype in terms:
        if (
            not isinstance(x, Tensor)
            or x.dtype != x0.dtype
            or x.shape != x0.shape
            or x.device != x0.device
            or not x.is_contiguous()
        ):
            return False
        if (b is not None) != with_bias:
            return False
        if b is None:
            if dtype != torch.float32:
                return False
        elif b.dtype != torch.float32 or b.dim() != 1 or b.size(0) != x0.size(-1) or b.device != x0.device:
            return False
        elif dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return False
    return True


class _BiasSum(torch.autograd.Function):
    """``sum_r (x_r + b_r)`` in fp32 from ``n`` outputs ``[M, F]`` and ``n`` or
    no fp32 biases ``[F]``. Backward: the gradient cast once per input dtype,
    and summed over the rows once for every bias."""

    @staticmethod
    def forward(ctx: Any, n: int, *tensors: Tensor) -> Tensor:
        xs, biases = list(tensors[:n]), tensors[n:]
        ctx.n, ctx.dtypes = n, [x.dtype for x in xs]
        stacked = (biases[0].unsqueeze(0) if n == 1 else torch.stack(biases)) if biases else None
        out = None
        for i in range(0, n, MAX_INPUTS):
            chunk = stacked[i : i + MAX_INPUTS] if stacked is not None else None
            out = bias_sum_op(xs[i : i + MAX_INPUTS], chunk, out, differentiable=())
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        needs = ctx.needs_input_grad[1:]
        casts: dict = {}
        gx = []
        for r in range(ctx.n):
            d = ctx.dtypes[r]
            if needs[r] and d not in casts:
                casts[d] = grad.to(d)
            gx.append(casts.get(d) if needs[r] else None)
        gb: List[Optional[Tensor]] = []
        total: Optional[Tensor] = None
        for r in range(ctx.n, len(needs)):
            if not needs[r]:
                gb.append(None)
                continue
            # one row sum for every bias; a copy for each further one (a
            # gradient tensor is not shared between two parameters' .grad)
            total = grad.sum(0) if total is None else total
            gb.append(total if not any(g is not None for g in gb) else total.clone())
        return (None, *gx, *gb)
