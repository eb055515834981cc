"""The CSR format with degree-bucket schedules, for both directions.

A :class:`CSRGraph` holds, as plain int32 tensors:

* ``rowptr [R+1]``, ``col [E]``: the adjacency sorted by target (rows are
  targets, columns are sources), so ``out = A @ x`` aggregates in-edges.
  Edges of one row keep their original relative order (stable sort).
* ``perm [E]``: CSR position -> original edge id (for edge weights given in the
  order of ``edge_index``); ``None`` when the input already was CSR.
* ``t_rowptr [C+1]``, ``t_col [E]``, ``t_perm [E]``: the transpose (rows are
  sources) used by the backward pass; ``t_perm`` maps a transpose position to
  the forward CSR position.
* one :class:`Schedule` per direction: the row schedule of the CSR kernels.

Schedule (the degree buckets). Every row is cut into units of at most
``chunk`` edges; a unit is ``(row, start, end, slot)``:

* rows of degree <= chunk (the light and medium buckets, isolated rows
  included) are one unit with ``slot = -1``; the kernel writes them directly;
* heavier rows (the heavy bucket) are split into ``ceil(deg / chunk)`` units,
  each owning one workspace slot; ``heavy_rows [H]`` and ``heavy_ptr [H+1]``
  give each heavy row its run of slots, reduced in order by a second pass
  (deterministic, no atomics).

Units are sorted by length, longest first, so the L-lane groups that share a
warp walk units of similar length (many light rows per warp, one group per
medium row, heavy rows spread over many warps).
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any, Callable, Collection, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import _kernels, _library
from .._library import Op

#: edges per schedule unit by default; None: :func:`auto_chunk` picks it from the edge count
DEFAULT_CHUNK = None
_INT32_MAX = 2**31 - 1
_KEEP_ROWS = 1 << 24  # edges up to which CSRGraph._finish reuses the row array (_rows_to_keep)


class Schedule(NamedTuple):
    units: Tensor  # int32 [U, 4]: row, start, end, slot
    heavy_rows: Tensor  # int32 [H]
    heavy_ptr: Tensor  # int32 [H + 1]
    num_slots: int

    def to(self, device) -> 'Schedule':
        """This schedule on ``device``."""
        return Schedule(self.units.to(device), self.heavy_rows.to(device), self.heavy_ptr.to(device), self.num_slots)


class Layout(NamedTuple):
    """How a graph's arrays sit beyond a plain CSR: one value, given to the
    graph when it is made and never changed."""

    #: padded to static shapes (:meth:`~pyg_tc.formats.CSRGraph.pad`): padding rows and edge
    #: slots past the real ones; the one padding fact the layers read (a
    #: constant per bucket, so ``torch.compile`` guards on nothing that
    #: changes between batches)
    padded: bool = False
    #: shapes static per bucket (a padded graph, a per-hop padded one and its
    #: trimmed graphs): the layers take their paths without synchronisation,
    #: so a step on it can be captured in a CUDA graph
    static_shapes: bool = False
    #: a schedule has filler entries (``padded_schedule``)
    fillers: bool = False
    #: ``(rows, edges)`` really in a padded graph (informational; None where unknown)
    real_size: Optional[Tuple[Optional[int], Optional[int]]] = None


def padded_layout(real_size: Tuple[Optional[int], Optional[int]]) -> Layout:
    """The :class:`Layout` of a graph padded to static shapes."""
    return Layout(padded=True, static_shapes=True, fillers=True, real_size=real_size)


class SampledHops(NamedTuple):
    """The hop structure of a sampled mini-batch (:mod:`pyg_tc.loader`):
    nodes are the seeds then each hop's new nodes, edges each hop's edges in
    turn (hop ``j``'s edges point to hop ``j - 1``'s nodes), as PyG's
    ``num_sampled_nodes`` / ``num_sampled_edges``; ``max_degree`` bounds the
    in-degrees (the largest fan-out), or None."""

    num_nodes: Tuple[int, ...]
    num_edges: Tuple[int, ...]
    max_degree: Optional[int]


@torch.compiler.assume_constant_result
def coop_units(device: Optional[torch.device] = None) -> int:
    """Schedule units below which the csr SpMM runs in cooperative mode (a
    whole warp per unit) on ``device`` (the current CUDA device by default):
    the kernels' rule (``kernels/common/launch_config.h``), loading them where
    they can be; 33,792 (a 132-SM GPU's) where they cannot."""
    if (device is None or device.type == 'cuda') and torch.cuda.is_available() and _library.ensure():
        return _kernels.coop_units(None if device is None else device.index)
    return _kernels.COOP_UNITS_WITHOUT_KERNELS


def auto_chunk(num_edges: int, num_rows: int = 1 << 30) -> int:
    """Edges per unit, from kernel-only sweeps on the H200 (docs/benchmarks.md).
    Graphs whose schedule has fewer than :func:`~pyg_tc.formats.csr.coop_units` units at chunk 256
    run in the kernel's cooperative mode and want 256.
    Otherwise short units for smaller graphs (the longest unit is the tail of
    the launch) and long ones for large graphs (fewer partial rows to write and
    reduce): the smallest power of two above E / 2^16, clamped to [128, 1024]."""
    if num_rows + num_edges // 256 < coop_units():
        return 256
    return int(min(1024, max(128, 1 << max(0, (num_edges >> 16)).bit_length())))


def _schedule_counts(rowptr: Tensor, chunk: int) -> tuple:
    """Device half of :func:`build_schedule`: units per row ``n``, their
    inclusive sums, the heavy mask and the heavy units' sums; and the three
    sizes (units, slots, heavy rows) as one tensor, read by the caller with
    one synchronisation for any number of schedules."""
    rp = rowptr.long()
    deg = rp[1:] - rp[:-1]
    n = torch.div(deg + chunk - 1, chunk, rounding_mode='floor').clamp_(min=1)
    csum = torch.cumsum(n, 0)
    heavy = n > 1
    hn = torch.where(heavy, n, torch.zeros_like(n))
    hcsum = torch.cumsum(hn, 0)
    zero = rp.new_zeros(1)
    sizes = torch.cat([csum[-1:], hcsum[-1:], heavy.sum().view(1)]) if n.numel() else zero.repeat(3)
    return (rp, n, csum, heavy, hn, hcsum), sizes


def _schedule_finish(parts: tuple, chunk: int, U: int, num_slots: int, H: int) -> Schedule:
    """Host half of :func:`build_schedule`, given the sizes: no synchronisation."""
    rp, n, csum, heavy, hn, hcsum = parts
    dev = rp.device
    R = rp.numel() - 1
    if H == 0:
        return _light_schedule(rp)
    row = torch.repeat_interleave(torch.arange(R, device=dev), n, output_size=U)
    k = torch.arange(U, device=dev) - (csum - n)[row]
    start = rp[row] + k * chunk
    end = torch.minimum(start + chunk, rp[row + 1])
    slot = torch.where(heavy[row], (hcsum - hn)[row] + k, torch.full_like(k, -1))
    order = torch.sort(end - start, descending=True, stable=True)[1]
    units = torch.stack([row, start, end, slot], 1)[order].to(torch.int32).contiguous()
    # heavy rows in order, without nonzero()'s synchronisation: the i-th heavy
    # row goes to slot i, every other row to a discarded slot H
    heavy_rows = torch.empty(H + 1, dtype=torch.long, device=dev)
    if R:
        dest = torch.where(heavy, torch.cumsum(heavy, 0) - 1, torch.full_like(n, H))
        heavy_rows.scatter_(0, dest, torch.arange(R, device=dev))
    heavy_rows = heavy_rows[:H]
    heavy_ptr = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), torch.cumsum(n[heavy_rows], 0)])
    return Schedule(units, heavy_rows.to(torch.int32), heavy_ptr.to(torch.int32), num_slots)


