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

    #: padded to static shapes (:func:`~pyg_tc.formats.padding.pad`): padding rows and edge
    #: slots past the real ones; the one padding fact the layers read (a
    #: constant per bucket, so ``torch.compile`` guards on nothing that
    #: changes between batches)
    padded: bool = False
    #: shapes static per bucket (a padded graph, a per-hop padded one and its
    #: trimmed graphs): the layers take their paths without synchronisation,
    #: so a step on it can be captured in a CUDA graph
    static_shapes: bool = False
    #: a schedule has filler entries (:func:`~pyg_tc.formats.padding.padded_schedule`)
    fillers: bool = False
    #: ``(rows, edges)`` really in a padded graph (informational; None where unknown)
    real_size: Optional[Tuple[Optional[int], Optional[int]]] = None


class SampledHops(NamedTuple):
    """The hop structure of a sampled mini-batch (:mod:`pyg_tc.loader`):
    nodes are the seeds then each hop's new nodes, edges each hop's edges in
    turn (hop ``j``'s edges point to hop ``j - 1``'s nodes), as PyG's
    ``num_sampled_nodes`` / ``num_sampled_edges``; ``max_degree`` bounds the
    in-degrees (the largest fan-out), or None."""

    num_nodes: Tuple[int, ...]
    num_edges: Tuple[int, ...]
    max_degree: Optional[int]
    #: a bipartite batch graph's source nodes per hop (an edge type of a
    #: heterogeneous batch: the source type's ``num_sampled_nodes``); None: ``num_nodes``
    num_src: Optional[Tuple[int, ...]] = None

    @property
    def src_nodes(self) -> Tuple[int, ...]:
        """The source (column) nodes per hop."""
        return self.num_nodes if self.num_src is None else self.num_src


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


class GraphCache:
    """What is derived from one graph's structure: made on first use, kept
    beside the graph (``graph.cache``) and shared by every layer and op that
    uses the graph. The graph itself never changes; only its cache fills.

    * ``max_degree``: the largest in-degree once read (reading it
      synchronises with the device; a padded graph's is given when known);
    * ``sgt``: TC-GNN's tensor-core blocks (:class:`~pyg_tc.formats.sgt.SGT`),
      made by :class:`~pyg_tc.transforms.SGTTransform` or the first ``'sgt'``
      call; :meth:`~pyg_tc.formats.CSRGraph.to` carries them;
    * ``notices``: the once-per-graph notices already given;
    * entries by key (:meth:`memo`, :meth:`get`): derived graphs (the
      self-loop graphs of ``pyg_tc.formats.loops``, ES-SpMM's capped
      graphs, ``trim_to_layer``'s graphs of :mod:`pyg_tc.formats.padding`),
      orders, and each op's own per-graph objects (normalisations, schedules,
      tuning results); a key is a string or a tuple whose first item names the
      object.

    :meth:`keys` and :meth:`drop` let :class:`pyg_tc.capture.CapturedStep`
    forget what its warm-up made, so that the capture makes it inside the CUDA
    graph. Nothing here is carried by :meth:`~pyg_tc.formats.CSRGraph.to` except ``sgt``
    (the rest is remade on the new device)."""

    def __init__(self, max_degree: Optional[int] = None):
        self.max_degree: Optional[int] = max_degree
        self.sgt: Any = None
        self.notices: set = set()
        self._entries: dict = {}

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """The entry under ``key``, ``make()`` made on first use and kept."""
        if key not in self._entries:
            self._entries[key] = make()
        return self._entries[key]

    def get(self, key: Any) -> Any:
        """The entry under ``key``, or None; makes nothing (what a layer
        checks under ``torch.compile``)."""
        return self._entries.get(key)

    def put(self, key: Any, value: Any) -> Any:
        """Keep ``value`` under ``key`` (replacing what was there); returns it."""
        self._entries[key] = value
        return value

    def keys(self) -> frozenset:
        """What is kept now (entries, ``'max_degree'``, ``('notice', name)``),
        to :meth:`drop` later what is made after this point."""
        known = {'max_degree'} if self.max_degree is not None else set()
        return frozenset(self._entries) | known | {('notice', n) for n in self.notices}

    def values(self) -> list:
        """Every kept entry (derived graphs among them)."""
        return list(self._entries.values())

    def drop(self, keep: Collection = ()) -> None:
        """Forget what is not in ``keep`` (an earlier :meth:`keys`); it is made
        again on next use. ``sgt`` stays."""
        for key in [k for k in self._entries if k not in keep]:
            del self._entries[key]
        if 'max_degree' not in keep:
            self.max_degree = None
        self.notices = {n for n in self.notices if ('notice', n) in keep}


