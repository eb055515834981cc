"""How formats travel with the adjacency.

Decision (recorded in docs/architecture.md): the carrier is the adjacency
tensor itself.

* :class:`TCEdgeIndex` is a ``torch_geometric.EdgeIndex`` that also holds a
  :class:`~pyg_tc.formats.CSRGraph`. Transforms put one into
  ``data.edge_index`` without reordering the edges (so ``edge_attr`` and
  ``edge_weight`` stay aligned). The graph follows ``.to(device)``,
  ``.cuda()``, ``.clone()``, ``torch.save``/``torch.load`` and
  ``Data.to``. ``Batch.from_data_list`` yields a plain ``EdgeIndex`` (a batch
  is another graph); layers then build the batched graph's format on first
  use, on the GPU, and cache it on that tensor.
* A prefix slice of a sampled batch's ``TCEdgeIndex`` (PyG's
  ``trim_to_layer``: ``edge_index.narrow(1, 0, k)`` or ``edge_index[:, :k]``,
  same memory, same strides, offset 0; again sliced in the next layer) is a
  ``TCEdgeIndex`` that remembers the batch it came from: where ``k`` is a hop
  boundary its graph is derived from the batch's
  (:func:`~pyg_tc.formats.padding.trimmed`: no sort, no synchronisation,
  shared by forward, backward and every layer); elsewhere it is built from
  its edges as for any adjacency.
* Any other adjacency (plain ``edge_index``, ``EdgeIndex``, ``torch.sparse``
  CSR/CSC/COO ``adj_t``, ``SparseTensor``) gets its graph built on first use
  and cached on the tensor object, keyed by the tensor's version counter, the
  node counts and the device, so an in-place edit or a different node count
  never reuses stale metadata.

Limitation: the version counter only sees writes that autograd sees. A graph
changed behind it (through ``edge_index.data``, ``torch.no_grad`` writes to a
tensor's ``.data``, a numpy array sharing the memory (``torch.from_numpy``),
or another view's storage written by a C extension) keeps its old format and
is aggregated over the old edges. After such a write call
:func:`~pyg_tc.formats.clear_graph` on the tensor (or use a new tensor); a ``cached=True``
GCNConv also keeps its normalised graph until ``conv._cached_edge_index =
None`` (or ``reset_parameters()``), exactly like PyG's.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric import EdgeIndex, Index

from .csr import DEFAULT_CHUNK, CSRGraph, stale_error
from .padding import trimmed

_ATTR = '_pyg_tc_graph'  # an Entry
_DERIVED = '_pyg_tc_derived'  # {name: Entry}
_PREFIX = '_pyg_tc_prefix'  # a Prefix
aten = torch.ops.aten
_CARRY_OPS = (aten._to_copy.default, aten.clone.default, aten._pin_memory.default)

try:  # optional dependency
    from torch_sparse import SparseTensor  # type: ignore
except Exception:  # pragma: no cover
    SparseTensor = None


class Key(NamedTuple):
    """What a format carried by an adjacency was built for: the adjacency's
    version counter (in-place writes bump it), the node counts, the device
    and the flow. A format is used only for the same key."""

    version: int
    num_src: int
    num_dst: int
    device: torch.device
    flow: str

    def unversioned(self) -> tuple:
        """The key without the version (what ``torch.compile`` can compare)."""
        return tuple(self)[1:]


class Entry(NamedTuple):
    """A format carried by an adjacency: its :class:`~pyg_tc.formats.carrier.Key`
    and the value (a :class:`~pyg_tc.formats.CSRGraph`; for a ``torch.sparse``
    tensor ``(graph, values)``; for ``derived`` the derived format)."""

    key: 'Key'
    value: Any


class Prefix(NamedTuple):
    """Carried by a prefix slice of a sampled batch's ``edge_index``: the
    batch's :class:`TCEdgeIndex` and its version then, the slice's edge count
    and its own version then."""

    root: Any
    root_version: int
    num_edges: int
    version: int


def graph_of(adj: Any) -> Optional[CSRGraph]:
    """The :class:`~pyg_tc.formats.CSRGraph` an adjacency carries for the default flow (a
    :class:`TCEdgeIndex`'s, or one cached by an earlier call), else None;
    builds nothing and checks nothing."""
    entry = getattr(adj, _ATTR, None)
    return None if entry is None else entry.value


class TCEdgeIndex(EdgeIndex):
    """An ``EdgeIndex`` carrying a pyg_tc :class:`CSRGraph` (see module doc)."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        out = EdgeIndex.__torch_dispatch__.__func__(EdgeIndex, func, types, args, kwargs)
        if func in _CARRY_OPS and isinstance(out, EdgeIndex):
            entry = getattr(args[0], _ATTR, None)
            if entry is not None:
                out.__class__ = TCEdgeIndex
                key = entry.key._replace(version=out._version, device=out.device)
                setattr(out, _ATTR, Entry(key, entry.value.to(out.device)))
        elif func is aten.slice.Tensor and isinstance(out, EdgeIndex):
            _mark_prefix(args[0], out)
        return out


def _mark_prefix(src: Any, out: EdgeIndex) -> None:
    """Records on ``out``, a slice of ``src``, the sampled batch whose edges
    it is a prefix of (see the module doc): ``src`` is the batch's
    ``TCEdgeIndex`` (its graph has a hop structure) or a prefix of it, both
    unchanged since, and ``out`` has the batch's memory and strides at its
    offset (``edge_index.narrow(1, 0, k)``, ``edge_index[:, :k]``, a no-op
    slice)."""
    if torch.compiler.is_compiling():
        return
    rec = getattr(src, _PREFIX, None)
    if rec is not None:
        root, version = rec.root, rec.root_version
        if rec.version != src._version:
            return
    else:
        entry = getattr(src, _ATTR, None)
        if entry is None or entry.value.sampled_hops is None:
            return
        root, version = src, entry.key.version
    if root._version != version:
        return
    a, b = plain_tensor(root), plain_tensor(out)
    if (
        b.dim() != 2
        or b.size(0) != 2
        or b.size(1) > a.size(1)
        or b.device != a.device
        or b.data_ptr() != a.data_ptr()
        or b.stride() != a.stride()
    ):
        return
    out.__class__ = TCEdgeIndex
    setattr(out, _PREFIX, Prefix(root, version, b.size(1), out._version))


def _trimmed_graph(adj: Any, num_src: int, num_dst: int) -> Optional[CSRGraph]:
    """The graph of a prefix slice of a sampled batch (:func:`_mark_prefix`)
    with these node counts, derived from the batch's graph
    (:func:`~pyg_tc.formats.padding.trimmed`), or None (not such a slice, changed since, or
    not a hop boundary)."""
    rec = getattr(adj, _PREFIX, None)
    if rec is None:
        return None
    entry = getattr(rec.root, _ATTR, None)
    if (
        entry is None
        or rec.root._version != rec.root_version
        or entry.key.version != rec.root_version
        or adj._version != rec.version
        or adj.size(1) != rec.num_edges
        or entry.key.device != adj.device
    ):
        return None
    return trimmed(entry.value, rec.num_edges, num_dst, num_src)


def plain_tensor(t: Any) -> Any:
    """The plain ``torch.Tensor`` under a PyG ``EdgeIndex`` / ``Index``
    (zero-copy); anything else unchanged. ``as_subclass(Tensor)`` does not
    strip these wrapper subclasses, and their arithmetic fails on tensors of
    0 or 1 elements, so formats never hold them."""
    return t.as_tensor() if isinstance(t, (EdgeIndex, Index)) else t


def _key(t: Any, num_src: int, num_dst: int, flow: str) -> Key:
    dev = t.device() if callable(getattr(t, 'device', None)) else t.device
    return Key(getattr(t, '_version', 0), num_src, num_dst, dev, flow)


def _attr(flow: str) -> str:
    # One slot per flow, so a target_to_source call never replaces the graph
    # a transform attached for the default flow.
    return _ATTR if flow == 'source_to_target' else _ATTR + '_t2s'


def _matches(entry: Entry, key: Key) -> bool:
    # Under torch.compile the version counter is not traceable; the format
    # found at trace time is used (Dynamo guards on the tensor object).
    if torch.compiler.is_compiling():
        return entry.key.unversioned() == key.unversioned()
    return entry.key == key


def _cached(t: Any, key: Key) -> Optional[CSRGraph]:
    entry = getattr(t, _attr(key.flow), None)
    return entry.value if entry is not None and _matches(entry, key) else None


def _store(t: Any, key: Key, graph: CSRGraph) -> None:
    try:
        setattr(t, _attr(key.flow), Entry(key, graph))
    except (AttributeError, TypeError):  # pragma: no cover - objects without __dict__
        pass


def clear_graph(adj: Any) -> None:
    """Forget the formats cached on (or attached to) ``adj``, for both flows;
    the next call builds them again from the current edges. Needed only after
    a write the version counter does not see (see the module doc)."""
    for name in (_ATTR, _ATTR + '_t2s', _DERIVED, _PREFIX):
        if hasattr(adj, name):
            delattr(adj, name)
    if isinstance(adj, TCEdgeIndex):
        adj.__class__ = EdgeIndex


def has_graph(adj: Any, flow: str = 'source_to_target') -> bool:
    """Whether ``adj`` is a :class:`CSRGraph` or carries one for ``flow``
    (from a transform or an earlier call), without building anything."""
    return (
        isinstance(adj, CSRGraph)
        or getattr(adj, _attr(flow), None) is not None
        or (isinstance(adj, Tensor) and adj.layout != torch.strided and hasattr(adj, _ATTR))
    )


def derived(adj: Tensor, num_src: int, num_dst: int, flow: str, name: Any, build: Optional[Any] = None) -> Any:
    """A format derived straight from a plain ``edge_index``'s edges (e.g.
    GAT's graph with one self loop per node), cached on the tensor under
    ``name`` with the staleness key of :func:`get_graph` (version, node
    counts, device, flow), so a layer that needs only the derived graph never
    keeps the plain one alive. ``build()`` makes it when missing (None:
    lookup only, returns None when missing; under ``torch.compile`` nothing
    is built)."""
    key = _key(adj, num_src, num_dst, flow)
    store = getattr(adj, _DERIVED, None)
    entry = None if store is None else store.get(name)
    if entry is not None and _matches(entry, key):
        return entry.value
    if build is None or torch.compiler.is_compiling():
        return None
    value = build()
    if store is None:
        store = {}
        try:
            setattr(adj, _DERIVED, store)
        except (AttributeError, TypeError):  # pragma: no cover - objects without __dict__
            return value
    store[name] = Entry(key, value)
    return value


def format_bytes(adj: Any) -> int:
    """Bytes of the pyg_tc formats cached on (or attached to) ``adj``: its
    graphs, their memoised structures and derived formats (each storage
    counted once); for memory reports."""
    seen, visited, total = set(), set(), 0

    def walk(obj: Any) -> None:
        nonlocal total
        if obj is None or id(obj) in visited:
            return
        visited.add(id(obj))
        if isinstance(obj, Tensor):
            if obj.layout != torch.strided:
                return
            st = obj.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                total += st.nbytes()
        elif isinstance(obj, (tuple, list)):
            for v in obj:
                walk(v)
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v)
        elif hasattr(obj, '__dict__') and type(obj).__module__.startswith('pyg_tc'):
            walk(vars(obj))

    for name in (_ATTR, _ATTR + '_t2s', _DERIVED):
        walk(getattr(adj, name, None))
    if isinstance(adj, CSRGraph):
        walk(adj)
    return total


