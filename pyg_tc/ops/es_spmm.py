"""ES-SpMM's edge sampling (the ES-SpMM paper, docs/es_spmm.md):
which edges a row keeps when it is capped at ``S`` neighbours, as a pure
function of (row, slot, seed), and the sampled aggregation's reference.

This module is the specification the CUDA kernel follows (and its test
oracle): every function works on int64 tensors with integer arithmetic only,
so the device computes the same slots bit for bit.

A row of degree ``d <= S`` keeps all its edges, in CSR order (computed exactly;
with ``S >=`` the largest degree the sampled op *is* the exact op, bitwise). A
row of degree ``d > S`` keeps ``S`` edges, slot ``k`` (``0 <= k < S``) taking
edge ``rowptr[row] + idx(k)`` with, per strategy:

* ``'uniform'`` (the default): ``idx(k) = (P(k) + r) mod d``, ``P`` a keyed
  pseudo-random permutation of ``[0, d)`` (an invertible mixer on the ``b``-bit
  integers, ``2^(b-1) < d <= 2^b``, restricted to ``[0, d)`` by cycle walking)
  and ``r`` a keyed offset in ``[0, d)``; keys from a 32-bit hash of ``(row,
  seed)``. ``idx`` is a bijection, so the ``S`` slots are distinct (no
  duplicate samples), and the rotation by ``r`` makes every edge's inclusion
  probability over seeds exactly ``S / d`` (up to the ``d / 2^62`` bias of
  ``r``): the Horvitz-Thompson weights below are unbiased.
* ``'bucket'``: ``idx(k) = k``, the row's first ``S`` edges (the paper's Bucket).
* ``'fastrand'``: ``idx(k) = (577 k) mod d`` (the paper's FastRand; it repeats
  edges when ``gcd(577, d) > 1`` or ``577 S > d`` wraps onto earlier slots,
  and ignores the seed: kept for comparison only).

Estimators (the sampled result's expectation over seeds is the exact one for
'uniform'): ``sum`` scales a capped row's kept terms by ``d / S``; ``mean``
divides by the number kept (``min(d, S)``); edge values (GCN's symmetric
normalisation from the full degrees, any user weight) multiply as in the
exact op.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from . import dispatch
from .csr import check_spmm, spmm_reference

#: the strategies, in the order of the kernel op's ``sampling`` index
SAMPLINGS = ('uniform', 'bucket', 'fastrand')
FASTRAND_PRIME = 577
_M32 = 0xFFFFFFFF
_M31 = 0x7FFFFFFF


def _mul32(x: Tensor, c: int) -> Tensor:
    """``(x * c) mod 2^32`` for ``0 <= x < 2^32`` (int64, no overflow: two
    16-bit halves of ``c``), as ``uint32`` multiplication on the device."""
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _M32


def hash32(x: Tensor) -> Tensor:
    """A 32-bit integer mixer (``lowbias32``: xor-shift, multiply, twice) of
    ``x mod 2^32``; int64 in, values in ``[0, 2^32)`` out."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def row_keys(row: Tensor, seed: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Four 32-bit keys per row (int64 tensors) from ``hash32`` of the row and
    the seed: the permutation's xor, two odd multipliers (``< 2^31``), and
    the high bits of the offset ``r``."""
    s = hash32(torch.tensor(seed & _M32, dtype=torch.int64) ^ 0x9E3779B9)
    k0 = hash32(row ^ s)
    k1 = hash32(k0 ^ 0x85EBCA6B)
    k2 = hash32(k1 ^ 0xC2B2AE35)
    k3 = hash32(k2 ^ 0x27D4EB2F)
    return k0, k1, k2, k3


def _bits(d: Tensor) -> Tensor:
    """``b`` with ``2^(b-1) < d <= 2^b`` (``b >= 1``), per row (int64)."""
    b = torch.zeros_like(d)
    v = (d - 1).clamp(min=1)
    while bool((v > 0).any()):
        b = b + (v > 0).long()
        v = v >> 1
    return b.clamp(min=1)


def _mix(x: Tensor, b: Tensor, k0: Tensor, k1: Tensor, k2: Tensor) -> Tensor:
    """A bijection of the ``b``-bit integers (per element ``b``): xor with a
    key, multiply by an odd key, xor-shift right by ``ceil(b / 2)``, multiply,
    xor-shift; every step is invertible modulo ``2^b``."""
    m = (torch.ones_like(b) << b) - 1
    h = (b + 1) >> 1
    x = (x ^ k0) & m
    x = (x * ((k1 & _M31) | 1)) & m
    x = x ^ (x >> h)
    x = (x * ((k2 & _M31) | 1)) & m
    return x ^ (x >> h)


def uniform_index(k: Tensor, d: Tensor, row: Tensor, seed: int) -> Tensor:
    """``'uniform'``: slot ``k`` of a row of degree ``d > k`` -> the edge's
    position in the row, ``(P(k) + r) mod d`` (module doc); int64 tensors of
    one shape."""
    k0, k1, k2, k3 = row_keys(row, seed)
    b = _bits(d)
    y = _mix(k, b, k0, k1, k2)
    out = y >= d
    while bool(out.any()):  # cycle walking: terminates, as k itself lies in [0, d)
        y = torch.where(out, _mix(y, b, k0, k1, k2), y)
        out = y >= d
    r = (((k3 & _M31) << 31) | (hash32(k3 ^ 0x165667B1) & _M31)) % d
    return (y + r) % d


def slot_index(k: Tensor, d: Tensor, row: Tensor, sampling: str, seed: int) -> Tensor:
    """Position in its row of the edge that slot ``k`` of a capped row keeps."""
    if sampling == 'bucket':
        return k
    if sampling == 'fastrand':
        return (k * FASTRAND_PRIME) % d
    if sampling == 'uniform':
        return uniform_index(k, d, row, seed)
    raise ValueError(f"pyg_tc: sampling must be one of {SAMPLINGS}, got {sampling!r}")


def check_sampling(max_neighbors: int, sampling: str) -> None:
    """Raises for a cap below 1 or an unknown strategy."""
    if isinstance(max_neighbors, bool) or not isinstance(max_neighbors, int) or max_neighbors < 1:
        raise ValueError(f'pyg_tc: max_neighbors must be a positive int, got {max_neighbors!r}')
    if sampling not in SAMPLINGS:
        raise ValueError(f"pyg_tc: sampling must be one of {SAMPLINGS}, got {sampling!r}")


def sample_csr(
    rowptr: Tensor, max_neighbors: int, sampling: str = 'uniform', seed: int = 0
) -> Tuple[Tensor, Tensor, Tensor]:
    """The capped graph of a CSR: ``(rowptr_s, edge, scale)``. Row ``i`` keeps
    ``min(deg_i, S)`` edges, positions ``edge[rowptr_s[i]:rowptr_s[i+1]]``
    into the original edge arrays (``col[edge]``, ``value[edge]``): all of
    them in CSR order when ``deg_i <= S``, else the ``S`` slots of
    :func:`slot_index` in slot order. ``scale[i] = deg_i / S`` for capped rows,
    1 otherwise (float64: the sum estimator's Horvitz-Thompson weight)."""
    check_sampling(max_neighbors, sampling)
    S = max_neighbors
    rowptr = rowptr.long()
    deg = rowptr[1:] - rowptr[:-1]
    keep = deg.clamp(max=S)
    rowptr_s = torch.zeros_like(rowptr)
    torch.cumsum(keep, 0, out=rowptr_s[1:])
    R, E_s = deg.numel(), int(rowptr_s[-1])
    row = torch.repeat_interleave(torch.arange(R, device=rowptr.device), keep, output_size=E_s)
    k = torch.arange(E_s, device=rowptr.device) - rowptr_s[:-1].index_select(0, row)
    d = deg.index_select(0, row)
    capped = d > S
    idx = k.clone()
    if bool(capped.any()):
        idx[capped] = slot_index(k[capped], d[capped], row[capped], sampling, seed)
    edge = rowptr[:-1].index_select(0, row) + idx
    scale = torch.where(deg > S, deg.double() / S, torch.ones_like(deg, dtype=torch.float64))
    return rowptr_s, edge, scale


def sampled_spmm_reference(
    rowptr: Tensor,
    col: Tensor,
    value: Optional[Tensor],
    x: Tensor,
    max_neighbors: int,
    sampling: str = 'uniform',
    seed: int = 0,
    reduce: str = 'sum',
    diag: Optional[Tensor] = None,
) -> Tensor:
    """ES-SpMM's result on the CPU (and the oracle of the kernel): the exact
    :func:`~pyg_tc.ops.spmm_reference` on :func:`~pyg_tc.ops.es_spmm.sample_csr`'s graph, sums of
    capped rows scaled by ``deg / S``, means over the kept edges, ``max`` over
    the kept edges; ``diag`` (a self term) is never sampled.

    Args:
        rowptr, col, value, x, reduce, diag: as in
            :func:`~pyg_tc.ops.spmm_reference`.
        max_neighbors (int): ``S``, the edges a row keeps at most.
        sampling (str, optional): ``'uniform'``, ``'bucket'`` or ``'fastrand'``.
        seed (int, optional): the sample is a function of (row, slot, seed).

    Shapes:
        - **input:** x :math:`(N_{src}, F)`, col and value :math:`(E)`
        - **output:** :math:`(N_{dst}, F)`
    """
    if reduce not in ('sum', 'mean', 'max'):
        raise ValueError(f"pyg_tc: reduce must be 'sum', 'mean' or 'max', got {reduce!r}")
    rowptr_s, edge, scale = sample_csr(rowptr, max_neighbors, sampling, seed)
    col_s = col.long().index_select(0, edge)
    v = None if value is None else value.index_select(0, edge)
    if reduce == 'sum':
        row = torch.repeat_interleave(
            torch.arange(scale.numel(), device=x.device), rowptr_s[1:] - rowptr_s[:-1], output_size=edge.numel()
        )
        w = scale.index_select(0, row)
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        v = w.to(acc) if v is None else v.to(acc) * w.to(acc)
    return spmm_reference(rowptr_s, col_s, v, x, diag, reduce)


# ---------------------------------------------------------------------------
# Sampled aggregation on a CSRGraph (the reference path: the capped graph is
# built with PyTorch ops, then the exact kernel runs on it)


class Sampling(NamedTuple):
    """A sampled aggregation's settings: cap, strategy, seed (None: a fresh
    seed from PyTorch's default generator per call, i.e. a new sample per
    step for training; an int: the same sample every call)."""

    max_neighbors: int
    sampling: str = 'uniform'
    seed: Optional[int] = 0

    def resolved_seed(self) -> int:
        """The seed of this call."""
        if self.seed is None:
            return int(torch.randint(0, 2**31 - 1, (), dtype=torch.int64))
        return int(self.seed)


def row_order(g) -> Tensor:
    """The rows of ``g`` by degree, descending (int32, once per graph): the
    kernel's warps take rows in this order, so the rows sharing a warp keep
    nearly equal counts ``min(deg, S)`` for every cap ``S``."""
    return g.rows_by_degree()


def capped_graph(g, max_neighbors: int, sampling: str, seed: int):
    """``(graph, edge, row_scale)``: the capped :class:`~pyg_tc.formats.CSRGraph` of ``g``
    (:func:`sample_csr`), its edges' positions in ``g``'s CSR order and the
    per-edge Horvitz-Thompson weight (float64); None when no row of ``g`` has
    more than ``max_neighbors`` edges (the exact op applies). The latest
    capped graph per (cap, strategy) is kept in ``g.cache`` (a fixed seed
    builds it once; a new seed per call replaces it)."""
    from ..formats.csr import CSRGraph

    if g.max_degree() <= max_neighbors:
        return None

    hit = kept_capped(g, max_neighbors, sampling, seed)
    if hit is not None:
        return hit
    rowptr_s, edge, scale = sample_csr(g.rowptr, max_neighbors, sampling, seed)
    gs = CSRGraph.from_csr(rowptr_s, g.col.index_select(0, edge), g.num_cols, g.chunk)
    built = (gs, edge, scale.index_select(0, gs.row().long()))
    g.cache.put(('capped', max_neighbors, sampling), (seed, built))
    return built


def kept_capped(g, max_neighbors: int, sampling: str, seed: int):
    """:func:`capped_graph`'s value kept in ``g``'s cache for this seed, or None
    (builds nothing)."""
    hit = g.cache.get(('capped', max_neighbors, sampling))
    return hit[1] if hit is not None and hit[0] == seed else None


def check_sampled(g, x, value: Optional[Tensor], reduce: str, diag, spec: tuple) -> dict:
    """The checked arguments of a sampled aggregation (family
    ``'sampled_spmm'``): the settings ``spec`` (a :class:`Sampling` or its
    fields) checked and this call's seed drawn, then the aggregation's
    arguments as given (the capped graph's path gathers the edge values
    themselves) and as checked by :func:`~pyg_tc.ops.csr.check_spmm`
    (``checked``: what the kernel and the exact path take)."""
    spec = Sampling(*spec)
    check_sampling(spec.max_neighbors, spec.sampling)
    seed = spec.resolved_seed()
    return dict(
        x=x,
        value=value,
        reduce=dispatch.REDUCE.get(reduce, reduce),
        diag=diag,
        spec=spec,
        seed=seed,
        checked=check_spmm(g, x, value, reduce, diag),
    )


# ES-SpMM on a CSRGraph: ``reduce`` over each row's kept edges (module doc: sums
# scaled by ``deg / S`` on capped rows, means over the kept edges), ``value``
# (CSR order of ``g``) gathered for the kept edges, ``diag`` not sampled.
# Differentiable in ``x``, ``value`` and ``diag``: the backward is the exact
# transpose of the call's sample. Three implementations, one sample (results
# equal up to fp32 rounding order), tried in this order by dispatch.choose:
#
# * 'exact': no row of ``g`` has more than ``max_neighbors`` edges: the exact op, bitwise;
# * 'kernel' (backends 'auto' and 'csr'): without gradients on CUDA, unless a capped
#   graph is kept on ``g`` for this seed, the ``sampled_spmm`` kernel op computes each
#   row's sample itself (nothing built, no host synchronisation);
# * 'capped': the capped graph kept on ``g`` for this seed (built by CapNeighbors or an
#   earlier training call: the fastest inference), or built now (:func:`capped_graph`:
#   with gradients, on the CPU, for float64 or CBSR features), and the exact engine
#   on it, forward and transposed backward.

dispatch.family(
    'sampled_spmm',
    check_sampled,
    routes={
        'auto': ('exact', 'kernel', 'capped'),
        'csr': ('exact', 'kernel', 'capped'),
        'sgt': ('exact', 'capped'),
        'reference': ('exact', 'capped'),
    },
)


def _nothing_capped(g, a: dict) -> bool:
    return g.max_degree() <= a['spec'].max_neighbors


def _kernel_applies(g, a: dict) -> bool:
    """No capped graph kept for this seed, dense features, no gradient needed."""
    c, spec = a['checked'], a['spec']
    return (
        kept_capped(g, spec.max_neighbors, spec.sampling, a['seed']) is None
        and isinstance(a['x'], Tensor)
        and not (
            torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (a['x'], c['value'], c['diag']))
        )
    )


