"""Differentiable sparse ops. One place checks arguments and dispatches:
CUDA kernel (fp32/fp16/bf16 on a GPU with the kernels built), otherwise the
pure-PyTorch reference through the same registered op (CPU, or a GPU without
kernels); float64 always runs the reference.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric import EdgeIndex

from ..formats.carrier import get_graph
from ..formats.csr import CSRGraph, inverse_perm
from . import _registry
from ._registry import ensure, sddmm_reference, spmm_reference

__all__ = ['spmm', 'sddmm', 'spmm_graph', 'sddmm_graph', 'ensure', 'spmm_reference',
           'sddmm_reference']

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
    if not isinstance(diag, Tensor):
        diag = torch.tensor([float(diag)], device=x.device)
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


def sddmm_graph(g: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    """``out[e] = <a[target(e)], b[source(e)]>`` for every edge, in CSR order."""
    if not isinstance(a, Tensor) or a.dim() != 2 or a.size(0) != g.num_rows:
        raise ValueError(f'pyg_tc: a must be [{g.num_rows}, F] (one row per target node)')
    _check_features(b, g, 'b')
    if a.dtype != b.dtype or a.size(1) != b.size(1) or a.device != b.device:
        raise ValueError('pyg_tc: a and b must share dtype, device and width')
    ensure()
    if a.dtype == torch.float64 and a.is_cuda and _registry.CUDA_KERNELS:
        return sddmm_reference(g.rowptr, g.col, a, b)
    s, ts = g.sched, g.t_sched
    args = (g.col, a.contiguous(), b.contiguous(), s.units, g.rowptr, s.heavy_rows, s.heavy_ptr,
            s.num_slots, g.t_rowptr, g.t_col, g.t_perm, ts.units, ts.heavy_rows, ts.heavy_ptr,
            ts.num_slots)
    return _call(torch.ops.pyg_tc.sddmm_csr.default, args, (a, b))


def _to_csr_order(v: Optional[Tensor], g: CSRGraph) -> Optional[Tensor]:
    if v is None or g.perm is None:
        return v
    if v.dim() == 2 and v.size(1) == 1:
        v = v.view(-1)
    if v.dim() != 1 or v.numel() != g.num_edges:
        raise ValueError(f'pyg_tc: edge_weight must have one entry per edge ({g.num_edges}), '
                         f'got shape {tuple(v.shape)}')
    return v.index_select(0, g.perm)


def spmm(x: Tensor, adj: Any, edge_weight: Optional[Tensor] = None, reduce: str = 'sum', *,
         size: Optional[Tuple[Optional[int], Optional[int]]] = None,
         flow: str = 'source_to_target', diag: Any = None) -> Tensor:
    """Neighbour aggregation ``out[i] = reduce_{(j -> i)} w_ji * x[j]``.

    Args:
        x: ``[num_src, F]`` node features (fp16, bf16, fp32 or fp64).
        adj: ``edge_index [2, E]`` (int32/int64), ``EdgeIndex``, torch.sparse
            ``adj_t``, ``SparseTensor`` or :class:`~pyg_tc.formats.CSRGraph`.
        edge_weight: optional ``[E]`` weights in the order of ``adj``'s edges.
        reduce: ``'sum'`` (``'add'``), ``'mean'`` or ``'max'``.
        size: ``(num_src, num_dst)``; defaults to ``x.size(0)`` for both.
        flow: as in PyG's ``MessagePassing``.
        diag: optional per-node (or scalar) self term ``diag[i] * x[i]``.

    Returns ``[num_dst, F]`` in ``x``'s dtype. Differentiable in ``x``,
    ``edge_weight`` and ``diag``.
    """
    if size is None and isinstance(x, Tensor) and x.dim() == 2:
        # As PyG's propagate: an EdgeIndex's own target count, else square.
        num_dst = adj.sparse_size(1) if isinstance(adj, EdgeIndex) else None
        size = (x.size(0), num_dst if num_dst is not None else x.size(0))
    g, value = get_graph(adj, size=size, flow=flow)
    if edge_weight is not None:
        if value is not None:
            raise ValueError('pyg_tc: pass edge weights either in the sparse tensor or as edge_weight')
        value = _to_csr_order(edge_weight, g)
    return spmm_graph(g, x, value, reduce, diag)


def sddmm(a: Tensor, b: Tensor, adj: Any, *,
          size: Optional[Tuple[Optional[int], Optional[int]]] = None,
          flow: str = 'source_to_target') -> Tensor:
    """Per-edge dot products ``out[e] = <a[dst_e], b[src_e]>``, in the order of
    ``adj``'s edges (CSR order for sparse inputs). Differentiable in a and b."""
    if size is None and isinstance(b, Tensor) and isinstance(a, Tensor):
        size = (b.size(0), a.size(0))
    g, _ = get_graph(adj, size=size, flow=flow)
    out = sddmm_graph(g, a, b)
    if g.perm is None:
        return out
    return out.index_select(0, g.memo('inverse_perm', lambda: inverse_perm(g.perm)))