def _light_schedule(rowptr: Tensor) -> Schedule:
    """The schedule of a ``rowptr`` without heavy rows (every degree <=
    chunk; most mini-batches): one direct unit per row, longest first, no
    slots. What :func:`_schedule_finish` gives for it, in a few launches."""
    rp = rowptr.to(torch.int32)
    R = rp.numel() - 1
    units = torch.stack(
        [
            torch.arange(R, dtype=torch.int32, device=rp.device),
            rp[:-1],
            rp[1:],
            torch.full((R,), -1, dtype=torch.int32, device=rp.device),
        ],
        1,
    )
    order = torch.sort(units[:, 2] - units[:, 1], descending=True, stable=True)[1]
    return Schedule(units[order], units.new_zeros(0), units.new_zeros(1), 0)


def padded_schedules(rowptrs: Sequence[Tensor], chunk: int, num_edges: int) -> List[Schedule]:
    """:func:`padded_schedule` of several ``rowptr`` of ``num_edges`` slots
    (a padded graph's two directions): on CUDA with the kernels loaded the
    ``csr_padded_schedules`` op (about ten launches each, no
    synchronisation, so it can be captured), else :func:`padded_schedule`
    (about 65 small ops each)."""
    if chunk < 1:
        raise ValueError(f'chunk must be positive, got {chunk}')
    slots = 3 * (-(-num_edges // chunk))
    if rowptrs and all(rp.is_cuda for rp in rowptrs) and _library._use_kernel(rowptrs[0]):
        flat = csr_padded_schedules([rp.to(torch.int32) for rp in rowptrs], chunk, num_edges)
        return [Schedule(flat[3 * i], flat[3 * i + 1], flat[3 * i + 2], slots) for i in range(len(rowptrs))]
    return [padded_schedule(rp, chunk, num_edges) for rp in rowptrs]


def pad_hops_layout(
    rowptr: Tensor,
    col: Tensor,
    num_nodes: Sequence[int],
    num_edges: Sequence[int],
    pad_nodes: Sequence[int],
    pad_edges: Sequence[int],
) -> List[Tensor]:
    """The per-hop padded layout of a sampled batch's CSR
    (:meth:`CSRGraph.pad_hops`): ``[rowptr, col, rows, node_index,
    edge_index, node_mask]``, the padded CSR (int32; ``rows`` the target of
    every slot), where each real node and edge went (int64) and which rows
    are real (bool). On CUDA with the kernels loaded the ``csr_pad_hops`` op
    (one launch, no synchronisation), else :func:`pad_hops_reference`
    (about 40 small ops)."""
    args = (list(map(int, num_nodes)), list(map(int, num_edges)), list(map(int, pad_nodes)), list(map(int, pad_edges)))
    i32 = torch.int32
    if rowptr.is_cuda and _library._use_kernel(rowptr):
        return csr_pad_hops(rowptr.to(i32), col.to(i32), *args)
    return pad_hops_reference(rowptr, col, *args)


def pad_hops_reference(
    rowptr: Tensor, col: Tensor, num_nodes: List[int], num_edges: List[int], pad_nodes: List[int], pad_edges: List[int]
) -> List[Tensor]:
    """The reference of the ``csr_pad_hops`` op (see ``pad_hops_layout``).
    Node block ``h`` (``num_nodes[h]`` real rows) moves to rows ``O_h ..
    O_h + pad_nodes[h]`` (``O_h`` the padded blocks before it); edge block
    ``h`` (hop ``h + 1``'s ``num_edges[h]`` edges, in CSR order) to slots
    ``Q_h .. Q_h + pad_edges[h]``. A real row keeps its edges; a padded row
    of node block ``h`` starts where its block's real edges end, so the
    block's last row (its *sink*) owns the block's padding slots, which are
    edges from the last row of node block ``h + 1`` (both padded)."""
    n, e, N, P = num_nodes, num_edges, pad_nodes, pad_edges
    L = len(e)
    if len(n) != L + 1 or len(N) != L + 1 or len(P) != L:
        raise ValueError('pyg_tc: csr_pad_hops: one more node count than edge counts, padded and real alike')
    if any(a <= b or b < 0 for a, b in zip(N, n)) or any(a < b or b < 0 for a, b in zip(P, e)):
        raise ValueError(
            'pyg_tc: csr_pad_hops: every node block needs a padded row (pad_nodes > num_nodes) and '
            'pad_edges must be at least num_edges'
        )
    if rowptr.numel() != sum(n) + 1 or col.numel() != sum(e):
        raise ValueError(
            'pyg_tc: csr_pad_hops: rowptr must have one entry more than the real nodes, col one per real edge'
        )
    O, off = [0, *accumulate(N)], [0, *accumulate(n)]  # node block starts: padded, real
    Q, base = [0, *accumulate(P)], [0, *accumulate(e)]  # edge block starts
    R, E = O[-1], Q[-1]
    dev, i32, i64 = rowptr.device, torch.int32, torch.int64
    node_index = torch.cat([torch.arange(O[h], O[h] + n[h], dtype=i64, device=dev) for h in range(L + 1)])
    edge_index = torch.cat(
        [torch.arange(Q[h], Q[h] + e[h], dtype=i64, device=dev) for h in range(L)]
        + [torch.zeros(0, dtype=i64, device=dev)]
    )
    new_id = node_index.to(i32)  # every real node's new id
    real_col = new_id.index_select(0, col.long())
    real_rows = new_id.index_select(0, csr_rows(rowptr, col.numel()).long())
    ptr, out_col, out_rows = [], [], []
    for h in range(L + 1):
        nxt = e[h] if h < L else 0
        ptr.append(rowptr[off[h] : off[h] + n[h]].to(i32) + (Q[h] - base[h]))
        ptr.append(torch.full((N[h] - n[h],), Q[h] + nxt, dtype=i32, device=dev))
        if h < L:
            out_col += [
                real_col[base[h] : base[h + 1]],
                torch.full((P[h] - e[h],), O[h + 2] - 1, dtype=i32, device=dev),
            ]
            out_rows += [
                real_rows[base[h] : base[h + 1]],
                torch.full((P[h] - e[h],), O[h + 1] - 1, dtype=i32, device=dev),
            ]
    out_ptr = torch.cat(ptr + [torch.full((1,), E, dtype=i32, device=dev)])
    empty = [torch.zeros(0, dtype=i32, device=dev)]
    node_mask = torch.zeros(R, dtype=torch.bool, device=dev).index_fill_(0, node_index, True)
    return [out_ptr, torch.cat(out_col + empty), torch.cat(out_rows + empty), node_index, edge_index, node_mask]


def padded_schedule(rowptr: Tensor, chunk: int, num_edges: int) -> Schedule:
    """The degree-bucket schedule of a padded graph's ``rowptr``
    (:meth:`CSRGraph.pad`) with array sizes fixed by ``(rows, num_edges,
    chunk)``, built without synchronisation. With ``q = ceil(num_edges /
    chunk)``: ``R + q`` units (every row has one, a row of degree ``d``
    ``ceil(d / chunk)``), ``q`` heavy entries (a heavy row has more than
    ``chunk`` edges) and ``3 q`` workspace slots (heavy rows own at most
    ``2 q``). What a graph does not use is filler: units ``(R - 1, E, E,
    spare slot)`` (empty, their partial goes to a slot no row reads; sorted
    last) and heavy entries ``(R - 1, empty slot range)``, which the second
    pass skips. The real units, slots and heavy rows are those
    :func:`build_schedules` gives, in the same order."""
    rp = rowptr.long()
    dev, R = rp.device, rp.numel() - 1
    q = -(-num_edges // chunk)
    U, H, S = R + q, q, 3 * q
    deg = rp[1:] - rp[:-1]
    n = torch.div(deg + chunk - 1, chunk, rounding_mode='floor').clamp_(min=1)
    heavy = n > 1
    csum = torch.cumsum(n, 0)
    n_ext = torch.cat([n, U - csum[-1:]])  # the fillers: one more "row"
    row = torch.repeat_interleave(torch.arange(R + 1, device=dev), n_ext, output_size=U)
    k = torch.arange(U, device=dev) - torch.cat([csum - n, csum[-1:]])[row]
    real = row < R
    r = row.clamp(max=R - 1)
    e = rp[R]
    start = torch.where(real, rp[r] + k * chunk, e)
    end = torch.where(real, torch.minimum(start + chunk, rp[r + 1]), e)
    hn = torch.where(heavy, n, torch.zeros_like(n))
    hcsum = torch.cumsum(hn, 0)
    slot = torch.where(real, torch.where(heavy[r], (hcsum - hn)[r] + k, torch.full_like(k, -1)), hcsum[-1] + k)
    order = torch.sort(end - start, descending=True, stable=True)[1]
    units = torch.stack([r, start, end, slot], 1)[order].to(torch.int32).contiguous()
    # heavy rows in row order (i-th heavy row to entry i, the others to a dropped entry H)
    dest = torch.where(heavy, torch.cumsum(heavy, 0) - 1, torch.full_like(n, H))
    heavy_rows = torch.full((H + 1,), R - 1, dtype=torch.long, device=dev).scatter_(
        0, dest, torch.arange(R, device=dev)
    )[:H]
    counts = torch.zeros(H + 1, dtype=torch.long, device=dev).scatter_(0, dest, n)[:H]
    heavy_ptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return Schedule(units, heavy_rows.to(torch.int32), heavy_ptr.to(torch.int32), S)


def build_schedules(
    rowptrs: Sequence[Tensor], chunk: int, max_degrees: Optional[Sequence[Optional[int]]] = None
) -> List[Schedule]:
    """:func:`build_schedule` of several ``rowptr``: on CUDA with the kernels
    loaded, the ``csr_schedules`` op (one synchronisation in all, ~15
    launches); otherwise :func:`build_schedules_torch`."""
    if chunk < 1:
        raise ValueError(f'chunk must be positive, got {chunk}')
    if not rowptrs:
        return []
    if all(rp.is_cuda for rp in rowptrs) and _library._use_kernel(rowptrs[0]):
        flat = csr_schedules([rp.to(torch.int32) for rp in rowptrs], chunk)
        slots = flat[-1].tolist()
        return [Schedule(flat[3 * i], flat[3 * i + 1], flat[3 * i + 2], slots[i]) for i in range(len(rowptrs))]
    return build_schedules_torch(rowptrs, chunk, max_degrees)


def build_schedules_torch(
    rowptrs: Sequence[Tensor], chunk: int, max_degrees: Optional[Sequence[Optional[int]]] = None
) -> List[Schedule]:
    """:func:`build_schedule` of several ``rowptr`` in PyTorch ops, with one
    device synchronisation in all when no row is heavy (the largest degrees
    are read together), two otherwise (then the sizes of the schedules with
    heavy rows are read together). ``max_degrees``: an upper bound of a
    ``rowptr``'s largest degree where the caller knows one (a sampled batch:
    its largest fan-out), so it is not read."""
    if not rowptrs:
        return []
    known = list(max_degrees) if max_degrees is not None else [None] * len(rowptrs)
    unknown = [i for i, m in enumerate(known) if m is None]
    if unknown:
        read = torch.stack(
            [
                (rowptrs[i][1:] - rowptrs[i][:-1]).max() if rowptrs[i].numel() > 1 else rowptrs[i].new_zeros(())
                for i in unknown
            ]
        ).tolist()
        for i, m in zip(unknown, read):
            known[i] = m
    top = known
    out: List[Optional[Schedule]] = [None if m > chunk else _light_schedule(rp) for rp, m in zip(rowptrs, top)]
    heavy = [i for i, m in enumerate(top) if m > chunk]
    counts = [_schedule_counts(rowptrs[i], chunk) for i in heavy]
    sizes = torch.cat([c[1] for c in counts]).tolist() if counts else []
    for k, (i, (parts, _)) in enumerate(zip(heavy, counts)):
        out[i] = _schedule_finish(parts, chunk, *sizes[3 * k : 3 * k + 3])
    return out


def build_schedule(rowptr: Tensor, chunk: Optional[int] = DEFAULT_CHUNK, num_edges: Optional[int] = None) -> Schedule:
    """Degree-bucket schedule of a CSR ``rowptr`` (runs on rowptr's device;
    one synchronisation, two without ``chunk`` and ``num_edges``)."""
    if chunk is None:
        chunk = auto_chunk(int(rowptr[-1]) if num_edges is None else num_edges, rowptr.numel() - 1)
    return build_schedules([rowptr], chunk)[0]


def stale_error(fmt: str, changes: dict, fix: str) -> ValueError:
    """The error for metadata used on a graph it was not built for, naming
    what changed: ``changes`` maps a property (e.g. 'source nodes') to its
    (value at build time, value now); only differing ones are listed."""
    diff = [f'{name} {built} -> {now}' for name, (built, now) in changes.items() if built != now]
    return ValueError(
        f'pyg_tc: stale {fmt} metadata: built for another graph ({", ".join(diff) or "unknown change"}); {fix}'
    )


def inverse_perm(p: Tensor) -> Tensor:
    """The inverse of a permutation, in p's dtype."""
    inv = torch.empty_like(p)
    inv[p.long()] = torch.arange(p.numel(), device=p.device, dtype=p.dtype)
    return inv


def csr_rows(rowptr: Tensor, num_edges: Optional[int] = None) -> Tensor:
    """Row index of every CSR position as int32, by a marker cumsum: no int64
    temporary of the edge count (``repeat_interleave`` builds one, 800 MB on
    a 100M-edge graph). Give ``num_edges`` to avoid reading it from the
    device (a synchronisation)."""
    R = rowptr.numel() - 1
    E = num_edges if num_edges is not None else (int(rowptr[-1]) if R >= 0 else 0)
    m = torch.zeros(E + 1, dtype=torch.int32, device=rowptr.device)
    if R > 1:
        m.index_add_(0, rowptr[1:R].long(), torch.ones(R - 1, dtype=torch.int32, device=rowptr.device))
    out = m[:E]
    return out.cumsum_(0) if E else out


def sort_int32(keys: Tensor, num_keys: int) -> Tuple[Tensor, Tensor]:
    """Stable sort of int32 keys in [0, num_keys): (sorted keys, int32
    permutation). On the GPU a radix sort over the used key bits (about half
    the memory of torch.sort); elsewhere torch.sort."""
    bits = max(1, (max(num_keys, 1) - 1).bit_length())
    if keys.is_cuda and bits <= 31 and _library._use_kernel(keys):
        return sort_int32_op(keys, bits)
    return sort_reference(keys)


def _rows_to_keep(rows: Tensor) -> Optional[Tensor]:
    """The sorted row array for :meth:`CSRGraph._finish` to reuse (four
    launches fewer, which matters on mini-batches), or None above
    ``_KEEP_ROWS`` edges: there the transpose's sort gets the memory to itself
    and the array is rebuilt after it."""
    return rows if rows.numel() <= _KEEP_ROWS else None


def _out_of_range(idx: Tensor, n: int) -> bool:
    """Whether any of ``idx`` lies outside [0, n) (one synchronisation)."""
    lo, hi = torch.stack([idx.min(), idx.max()]).tolist()
    return lo < 0 or hi >= n


def _rowptr_from_sorted(rows_sorted: Tensor, R: int) -> Tensor:
    """``rowptr`` of sorted int32 row indices in [0, R): a binary search per
    row (no synchronisation, unlike ``bincount``)."""
    bounds = torch.arange(R + 1, dtype=torch.int32, device=rows_sorted.device)
    return torch.searchsorted(rows_sorted.to(torch.int32), bounds, out_int32=True)


def transpose(col: Tensor, rows: Tensor, num_cols: int) -> Tuple[Tensor, Tensor, Tensor]:
    """``(t_rowptr, t_col, t_perm)`` of a CSR (see :func:`transpose_torch`):
    the ``csr_transpose`` op on CUDA with the kernels loaded (one radix sort
    and one kernel), else :func:`transpose_torch`."""
    if col.is_cuda and _library._use_kernel(col):
        return csr_transpose(col, rows.to(torch.int32), num_cols)
    return transpose_torch(col, rows, num_cols)


def transpose_torch(col: Tensor, rows: Tensor, num_cols: int) -> Tuple[Tensor, Tensor, Tensor]:
    """``(t_rowptr, t_col, t_perm)`` of a CSR given the source (``col``) and
    the target (``rows``) of every position: the sources sorted stably
    (:func:`sort_int32`), ``t_perm`` maps a transpose position to its forward
    position. The pure-PyTorch builder (and the reference of the
    ``csr_transpose`` kernel)."""
    t_rows, t_perm = sort_int32(col, num_cols)
    t_rowptr = _rowptr_from_sorted(t_rows, num_cols)
    del t_rows
    return t_rowptr, rows.to(torch.int32).index_select(0, t_perm), t_perm


#: what :meth:`CSRGraph.from_sampled` may leave to first use
_DEFERRED = frozenset(('t_rowptr', 't_col', 't_perm', 'sched', 't_sched'))


class CSRGraph:
    """Both directions of a graph with their schedules; see the module doc."""

    def __init__(
        self,
        rowptr: Tensor,
        col: Tensor,
        perm: Optional[Tensor],
        t_rowptr: Tensor,
        t_col: Tensor,
        t_perm: Tensor,
        sched: Schedule,
        t_sched: Schedule,
        num_rows: int,
        num_cols: int,
        chunk: Optional[int] = DEFAULT_CHUNK,
        layout: Layout = Layout(),
    ):
        if chunk is None:
            chunk = auto_chunk(col.numel(), rowptr.numel() - 1)
        self.rowptr, self.col, self.perm = rowptr, col, perm
        self.t_rowptr, self.t_col, self.t_perm = t_rowptr, t_col, t_perm
        self.sched, self.t_sched = sched, t_sched
        self.num_rows, self.num_cols, self.chunk = int(num_rows), int(num_cols), int(chunk)
        self.sgt = None  # TC-GNN SGT metadata (pyg_tc.formats.sgt.SGT), built on demand
        # ES-SpMM: the sampling (pyg_tc.ops.es_spmm.Sampling) layers apply on this graph by
        # default (set by pyg_tc.transforms.CapNeighbors); None: exact aggregation
        self.sampling = None
        #: how the arrays sit beyond a plain CSR (padding, static shapes)
        self.layout = layout
        #: the hop structure of a sampled mini-batch (:meth:`from_sampled`),
        #: by which :meth:`trimmed` derives PyG's ``trim_to_layer`` graphs
        self.sampled_hops: Optional[SampledHops] = None
        # the one store of what is derived from the structure, by key (see
        # "derived objects" below); only pyg_tc.formats reads it directly
        self._memo: dict = {}

    @property
    def padded(self) -> bool:
        """Whether the graph is padded to static shapes (:attr:`~pyg_tc.formats.csr.Layout.padded`)."""
        return self.layout.padded

    @property
    def static_shapes(self) -> bool:
        """Whether the graph's shapes are static per bucket (:attr:`~pyg_tc.formats.csr.Layout.static_shapes`)."""
        return self.layout.static_shapes

    @property
    def real_size(self) -> Optional[Tuple[Optional[int], Optional[int]]]:
        """``(rows, edges)`` really in a padded graph (:attr:`~pyg_tc.formats.csr.Layout.real_size`)."""
        return self.layout.real_size

    # -- derived objects ----------------------------------------------------
    # Objects computed from the structure once per graph and shared by every
    # layer that uses it: derived graphs (the self-loop graph of
    # :mod:`pyg_tc.formats.loops`, ES-SpMM's capped graph), row and edge
    # orders, normalisations. One store holds them, which the named accessors
    # below and :meth:`memo` fill; :meth:`derived_keys`, :meth:`derived_values`
    # and :meth:`drop_derived` list and drop its entries. Not carried by
    # :meth:`to` (recomputed on the new device).

    def memo(self, key: Any, fn: Callable[[], Any]) -> Any:
        """The object derived from the structure under ``key``, ``fn()``
        computed on first use and kept (a layer's or op's own per-graph
        cache: normalisations, schedules, tuning results; derived graphs have
        named accessors)."""
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    def memoised(self, key: Any) -> Any:
        """The object kept under ``key`` by :meth:`memo`, or None; builds
        nothing (what a layer checks under ``torch.compile``)."""
        return self._memo.get(key)

    def _remember(self, key: Any, value: Any) -> Any:
        """Keep ``value`` under ``key`` (replacing what was there); returns it."""
        self._memo[key] = value
        return value

    def derived_keys(self) -> frozenset:
        """The keys of every derived object kept on this graph, to drop later
        those made after this point (:meth:`drop_derived`)."""
        return frozenset(self._memo)

    def derived_values(self) -> list:
        """Every derived object kept on this graph (graphs among them: e.g. a
        self-loop graph, a capped graph)."""
        return list(self._memo.values())

    def drop_derived(self, keep: Collection = ()) -> None:
        """Forget the derived objects whose key is not in ``keep`` (e.g. an
        earlier :meth:`derived_keys`): they are made again on next use.
        :class:`pyg_tc.capture.CapturedStep` drops what its warm-up made, so
        that the capture computes it inside the CUDA graph."""
        for key in [k for k in self._memo if k not in keep]:
            del self._memo[key]

    def known_max_degree(self) -> Optional[int]:
        """:meth:`max_degree` if it was read already, else None (reading it
        synchronises with the device)."""
        return self._memo.get('max_degree')

    @property
    def fp16_sum_warned(self) -> bool:
        """Whether a layer gave its notice about float16 sums on this graph
        (once per graph). Kept with the derived objects, so
        :meth:`drop_derived` resets it."""
        return 'fp16_sum_warned' in self._memo

    @fp16_sum_warned.setter
    def fp16_sum_warned(self, value: bool) -> None:
        if value:
            self._memo['fp16_sum_warned'] = True
        else:
            self._memo.pop('fp16_sum_warned', None)

    def csr_positions(self) -> Optional[Tensor]:
        """The CSR position of every original edge (the inverse of ``perm``;
        once per graph), or None when the orders agree (``perm`` is None)."""
        if self.perm is None:
            return None
        return self.memo('inverse_perm', lambda: inverse_perm(self.perm))

    def rows_by_degree(self) -> Tensor:
        """The rows by in-degree, descending, ties in row order (int32; once
        per graph)."""
        return self.memo('row_order', lambda: torch.sort(self.degree(), descending=True, stable=True)[1].int())

    def capped(self, max_neighbors: int, sampling: str, seed: int, build: Optional[Callable[[], Any]] = None) -> Any:
        """ES-SpMM's capped graph of this graph for ``(max_neighbors,
        sampling, seed)``: what ``build()`` returns
        (:func:`pyg_tc.ops.es_spmm.capped_graph`: the capped graph, its edges'
        positions here and their weights), kept one per ``(max_neighbors,
        sampling)``: a new seed's replaces the earlier one. ``build`` None:
        lookup only (None when not kept)."""
        key = ('capped', max_neighbors, sampling)
        hit = self._memo.get(key)
        if hit is not None and hit[0] == seed:
            return hit[1]
        if build is None:
            return None
        value = build()
        self._memo[key] = (seed, value)
        return value

    def trimmed(self, num_edges: int, num_rows: int, num_cols: int) -> Optional['CSRGraph']:
        """The graph of this sampled mini-batch's first ``num_edges`` edges
        between its first ``num_rows`` targets and ``num_cols`` sources: what
        PyG's ``trim_to_layer`` keeps for a layer (``edge_index.narrow(1, 0,
        num_edges)`` and the first nodes). Derived from this graph without a
        sort and without reading the device (``_trim``); memoised per
        ``(num_edges, num_rows, num_cols)``, so forward, backward and every
        layer share it; this graph itself when nothing is trimmed.

        None when the graph has no hop structure (``sampled_hops``), or
        ``num_edges`` is not a hop boundary, or the node counts do not cover
        those hops' targets and sources: the caller builds the graph from
        its edges instead."""
        hops = self.sampled_hops
        k, R, C = int(num_edges), int(num_rows), int(num_cols)
        if hops is None or self.padded or self.perm is not None or R > self.num_rows or C > self.num_cols:
            return None
        if (k, R, C) == (self.num_edges, self.num_rows, self.num_cols):
            return self
        ends = [0, *accumulate(hops.num_edges)]
        if k not in ends:
            return None
        # the first hops whose edges end at k: targets lie in hops < j, sources in hops <= j
        j = ends.index(k)
        nodes = list(accumulate(hops.num_nodes))
        if j > 0 and (R < nodes[j - 1] or C < nodes[j]):
            return None
        return self.memo(('trimmed', k, R, C), lambda: self._trim(k, R, C))

    def _trim(self, k: int, R: int, C: int) -> 'CSRGraph':
        """:meth:`trimmed`'s graph, whose edges are the CSR prefix ``[0, k)``
        (``k`` a row boundary): ``rowptr[:R + 1]`` clamped at ``k`` (rows past
        the kept hops keep no edge), ``col[:k]`` (a view); the transpose is
        this graph's with the entries of edges ``>= k`` removed by an
        order-preserving compaction of known size ``k`` (mask, cumulative
        sum, scatter; the new ``t_rowptr`` is the sum at the old one), which
        is the stable sort a build would make. Schedules: one direct unit per
        row where the degrees are known to fit a unit (the in-degrees from
        the fan-outs, the out-degrees when this graph's transpose has no heavy
        row), else ``padded_schedule`` (array sizes fixed by ``(R, k)``;
        fillers the kernels skip). No synchronisation."""
        chunk = auto_chunk(k, R)
        rowptr = self.rowptr[: R + 1].clamp(max=k)
        keep = self.t_perm < k
        csum = torch.cumsum(keep, 0)
        dest = torch.where(keep, csum - 1, torch.full_like(csum, k))  # dropped entries to a spare slot k
        t_col = self.t_col.new_empty(k + 1).scatter_(0, dest, self.t_col)[:k]
        t_perm = self.t_perm.new_empty(k + 1).scatter_(0, dest, self.t_perm)[:k]
        t_rowptr = torch.cat([csum.new_zeros(1), csum]).index_select(0, self.t_rowptr[: C + 1].long())
        t_rowptr = t_rowptr.to(torch.int32)
        bound = self.sampled_hops.max_degree if self.sampled_hops.max_degree is not None else self.known_max_degree()
        light = k <= chunk or (bound is not None and bound <= chunk)
        t_light = k <= chunk or (self.t_sched.heavy_rows.numel() == 0 and self.chunk <= chunk)
        heavy = padded_schedules([p for p, lt in ((rowptr, light), (t_rowptr, t_light)) if not lt], chunk, k)
        sched = _light_schedule(rowptr) if light else heavy.pop(0)
        t_sched = _light_schedule(t_rowptr) if t_light else heavy.pop(0)
        layout = Layout(static_shapes=self.static_shapes, fillers=not (light and t_light))
        g = CSRGraph(rowptr, self.col[:k], None, t_rowptr, t_col, t_perm, sched, t_sched, R, C, chunk, layout)
        g.sampling = self.sampling
        return g

    # -- construction -------------------------------------------------------
    @classmethod
    def from_coo(
        cls, src: Tensor, dst: Tensor, num_src: int, num_dst: int, chunk: Optional[int] = DEFAULT_CHUNK
    ) -> 'CSRGraph':
        """Edges ``src[e] -> dst[e]``; runs on the device of the indices."""
        if src.dim() != 1 or dst.dim() != 1 or src.numel() != dst.numel():
            raise ValueError('pyg_tc: src and dst must be 1-D of equal length')
        if src.dtype not in (torch.int32, torch.int64) or dst.dtype != src.dtype:
            raise TypeError(f'pyg_tc: edge indices must be int32 or int64, got {src.dtype}')
        E = src.numel()
        if E > _INT32_MAX or num_src > _INT32_MAX or num_dst > _INT32_MAX:
            raise ValueError('pyg_tc: graphs with more than 2^31-1 edges or nodes are not supported')
        is_sorted = True
        if E > 0:
            # one synchronisation: the range check and whether the edges are
            # already sorted by target (NeighborLoader's batches are: CSC order)
            s_lo, s_hi = torch.aminmax(src)
            d_lo, d_hi = torch.aminmax(dst)
            unsorted = (dst[1:] < dst[:-1]).any().to(src.dtype)
            mn, mx_s, mx_d, uns = torch.stack([torch.minimum(s_lo, d_lo), s_hi, d_hi, unsorted]).tolist()
            if mn < 0 or mx_s >= num_src or mx_d >= num_dst:
                raise IndexError(
                    f'pyg_tc: edge index out of range: sources must lie in [0, {num_src}) and '
                    f'targets in [0, {num_dst}); found min {mn}, max source {mx_s}, max target {mx_d}'
                )
            is_sorted = not uns
        if is_sorted:  # the edge order is the CSR order: no sort, perm None
            rows = dst.to(torch.int32)
            rowptr = _rowptr_from_sorted(rows, num_dst)
            keep = _rows_to_keep(rows)
            del rows
            return cls._finish(rowptr, src.to(torch.int32).contiguous(), None, num_dst, num_src, chunk, keep)
        # Temporaries are dropped as soon as possible: on a 100M-edge graph each
        # int32 edge array is 400 MB and torch.sort's int64 indices 800 MB.
        rows, perm = sort_int32(dst.to(torch.int32), num_dst)
        rowptr = _rowptr_from_sorted(rows, num_dst)
        col = src.to(torch.int32).index_select(0, perm)
        keep = _rows_to_keep(rows)
        del rows
        return cls._finish(rowptr, col, perm, num_dst, num_src, chunk, keep)

    @classmethod
    def from_csr(cls, rowptr: Tensor, col: Tensor, num_cols: int, chunk: Optional[int] = DEFAULT_CHUNK) -> 'CSRGraph':
        """An adjacency already in CSR (rows = targets); ``perm`` is None."""
        R = rowptr.numel() - 1
        E = col.numel()
        if E > 0 and _out_of_range(col, num_cols):
            raise IndexError(f'pyg_tc: column index out of range [0, {num_cols})')
        rowptr = rowptr.to(torch.int32).contiguous()
        col = col.to(torch.int32).contiguous()
        return cls._finish(rowptr, col, None, R, num_cols, chunk)

    @classmethod
    def from_sampled(
        cls,
        rowptr: Tensor,
        col: Tensor,
        rows: Tensor,
        num_nodes: int,
        max_degree: Optional[int] = None,
        chunk: Optional[int] = DEFAULT_CHUNK,
        num_sampled_nodes: Optional[Sequence[int]] = None,
        num_sampled_edges: Optional[Sequence[int]] = None,
        defer: bool = False,
    ) -> 'CSRGraph':
        """The graph of a sampled mini-batch (:mod:`pyg_tc.loader`): its edges
        come sorted by target with every index in range, so ``rowptr``,
        ``col`` and ``rows`` (int32, the target of every edge) are taken as
        they are; ``max_degree`` bounds the in-degrees (the largest fan-out)
        when known. Only the transpose and the schedules are built; with
        ``defer`` on first use (or :meth:`complete`), so a batch padded
        next (:meth:`pad_hops`) never builds them.
        ``num_sampled_nodes`` / ``num_sampled_edges`` (per hop, as PyG's
        batch fields) record the hop structure (``sampled_hops``), from
        which :meth:`trimmed` derives ``trim_to_layer``'s graphs."""
        hops = None
        if num_sampled_nodes is not None or num_sampled_edges is not None:
            nodes = tuple(int(n) for n in num_sampled_nodes or ())
            edges = tuple(int(e) for e in num_sampled_edges or ())
            if len(nodes) != len(edges) + 1 or sum(nodes) != num_nodes or sum(edges) != col.numel():
                raise ValueError(
                    f'pyg_tc: {len(nodes)} hop node counts (sum {sum(nodes)}) and {len(edges)} hop edge '
                    f'counts (sum {sum(edges)}) do not describe a batch of {num_nodes} nodes and '
                    f'{col.numel()} edges (one more node count than edge counts)'
                )
            hops = SampledHops(nodes, edges, max_degree)
        if defer:
            chunk = auto_chunk(col.numel(), num_nodes) if chunk is None else chunk
            g = cls(rowptr, col, None, None, None, None, None, None, num_nodes, num_nodes, chunk)
            for name in _DEFERRED:
                del g.__dict__[name]
            g._deferred = (rows, max_degree)
        else:
            g = cls._finish(rowptr, col, None, num_nodes, num_nodes, chunk, rows, max_degree)
        g.sampled_hops = hops
        return g

    def __getattr__(self, name: str) -> Any:
        # only for attributes an instance lacks: a deferred graph's transpose and schedules
        if name not in _DEFERRED or '_deferred' not in self.__dict__:
            raise AttributeError(f'{type(self).__name__!r} object has no attribute {name!r}')
        return getattr(self.complete(), name)

    def complete(self) -> 'CSRGraph':
        """Builds the transpose and the schedules :meth:`from_sampled` deferred
        (nothing for any other graph); returns the graph."""
        pending = self.__dict__.pop('_deferred', None)
        if pending is not None:
            rows, max_degree = pending
            done = self._finish(self.rowptr, self.col, None, self.num_rows, self.num_cols, self.chunk, rows, max_degree)
            for name in _DEFERRED:
                setattr(self, name, getattr(done, name))
        return self

    @classmethod
    def _finish(cls, rowptr, col, perm, R, C, chunk, rows=None, max_degree=None) -> 'CSRGraph':
        """The transpose and both schedules of a CSR; ``rows``: the int32 row
        of every CSR position when the caller has it (:func:`_rows_to_keep`),
        else rebuilt after the sort; ``max_degree``: a bound of the forward
        in-degrees, when known (see :func:`build_schedules`)."""
        if chunk is None:
            chunk = auto_chunk(col.numel(), R)
        if rows is None:
            rows = csr_rows(rowptr, col.numel())
        t_rowptr, t_col, t_perm = transpose(col, rows, C)
        del rows
        sched, t_sched = build_schedules([rowptr, t_rowptr], chunk, [max_degree, None])
        return cls(rowptr, col, perm, t_rowptr, t_col, t_perm, sched, t_sched, R, C, chunk)

    # -- properties ---------------------------------------------------------
    @property
    def num_edges(self) -> int:
        """Number of edges (nonzeros)."""
        return self.col.numel()

    @property
    def device(self) -> torch.device:
        """Device of the metadata."""
        return self.col.device

    def degree(self) -> Tensor:
        """In-degree of every row (target), int64."""
        return (self.rowptr[1:] - self.rowptr[:-1]).long()

    def max_degree(self) -> int:
        """The largest in-degree (0 without rows); read from the device once per graph."""
        return self.memo('max_degree', lambda: int(self.degree().max()) if self.num_rows else 0)

    def per_edge(self, v: Tensor) -> Tensor:
        """A per-row (target) tensor ``v [R, ...]`` repeated for every edge of
        its row, in CSR order (padding edges: the last row's value)."""
        if self.padded:
            return v.index_select(0, self.row().long())
        return v.repeat_interleave(self.degree(), dim=0, output_size=self.num_edges)

    def row(self) -> Tensor:
        """Target index of every CSR edge, int32 (see :func:`~pyg_tc.formats.csr.csr_rows`)."""
        return csr_rows(self.rowptr, self.num_edges)

    def transpose(self) -> 'CSRGraph':
        """The reversed graph (sources become rows), sharing all tensors."""
        g = CSRGraph(
            self.t_rowptr,
            self.t_col,
            None,
            self.rowptr,
            self.col,
            inverse_perm(self.t_perm),
            self.t_sched,
            self.sched,
            self.num_cols,
            self.num_rows,
            self.chunk,
            self.layout,
        )
        return g

    def pad(self, num_rows: int, num_edges: int) -> 'CSRGraph':
        """This square graph (a sampled mini-batch) padded to static shapes:
        ``num_rows`` rows and ``num_edges`` edge slots (no fewer than it has;
        mini-batches keep one padded row at least, :mod:`pyg_tc.transforms.pad`), for CUDA-graph capture and
        ``torch.compile`` (one shape per bucket, :mod:`pyg_tc.transforms.pad`).

        * padded rows have no edges: their ``rowptr`` entries repeat the edge
          count ``E``, in both directions, so every kernel skips them and
          their aggregation is 0;
        * the padding edge slots ``E .. num_edges - 1`` lie past
          ``rowptr[-1]``: no kernel reads them; their ``col`` (and the
          transpose's) is the last row, so ``row()`` and ``per_edge`` see them
          as loops of the last padded row, whose values nothing reads;
        * both schedules (``padded_schedule``, ``chunk`` from
          ``auto_chunk`` of the padded sizes) have array sizes fixed by
          ``(num_rows, num_edges)``: heavy rows are split as in any graph,
          unused units and heavy entries are fillers the kernels skip;
        * ``perm`` / ``t_perm`` map padding slots to themselves.

        Builds on the graph's device without synchronisation. ``padded`` is
        set and ``real_size`` records the real ``(rows, edges)``."""
        R, E = self.num_rows, self.num_edges
        if self.padded:
            raise ValueError('pyg_tc: this graph is padded already')
        if self.num_cols != R:
            raise ValueError(f'pyg_tc: only square graphs (sampled batches) are padded, got {R} x {self.num_cols}')
        if num_rows < R or num_edges < E or (num_rows == R and (R == 0 or num_edges == E)):
            raise ValueError(
                f'pyg_tc: cannot pad a graph of {R} rows and {E} edges to {num_rows} rows and '
                f'{num_edges} edges (no fewer rows or edges, and something to pad)'
            )
        if num_rows > _INT32_MAX or num_edges > _INT32_MAX:
            raise ValueError('pyg_tc: graphs with more than 2^31-1 edges or nodes are not supported')
        dev, P, Q = self.device, num_rows - R, num_edges - E

        def ptr(rp: Tensor) -> Tensor:
            return torch.cat([rp.to(torch.int32), rp.new_full((P,), E, dtype=torch.int32)])

        def idx(c: Tensor) -> Tensor:
            return torch.cat([c.to(torch.int32), c.new_full((Q,), num_rows - 1, dtype=torch.int32)])

        tail = torch.arange(E, num_edges, dtype=torch.int32, device=dev)
        perm = None if self.perm is None else torch.cat([self.perm.to(torch.int32), tail])
        rowptr, t_rowptr = ptr(self.rowptr), ptr(self.t_rowptr)
        chunk = auto_chunk(num_edges, num_rows)
        g = CSRGraph(
            rowptr,
            idx(self.col),
            perm,
            t_rowptr,
            idx(self.t_col),
            torch.cat([self.t_perm.to(torch.int32), tail]),
            *padded_schedules([rowptr, t_rowptr], chunk, num_edges),
            num_rows,
            num_rows,
            chunk,
            padded_layout((R, E)),
        )
        g.sampling = self.sampling
        if self.known_max_degree() is not None:
            g._remember('max_degree', self.known_max_degree())
        return g

    def pad_hops(self, num_nodes: Sequence[int], num_edges: Sequence[int], return_index: bool = False) -> Any:
        """This sampled mini-batch's graph padded hop by hop to static shapes
        (:class:`pyg_tc.transforms.PadHops`): node block ``h`` has
        ``num_nodes[h]`` rows, edge block ``h`` (hop ``h``'s edges, targets
        in node block ``h - 1``) ``num_edges[h - 1]`` slots; each block's
        real entries first, in their order, then its padding. Node ``v`` of
        hop ``h`` moves to ``v - n_0 - .. - n_{h-1} + N_0 + .. + N_{h-1}``.

        The padding edge slots of block ``h`` are real CSR entries: in-edges
        of node block ``h - 1``'s last row (its *sink*, a padded row), from
        node block ``h``'s last row (padded). No real edge reads a padded
        node, so every real row aggregates as before; padded rows aggregate
        garbage nobody reads. Unlike :meth:`pad`'s graph, this one is an
        ordinary graph (``padded`` False, ``perm`` None, every slot in a
        row), with ``sampled_hops`` the padded hop counts, so
        :meth:`trimmed` derives ``trim_to_layer``'s graphs at the padded hop
        boundaries, themselves of static shapes. Both schedules are
        ``padded_schedule``'s (array sizes fixed by the totals; the sink
        rows may be heavy); ``static_shapes`` is set. Built on the graph's
        device without synchronisation: the layout in one op
        (``pad_hops_layout``), the transpose (a fixed-size sort of the
        padded sources) and the schedules.

        Args:
            num_nodes (Sequence[int]): rows per hop, ``N_0 .. N_L``; each
                more than the hop's real nodes (a sink row at least).
            num_edges (Sequence[int]): edge slots per hop, ``P_1 .. P_L``;
                no fewer than the hop's real edges.
            return_index (bool, optional): also return where the real nodes
                and edges went, which rows are real and the target of every
                slot: ``(graph, node_index, edge_index, node_mask, rows)``
                (see ``pad_hops_layout``).
        """
        hops = self.sampled_hops
        if hops is None or self.padded or self.perm is not None or self.num_rows != self.num_cols:
            raise ValueError('pyg_tc: pad_hops pads a sampled mini-batch graph (hop structure, CSR order, not padded)')
        N, P = [int(v) for v in num_nodes], [int(v) for v in num_edges]
        n, e = list(hops.num_nodes), list(hops.num_edges)
        L = len(e)
        if len(N) != L + 1 or len(P) != L:
            raise ValueError(
                f'pyg_tc: a batch of {L} hops pads to {L + 1} node counts and {L} edge counts, '
                f'got {len(N)} and {len(P)}'
            )
        if any(a <= b for a, b in zip(N, n)) or any(a < b for a, b in zip(P, e)):
            raise ValueError(
                f'pyg_tc: cannot pad hops of {n} nodes and {e} edges to {N} nodes (one padded '
                f'row at least per hop) and {P} edges'
            )
        R, E = sum(N), sum(P)
        if R > _INT32_MAX or E > _INT32_MAX:
            raise ValueError('pyg_tc: graphs with more than 2^31-1 edges or nodes are not supported')
        rowptr, col, rows, node_index, edge_index, node_mask = pad_hops_layout(self.rowptr, self.col, n, e, N, P)
        t_rowptr, t_col, t_perm = transpose(col, rows, R)
        chunk = auto_chunk(E, R)
        scheds = padded_schedules([rowptr, t_rowptr], chunk, E)
        layout = Layout(static_shapes=True, fillers=True)
        g = CSRGraph(rowptr, col, None, t_rowptr, t_col, t_perm, *scheds, R, R, chunk, layout)
        g.sampling = self.sampling
        # no degree bound: the sink rows' degrees change from batch to batch (a bound would let
        # trimmed() pick schedules whose kind depends on the batch)
        g.sampled_hops = SampledHops(tuple(N), tuple(P), None)
        return (g, node_index, edge_index, node_mask, rows) if return_index else g

    def to(self, device, non_blocking: bool = False) -> 'CSRGraph':
        """This graph (both directions, schedules, attached SGT) on ``device``."""

        def mv(t):
            return None if t is None else t.to(device, non_blocking=non_blocking)

        g = CSRGraph(
            mv(self.rowptr),
            mv(self.col),
            mv(self.perm),
            mv(self.t_rowptr),
            mv(self.t_col),
            mv(self.t_perm),
            self.sched.to(device),
            self.t_sched.to(device),
            self.num_rows,
            self.num_cols,
            self.chunk,
            self.layout,
        )
        if self.sgt is not None:
            g.sgt = self.sgt.to(device, non_blocking=non_blocking)
        g.sampling = self.sampling
        g.sampled_hops = self.sampled_hops
        return g

    def __repr__(self) -> str:
        pad = f', padded from {self.real_size}' if self.padded else ''
        return (
            f'CSRGraph(rows={self.num_rows}, cols={self.num_cols}, edges={self.num_edges}, '
            f'units={self.sched.units.size(0)}, heavy_rows={self.sched.heavy_rows.numel()}, '
            f'chunk={self.chunk}, device={self.device}{pad})'
        )

    def stats(self) -> dict:
        """Shape and schedule statistics (rows, edges, degrees, units, heavy rows)."""
        return {
            'rows': self.num_rows,
            'cols': self.num_cols,
            'edges': self.num_edges,
            'units': int(self.sched.units.size(0)),
            'heavy_rows': int(self.sched.heavy_rows.numel()),
            'slots': self.sched.num_slots,
            'max_degree': self.max_degree(),
        }

    # -- checks -------------------------------------------------------------
    def check_compatible(self, x: Tensor, what: str = 'x') -> None:
        """Stale-metadata check: x must live on this graph's device and have one
        row per source node."""
        if x.device != self.device:
            raise ValueError(
                f'pyg_tc: {what} is on {x.device} but the graph metadata is on {self.device}; move both to one device'
            )
        if x.size(0) != self.num_cols:
            raise stale_error(
                'graph',
                {f'source nodes ({what} rows)': (self.num_cols, x.size(0))},
                'this CSRGraph belongs to another graph: rebuild the format for this one (or re-apply the transform)',
            )

    def validate(self) -> 'CSRGraph':
        """Check every invariant of both directions; raises ValueError."""
        E = self.num_edges
        real = self.real_size[1] if self.padded else E
        if real is None:  # (a padded self-loop graph: its edge count stays on the device)
            real = int(self.rowptr[-1])
        _validate_csr(self.rowptr, self.col, self.num_rows, self.num_cols, 'forward', real)
        _validate_csr(self.t_rowptr, self.t_col, self.num_cols, self.num_rows, 'transpose', real)
        for name, p in (('perm', self.perm), ('t_perm', self.t_perm)):
            if p is not None and (
                p.numel() != E or not torch.equal(torch.sort(p.long())[0], torch.arange(E, device=p.device))
            ):
                raise ValueError(f'pyg_tc: {name} is not a permutation of the edges')
        # transpose edge k is forward edge t_perm[k]: same (row, col) swapped
        rows = self.row()
        tp = self.t_perm.long()[:real]  # (padding slots map to themselves: checked above)
        t_rows = csr_rows(self.t_rowptr)
        if not (torch.equal(self.col[tp], t_rows) and torch.equal(rows[tp], self.t_col[:real])):
            raise ValueError('pyg_tc: transpose does not match the forward CSR')
        if real < E and not torch.equal(self.t_perm[real:].long(), torch.arange(real, E, device=tp.device)):
            raise ValueError('pyg_tc: padding edge slots must map to themselves')
        _validate_schedule(_without_fillers(self.sched) if self.layout.fillers else self.sched, self.rowptr, 'forward')
        _validate_schedule(
            _without_fillers(self.t_sched) if self.layout.fillers else self.t_sched, self.t_rowptr, 'transpose'
        )
        for name, s in (('forward', self.sched), ('transpose', self.t_sched)):
            u = s.units
            if u.numel() and int((u[:, 2] - u[:, 1]).max()) > self.chunk:
                raise ValueError(f'pyg_tc: {name} schedule has a unit longer than chunk={self.chunk}')
        return self


def _without_fillers(s: Schedule) -> Schedule:
    """The real part of a schedule with fillers (:func:`padded_schedule`:
    a padded graph's, or a trimmed one's): the heavy entries with slots
    (they come first) and the units of their slots or written directly."""
    hp = s.heavy_ptr.long()
    keep = hp[1:] > hp[:-1]
    H = int(keep.sum())
    if not bool(keep[:H].all()):
        raise ValueError('pyg_tc: padded schedule: empty heavy entries before real ones')
    S = int(hp[H])
    u = s.units
    real = (u[:, 3] < S) if u.numel() else torch.zeros(0, dtype=torch.bool, device=u.device)
    fill = u[~real]
    if fill.numel() and bool((fill[:, 1] != fill[:, 2]).any()):
        raise ValueError('pyg_tc: padded schedule: a filler unit has edges')
    return Schedule(u[real], s.heavy_rows[:H], s.heavy_ptr[: H + 1], S)


def _validate_csr(rowptr, col, R, C, name, num_edges):
    if rowptr.numel() != R + 1 or int(rowptr[0]) != 0 or int(rowptr[-1]) != num_edges:
        raise ValueError(f'pyg_tc: {name} rowptr does not span the {num_edges} edges')
    if R > 0 and bool(((rowptr[1:] - rowptr[:-1]) < 0).any()):
        raise ValueError(f'pyg_tc: {name} rowptr is not monotone')
    if col.numel() and (int(col.min()) < 0 or int(col.max()) >= C):
        raise ValueError(f'pyg_tc: {name} column index out of range')


def _validate_schedule(s: Schedule, rowptr: Tensor, name: str) -> None:
    """Every edge in exactly one unit; every row written exactly once (directly
    or through its heavy-row slots); slots unique and contiguous per row."""
    rp = rowptr.long()
    R, E = rp.numel() - 1, int(rp[-1])
    u = s.units.long()
    if u.dim() != 2 or u.size(1) != 4:
        raise ValueError(f'pyg_tc: {name} schedule units must be [U, 4]')
    row, start, end, slot = u.unbind(1) if u.numel() else (u.new_zeros(0),) * 4
    if bool(((row < 0) | (row >= R)).any()):
        raise ValueError(f'pyg_tc: {name} schedule has a unit with a row out of range')
    hp = s.heavy_ptr.long()
    if (
        hp.numel() != s.heavy_rows.numel() + 1
        or int(hp[0]) != 0
        or int(hp[-1]) != s.num_slots
        or bool((hp[1:] < hp[:-1]).any())
    ):
        raise ValueError(f'pyg_tc: {name} schedule heavy_ptr does not span the {s.num_slots} slots')
    if bool(((start < rp[row]) | (end > rp[row + 1]) | (start > end)).any()):
        raise ValueError(f'pyg_tc: {name} schedule has a unit outside its row')
    cover = torch.zeros(E + 1, dtype=torch.long, device=rp.device)
    cover.index_add_(0, start, torch.ones_like(start))
    cover.index_add_(0, end, -torch.ones_like(end))
    if E and not bool((torch.cumsum(cover, 0)[:E] == 1).all()):
        raise ValueError(f'pyg_tc: {name} schedule does not cover every edge exactly once')
    direct = slot < 0
    hr = s.heavy_rows.long()
    if bool(((hr < 0) | (hr >= R)).any()):
        raise ValueError(f'pyg_tc: {name} schedule has a heavy row out of range')
    written = torch.zeros(R, dtype=torch.long, device=rp.device)
    written.index_add_(0, row[direct], torch.ones_like(row[direct]))
    written.index_add_(0, hr, torch.ones_like(hr))
    if R and not bool((written == 1).all()):
        raise ValueError(f'pyg_tc: {name} schedule does not write every row exactly once')
    ps = slot[~direct]
    if ps.numel() != s.num_slots or (
        ps.numel() and not torch.equal(torch.sort(ps)[0], torch.arange(s.num_slots, device=rp.device))
    ):
        raise ValueError(f'pyg_tc: {name} schedule slots are not unique')
    owner = torch.repeat_interleave(hr, hp[1:] - hp[:-1], output_size=s.num_slots)
    slot_row = torch.empty(s.num_slots, dtype=torch.long, device=rp.device)
    slot_row[ps] = row[~direct]
    if not torch.equal(owner, slot_row):
        raise ValueError(f'pyg_tc: {name} schedule heavy_ptr does not match the unit slots')


# ---------------------------------------------------------------------------
# The builders' GPU ops, defined here beside their references (the pure-PyTorch
# builders above), so ``formats`` needs nothing from the op packages above it.
# Kernels: ``kernels/sort/`` and ``kernels/csr/csr_build.cu``.


def sort_reference(keys: Tensor):
    """``torch.sort`` (stable), permutation as int32."""
    values, perm = torch.sort(keys, stable=True)
    return values, perm.to(torch.int32)


def transpose_reference(col: Tensor, rows: Tensor, num_cols: int):
    """:func:`pyg_tc.formats.csr.transpose_torch`."""
    return transpose_torch(col, rows, num_cols)


def schedules_reference(rowptrs: List[Tensor], chunk: int) -> List[Tensor]:
    """:func:`pyg_tc.formats.csr.build_schedules_torch`, flattened."""
    out: List[Tensor] = []
    scheds = build_schedules_torch(rowptrs, chunk)
    for s in scheds:
        out += [s.units, s.heavy_rows, s.heavy_ptr]
    return out + [torch.tensor([s.num_slots for s in scheds], dtype=torch.long)]


def _schedules_fake(a):
    ctx = torch.library.get_ctx()
    out = []
    for rp in a.rowptrs:
        u, h = ctx.new_dynamic_size(), ctx.new_dynamic_size()
        out += [rp.new_empty(u, 4), rp.new_empty(h), rp.new_empty(h + 1)]
    return out + [torch.empty(len(a.rowptrs), dtype=torch.long)]


#: ``sort_int32(keys, end_bit) -> (values, perm)``: stable sort of non-negative
#: int32 keys below ``2**end_bit``, with an int32 permutation (a radix sort:
#: about half the memory of ``torch.sort``, which returns int64 indices);
#: called by :func:`sort_int32`
sort_int32_op = Op(
    'sort_int32(Tensor keys, int end_bit) -> (Tensor values, Tensor perm)',
    reference=sort_reference,
    fake=lambda a: (a.keys.new_empty(a.keys.shape), a.keys.new_empty(a.keys.shape)),
)

#: ``csr_transpose(col, rows, num_cols) -> (t_rowptr, t_col, t_perm)``: the
#: transpose of a CSR given the source (``col``) and target (``rows``) of every
#: CSR position, sources sorted stably; called by :func:`transpose`
csr_transpose = Op(
    'csr_transpose(Tensor col, Tensor rows, int num_cols) -> (Tensor t_rowptr, Tensor t_col, Tensor t_perm)',
    reference=transpose_reference,
    fake=lambda a: (a.col.new_empty(a.num_cols + 1), a.col.new_empty(a.col.shape), a.col.new_empty(a.col.shape)),
)

#: ``csr_schedules(rowptrs, chunk) -> [units, heavy_rows, heavy_ptr] * n +
#: [slots]``: the degree-bucket schedule of each ``rowptr``, with one
#: synchronisation in all; called by :func:`build_schedules`
csr_schedules = Op(
    'csr_schedules(Tensor[] rowptrs, int chunk) -> Tensor[]', reference=schedules_reference, fake=_schedules_fake
)


def padded_schedules_reference(rowptrs: List[Tensor], chunk: int, num_edges: int) -> List[Tensor]:
    """:func:`pyg_tc.formats.csr.padded_schedule` of each ``rowptr``, flattened."""
    out: List[Tensor] = []
    for rp in rowptrs:
        s = padded_schedule(rp, chunk, num_edges)
        out += [s.units, s.heavy_rows, s.heavy_ptr]
    return out


def _padded_schedules_fake(a):
    q = -(-a.num_edges // a.chunk)
    out = []
    for rp in a.rowptrs:
        out += [rp.new_empty(rp.numel() - 1 + q, 4), rp.new_empty(q), rp.new_empty(q + 1)]
    return out


#: ``csr_padded_schedules(rowptrs, chunk, num_edges) -> [units, heavy_rows,
#: heavy_ptr] * n``: :func:`padded_schedule` of each ``rowptr`` (array sizes
#: fixed by the rows, ``num_edges`` and ``chunk``; no synchronisation);
#: called by :func:`padded_schedules`
csr_padded_schedules = Op(
    'csr_padded_schedules(Tensor[] rowptrs, int chunk, int num_edges) -> Tensor[]',
    reference=padded_schedules_reference,
    fake=_padded_schedules_fake,
)


def _pad_hops_fake(a):
    R, E = sum(a.pad_nodes), sum(a.pad_edges)
    rp = a.rowptr
    return [
        rp.new_empty(R + 1),
        rp.new_empty(E),
        rp.new_empty(E),
        rp.new_empty(sum(a.num_nodes), dtype=torch.int64),
        rp.new_empty(sum(a.num_edges), dtype=torch.int64),
        rp.new_empty(R, dtype=torch.bool),
    ]


#: ``csr_pad_hops(rowptr, col, num_nodes, num_edges, pad_nodes,
#: pad_edges) -> [rowptr, col, rows, node_index, edge_index, node_mask]``:
#: the per-hop padded layout of a sampled batch's CSR (one launch, no
#: synchronisation); called by :func:`pad_hops_layout`
csr_pad_hops = Op(
    'csr_pad_hops(Tensor rowptr, Tensor col, int[] num_nodes, int[] num_edges, '
    'int[] pad_nodes, int[] pad_edges) -> Tensor[]',
    reference=pad_hops_reference,
    fake=_pad_hops_fake,
)