def has_derived(adj: Any) -> bool:
    """Whether ``adj`` carries any derived format (:func:`derived`)."""
    return getattr(adj, _DERIVED, None) is not None


def attach(
    edge_index: Tensor,
    num_nodes: Union[None, int, Tuple[int, int]] = None,
    graph: Optional[CSRGraph] = None,
    chunk: Optional[int] = DEFAULT_CHUNK,
    sort_order: Optional[str] = None,
) -> TCEdgeIndex:
    """Wrap ``edge_index`` (edge order unchanged) as a :class:`TCEdgeIndex`
    carrying its graph; builds the graph on ``edge_index``'s device if needed.
    ``num_nodes``: the node count, or ``(sources, targets)`` of a bipartite
    graph (an edge type of a heterogeneous graph). ``sort_order``
    (``'row'`` / ``'col'``) declares an order the edges are already in, as
    ``EdgeIndex`` does (not checked)."""
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError('pyg_tc: edge_index must be a [2, E] tensor')
    if num_nodes is None:
        num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 0
    num_src, num_dst = (int(num_nodes[0]), int(num_nodes[1])) if isinstance(num_nodes, tuple) else (num_nodes,) * 2
    data = plain_tensor(edge_index)
    ei = EdgeIndex(data.contiguous(), sparse_size=(num_src, num_dst), sort_order=sort_order)
    if graph is None:
        graph = CSRGraph.from_coo(data[0], data[1], num_src, num_dst, chunk)
    ei.__class__ = TCEdgeIndex
    setattr(ei, _ATTR, Entry(_key(ei, num_src, num_dst, 'source_to_target'), graph))
    return ei