class CSRGraph:
    """Both directions of a graph with their schedules (see the module doc):
    an immutable value. Derived graphs (padded, trimmed, self-loop, capped)
    are new graphs; what is derived from the structure is kept in
    :attr:`cache`. Made by :meth:`from_coo`, :meth:`from_csr`,
    :meth:`from_sampled` or the transforms of :mod:`pyg_tc.transforms`.

    Args:
        rowptr (torch.Tensor): ``[R + 1]`` int32, targets' edge ranges.
        col (torch.Tensor): ``[E]`` int32, each edge's source.
        perm (torch.Tensor, optional): ``[E]`` CSR position -> original edge
            id; None when the input order is the CSR order.
        t_rowptr, t_col, t_perm (torch.Tensor): the transpose (``t_perm``:
            transpose position -> forward position).
        sched, t_sched (Schedule): both directions' schedules.
        num_rows, num_cols (int): targets ``R`` and sources ``C``.
        chunk (int, optional): edges per schedule unit (None: :func:`~pyg_tc.formats.csr.auto_chunk`).
        layout (Layout): padding and static shapes.
        sampled_hops (SampledHops, optional): a sampled mini-batch's hop
            structure (:meth:`from_sampled`), from which
            :func:`pyg_tc.formats.padding.trimmed` derives ``trim_to_layer``'s graphs.
        max_degree (int, optional): the largest in-degree when known.
    """

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
        sampled_hops: Optional[SampledHops] = None,
        max_degree: Optional[int] = None,
    ):
        if chunk is None:
            chunk = auto_chunk(col.numel(), rowptr.numel() - 1)
        fields = dict(rowptr=rowptr, col=col, perm=perm, t_rowptr=t_rowptr, t_col=t_col, t_perm=t_perm)
        fields.update(sched=sched, t_sched=t_sched, num_rows=int(num_rows), num_cols=int(num_cols), chunk=int(chunk))
        fields.update(layout=layout, sampled_hops=sampled_hops, cache=GraphCache(max_degree))
        self.__dict__.update(fields)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f'pyg_tc: a CSRGraph is an immutable value ({name!r} cannot be set): derive a new graph, '
            'or keep derived objects in graph.cache'
        )

    def __delattr__(self, name: str) -> None:
        self.__setattr__(name, None)

    def replace(self, **fields: Any) -> 'CSRGraph':
        """A new graph with the given fields (the constructor's arguments)
        replaced and the others shared; its cache starts empty. For a graph
        whose structure differs only in one array (a test's corrupted
        schedule, a schedule of another chunk)."""
        names = ('rowptr', 'col', 'perm', 't_rowptr', 't_col', 't_perm', 'sched', 't_sched')
        names += ('num_rows', 'num_cols', 'chunk', 'layout', 'sampled_hops')
        unknown = set(fields) - set(names)
        if unknown:
            raise TypeError(f'pyg_tc: CSRGraph.replace: unknown fields {sorted(unknown)}')
        return CSRGraph(**{**{name: getattr(self, name) for name in names}, **fields})

    #: the typed store of what is derived from the structure (:class:`~pyg_tc.formats.csr.GraphCache`)
    cache: GraphCache
    #: how the arrays sit beyond a plain CSR (padding, static shapes)
    layout: Layout
    #: the hop structure of a sampled mini-batch (:meth:`from_sampled`), or None
    sampled_hops: Optional[SampledHops]

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

    def csr_positions(self) -> Optional[Tensor]:
        """The CSR position of every original edge (the inverse of ``perm``;
        once per graph), or None when the orders agree (``perm`` is None)."""
        if self.perm is None:
            return None
        return self.cache.memo('inverse_perm', lambda: inverse_perm(self.perm))

    def rows_by_degree(self) -> Tensor:
        """The rows by in-degree, descending, ties in row order (int32; once
        per graph)."""
        return self.cache.memo('row_order', lambda: torch.sort(self.degree(), descending=True, stable=True)[1].int())

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
        if E == 0:  # no edges: nothing to check, sort or schedule (no synchronisation)
            return cls._empty(num_dst, num_src, src.device, chunk)
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
    def _empty(cls, R: int, C: int, device: Any, chunk: Optional[int] = DEFAULT_CHUNK) -> 'CSRGraph':
        """A graph of ``R`` rows, ``C`` columns and no edges (every row one
        empty unit), built without synchronisation (e.g. an edge type that
        ``trim_to_layer`` leaves no edges)."""
        i32 = torch.int32
        rowptr, t_rowptr = torch.zeros(R + 1, dtype=i32, device=device), torch.zeros(C + 1, dtype=i32, device=device)
        none = torch.zeros(0, dtype=i32, device=device)
        chunk = auto_chunk(0, R) if chunk is None else chunk
        sched, t_sched = _light_schedule(rowptr), _light_schedule(t_rowptr)
        return cls(rowptr, none, None, t_rowptr, none, none, sched, t_sched, R, C, chunk, max_degree=0)

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
        num_cols: Optional[int] = None,
        num_sampled_src: Optional[Sequence[int]] = None,
    ) -> 'CSRGraph':
        """The graph of a sampled mini-batch (:mod:`pyg_tc.loader`): its edges
        come sorted by target with every index in range, so ``rowptr``,
        ``col`` and ``rows`` (int32, the target of every edge) are taken as
        they are; ``max_degree`` bounds the in-degrees (the largest fan-out)
        when known. Only the transpose and the schedules are built; with
        ``defer`` on first use (or :meth:`complete`), so a batch padded
        next (:func:`~pyg_tc.formats.padding.pad_hops`) never builds them.
        ``num_sampled_nodes`` / ``num_sampled_edges`` (per hop, as PyG's
        batch fields) record the hop structure (``sampled_hops``), from
        which :func:`~pyg_tc.formats.padding.trimmed` derives ``trim_to_layer``'s graphs.
        ``num_cols``: the source nodes of a bipartite batch graph (an edge type
        of a heterogeneous batch; default ``num_nodes``, targets and sources
        alike), and ``num_sampled_src`` their counts per hop (the source
        type's ``num_sampled_nodes``; default ``num_sampled_nodes``)."""
        hops = None
        C = num_nodes if num_cols is None else int(num_cols)
        if num_sampled_nodes is not None or num_sampled_edges is not None:
            nodes = tuple(int(n) for n in num_sampled_nodes or ())
            edges = tuple(int(e) for e in num_sampled_edges or ())
            src = None if num_sampled_src is None else tuple(int(n) for n in num_sampled_src)
            if (
                len(nodes) != len(edges) + 1
                or sum(nodes) != num_nodes
                or sum(edges) != col.numel()
                or (src is not None and (len(src) != len(nodes) or sum(src) != C))
            ):
                raise ValueError(
                    f'pyg_tc: {len(nodes)} hop node counts (sum {sum(nodes)}), {len(edges)} hop edge '
                    f'counts (sum {sum(edges)}) and source counts {src} do not describe a batch of '
                    f'{num_nodes} targets, {C} sources and {col.numel()} edges (one more node count than '
                    f'edge counts)'
                )
            hops = SampledHops(nodes, edges, max_degree, src)
        if not defer:
            return cls._finish(rowptr, col, None, num_nodes, C, chunk, rows, max_degree, hops)
        chunk = auto_chunk(col.numel(), num_nodes) if chunk is None else chunk
        g = cls(rowptr, col, None, None, None, None, None, None, num_nodes, C, chunk, sampled_hops=hops)
        for name in _DEFERRED:
            del g.__dict__[name]
        g.__dict__['_deferred'] = (rows, max_degree)
        return g

    def __getattr__(self, name: str) -> Any:
        # only for attributes an instance lacks: a deferred graph's transpose and schedules
        if name not in _DEFERRED or '_deferred' not in self.__dict__:
            raise AttributeError(f'{type(self).__name__!r} object has no attribute {name!r}')
        return getattr(self.complete(), name)

    def complete(self) -> 'CSRGraph':
        """Builds the transpose and the schedules :meth:`from_sampled` deferred
        (nothing for any other graph); returns the graph. (They are part of
        the value, made late: the graph does not change.)"""
        pending = self.__dict__.pop('_deferred', None)
        if pending is not None:
            rows, max_degree = pending
            done = self._finish(self.rowptr, self.col, None, self.num_rows, self.num_cols, self.chunk, rows, max_degree)
            self.__dict__.update({name: done.__dict__[name] for name in _DEFERRED})
        return self

    @classmethod
    def _finish(cls, rowptr, col, perm, R, C, chunk, rows=None, max_degree=None, hops=None) -> 'CSRGraph':
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
        return cls(rowptr, col, perm, t_rowptr, t_col, t_perm, sched, t_sched, R, C, chunk, sampled_hops=hops)

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
        if self.cache.max_degree is None:
            self.cache.max_degree = int(self.degree().max()) if self.num_rows else 0
        return self.cache.max_degree

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
            self.sampled_hops,
        )
        if self.cache.sgt is not None:
            g.cache.sgt = self.cache.sgt.to(device, non_blocking=non_blocking)
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
    """The real part of a schedule with fillers (:func:`~pyg_tc.formats.padding.padded_schedule`:
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
