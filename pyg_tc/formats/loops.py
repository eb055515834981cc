"""The self-loop graph of attention layers: PyG's ``remove_self_loops`` +
``add_self_loops`` as a format.

``GATConv``, ``GATv2Conv`` and ``AGNNConv`` with ``add_self_loops=True``
(PyG's default) run on the graph without its loops and with one loop per
node ``i < num_loops``. It is structure, built once per graph
(:class:`LoopGraph`): the graph and the map from its CSR positions to
"original edge or loop", by which edge features (and GAT's folded per-edge
scores) are gathered.

* For a plain ``edge_index`` it is built straight from the edges and cached
  on the tensor (:func:`loops_from_edges`, a derived format of
  :func:`pyg_tc.formats.carrier.derived`), so the adjacency's own CSR graph
  is never built (one graph in memory, not two).
* An adjacency that carries a graph (a transform's ``TCEdgeIndex``, sparse
  tensors, a :class:`~pyg_tc.formats.CSRGraph`) has it memoised on that
  graph (:func:`loop_graph`); a padded mini-batch has a padded one
  (:func:`pad_loop_graph`).
* The edges a string ``fill_value`` reduces into a loop's features
  (:func:`loop_fill_index`, :func:`fill_index_from_edges`) and the order of
  PyG's edge index for the returned attention weights (:func:`pyg_order`)
  are memoised beside it.

Every accessor takes ``build=False`` to look up without building, which is
what a layer does under ``torch.compile`` (the shapes are data-dependent).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .carrier import TCEdgeIndex, derived, has_derived, has_graph, plain_tensor
from .csr import DEFAULT_CHUNK, CSRGraph, auto_chunk, csr_rows
from .padding import padded_layout, padded_schedules

_INT32_MAX = 2**31 - 1
MODES = ('append', 'sorted', 'coalesce')


class LoopGraph(NamedTuple):
    """A graph with PyG's self-loop handling applied (see the module doc):
    ``ids [E']`` maps each CSR position of ``graph`` to an id in
    ``cat(original edges, loops)``: ``e < E`` is the original edge ``e`` (in
    the order of the adjacency's edges), ``E + i`` the loop of node ``i``."""

    graph: CSRGraph
    ids: Tensor


def _loop_key(mode: str, num_loops: int) -> tuple:
    return ('gat_loops', mode, int(num_loops))


def _fill_key(num_loops: int, by_source: bool) -> tuple:
    return ('gat_loop_fill', int(num_loops), bool(by_source))


def _index_dtype(n: int) -> torch.dtype:
    return torch.int32 if n <= _INT32_MAX else torch.int64


def _append_loops(
    src: Tensor, dst: Tensor, num_src: int, num_dst: int, num_loops: int, chunk: Optional[int]
) -> LoopGraph:
    """PyG's ``remove_self_loops`` + ``add_self_loops`` of the edges
    ``src[e] -> dst[e]`` (in the adjacency's order): the kept edges keep their
    order and one loop per node ``i < num_loops`` follows. Only ``ids`` is
    kept as the edge map (the graph's ``perm`` is None): PyG's new edge order
    is the ids' order (:func:`pyg_order`), so one ``[E]`` array serves edge
    features and the returned attention weights."""
    E = src.numel()
    loops = torch.arange(num_loops, device=src.device, dtype=src.dtype)
    keep = src != dst
    if E and num_loops <= num_dst:
        # one synchronisation: loops present, target order (NeighborLoader's
        # batches), and the range check the merge below needs
        flags = torch.stack([keep.all(), (dst[1:] >= dst[:-1]).all()]).to(src.dtype)
        no_loops, in_order, mn, mx_s, mx_d = torch.cat(
            [flags, torch.minimum(src.min(), dst.min()).view(1), src.max().view(1), dst.max().view(1)]
        ).tolist()
        if mn >= 0 and mx_s < num_src and mx_d < num_dst and no_loops and in_order:
            return _merge_loops(src, dst, num_src, num_dst, num_loops, chunk)
        no_loops = bool(no_loops)
    else:
        no_loops = bool(keep.all())
    if no_loops:
        graph = CSRGraph.from_coo(torch.cat([src, loops]), torch.cat([dst, loops]), num_src, num_dst, chunk)
        ids = (
            graph.perm
            if graph.perm is not None
            else torch.arange(E + num_loops, device=src.device, dtype=_index_dtype(E + num_loops))
        )
    else:
        oid = keep.nonzero().flatten()
        del keep
        graph = CSRGraph.from_coo(
            torch.cat([src.index_select(0, oid), loops]),
            torch.cat([dst.index_select(0, oid), loops]),
            num_src,
            num_dst,
            chunk,
        )
        ids = torch.cat([oid, loops.long() + E])
        if graph.perm is not None:
            ids = ids.index_select(0, graph.perm.long())
        ids = ids.to(_index_dtype(E + num_loops))
    if graph.perm is not None:
        graph = graph.replace(perm=None)  # ids is the only edge map kept (see pyg_order)
    return LoopGraph(graph, ids)


def _merge_loops(
    src: Tensor, dst: Tensor, num_src: int, num_dst: int, num_loops: int, chunk: Optional[int]
) -> LoopGraph:
    """:func:`_append_loops` of edges without self loops already in target
    order: the stable sort by target would put node ``i``'s loop right after
    its row's edges, so the CSR is written directly (no sort, no
    synchronisation): edge ``e`` of row ``r`` moves ``min(r, num_loops)``
    places on, the loop of row ``i`` ends its row."""
    dev, E = src.device, src.numel()
    rp = torch.searchsorted(
        dst.to(torch.int32), torch.arange(num_dst + 1, dtype=torch.int32, device=dev), out_int32=True
    ).long()
    before = torch.arange(num_dst + 1, device=dev).clamp_(max=num_loops)  # loops of the rows above
    M = E + num_loops
    idt = _index_dtype(M)
    col = torch.empty(M, dtype=torch.int32, device=dev)
    ids = torch.empty(M, dtype=idt, device=dev)
    pos = torch.arange(E, device=dev) + dst.long().clamp(max=num_loops)
    col[pos] = src.to(torch.int32)
    ids[pos] = torch.arange(E, device=dev, dtype=idt)
    lpos = rp[1 : num_loops + 1] + torch.arange(num_loops, device=dev)
    col[lpos] = torch.arange(num_loops, device=dev, dtype=torch.int32)
    ids[lpos] = torch.arange(E, M, device=dev, dtype=idt)
    graph = CSRGraph._finish((rp + before).to(torch.int32), col, None, num_dst, num_src, chunk)
    return LoopGraph(graph, ids)


def _edges_of(g: CSRGraph) -> Tuple[Tensor, Tensor]:
    """(sources, targets) of ``g``'s edges in the adjacency's edge order."""
    row, col = g.row(), g.col
    if g.perm is None:
        return col, row
    p = g.perm.long()
    src, dst = torch.empty_like(col), torch.empty_like(row)
    src[p], dst[p] = col, row
    return src, dst


def _flow_edges(adj: Any, flow: str) -> Tuple[Tensor, Tensor]:
    """(sources, targets) of a plain ``edge_index`` for ``flow``."""
    data = plain_tensor(adj)
    if data.dim() != 2 or data.size(0) != 2:
        raise ValueError(f'pyg_tc: edge_index must be a [2, E] tensor, got shape {tuple(data.shape)}')
    if data.dtype not in (torch.int32, torch.int64):
        raise TypeError(f'pyg_tc: edge_index must be int32 or int64, got {data.dtype}')
    return (data[0], data[1]) if flow == 'source_to_target' else (data[1], data[0])


def loop_graph(g: CSRGraph, num_loops: int, mode: str = 'append', build: bool = True) -> Optional[LoopGraph]:
    """``g`` with its self loops removed and one loop per node ``i <
    num_loops`` added, as PyG's layers do it; memoised on ``g``.

    ``mode='append'`` (``edge_index`` inputs; PyG's ``remove_self_loops`` +
    ``add_self_loops``): see :func:`_append_loops`. ``'sorted'``
    (``SparseTensor``; ``set_diag``) and ``'coalesce'`` (``torch.sparse``;
    PyG rebuilds a coalesced tensor, which merges repeated entries): the CSR
    order is PyG's, sorted by (target, source). A plain ``edge_index`` skips
    ``g`` altogether (:func:`loops_from_edges`). ``build=False``: None when
    not memoised yet (nothing is built).
    """
    if mode not in MODES:
        raise ValueError(f'pyg_tc: unknown self-loop mode {mode!r}')
    key = _loop_key(mode, num_loops)
    if not build:
        return g.cache.get(key)

    def make() -> LoopGraph:
        if mode == 'append' and g.static_shapes and num_loops == g.num_rows == g.num_cols:
            return static_loop_graph(g)  # (a padded batch's: no synchronisation, capturable)
        if mode == 'append':
            src, dst = _edges_of(g)
            return _append_loops(src, dst, g.num_cols, g.num_rows, num_loops, g.chunk)
        E, dev = g.num_edges, g.device
        row, col = g.row().long(), g.col.long()
        keep = (row != col).nonzero().flatten()
        oid = keep if g.perm is None else g.perm.long().index_select(0, keep)
        loops = torch.arange(num_loops, device=dev)
        r = torch.cat([row.index_select(0, keep), loops])
        c = torch.cat([col.index_select(0, keep), loops])
        ids = torch.cat([oid, loops + E])
        rc, order = torch.sort(r * max(g.num_cols, 1) + c, stable=True)
        if mode == 'coalesce' and rc.numel() > 1:
            first = torch.ones_like(rc, dtype=torch.bool)
            first[1:] = rc[1:] != rc[:-1]
            order = order[first]
        r, c, ids = r.index_select(0, order), c.index_select(0, order), ids.index_select(0, order)
        rowptr = torch.zeros(g.num_rows + 1, dtype=torch.long, device=dev)
        torch.cumsum(torch.bincount(r, minlength=g.num_rows), 0, out=rowptr[1:])
        graph = CSRGraph.from_csr(rowptr, c, g.num_cols, g.chunk)
        return LoopGraph(graph, ids.to(_index_dtype(E + num_loops)))

    return g.cache.memo(key, make)


def plain_edge_index(adj: Any) -> bool:
    """Whether ``adj`` is a plain ``edge_index`` (a strided tensor carrying no
    transform's graph): its self-loop graph comes from
    :func:`loops_from_edges`, not from a CSR graph of the adjacency."""
    return isinstance(adj, Tensor) and adj.layout == torch.strided and not isinstance(adj, TCEdgeIndex)


def format_ready(adj: Any, flow: str) -> bool:
    """Whether ``adj`` carries a graph or a derived format (self-loop
    layers, under ``torch.compile``; the exact check follows per call)."""
    return has_graph(adj, flow) or has_derived(adj)


def loops_from_edges(
    adj: Tensor, num_src: int, num_dst: int, flow: str, num_loops: int, build: bool = True
) -> Optional[LoopGraph]:
    """The self-loop graph (``'append'`` mode) of a plain ``edge_index``,
    built straight from its edges and cached on the tensor
    (:func:`pyg_tc.formats.carrier.derived`): the plain CSR graph is never
    built, so only one graph per ``edge_index`` stays in memory. ``num_src``
    / ``num_dst`` as PyG's ``size`` (before ``flow``); ``build=False``: None
    when not cached."""
    if flow == 'target_to_source':
        num_src, num_dst = num_dst, num_src

    def make() -> LoopGraph:
        src, dst = _flow_edges(adj, flow)
        return _append_loops(src, dst, num_src, num_dst, num_loops, DEFAULT_CHUNK)

    return derived(adj, num_src, num_dst, flow, _loop_key('append', num_loops), make if build else None)


def _fill_index(
    src: Tensor, dst: Tensor, num_loops: int, by_source: bool, live: Optional[Tensor] = None
) -> Tuple[Tensor, Tensor]:
    """(edge ids, node) of the edges a string ``fill_value`` reduces; with
    ``live`` (a padded graph's real edges; static shapes, no
    synchronisation): every edge, the others with node ``num_loops``
    (dropped by the layer, which reduces into ``num_loops + 1`` rows)."""
    node = src if by_source else dst
    take = (src != dst) & (node < num_loops)
    if live is not None:
        return (
            torch.arange(src.numel(), device=src.device),
            torch.where(take & live, node.long(), torch.full_like(node, num_loops, dtype=torch.long)),
        )
    pos = take.nonzero().flatten()
    return pos, node.index_select(0, pos).long()


def pad_loop_graph(g: CSRGraph) -> LoopGraph:
    """The self-loop graph GAT and GATv2 use on a graph of static shapes
    (:func:`~pyg_tc.formats.padding.pad`, :func:`~pyg_tc.formats.padding.pad_hops` and its trimmed
    graphs): :func:`static_loop_graph`, memoised on ``g`` where the layers
    look it up (:func:`loop_graph`). A transform that calls it
    (``PadToBuckets`` / ``PadHops`` with ``self_loops=True``) makes it part
    of the batch; without it a layer derives the same graph inside the
    step, also without synchronisation."""
    if not g.static_shapes:
        raise ValueError(
            'pyg_tc: pad_loop_graph takes a graph of static shapes (pyg_tc.formats.padding.pad, pad_hops, or their trimmed graphs)'
        )
    return loop_graph(g, g.num_rows, 'append')


def static_loop_graph(g: CSRGraph) -> LoopGraph:
    """:func:`_append_loops` of a square graph of static shapes (``N`` rows,
    ``P`` edge slots), on its device without synchronisation: padded to
    ``P + N`` slots (:func:`~pyg_tc.formats.padding.pad`'s layout: slots past
    ``rowptr[-1]`` are padding, ``col`` / ``t_col`` the last row, ``t_perm``
    themselves, ``ids`` the last loop's). Every slot of ``g`` is an edge
    (a :func:`~pyg_tc.formats.padding.pad` graph's padding slots are loops of its last
    row, so they go as any self loop). Row ``r`` keeps its non-loop edges in
    CSR order and ends with its loop; in the transpose, column ``c`` keeps
    its entries in CSR order with its loop among them after the rows
    ``< c``: the arrays a host build (:func:`_append_loops` + ``pad``) gives,
    from prefix sums and scatters of known sizes."""
    N, P, dev = g.num_rows, g.num_edges, g.device
    cap, i32 = P + N, torch.int32
    ar = torch.arange(N + 1, device=dev)
    lr = ar[:-1]

    def scatter(init: Tensor, pos: Tensor, val: Tensor, lpos: Tensor, lval: Tensor) -> Tensor:
        # dropped entries go to the spare slot ``cap``
        return init.scatter_(0, pos, val.to(init.dtype)).scatter_(0, lpos, lval.to(init.dtype))[:cap]

    def prefix(keep: Tensor, rowptr: Tensor) -> Tuple[Tensor, Tensor]:
        ck = torch.cumsum(keep, 0)
        return ck, torch.cat([ck.new_zeros(1), ck]).index_select(0, rowptr.long())

    row, col = g.row().long(), g.col.long()
    keep = col != row
    ck, nl = prefix(keep, g.rowptr)  # kept edges up to each slot / before each row
    new_pos = ck - 1 + row  # a kept edge's slot: its rank among the kept, plus a loop per row above
    pos = torch.where(keep, new_pos, torch.full_like(new_pos, cap))
    lpos = nl[1:] + lr  # row r's loop ends its row
    oid = torch.arange(P, device=dev) if g.perm is None else g.perm.long()
    new_col = scatter(torch.full((cap + 1,), N - 1, dtype=i32, device=dev), pos, col, lpos, lr)
    ids = scatter(torch.full((cap + 1,), P + N - 1, dtype=_index_dtype(cap), device=dev), pos, oid, lpos, lr + P)
    # the transpose: entry j of column c (target t_col[j]) is forward slot t_perm[j]
    tp, t_tgt = g.t_perm.long(), g.t_col.long()
    t_src = csr_rows(g.t_rowptr, P).long()
    t_keep = keep.index_select(0, tp)
    t_ck, t_nl = prefix(t_keep, g.t_rowptr)
    _, t_less = prefix(t_keep & (t_tgt < t_src), g.t_rowptr)  # column c's kept entries from rows < c
    t_new = t_src + t_ck - 1 + (t_tgt > t_src).long()
    t_pos = torch.where(t_keep, t_new, torch.full_like(t_new, cap))
    t_lpos = t_nl[:-1] + lr + (t_less[1:] - t_less[:-1])
    t_col = scatter(torch.full((cap + 1,), N - 1, dtype=i32, device=dev), t_pos, t_tgt, t_lpos, lr)
    t_perm = scatter(torch.arange(cap + 1, dtype=i32, device=dev), t_pos, new_pos.index_select(0, tp), t_lpos, lpos)
    rowptr, t_rowptr = (nl + ar).to(i32), (t_nl + ar).to(i32)
    chunk = auto_chunk(cap, N)
    scheds = padded_schedules([rowptr, t_rowptr], chunk, cap)
    bound = None if g.cache.max_degree is None else g.cache.max_degree + 1
    layout = padded_layout((N, None))
    graph = CSRGraph(rowptr, new_col, None, t_rowptr, t_col, t_perm, *scheds, N, N, chunk, layout, max_degree=bound)
    return LoopGraph(graph, ids)


def loop_fill_index(
    g: CSRGraph, num_loops: int, by_source: bool = False, build: bool = True
) -> Optional[Tuple[Tensor, Tensor]]:
    """(original edge ids, node) of the edges of ``g`` that are not self
    loops and whose ``edge_index[1]`` (the target; the source with
    ``by_source``, for ``flow='target_to_source'``) is below ``num_loops``,
    in edge order: what PyG's ``add_self_loops`` reduces for a string
    ``fill_value`` (e.g. ``'mean'``); memoised on ``g``. On a padded graph
    (static shapes, no synchronisation): every edge, those outside the
    reduction with node ``num_loops``; the same on a per-hop padded graph
    and its trimmed graphs. ``build=False``: None when not memoised yet."""
    key = _fill_key(num_loops, by_source)
    if not build:
        return g.cache.get(key)

    def make() -> Tuple[Tensor, Tensor]:
        live = None
        if g.static_shapes:  # (a per-hop padded graph's slots are all edges: all live)
            live = torch.arange(g.num_edges, device=g.device) < g.rowptr[-1]
            if g.perm is not None:
                live = live.index_select(0, g.csr_positions().long())
        return _fill_index(*_edges_of(g), num_loops, by_source, live)

    return g.cache.memo(key, make)


def fill_index_from_edges(
    lg: LoopGraph, adj: Tensor, flow: str, num_loops: int, by_source: bool = False, build: bool = True
) -> Optional[Tuple[Tensor, Tensor]]:
    """:func:`loop_fill_index` of a plain ``edge_index`` ``adj`` (``flow``
    as the layer's), from its edges, memoised on its self-loop graph ``lg``
    (:func:`loops_from_edges`). ``build=False``: None when not memoised yet."""
    key = _fill_key(num_loops, by_source)
    if not build:
        return lg.graph.cache.get(key)
    return lg.graph.cache.memo(key, lambda: _fill_index(*_flow_edges(adj, flow), num_loops, by_source))


def pyg_order(g: Optional[CSRGraph], lg: Optional[LoopGraph]) -> Optional[Tensor]:
    """CSR positions of the graph used in the order of PyG's edge index for
    it (None: the orders agree): without self loops ``g``'s
    (:meth:`CSRGraph.csr_positions`); with them (``'append'`` mode) the kept
    edges in their order and then the loops, i.e. ``lg.ids`` sorted
    (memoised on ``lg.graph``)."""
    if lg is None:
        return g.csr_positions()
    return lg.graph.cache.memo('pyg_order', lambda: torch.argsort(lg.ids.long()))