def get_graph(
    adj: Any,
    size: Optional[Tuple[Optional[int], Optional[int]]] = None,
    flow: str = 'source_to_target',
    chunk: Optional[int] = DEFAULT_CHUNK,
) -> Tuple[CSRGraph, Optional[Tensor]]:
    """The :class:`CSRGraph` of any PyG adjacency, and its edge values in CSR
    order (sparse inputs with values) or None.

    ``size`` is PyG's: the node counts of ``edge_index[0]`` and
    ``edge_index[1]`` (``(num_src, num_dst)`` for ``flow='source_to_target'``,
    ``(num_dst, num_src)`` for ``'target_to_source'``, which aggregates along
    reversed edges); missing entries come from an ``EdgeIndex``'s sparse size,
    else the largest index + 1. Sparse adjacencies (``adj_t``, rows =
    targets) carry their own size, and ``flow`` does not apply to them.
    """
    if flow not in ('source_to_target', 'target_to_source'):
        raise ValueError(f"pyg_tc: flow must be 'source_to_target' or 'target_to_source', got {flow!r}")
    if isinstance(adj, CSRGraph):
        return adj, None
    num_src, num_dst = size if size is not None else (None, None)

    # Sparse inputs are adj_t (rows = targets): like PyG, they always aggregate
    # along rows and `flow` does not apply to them.
    if SparseTensor is not None and isinstance(adj, SparseTensor):
        rowptr, col, value = adj.csr()
        R, C = adj.sparse_sizes()
        key = _key(col, C, R, flow)
        g = _cached(adj, key)
        if g is None:
            g = CSRGraph.from_csr(rowptr, col, C, chunk)
            _store(adj, key, g)
        return g, value

    if (
        isinstance(adj, Tensor)
        and adj.is_sparse
        or (isinstance(adj, Tensor) and adj.layout in (torch.sparse_csr, torch.sparse_csc))
    ):
        R, C = adj.size(0), adj.size(1)
        key = _key(adj, C, R, flow)
        entry = getattr(adj, _ATTR, None)
        if entry is not None and entry.key == key:
            return entry.value
        if adj.layout == torch.sparse_csc:
            csr = adj.to_sparse_csr()
        elif adj.layout == torch.sparse_coo:
            csr = adj.coalesce().to_sparse_csr()
        else:
            csr = adj
        g = CSRGraph.from_csr(csr.crow_indices(), csr.col_indices(), C, chunk)
        value = csr.values()
        try:
            setattr(adj, _ATTR, Entry(key, (g, value)))
        except (AttributeError, TypeError):  # pragma: no cover
            pass
        return g, value

    if not isinstance(adj, Tensor) or adj.dim() != 2 or adj.size(0) != 2:
        raise ValueError(
            'pyg_tc: adjacency must be an edge_index [2, E] tensor, EdgeIndex, torch.sparse '
            f'tensor, SparseTensor or CSRGraph; got {type(adj).__name__}'
            + (f' of shape {tuple(adj.shape)}' if isinstance(adj, Tensor) else '')
        )
    if adj.dtype not in (torch.int32, torch.int64):
        raise TypeError(f'pyg_tc: edge_index must be int32 or int64, got {adj.dtype}')
    if isinstance(adj, EdgeIndex):
        s0, s1 = adj.sparse_size()
        num_src = num_src if num_src is not None else s0
        num_dst = num_dst if num_dst is not None else s1
    if num_src is None or num_dst is None:
        n = int(adj.max()) + 1 if adj.numel() else 0
        num_src = n if num_src is None else num_src
        num_dst = n if num_dst is None else num_dst
    if flow == 'target_to_source':
        num_src, num_dst = num_dst, num_src
    key = _key(adj, num_src, num_dst, flow)
    g = _cached(adj, key)
    if g is None and torch.compiler.is_compiling():
        raise RuntimeError(
            'pyg_tc: under torch.compile the graph format must exist before '
            'tracing: run the model once eagerly or apply DegreeBucketTransform'
        )
    if g is None:
        entry = getattr(adj, _ATTR, None)
        if isinstance(adj, TCEdgeIndex) and entry is not None and flow == 'source_to_target':
            built = entry.key
            raise stale_error(
                'graph',
                {
                    'source nodes': (built.num_src, num_src),
                    'target nodes': (built.num_dst, num_dst),
                    'device': (built.device, adj.device),
                },
                'the format attached to this edge_index is for another graph: re-apply the transform',
            )
        trim = flow == 'source_to_target' and chunk == DEFAULT_CHUNK
        g = _trimmed_graph(adj, num_src, num_dst) if trim else None
        if g is None:
            data = plain_tensor(adj)
            src, dst = (data[0], data[1]) if flow == 'source_to_target' else (data[1], data[0])
            g = CSRGraph.from_coo(src, dst, num_src, num_dst, chunk)
        _store(adj, key, g)
    return g, None


