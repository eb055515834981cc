"""Differentiable sparse ops. One place checks arguments and dispatches:
CUDA kernel (fp32/fp16/bf16 on a GPU with the kernels built), otherwise the
pure-PyTorch reference through the same registered op (CPU, or a GPU without
kernels); float64 always runs the reference.
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric import EdgeIndex

from ..formats.carrier import get_graph
from ..formats.cbsr import CBSR, cbsr_spmm_reference, index_dtype
from ..formats.csr import CSRGraph, inverse_perm
from . import _registry
from ._registry import ensure, maxk_reference, sddmm_reference, spmm_reference
from .sgt import (choose_backend, sgt_of, sgt_sddmm_cells, sgt_sddmm_graph, sgt_spmm_cells,
                  sgt_spmm_graph)

__all__ = ['spmm', 'sddmm', 'spmm_graph', 'sddmm_graph', 'maxk', 'cbsr_spmm_graph', 'ensure',
           'spmm_reference', 'sddmm_reference', 'maxk_reference', 'sgt_spmm_graph',
           'sgt_sddmm_graph', 'sgt_spmm_cells', 'sgt_sddmm_cells', 'sgt_of', 'choose_backend']
_BACKENDS = ('auto', 'csr', 'sgt')


def _backend(backend: str, g: CSRGraph, x: Any, reduce: str, op: str = 'spmm') -> str:
    if backend not in _BACKENDS:
        raise ValueError(f'pyg_tc: backend must be one of {_BACKENDS}, got {backend!r}')
    if backend == 'auto':
        if (isinstance(x, CBSR) or _REDUCE.get(reduce) not in ('sum', 'mean')
                or not isinstance(x, Tensor) or x.dim() != 2):
            return 'csr'  # the CSR path raises the argument errors
        return choose_backend(g, x.size(1), x.dtype, op)
    if backend == 'sgt' and isinstance(x, CBSR):
        raise ValueError("pyg_tc: backend='sgt' takes dense features (CBSR input uses the CBSR kernels)")
    return backend

MAXK_KERNEL_WIDTH = 1024  # widest row the selection kernel holds in registers
CBSR_KERNEL_WIDTH = 4096  # widest shared-memory row buffer of the CBSR kernels

_REDUCE = {'sum': 'sum', 'add': 'sum', 'mean': 'mean', 'max': 'max'}
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_features(x: Tensor, g: CSRGraph, name: str = 'x') -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f'pyg_tc: {name} must be a tensor, got {type(x).__name__}')
    if x.dtype not in _FLOATS:
        raise TypeError(f'pyg_tc: {name} must be float16, bfloat16, float32 or float64, got {x.dtype}')
    if x.dim() != 2:
        raise ValueError(f'pyg_tc: {name} must be 2-D [num_nodes, features], got shape {tuple(x.shape)}')
    g.check_compatible(x, name)


def _edge_values(v: Optional[Tensor], g: CSRGraph, x: Tensor, name: str) -> Optional[Tensor]:
    if v is None:
        return None
    if not isinstance(v, Tensor) or not v.is_floating_point():
        raise TypeError(f'pyg_tc: {name} must be a floating-point tensor')
    if v.dim() == 2 and v.size(1) == 1:
        v = v.view(-1)
    if v.dim() != 1 or v.numel() != g.num_edges:
        raise ValueError(f'pyg_tc: {name} must have one entry per edge ({g.num_edges}), '
                         f'got shape {tuple(v.shape)}')
    if v.device != g.device:
        raise ValueError(f'pyg_tc: {name} is on {v.device} but the graph is on {g.device}')
    return v.to(torch.float64 if x.dtype == torch.float64 else torch.float32)


def _diag(diag: Any, g: CSRGraph, x: Tensor) -> Optional[Tensor]:
    if diag is None:
        return None
    if g.num_rows != g.num_cols:
        raise ValueError('pyg_tc: diag needs a square adjacency')
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    if not isinstance(diag, Tensor):  # a Python number: straight to the accumulation dtype
        diag = torch.tensor([float(diag)], dtype=acc, device=x.device)
    diag = diag.to(acc).reshape(-1)
    if diag.numel() not in (1, g.num_rows):
        raise ValueError(f'pyg_tc: diag must have 1 or {g.num_rows} entries, got {diag.numel()}')
    return diag


def _call(op, args, differentiable):
    """Call a registered op. In eager mode with nothing to differentiate, go
    straight to the device kernel: the Python autograd wrapper that
    ``register_autograd`` installs costs several microseconds per call, which
    is the whole kernel time on small graphs."""
    if (torch.compiler.is_compiling() or (torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in differentiable))):
        return op(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def spmm_graph(g: CSRGraph, x: Tensor, value: Optional[Tensor] = None, reduce: str = 'sum',
               diag: Optional[Tensor] = None, t_value: Optional[Tensor] = None) -> Tensor:
    """SpMM on a :class:`CSRGraph` with edge values already in CSR order.

    ``out[i] = reduce_{e: i <- j} value[e] * x[j]  (+ diag[i] * x[i])``.
    ``t_value`` (optional) is ``value`` in transpose order, saving one gather
    per backward when the caller caches it.
    """
    if reduce not in _REDUCE:
        raise ValueError(f"pyg_tc: reduce must be one of 'sum', 'mean', 'max', got {reduce!r}")
    reduce = _REDUCE[reduce]
    _check_features(x, g)
    value = _edge_values(value, g, x, 'edge values')
    diag = _diag(diag, g, x)
    if diag is not None and reduce == 'max':
        raise ValueError("pyg_tc: diag is not supported with reduce='max'")
    ensure()
    if x.dtype == torch.float64 and x.is_cuda and _registry.CUDA_KERNELS:
        return spmm_reference(g.rowptr, g.col, value, x, diag, reduce)
    s, ts = g.sched, g.t_sched
    args = (g.rowptr, g.col, value, x.contiguous(), s.units, s.heavy_rows, s.heavy_ptr, diag,
            s.num_slots, reduce, g.t_rowptr, g.t_col, g.t_perm, t_value, ts.units, ts.heavy_rows,
            ts.heavy_ptr, ts.num_slots)
    return _call(torch.ops.pyg_tc.spmm_csr.default, args, (x, value, diag))


def _check_sddmm(g: CSRGraph, a: Tensor, b: Tensor) -> None:
    if not isinstance(a, Tensor) or a.dim() != 2 or a.size(0) != g.num_rows:
        raise ValueError(f'pyg_tc: a must be [{g.num_rows}, F] (one row per target node)')
    _check_features(b, g, 'b')
    if a.dtype != b.dtype or a.size(1) != b.size(1) or a.device != b.device:
        raise ValueError('pyg_tc: a and b must share dtype, device and width')


def sddmm_graph(g: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    """``out[e] = <a[target(e)], b[source(e)]>`` for every edge, in CSR order."""
    _check_sddmm(g, a, b)
    ensure()
    if a.dtype == torch.float64 and a.is_cuda and _registry.CUDA_KERNELS:
        return sddmm_reference(g.rowptr, g.col, a, b)
    s, ts = g.sched, g.t_sched
    args = (g.col, a.contiguous(), b.contiguous(), s.units, g.rowptr, s.heavy_rows, s.heavy_ptr,
            s.num_slots, g.t_rowptr, g.t_col, g.t_perm, ts.units, ts.heavy_rows, ts.heavy_ptr,
            ts.num_slots)
    return _call(torch.ops.pyg_tc.sddmm_csr.default, args, (a, b))


def _kernel_ok(t: Tensor) -> bool:
    return t.is_cuda and t.dtype != torch.float64 and _registry.CUDA_KERNELS


def check_k(k: Any, who: str = 'pyg_tc') -> int:
    """MaxK's ``k`` as a Python int: any integral value (int, numpy integer,
    0-d integer tensor), at least 1; bools and floats are rejected."""
    if isinstance(k, bool) or (isinstance(k, Tensor) and (k.dim() or k.is_floating_point())):
        raise TypeError(f'{who}: k must be an int, got {type(k).__name__}')
    try:
        k = operator.index(k)
    except TypeError:
        raise TypeError(f'{who}: k must be an int, got {type(k).__name__}') from None
    if k < 1:
        raise ValueError(f'{who}: k must be >= 1, got {k}')
    return k


def maxk(x: Tensor, k: int) -> CBSR:
    """MaxK nonlinearity: the ``k`` largest entries of every row of ``x``
    (``[N, F]``), as a :class:`~pyg_tc.formats.CBSR` (values in x's dtype,
    column indices ascending). Order as ``torch.sort``: NaN counts as
    largest; ties at the k-th value keep the lowest columns. ``k >= F`` keeps
    every entry. Gradients flow to the kept entries only.

    CUDA: one-pass selection kernel for widths up to 1024 (fp32/fp16/bf16);
    wider rows, float64 and CPU use the reference (``torch.sort``).
    """
    k = check_k(k)
    if not isinstance(x, Tensor) or x.dim() != 2 or x.dtype not in _FLOATS:
        raise TypeError('pyg_tc: maxk needs a 2-D floating-point tensor [N, F]')
    F = x.size(1)
    idt = index_dtype(F)
    if k >= F:  # keeps everything: the identity, in CBSR form
        cols = torch.arange(F, device=x.device, dtype=idt).expand(x.size(0), F).contiguous()
        return CBSR(x, cols, F, check=False)
    ensure()
    if F > MAXK_KERNEL_WIDTH and _kernel_ok(x):
        values, indices = maxk_reference(x, k)
    else:
        values, indices = _call(torch.ops.pyg_tc.maxk_select.default, (x.contiguous(), k), (x,))
    return CBSR(values, indices, F, check=False)


def cbsr_spmm_graph(g: CSRGraph, x: CBSR, value: Optional[Tensor] = None, reduce: str = 'sum',
                    diag: Any = None) -> Tensor:
    """SpGEMM ``out[i] = reduce_{e: i <- j} value[e] * x[j] (+ diag[i] * x[i])``
    with CBSR features ``x``; dense ``[num_dst, x.width]`` output in x's
    dtype, fp32 accumulation. Backward: the SSpMM kernel for ``x.values``
    (only the kept entries get gradients), gathers for edge weights and diag.
    ``reduce`` is 'sum' or 'mean' (diag with 'sum' only)."""
    if not isinstance(x, CBSR):
        raise TypeError(f'pyg_tc: expected CBSR features, got {type(x).__name__}')
    if reduce not in ('sum', 'add', 'mean'):
        raise ValueError(f"pyg_tc: CBSR aggregation supports 'sum' and 'mean', got {reduce!r}")
    reduce = _REDUCE[reduce]
    _check_features(x.values, g, 'x.values')
    if x.indices.device != x.values.device or x.indices.shape != x.values.shape:
        raise ValueError('pyg_tc: CBSR indices must match the values in shape and device')
    value = _edge_values(value, g, x.values, 'edge values')
    diag = _diag(diag, g, x.values)
    if diag is not None and reduce == 'mean':
        raise ValueError("pyg_tc: diag is supported with reduce='sum' only for CBSR input")
    ensure()
    if x.width > CBSR_KERNEL_WIDTH and _kernel_ok(x.values):
        return cbsr_spmm_reference(g.rowptr, g.col, value, x.values, x.indices, x.width, diag, reduce)
    s = g.sched
    args = (g.rowptr, g.col, value, x.values.contiguous(), x.indices.contiguous(), x.width,
            s.units, s.heavy_rows, s.heavy_ptr, s.num_slots, diag, reduce)
    return _call(torch.ops.pyg_tc.cbsr_spmm.default, args, (x.values, value, diag))


def _to_csr_order(v: Optional[Tensor], g: CSRGraph) -> Optional[Tensor]:
    if v is None or g.perm is None:
        return v
    if v.dim() == 2 and v.size(1) == 1:
        v = v.view(-1)
    if v.dim() != 1 or v.numel() != g.num_edges:
        raise ValueError(f'pyg_tc: edge_weight must have one entry per edge ({g.num_edges}), '
                         f'got shape {tuple(v.shape)}')
    return v.index_select(0, g.perm)


def _default_size(adj: Any, num_src: int, flow: str) -> Tuple[int, int]:
    """PyG's ``size`` (nodes of ``edge_index[0]``, of ``edge_index[1]``) when
    the caller gives none: the source side from ``x``; the target side from an
    ``EdgeIndex``'s sparse size, else square (as PyG's ``propagate``)."""
    j = 0 if flow == 'source_to_target' else 1
    num_dst = adj.sparse_size(1 - j) if isinstance(adj, EdgeIndex) else None
    size = [num_src, num_src]
    if num_dst is not None:
        size[1 - j] = num_dst
    return size[0], size[1]


def spmm(x: Tensor, adj: Any, edge_weight: Optional[Tensor] = None, reduce: str = 'sum', *,
         size: Optional[Tuple[Optional[int], Optional[int]]] = None,
         flow: str = 'source_to_target', diag: Any = None, backend: str = 'auto') -> Tensor:
    """Neighbour aggregation ``out[i] = reduce_{(j -> i)} w_ji * x[j]``.

    Args:
        x: ``[num_src, F]`` node features (fp16, bf16, fp32 or fp64), or
            :class:`~pyg_tc.formats.CBSR` features (the SpGEMM kernel).
        adj: ``edge_index [2, E]`` (int32/int64), ``EdgeIndex``, torch.sparse
            ``adj_t``, ``SparseTensor`` or :class:`~pyg_tc.formats.CSRGraph`.
        edge_weight: optional ``[E]`` weights in the order of ``adj``'s edges.
        reduce: ``'sum'`` (``'add'``), ``'mean'`` or ``'max'``.
        size: PyG's ``size``: the node counts of ``edge_index[0]`` and
            ``edge_index[1]``, i.e. ``(num_src, num_dst)`` with
            ``flow='source_to_target'`` and ``(num_dst, num_src)`` with
            ``'target_to_source'``. Default: the sources are ``x``'s rows,
            the targets an ``EdgeIndex``'s sparse size or as many as the
            sources (square, as PyG). Sparse adjacencies carry their own size.
        flow: as in PyG's ``MessagePassing``: ``'source_to_target'``
            aggregates ``edge_index[0] -> edge_index[1]``,
            ``'target_to_source'`` the reverse (not for sparse adjacencies,
            which are ``adj_t`` with rows = targets).
        diag: optional per-node (or scalar) self term ``diag[i] * x[i]``.
        backend: ``'csr'`` (CSR kernel), ``'sgt'`` (TC-GNN tensor-core kernel;
            'sum' / 'mean'), ``'auto'`` (per graph and width, see
            :func:`pyg_tc.ops.choose_backend`).

    Returns ``[num_dst, F]`` in ``x``'s dtype. Differentiable in ``x``,
    ``edge_weight`` and ``diag``.
    """
    if size is None and isinstance(x, (Tensor, CBSR)) and x.dim() == 2:
        size = _default_size(adj, x.size(0), flow)
    g, value = get_graph(adj, size=size, flow=flow)
    if edge_weight is not None:
        if value is not None:
            raise ValueError('pyg_tc: pass edge weights either in the sparse tensor or as edge_weight')
        value = _to_csr_order(edge_weight, g)
    if isinstance(x, CBSR):
        _backend(backend, g, x, reduce)
        return cbsr_spmm_graph(g, x, value, reduce, diag)
    if _backend(backend, g, x, reduce) == 'sgt':
        return sgt_spmm_graph(g, x, value, reduce, diag)
    return spmm_graph(g, x, value, reduce, diag)


def sddmm(a: Tensor, b: Tensor, adj: Any, *,
          size: Optional[Tuple[Optional[int], Optional[int]]] = None,
          flow: str = 'source_to_target', backend: str = 'auto') -> Tensor:
    """Per-edge dot products ``out[e] = <a[dst_e], b[src_e]>``, in the order of
    ``adj``'s edges (CSR order for sparse inputs), where ``a`` holds the
    target and ``b`` the source features. Differentiable in a and b.
    ``size`` and ``flow`` as in :func:`spmm` (default size: from ``b`` and
    ``a``); ``backend`` as in :func:`spmm` ('sgt': TC-GNN's tensor-core
    SDDMM)."""
    if size is None and isinstance(b, Tensor) and isinstance(a, Tensor):
        size = (b.size(0), a.size(0)) if flow == 'source_to_target' else (a.size(0), b.size(0))
    g, _ = get_graph(adj, size=size, flow=flow)
    use_sgt = isinstance(b, Tensor) and _backend(backend, g, b, 'sum', 'sddmm') == 'sgt'
    out = sgt_sddmm_graph(g, a, b) if use_sgt else sddmm_graph(g, a, b)
    if g.perm is None:
        return out
    return out.index_select(0, g.memo('inverse_perm', lambda: inverse_perm(g.perm)))