@dispatch.register('sampled_spmm', 'exact', applies=_nothing_capped, needs_kernel=False)
def _exact(g, x, value, reduce, diag, spec, seed, checked, backend, strict) -> Tensor:
    return dispatch.aggregate(
        g, x, checked['value'], checked['reduce'], checked['diag'], backend=backend, strict=strict
    )


@dispatch.register('sampled_spmm', 'kernel', applies=_kernel_applies)
def _kernel(g, x, value, reduce, diag, spec, seed, checked, backend, strict) -> Tensor:
    c = checked
    return sampled_spmm(
        g.rowptr,
        g.col,
        c['value'],
        x,
        c['diag'],
        row_order(g),
        spec.max_neighbors,
        SAMPLINGS.index(spec.sampling),
        seed,
        c['reduce'],
        differentiable=(x, c['value'], c['diag']),
    )


@dispatch.register('sampled_spmm', 'capped', needs_kernel=False)
def _capped(g, x, value, reduce, diag, spec, seed, checked, backend, strict) -> Tensor:
    gs, edge, w = capped_graph(g, spec.max_neighbors, spec.sampling, seed)
    v = None if value is None else value.index_select(0, edge)
    if reduce == 'sum':
        w = w.to(value.dtype if value is not None else torch.float64 if x.dtype == torch.float64 else torch.float32)
        v = w if v is None else v * w
    return dispatch.aggregate(gs, x, v, reduce, diag, backend=backend, strict=strict)