def csr_order(v: Optional[Tensor], g: CSRGraph) -> Optional[Tensor]:
    """Per-edge values ``v`` (``[E]`` or ``[E, 1]``, in the order of the
    adjacency's edges) in ``g``'s CSR order."""
    if v is None or g.perm is None:
        return v
    if v.dim() == 2 and v.size(1) == 1:
        v = v.view(-1)
    if v.dim() != 1 or v.numel() != g.num_edges:
        raise ValueError(
            f'pyg_tc: edge_weight must have one entry per edge ({g.num_edges}), got shape {tuple(v.shape)}'
        )
    return v.index_select(0, g.perm)


def resolve(
    adj: Any,
    size: Optional[Tuple[Optional[int], Optional[int]]] = None,
    flow: str = 'source_to_target',
    edge_weight: Optional[Tensor] = None,
) -> Tuple[CSRGraph, Optional[Tensor]]:
    """The one helper between an adjacency and the ops: the
    :class:`CSRGraph` of ``adj`` (:func:`get_graph`) and its edge values in
    CSR order: a sparse adjacency's own values, or ``edge_weight`` (given in
    the order of ``adj``'s edges), not both."""
    g, value = get_graph(adj, size=size, flow=flow)
    if edge_weight is not None:
        if value is not None:
            raise ValueError('pyg_tc: pass edge weights either in the sparse tensor or as edge_weight')
        value = csr_order(edge_weight, g)
    return g, value
