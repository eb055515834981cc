"""Graphs of static shapes and their prefixes: padding, per-hop padding and
``trim_to_layer``'s trimming of a :class:`~pyg_tc.formats.CSRGraph`.

* :func:`pad`: a sampled batch's graph padded to ``(rows, edge slots)`` (one
  shape per bucket; :class:`pyg_tc.transforms.PadToBuckets`);
* :func:`pad_hops`: padded hop by hop, every hop's block of static size
  (:class:`pyg_tc.transforms.PadHops`);
* :func:`trimmed`: the graph of a sampled batch's first hops, as PyG's
  ``trim_to_layer`` keeps it, derived without a sort or a synchronisation;
* :func:`padded_schedule` / :func:`padded_schedules`: schedules with array
  sizes fixed by the bucket (fillers the kernels skip), and the
  ``csr_padded_schedules`` / ``csr_pad_hops`` ops with their references.

Every function builds on the graph's device without synchronising, so a
step on its graphs can be captured in a CUDA graph. ES-SpMM's capped graphs
(rows cut to ``max_neighbors`` edges) are :func:`pyg_tc.ops.es_spmm.capped_graph`'s:
they depend on a sampling strategy and its kernel.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import _library
from .._library import Op
from .csr import _INT32_MAX, CSRGraph, Layout, SampledHops, Schedule, _light_schedule, auto_chunk, csr_rows, transpose


def padded_layout(real_size: Tuple[Optional[int], Optional[int]]) -> Layout:
    """The :class:`~pyg_tc.formats.csr.Layout` of a graph padded to static shapes."""
    return Layout(padded=True, static_shapes=True, fillers=True, real_size=real_size)


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
    (:func:`pad_hops`): ``[rowptr, col, rows, node_index,
    edge_index, node_mask]``, the padded CSR (int32; ``rows`` the target of
    every slot), where each real node and edge went (int64) and which rows
    are real (bool). On CUDA with the kernels loaded the ``csr_pad_hops`` op
    (one launch, no synchronisation), else ``pad_hops_reference``
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


def block_index(num_nodes: Sequence[int], pad_nodes: Sequence[int], device: Any = None) -> Tensor:
    """Where each real node of a per-hop padded node set goes (int64): node
    ``i`` of hop ``h`` (hops of ``num_nodes[h]`` real nodes, in turn) to row
    ``N_0 + .. + N_{h-1} + i`` (``N = pad_nodes``)."""
    starts = [0, *accumulate(int(v) for v in pad_nodes)]
    parts = [torch.arange(starts[h], starts[h] + int(n), device=device) for h, n in enumerate(num_nodes)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long, device=device)


def pad_hops_bipartite(
    g: CSRGraph,
    num_nodes: Sequence[int],
    num_src: Sequence[int],
    num_edges: Sequence[int],
    dst_index: Optional[Tensor] = None,
    src_index: Optional[Tensor] = None,
) -> Tuple[CSRGraph, Tensor, Tensor]:
    """:func:`pad_hops` of a bipartite sampled graph (an edge type of a
    heterogeneous batch, its ``sampled_hops`` with source counts): target
    node block ``h`` padded to ``num_nodes[h]`` rows, source block ``h`` to
    ``num_src[h]``, edge block ``h`` (hop ``h + 1``'s edges, targets in
    block ``h``) to ``num_edges[h]`` slots, real entries first. The padding
    slots of edge block ``h`` are edges from the last (padded) source row of
    block ``h + 1`` into the last (padded) target row of block ``h``, so no
    real row reads a padded node. ``dst_index`` / ``src_index``: the node
    sets' :func:`block_index` (made here when not given).

    Returns ``(graph, edge_index, rows)``: the padded graph (``sampled_hops``
    the padded counts, ``static_shapes`` set, both schedules
    ``padded_schedule``'s), where each real edge went (int64) and the target
    of every slot (int32). Built on the graph's device without
    synchronisation."""
    hops = g.sampled_hops
    if hops is None or g.padded or g.perm is not None:
        raise ValueError('pyg_tc: pad_hops_bipartite pads a sampled batch graph (hop structure, CSR order, not padded)')
    n, m, e = list(hops.num_nodes), list(hops.src_nodes), list(hops.num_edges)
    N, M, P = [int(v) for v in num_nodes], [int(v) for v in num_src], [int(v) for v in num_edges]
    L = len(e)
    if len(N) != L + 1 or len(M) != L + 1 or len(P) != L:
        raise ValueError(
            f'pyg_tc: a batch of {L} hops pads to {L + 1} target and source counts and {L} edge counts, '
            f'got {len(N)}, {len(M)} and {len(P)}'
        )
    if any(a <= b for a, b in zip(N, n)) or any(a <= b for a, b in zip(M, m)) or any(a < b for a, b in zip(P, e)):
        raise ValueError(
            f'pyg_tc: cannot pad hops of {n} targets, {m} sources and {e} edges to {N} targets, {M} sources '
            f'(one padded row at least per hop) and {P} edges'
        )
    R, C, E = sum(N), sum(M), sum(P)
    if max(R, C, E) > _INT32_MAX:
        raise ValueError('pyg_tc: graphs with more than 2^31-1 edges or nodes are not supported')
    dev, i32 = g.rowptr.device, torch.int32
    dst_index = block_index(n, N, dev) if dst_index is None else dst_index
    src_index = block_index(m, M, dev) if src_index is None else src_index
    Od, Os, base = [0, *accumulate(N)], [0, *accumulate(M)], [0, *accumulate(e)]
    real_rows = dst_index.index_select(0, csr_rows(g.rowptr, g.num_edges).long()).to(i32)
    real_col = src_index.index_select(0, g.col.long()).to(i32)
    cols, rows = [real_col.new_zeros(0)], [real_rows.new_zeros(0)]
    for h in range(L):
        cols += [real_col[base[h] : base[h + 1]], torch.full((P[h] - e[h],), Os[h + 2] - 1, dtype=i32, device=dev)]
        rows += [real_rows[base[h] : base[h + 1]], torch.full((P[h] - e[h],), Od[h + 1] - 1, dtype=i32, device=dev)]
    col, rows = torch.cat(cols), torch.cat(rows)
    edge_index = block_index(e, P, dev)
    rowptr = torch.searchsorted(rows, torch.arange(R + 1, dtype=i32, device=dev), out_int32=True)
    t_rowptr, t_col, t_perm = transpose(col, rows, C)
    chunk = auto_chunk(E, R)
    scheds = padded_schedules([rowptr, t_rowptr], chunk, E)
    layout = Layout(static_shapes=True, fillers=True)
    out_hops = SampledHops(tuple(N), tuple(P), None, tuple(M))  # (no degree bound: see pad_hops)
    out = CSRGraph(rowptr, col, None, t_rowptr, t_col, t_perm, *scheds, R, C, chunk, layout, out_hops)
    return out, edge_index, rows


def padded_schedule(rowptr: Tensor, chunk: int, num_edges: int) -> Schedule:
    """The degree-bucket schedule of a padded graph's ``rowptr``
    (:func:`pad`) with array sizes fixed by ``(rows, num_edges,
    chunk)``, built without synchronisation. With ``q = ceil(num_edges /
    chunk)``: ``R + q`` units (every row has one, a row of degree ``d``
    ``ceil(d / chunk)``), ``q`` heavy entries (a heavy row has more than
    ``chunk`` edges) and ``3 q`` workspace slots (heavy rows own at most
    ``2 q``). What a graph does not use is filler: units ``(R - 1, E, E,
    spare slot)`` (empty, their partial goes to a slot no row reads; sorted
    last) and heavy entries ``(R - 1, empty slot range)``, which the second
    pass skips. The real units, slots and heavy rows are those
    :func:`~pyg_tc.formats.csr.build_schedules` gives, in the same order."""
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


def trimmed(g: CSRGraph, num_edges: int, num_rows: int, num_cols: int) -> Optional[CSRGraph]:
    """The graph of sampled mini-batch ``g``'s first ``num_edges`` edges
    between its first ``num_rows`` targets and ``num_cols`` sources: what
    PyG's ``trim_to_layer`` keeps for a layer (``edge_index.narrow(1, 0,
    num_edges)`` and the first nodes). Derived from ``g`` without a
    sort and without reading the device (``_trim``); kept in ``g.cache`` per
    ``(num_edges, num_rows, num_cols)``, so forward, backward and every
    layer share it; ``g`` itself when nothing is trimmed.

    None when ``g`` has no hop structure (``sampled_hops``), or
    ``num_edges`` is not a hop boundary, or the node counts do not cover
    those hops' targets and sources: the caller builds the graph from
    its edges instead."""
    hops = g.sampled_hops
    k, R, C = int(num_edges), int(num_rows), int(num_cols)
    if hops is None or g.padded or g.perm is not None or R > g.num_rows or C > g.num_cols:
        return None
    if (k, R, C) == (g.num_edges, g.num_rows, g.num_cols):
        return g
    ends = [0, *accumulate(hops.num_edges)]
    if k not in ends:
        return None
    # the first hops whose edges end at k: targets lie in hops < j, sources in hops <= j
    j = ends.index(k)
    nodes, src = list(accumulate(hops.num_nodes)), list(accumulate(hops.src_nodes))
    if j > 0 and (R < nodes[j - 1] or C < src[j]):
        return None
    return g.cache.memo(('trimmed', k, R, C), lambda: _trim(g, k, R, C))


def _trim(g: CSRGraph, k: int, R: int, C: int) -> CSRGraph:
    """:func:`trimmed`'s graph, whose edges are the CSR prefix ``[0, k)``
    (``k`` a row boundary): ``rowptr[:R + 1]`` clamped at ``k`` (rows past
    the kept hops keep no edge), ``col[:k]`` (a view); the transpose is
    ``g``'s with the entries of edges ``>= k`` removed by an
    order-preserving compaction of known size ``k`` (mask, cumulative
    sum, scatter; the new ``t_rowptr`` is the sum at the old one), which
    is the stable sort a build would make. Schedules: one direct unit per
    row where the degrees are known to fit a unit (the in-degrees from
    the fan-outs, the out-degrees when ``g``'s transpose has no heavy
    row), else ``padded_schedule`` (array sizes fixed by ``(R, k)``;
    fillers the kernels skip). No synchronisation."""
    chunk = auto_chunk(k, R)
    rowptr = g.rowptr[: R + 1].clamp(max=k)
    keep = g.t_perm < k
    csum = torch.cumsum(keep, 0)
    dest = torch.where(keep, csum - 1, torch.full_like(csum, k))  # dropped entries to a spare slot k
    t_col = g.t_col.new_empty(k + 1).scatter_(0, dest, g.t_col)[:k]
    t_perm = g.t_perm.new_empty(k + 1).scatter_(0, dest, g.t_perm)[:k]
    t_rowptr = torch.cat([csum.new_zeros(1), csum]).index_select(0, g.t_rowptr[: C + 1].long())
    t_rowptr = t_rowptr.to(torch.int32)
    bound = g.sampled_hops.max_degree if g.sampled_hops.max_degree is not None else g.cache.max_degree
    light = k <= chunk or (bound is not None and bound <= chunk)
    t_light = k <= chunk or (g.t_sched.heavy_rows.numel() == 0 and g.chunk <= chunk)
    heavy = padded_schedules([p for p, lt in ((rowptr, light), (t_rowptr, t_light)) if not lt], chunk, k)
    sched = _light_schedule(rowptr) if light else heavy.pop(0)
    t_sched = _light_schedule(t_rowptr) if t_light else heavy.pop(0)
    layout = Layout(static_shapes=g.static_shapes, fillers=not (light and t_light))
    return CSRGraph(rowptr, g.col[:k], None, t_rowptr, t_col, t_perm, sched, t_sched, R, C, chunk, layout)


def pad(g: CSRGraph, num_rows: int, num_edges: int, num_cols: Optional[int] = None) -> CSRGraph:
    """Graph ``g`` (a sampled mini-batch, or one edge type of a
    heterogeneous batch) padded to static shapes: ``num_rows`` rows (targets),
    ``num_cols`` columns (sources; default ``num_rows``, a square graph) and
    ``num_edges`` edge slots (no fewer than it has; mini-batches keep one
    padded row at least, :mod:`pyg_tc.transforms.pad`), for CUDA-graph capture and
    ``torch.compile`` (one shape per bucket, :mod:`pyg_tc.transforms.pad`).

    * padded rows (and columns) have no edges: their ``rowptr`` entries
      repeat the edge count ``E``, in both directions, so every kernel skips
      them and their aggregation is 0;
    * the padding edge slots ``E .. num_edges - 1`` lie past
      ``rowptr[-1]``: no kernel reads them; they run from the last column to
      the last row, so ``row()`` and ``per_edge`` see them as edges between
      padded nodes, whose values nothing reads;
    * both schedules (``padded_schedule``, ``chunk`` from
      ``auto_chunk`` of the padded sizes) have array sizes fixed by
      ``(num_rows, num_cols, num_edges)``: heavy rows are split as in any
      graph, unused units and heavy entries are fillers the kernels skip;
    * ``perm`` / ``t_perm`` map padding slots to themselves.

    Builds on ``g``'s device without synchronisation. ``padded`` is
    set and ``real_size`` records the real ``(rows, edges)``."""
    R, C, E = g.num_rows, g.num_cols, g.num_edges
    if g.padded:
        raise ValueError('pyg_tc: this graph is padded already')
    if num_cols is None:
        if C != R:
            raise ValueError(f'pyg_tc: a graph of {R} x {C} is padded with num_cols given')
        num_cols = num_rows
    if (
        num_rows < R
        or num_cols < C
        or num_edges < E
        or (num_rows == R and num_cols == C and (R == 0 or num_edges == E))
    ):
        raise ValueError(
            f'pyg_tc: cannot pad a graph of {R} x {C} and {E} edges to {num_rows} x {num_cols} and '
            f'{num_edges} edges (no fewer rows, columns or edges, and something to pad)'
        )
    if E < num_edges and (num_rows == 0 or num_cols == 0):
        raise ValueError('pyg_tc: padding edge slots need a row and a column to point at')
    if max(num_rows, num_cols, num_edges) > _INT32_MAX:
        raise ValueError('pyg_tc: graphs with more than 2^31-1 edges or nodes are not supported')
    dev, Q = g.device, num_edges - E

    def ptr(rp: Tensor, rows: int) -> Tensor:
        return torch.cat([rp.to(torch.int32), rp.new_full((rows - rp.numel() + 1,), E, dtype=torch.int32)])

    def idx(c: Tensor, last: int) -> Tensor:
        return torch.cat([c.to(torch.int32), c.new_full((Q,), last, dtype=torch.int32)])

    tail = torch.arange(E, num_edges, dtype=torch.int32, device=dev)
    perm = None if g.perm is None else torch.cat([g.perm.to(torch.int32), tail])
    rowptr, t_rowptr = ptr(g.rowptr, num_rows), ptr(g.t_rowptr, num_cols)
    chunk = auto_chunk(num_edges, num_rows)
    return CSRGraph(
        rowptr,
        idx(g.col, num_cols - 1),
        perm,
        t_rowptr,
        idx(g.t_col, num_rows - 1),
        torch.cat([g.t_perm.to(torch.int32), tail]),
        *padded_schedules([rowptr, t_rowptr], chunk, num_edges),
        num_rows,
        num_cols,
        chunk,
        padded_layout((R, E)),
        max_degree=g.cache.max_degree,
    )


def pad_hops(g: CSRGraph, num_nodes: Sequence[int], num_edges: Sequence[int], return_index: bool = False) -> Any:
    """Sampled mini-batch graph ``g`` padded hop by hop to static shapes
    (:class:`pyg_tc.transforms.PadHops`): node block ``h`` has
    ``num_nodes[h]`` rows, edge block ``h`` (hop ``h``'s edges, targets
    in node block ``h - 1``) ``num_edges[h - 1]`` slots; each block's
    real entries first, in their order, then its padding. Node ``v`` of
    hop ``h`` moves to ``v - n_0 - .. - n_{h-1} + N_0 + .. + N_{h-1}``.

    The padding edge slots of block ``h`` are real CSR entries: in-edges
    of node block ``h - 1``'s last row (its *sink*, a padded row), from
    node block ``h``'s last row (padded). No real edge reads a padded
    node, so every real row aggregates as before; padded rows aggregate
    garbage nobody reads. Unlike :func:`pad`'s graph, this one is an
    ordinary graph (``padded`` False, ``perm`` None, every slot in a
    row), with ``sampled_hops`` the padded hop counts, so
    :func:`trimmed` derives ``trim_to_layer``'s graphs at the padded hop
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
    hops = g.sampled_hops
    if hops is None or g.padded or g.perm is not None or g.num_rows != g.num_cols:
        raise ValueError('pyg_tc: pad_hops pads a sampled mini-batch graph (hop structure, CSR order, not padded)')
    N, P = [int(v) for v in num_nodes], [int(v) for v in num_edges]
    n, e = list(hops.num_nodes), list(hops.num_edges)
    L = len(e)
    if len(N) != L + 1 or len(P) != L:
        raise ValueError(
            f'pyg_tc: a batch of {L} hops pads to {L + 1} node counts and {L} edge counts, got {len(N)} and {len(P)}'
        )
    if any(a <= b for a, b in zip(N, n)) or any(a < b for a, b in zip(P, e)):
        raise ValueError(
            f'pyg_tc: cannot pad hops of {n} nodes and {e} edges to {N} nodes (one padded '
            f'row at least per hop) and {P} edges'
        )
    R, E = sum(N), sum(P)
    if R > _INT32_MAX or E > _INT32_MAX:
        raise ValueError('pyg_tc: graphs with more than 2^31-1 edges or nodes are not supported')
    rowptr, col, rows, node_index, edge_index, node_mask = pad_hops_layout(g.rowptr, g.col, n, e, N, P)
    t_rowptr, t_col, t_perm = transpose(col, rows, R)
    chunk = auto_chunk(E, R)
    scheds = padded_schedules([rowptr, t_rowptr], chunk, E)
    layout = Layout(static_shapes=True, fillers=True)
    # no degree bound: the sink rows' degrees change from batch to batch (a bound would let
    # trimmed() pick schedules whose kind depends on the batch)
    hops = SampledHops(tuple(N), tuple(P), None)
    out = CSRGraph(rowptr, col, None, t_rowptr, t_col, t_perm, *scheds, R, R, chunk, layout, hops)
    return (out, node_index, edge_index, node_mask, rows) if return_index else out


# ---------------------------------------------------------------------------
# The padding builders' GPU ops (kernels/csr/csr_build.cu), beside their references


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