# The enclosing sampled_aggregation's settings: a module-level slot (process-wide, like
# torch's global flags) rather than a ContextVar, which torch.compile cannot trace: the layers
# read it on every call, and with no sampling active compiled models keep no graph break.
_ACTIVE: List[Optional[Sampling]] = [None]


def active() -> Optional[Sampling]:
    """The sampling of the enclosing :func:`~pyg_tc.sampled_aggregation` (None: exact)."""
    return _ACTIVE[0]


@contextmanager
def sampled_aggregation(max_neighbors: int, sampling: str = 'uniform', seed: Optional[int] = 0) -> Iterator[Sampling]:
    """Inside the block every pyg_tc layer's neighbour aggregation (GCN,
    SAGE, GIN and the other SpMM-based layers) is ES-SpMM's sampled one,
    without changing the model::

        with pyg_tc.sampled_aggregation(max_neighbors=32):
            out = model(x, edge_index)

    ``seed=0`` (default): the same sample on every call (inference, and
    what :class:`~pyg_tc.transforms.CapNeighbors` precomputes); ``seed=None``:
    a new sample per call (training with sampling; reproducible under
    ``torch.manual_seed``). Attention layers (GAT, GATv2, AGNN's fused path)
    stay exact: a softmax over a sample is not an unbiased estimate. The
    setting is process-wide (not per thread) and nests.

    Args:
        max_neighbors (int): the edges a row keeps at most (rows with fewer
            are exact).
        sampling (str, optional): ``'uniform'`` (distinct, unbiased),
            ``'bucket'`` (the first ones) or ``'fastrand'``.
        seed (int, optional): ``0``: the same sample every call; None: a new
            one per call.
    """
    spec = Sampling(max_neighbors, sampling, seed)
    check_sampling(max_neighbors, sampling)
    previous, _ACTIVE[0] = _ACTIVE[0], spec
    try:
        yield spec
    finally:
        _ACTIVE[0] = previous


# ---------------------------------------------------------------------------
# The kernel op (kernels/csr/csr_sampled.cu): the rows' samples computed in the
# kernel, no capped graph built, no host synchronisation


def _sampled_ref(
    rowptr: Tensor,
    col: Tensor,
    value: Optional[Tensor],
    x: Tensor,
    diag: Optional[Tensor],
    max_neighbors: int,
    sampling: int,
    seed: int,
    reduce: str,
) -> Tensor:
    return sampled_spmm_reference(rowptr, col, value, x, max_neighbors, SAMPLINGS[sampling], seed, reduce, diag).to(
        x.dtype
    )


def _sampled_backward(a, needs: dict, grad: Tensor) -> dict:
    """The exact transpose of the call's sample: autograd through the
    reference on the same (rows, slots, seed)."""
    x = a.x.detach().requires_grad_(bool(needs['x']))
    v = None if a.value is None else a.value.detach().requires_grad_(bool(needs['value']))
    dg = None if a.diag is None else a.diag.detach().requires_grad_(bool(needs['diag']))
    wanted = {n: t for n, t in (('x', x), ('value', v), ('diag', dg)) if t is not None and needs[n]}
    if not wanted:
        return {}
    with torch.enable_grad():
        out = _sampled_ref(a.rowptr, a.col, v, x, dg, a.max_neighbors, a.sampling, a.seed, a.reduce)
        grads = torch.autograd.grad(out, list(wanted.values()), grad.to(out.dtype))
    return dict(zip(wanted, grads))


def _define_op():
    from .._library import Op

    return Op(
        'sampled_spmm(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor? diag, Tensor? row_order, '
        'int max_neighbors, int sampling, int seed, str reduce) -> Tensor',
        reference=_sampled_ref,
        fake=lambda a: a.x.new_empty(a.rowptr.size(0) - 1, a.x.size(1)),
        backward=_sampled_backward,
    )


#: ES-SpMM in one kernel call (CUDA; the reference elsewhere). Arguments: CSR
#: ``rowptr`` / ``col`` (int32), fp32 ``value`` or None, ``x``, fp32 ``diag``
#: (1 or N entries; the self term, never sampled) or None, ``row_order`` (int32,
#: a permutation of the rows, the order the warps take them: :func:`row_order`;
#: None = natural order; it changes the speed, never the result), the cap, the
#: strategy's index in :data:`SAMPLINGS`, the seed, the reduction. Its
#: backward runs autograd through the reference on the same sample.
sampled_spmm = _define_op()
