"""Static-shape mini-batches: each batch padded to one of a few buckets of
(nodes, edges), so a CUDA graph captured per bucket (:class:`~pyg_tc.capture.CapturedStep`)
or a ``torch.compile``-d model serves every batch.

A padded batch (:class:`PadToBuckets`) keeps PyG's layout and adds:

* rows ``n .. bucket.num_nodes - 1`` after the real ones (seeds first, as
  before): zero features, label 0 (``y``), ``n_id`` 0; at least one padded row
  always (the padding edges need a row of their own);
* edge slots ``E .. bucket.num_edges - 1``: in ``edge_index`` loops of the last
  padded row, in pyg_tc's CSR past the last row's end (no kernel reads them;
  padded rows have no in-edges, so their aggregation is 0), zero edge
  attributes, ``e_id`` 0;
* ``input_id`` padded with zeros to ``seed_capacity`` entries;
* ``node_mask`` (bool, one per row: real or not), ``seed_mask`` (bool, one per
  seed slot ``0 .. seed_capacity - 1``: a real seed or not; the last batch of
  an epoch has fewer), ``seed_capacity`` (int, the loader's ``batch_size``),
  ``num_real_nodes``, ``num_real_edges`` and ``bucket`` (a batch larger than
  every bucket keeps its shape, with no ``bucket`` (``batch.get("bucket")`` is None) and no masks).

``batch_size``, ``num_sampled_nodes`` and ``num_sampled_edges`` keep their
real values (PyG's meaning). A loss over the seeds with a static shape:
:func:`~pyg_tc.capture.seed_loss`. Padding applies to homogeneous batches whose
``edge_index`` carries pyg_tc's CSR (:class:`pyg_tc.loader.NeighborLoader`'s);
a batch larger than every bucket comes back unpadded (``bucket`` None), and
:class:`~pyg_tc.capture.CapturedStep` runs it eagerly.

Decision: :class:`PadToBuckets`' buckets bound the batch's totals (nodes,
edges): a padded batch is aggregated whole, in one kernel per layer, and
its hop structure is lost. For PyG's ``trim_to_layer`` (layer ``i`` drops the
last ``i`` hops: about 40% less GPU time for a products-shaped 3-layer SAGE
step), :class:`PadHops` pads hop by hop instead (:class:`HopBucket`: rows and
edge slots per hop; each hop's real entries first, then its padding; the
padding edges of a hop join the last padded rows of two consecutive blocks,
so the CSR remains an ordinary graph sorted by target and each layer's
trimmed graph is derived from it with static shapes;
:func:`pyg_tc.formats.padding.pad_hops`). Both kinds cost one captured
graph per bucket. Buckets come from measured batches (:func:`~pyg_tc.transforms.buckets_from_batches`:
the mean plus ``sigma`` standard deviations of ``num_batches`` batches, as
NVIDIA's MLPerf GNN code sizes its padded batches) or from the fan-out bounds
(:func:`~pyg_tc.transforms.buckets_from_fanouts`: never exceeded, but large).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.transforms import BaseTransform

from ..formats.carrier import attach, resolve
from ..formats.loops import pad_loop_graph
from ..formats import padding


class Bucket(NamedTuple):
    """The static shape of a padded batch.

    Args:
        num_nodes (int): rows of every padded batch (more than its real
            nodes: one padded row at least).
        num_edges (int): edge slots of every padded batch.
    """

    num_nodes: int
    num_edges: int

    def fits(self, num_nodes: int, num_edges: int) -> bool:
        """Whether a batch of ``num_nodes`` and ``num_edges`` pads to this
        bucket (one padded row at least)."""
        return num_nodes < self.num_nodes and num_edges <= self.num_edges


class HeteroBucket(NamedTuple):
    """The static shape of a padded heterogeneous batch
    (:class:`PadToBuckets` on ``HeteroData``): rows per node type, edge
    slots per edge type.

    Args:
        num_nodes (Tuple[Tuple[str, int], ...]): ``(node type, rows)`` for
            every node type (more rows than its real nodes: one padded row
            at least).
        num_edges (Tuple[Tuple[Tuple[str, str, str], int], ...]):
            ``(edge type, edge slots)`` for every edge type.
    """

    num_nodes: Tuple[Tuple[str, int], ...]
    num_edges: Tuple[Tuple[Tuple[str, str, str], int], ...]

    @property
    def nodes(self) -> Dict[str, int]:
        """Rows per node type."""
        return {t: int(n) for t, n in self.num_nodes}

    @property
    def edges(self) -> Dict[Tuple[str, str, str], int]:
        """Edge slots per edge type."""
        return {tuple(e): int(n) for e, n in self.num_edges}

    @property
    def total_nodes(self) -> int:
        """Rows of every batch of this bucket, over all node types."""
        return sum(n for _, n in self.num_nodes)

    @property
    def total_edges(self) -> int:
        """Edge slots of every batch of this bucket, over all edge types."""
        return sum(n for _, n in self.num_edges)

    def fits(self, num_nodes: Mapping[str, int], num_edges: Mapping[Tuple[str, str, str], int]) -> bool:
        """Whether a batch of these node counts per node type and edge counts
        per edge type pads to this bucket: the same types, fewer nodes than
        rows in every node type (a padded row at least), no more edges than
        slots in every edge type."""
        nodes, edges = self.nodes, self.edges
        return (
            set(num_nodes) == set(nodes)
            and set(num_edges) == set(edges)
            and all(n < nodes[t] for t, n in num_nodes.items())
            and all(e <= edges[k] for k, e in num_edges.items())
        )


def _hetero_sizes(batch: HeteroData) -> Tuple[Dict[str, int], Dict[Tuple[str, str, str], int]]:
    """Nodes per node type and edges per edge type of a heterogeneous batch."""
    return (
        {t: int(batch[t].num_nodes or 0) for t in batch.node_types},
        {e: int(batch[e].edge_index.size(1)) for e in batch.edge_types},
    )


def _round_up(v: float, multiple: int) -> int:
    return int(math.ceil(max(v, 1) / multiple) * multiple)


def _sizes(batch: Data) -> tuple:
    return int(batch.num_nodes), int(batch.edge_index.size(1))


def buckets_from_batches(
    batches: Iterable[Data],
    num_batches: int = 20,
    sigma: float = 5.0,
    levels: int = 1,
    node_multiple: int = 256,
    edge_multiple: int = 1024,
    per_hop: bool = False,
) -> Union[List[Bucket], List['HopBucket'], List[HeteroBucket], List['HeteroHopBucket']]:
    """Buckets from measured batches: their node and edge counts' mean plus
    ``sigma`` standard deviations (then one more row), rounded up.

    Args:
        batches (Iterable[torch_geometric.data.Data or torch_geometric.data.HeteroData]): a
            loader (or any iterable of batches);
            its first ``num_batches`` are measured (at least 2).
        num_batches (int, optional): batches measured (default 20).
        sigma (float, optional): standard deviations above the mean
            (default 5.0, as NVIDIA's MLPerf GNN code).
        levels (int, optional): buckets returned; above 1, smaller ones
            evenly spaced between the smallest batch seen and the bound (for
            the short last batch of an epoch, which otherwise pads to the full
            size). Default 1.
        node_multiple (int, optional): nodes rounded up to a multiple of it.
        edge_multiple (int, optional): edges rounded up to a multiple of it.
        per_hop (bool, optional): per-hop buckets (:class:`HopBucket`, for
            :class:`PadHops`): each hop's nodes and edges measured and
            bounded alike (one padded row per hop); the seed block holds the
            most seeds seen plus one row (the loader's ``batch_size + 1``).

    Heterogeneous batches (``HeteroData``) give :class:`HeteroBucket` shapes
    (:class:`HeteroHopBucket` with ``per_hop``): every node type's nodes and
    every edge type's edges (per hop) measured and bounded alike (one padded
    row per node type and hop).

    Returns the buckets, smallest first."""
    if num_batches < 2:
        raise ValueError(f'pyg_tc: buckets_from_batches needs at least 2 batches, got num_batches={num_batches}')
    if levels < 1:
        raise ValueError(f'pyg_tc: levels must be >= 1, got {levels}')
    sizes = []
    for i, b in enumerate(batches):
        if i == num_batches:
            break
        if isinstance(b, HeteroData):
            sizes.append((_hetero_hop_sizes(b) if per_hop else _hetero_sizes(b)) + ('hetero',))
        else:
            sizes.append(_hop_sizes(b) if per_hop else _sizes(b))
    if len(sizes) < 2:
        raise ValueError(f'pyg_tc: buckets_from_batches saw {len(sizes)} batch(es); it needs at least 2')
    if sizes[0][-1] == 'hetero':
        sizes = [z[:2] for z in sizes]
        make = _hetero_hop_buckets if per_hop else _hetero_buckets
        return make(sizes, sigma, levels, node_multiple, edge_multiple)
    if per_hop:
        return _hop_buckets(sizes, sigma, levels, node_multiple, edge_multiple)
    t = torch.tensor(sizes, dtype=torch.float64)
    top = t.mean(0) + sigma * t.std(0)
    top_n = _round_up(top[0].item() + 1, node_multiple)
    top_e = _round_up(top[1].item(), edge_multiple)
    if levels == 1:
        return [Bucket(top_n, top_e)]
    low = t.min(0).values
    out = []
    for k in range(1, levels + 1):
        f = k / levels
        out.append(
            Bucket(
                _round_up(low[0].item() + 1 + f * (top_n - low[0].item() - 1), node_multiple),
                _round_up(low[1].item() + f * (top_e - low[1].item()), edge_multiple),
            )
        )
    return sorted(set(out))


def _hetero_buckets(
    sizes: list, sigma: float, levels: int, node_multiple: int, edge_multiple: int
) -> List[HeteroBucket]:
    """:func:`buckets_from_batches`'s buckets of heterogeneous batches from
    measured ``(nodes per node type, edges per edge type)``."""
    node_types, edge_types = list(sizes[0][0]), list(sizes[0][1])
    if any(list(n) != node_types or list(e) != edge_types for n, e in sizes):
        raise ValueError('pyg_tc: the measured batches have different node or edge types')
    t = torch.tensor([[n[k] for k in node_types] + [e[k] for k in edge_types] for n, e in sizes], dtype=torch.float64)
    top = (t.mean(0) + sigma * t.std(0)).tolist()
    low = t.min(0).values.tolist()
    T = len(node_types)

    def bucket(f: float) -> HeteroBucket:
        def at(i: int, extra: int, multiple: int) -> int:
            hi = _round_up(top[i] + extra, multiple)
            return _round_up(low[i] + extra + f * (hi - low[i] - extra), multiple)

        return HeteroBucket(
            tuple((k, at(i, 1, node_multiple)) for i, k in enumerate(node_types)),
            tuple((k, at(T + i, 0, edge_multiple)) for i, k in enumerate(edge_types)),
        )

    out = {bucket(k / levels) for k in range(1, levels + 1)}
    return sorted(out, key=lambda b: (b.total_edges, b.total_nodes, b))


def buckets_from_fanouts(
    batch_size: int, num_neighbors: Sequence[int], num_nodes: int, node_multiple: int = 256, edge_multiple: int = 1024
) -> List[Bucket]:
    """The one bucket no batch exceeds (large: every node and hop at its
    full fan-out).

    Args:
        batch_size (int): seeds per batch.
        num_neighbors (Sequence[int]): fan-out per hop (each ``>= 0``; ``-1``
            has no bound).
        num_nodes (int): the graph's nodes (no batch has more).
        node_multiple (int, optional): nodes rounded up to a multiple of it.
        edge_multiple (int, optional): edges rounded up to a multiple of it.
    """
    if any(k < 0 for k in num_neighbors):
        raise ValueError('pyg_tc: buckets_from_fanouts needs fan-outs >= 0 (-1, all neighbours, has no bound)')
    frontier, nodes, edges = batch_size, batch_size, 0
    for k in num_neighbors:
        edges += frontier * k
        frontier = min(frontier * k, num_nodes)
        nodes += frontier
    nodes = min(nodes, num_nodes)
    return [Bucket(_round_up(nodes + 1, node_multiple), _round_up(edges, edge_multiple))]


def _pad_rows(t: Tensor, rows: int, dim: int = 0) -> Tensor:
    """``t`` with zero rows appended along ``dim`` up to ``rows``."""
    extra = rows - t.size(dim)
    if extra == 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t, t.new_zeros(shape)], dim)


def _pad_attributes(
    batch: Any,
    pad_nodes: Callable[[Tensor, int], Tensor],
    pad_edges: Callable[[Tensor, int], Tensor],
    seed_capacity: int,
    num_nodes: int,
    num_edges: int,
    store: Any = None,
) -> None:
    """Pads the tensor attributes of ``batch``'s ``store`` (default: a
    ``Data``'s own) in place: node attributes with ``pad_nodes(value,
    cat_dim)``, edge attributes with ``pad_edges``, and the per-seed
    ``input_id`` / ``seed_time`` to ``seed_capacity`` entries. A tensor is a
    node or edge attribute by PyG's rule (``is_node_attr`` / ``is_edge_attr``
    of a ``Data``: its size along its cat dimension is the batch's
    ``num_nodes`` or ``num_edges``; a tie goes to the edges when ``'edge'`` is
    in the key), applied with the counts the caller knows (-1: the store
    has none of that kind)."""
    store = batch._store if store is None else store
    for key, value in list(store.items()):
        if key in ('edge_index', 'num_nodes') or not isinstance(value, Tensor) or value.dim() == 0:
            continue
        dim = batch.__cat_dim__(key, value, store)
        if not isinstance(dim, int):
            continue
        size = value.size(dim)
        if size == num_nodes and (num_nodes != num_edges or 'edge' not in key):
            store[key] = pad_nodes(value, dim)
        elif size == num_edges:
            store[key] = pad_edges(value, dim)
    for key in ('input_id', 'seed_time'):  # one entry per seed: seed_capacity of them
        value = store.get(key)
        if isinstance(value, Tensor) and value.dim() >= 1 and value.size(0) <= seed_capacity:
            store[key] = _pad_rows(value, seed_capacity)


def _first_fit(buckets: Sequence[Any], num_nodes: Any, num_edges: Any) -> Optional[Any]:
    """The first of ``buckets`` (sorted smallest first) a batch of these
    counts fits, or None."""
    return next((b for b in buckets if b.fits(num_nodes, num_edges)), None)


class PadToBuckets(BaseTransform):
    r"""Pads each mini-batch to the smallest bucket it fits (see the module
    doc): ``NeighborLoader(..., transform=PadToBuckets(buckets, batch_size))``.

    Heterogeneous batches (``HeteroData`` from
    :class:`pyg_tc.loader.NeighborLoader`) are padded to
    :class:`HeteroBucket` shapes: each node type to its rows (zero features,
    label 0, ``n_id`` 0; ``node_mask`` per node type), each edge type to its
    slots (padding edges from the last padded row of the source type to the
    last padded row of the target type, past the end of the CSR, so no real
    row reads them). The seeds' node type (the one with ``batch_size``) gets
    ``seed_mask`` and ``seed_capacity``; every type records its real
    ``num_real_nodes`` / ``num_real_edges``; ``bucket`` is a global
    attribute. :func:`~pyg_tc.capture.seed_loss` and
    :class:`~pyg_tc.capture.CapturedStep` take such batches (the model's
    output for the seeds' node type)::

        loader = pyg_tc.loader.NeighborLoader(data, [15, 10, 5], batch_size=1024,
                                              input_nodes=('paper', train))
        loader.transform = PadToBuckets(buckets_from_batches(loader), seed_capacity=1024)

    Args:
        buckets (List[Bucket] or List[Tuple[int, int]] or List[HeteroBucket]):
            the (nodes, edges) shapes, e.g. from
            :func:`~pyg_tc.transforms.buckets_from_batches`.
        seed_capacity (int): the loader's ``batch_size`` (the seed rows
            every padded batch reserves).
        self_loops (bool, optional): also build the padded self-loop graph
            that ``GATConv`` / ``GATv2Conv`` (``add_self_loops=True``) use
            (``pyg_tc.formats.loops.pad_loop_graph``) with the batch, instead
            of the layers deriving it inside the step (on the device, without
            synchronisation, either way) (default: False).
    """

    def __init__(
        self, buckets: Sequence[Union[Sequence[int], HeteroBucket]], seed_capacity: int, self_loops: bool = False
    ):
        bs = list(buckets)
        if not bs:
            raise ValueError('pyg_tc: PadToBuckets needs at least one bucket')
        self.hetero = isinstance(bs[0], HeteroBucket)
        if any(isinstance(b, HeteroBucket) != self.hetero for b in bs):
            raise ValueError('pyg_tc: PadToBuckets takes buckets of one kind (Bucket or HeteroBucket)')
        if self.hetero:
            bs = sorted(set(bs), key=lambda b: (b.total_edges, b.total_nodes, b))
        else:
            bs = sorted(Bucket(int(n), int(e)) for n, e in bs)
            for b in bs:
                if b.num_nodes <= seed_capacity:
                    raise ValueError(f'pyg_tc: bucket {tuple(b)} has no more rows than the {seed_capacity} seeds')
        self.buckets, self.seed_capacity, self.self_loops = bs, int(seed_capacity), bool(self_loops)

    def bucket_for(self, num_nodes: Any, num_edges: Any) -> Optional[Union[Bucket, HeteroBucket]]:
        """The smallest bucket a batch fits, or None (heterogeneous: counts
        per node type and per edge type, as dictionaries)."""
        return _first_fit(self.buckets, num_nodes, num_edges)

    def forward(self, batch: Union[Data, HeteroData]) -> Union[Data, HeteroData]:
        """``batch`` padded to its bucket (in place; see the module doc), or
        with only ``seed_capacity`` and the real counts added when it fits
        none."""
        if isinstance(batch, HeteroData) and self.hetero:
            return self._pad_hetero(batch)
        if not isinstance(batch, Data) or self.hetero:
            raise TypeError(
                f'pyg_tc: PadToBuckets with {"HeteroBucket" if self.hetero else "Bucket"}s pads '
                f'{"HeteroData" if self.hetero else "Data"} batches, got {type(batch).__name__}'
            )
        n, E = _sizes(batch)
        B = int(batch.batch_size) if 'batch_size' in batch else n
        if B > self.seed_capacity:
            raise ValueError(f'pyg_tc: the batch has {B} seeds but seed_capacity is {self.seed_capacity}')
        bucket = self.bucket_for(n, E)
        batch.seed_capacity = self.seed_capacity
        batch.num_real_nodes, batch.num_real_edges = n, E
        dev = batch.edge_index.device
        batch.bucket = bucket
        if bucket is None:  # larger than every bucket: as it came (an eager step)
            return batch
        N, P = bucket
        g, _ = resolve(batch.edge_index, size=(n, n))
        if g.perm is not None:
            raise ValueError(
                'pyg_tc: PadToBuckets needs batches whose edges are in CSR order (pyg_tc.loader.NeighborLoader\'s)'
            )
        pg = padding.pad(g, N, P)
        if self.self_loops:
            pad_loop_graph(pg)
        _pad_attributes(
            batch, lambda v, d: _pad_rows(v, N, d), lambda v, d: _pad_rows(v, P, d), self.seed_capacity, n, E
        )
        ei = batch.edge_index.as_tensor() if hasattr(batch.edge_index, 'as_tensor') else batch.edge_index
        ei = torch.cat([ei, ei.new_full((2, P - E), N - 1)], 1)
        batch.edge_index = attach(ei, N, pg, sort_order='col')
        batch.num_nodes = N
        batch.node_mask = torch.arange(N, device=dev) < n
        batch.seed_mask = torch.arange(self.seed_capacity, device=dev) < B
        return batch

    def _pad_hetero(self, batch: HeteroData) -> HeteroData:
        """A heterogeneous batch padded to its :class:`HeteroBucket` (in
        place): every node type's attributes to its rows, every edge type's
        ``edge_index``, CSR and attributes to its slots; ``node_mask`` per
        node type; ``seed_mask`` and ``seed_capacity`` on the seeds' node
        type (the one with ``batch_size``); the real counts in
        ``num_real_nodes`` / ``num_real_edges`` per type; ``bucket`` global."""
        ns, es = _hetero_sizes(batch)
        seeds = _seed_types(batch, self.seed_capacity)
        for t, n in ns.items():
            batch[t].num_real_nodes = n
        for e, E in es.items():
            batch[e].num_real_edges = E
        bucket = self.bucket_for(ns, es)
        batch.bucket = bucket
        if bucket is None:  # larger than every bucket: as it came (an eager step)
            return batch
        N, P = bucket.nodes, bucket.edges
        _check_seed_rows(bucket, {t: N[t] for t in seeds}, self.seed_capacity)
        for e in batch.edge_types:
            src, _, dst = e
            store, n_src, n_dst = batch[e], ns[src], ns[dst]
            ei = store.edge_index
            g, _ = resolve(ei, size=(n_src, n_dst))
            if g.perm is not None:
                raise ValueError(
                    f"pyg_tc: PadToBuckets needs batches whose edges are in CSR order (pyg_tc.loader.NeighborLoader's); "
                    f'edge type {e} is not'
                )
            pg = padding.pad(g, N[dst], P[e], num_cols=N[src])
            if self.self_loops and src == dst:
                pad_loop_graph(pg)
            _pad_attributes(batch, None, lambda v, d: _pad_rows(v, P[e], d), self.seed_capacity, -1, es[e], store)
            plain = ei.as_tensor() if hasattr(ei, 'as_tensor') else ei
            fill = torch.tensor([[N[src] - 1], [N[dst] - 1]], dtype=plain.dtype, device=plain.device)
            plain = torch.cat([plain, fill.expand(2, P[e] - es[e])], 1)
            store.edge_index = attach(plain, (N[src], N[dst]), pg, sort_order='col')
        dev = _device_of(batch)
        for t in batch.node_types:
            store = batch[t]
            _pad_attributes(batch, lambda v, d: _pad_rows(v, N[t], d), None, self.seed_capacity, ns[t], -1, store)
            store.num_nodes = N[t]
            store.node_mask = torch.arange(N[t], device=dev) < ns[t]
            if t in seeds:
                store.seed_mask = torch.arange(self.seed_capacity, device=dev) < int(store.batch_size)
        return batch

    def __repr__(self) -> str:
        return f'{type(self).__name__}({[tuple(b) for b in self.buckets]}, seed_capacity={self.seed_capacity})'


def _seed_types(batch: HeteroData, seed_capacity: int) -> List[str]:
    """The node types holding seeds (those with ``batch_size``), each given
    ``seed_capacity`` after checking its seeds fit."""
    seeds = [t for t in batch.node_types if 'batch_size' in batch[t]]
    for t in seeds:
        if int(batch[t].batch_size) > seed_capacity:
            raise ValueError(
                f'pyg_tc: the batch has {int(batch[t].batch_size)} seeds of type {t!r} but seed_capacity is '
                f'{seed_capacity}'
            )
        batch[t].seed_capacity = seed_capacity
    return seeds


def _check_seed_rows(bucket: Any, rows: Dict[str, int], seed_capacity: int) -> None:
    """Raises where a bucket keeps no more seed rows of a node type than the
    seed slots (``rows``: the seed block's rows per seed type)."""
    for t, n in rows.items():
        if n <= seed_capacity:
            raise ValueError(
                f'pyg_tc: bucket {bucket} has no more seed rows of type {t!r} ({n}) than the {seed_capacity} seeds'
            )


def _device_of(batch: HeteroData) -> torch.device:
    """Where a heterogeneous batch's graph is (its first edge type's
    ``edge_index``; the CPU without edge types)."""
    for e in batch.edge_types:
        return batch[e].edge_index.device
    return torch.device('cpu')


class HopBucket(NamedTuple):
    """The static shape of a per-hop padded batch (:class:`PadHops`).

    Args:
        num_nodes (Tuple[int, ...]): rows per hop, ``N_0 .. N_L``: the seed
            block (more rows than the loader's ``batch_size``), then each
            hop's block; each keeps one padded row at least.
        num_edges (Tuple[int, ...]): edge slots per hop, ``P_1 .. P_L``.
    """

    num_nodes: Tuple[int, ...]
    num_edges: Tuple[int, ...]

    @property
    def total_nodes(self) -> int:
        """Rows of every batch of this bucket."""
        return sum(self.num_nodes)

    @property
    def total_edges(self) -> int:
        """Edge slots of every batch of this bucket."""
        return sum(self.num_edges)

    def fits(self, num_nodes: Sequence[int], num_edges: Sequence[int]) -> bool:
        """Whether a batch of these per-hop node and edge counts (PyG's
        ``num_sampled_nodes`` / ``num_sampled_edges``) pads to this bucket:
        as many hops, fewer nodes than rows in every hop (a padded row at
        least), no more edges than slots."""
        return (
            len(num_nodes) == len(self.num_nodes)
            and len(num_edges) == len(self.num_edges)
            and all(n < N for n, N in zip(num_nodes, self.num_nodes))
            and all(e <= P for e, P in zip(num_edges, self.num_edges))
        )


class HeteroHopBucket(NamedTuple):
    """The static shape of a per-hop padded heterogeneous batch
    (:class:`PadHops` on ``HeteroData``): rows per hop of every node type,
    edge slots per hop of every edge type.

    Args:
        num_nodes (Tuple[Tuple[str, Tuple[int, ...]], ...]): ``(node type,
            (N_0 .. N_L))`` for every node type: its rows per hop, each more
            than the hop's real nodes (one padded row at least).
        num_edges (Tuple[Tuple[Tuple[str, str, str], Tuple[int, ...]], ...]):
            ``(edge type, (P_1 .. P_L))`` for every edge type.
    """

    num_nodes: Tuple[Tuple[str, Tuple[int, ...]], ...]
    num_edges: Tuple[Tuple[Tuple[str, str, str], Tuple[int, ...]], ...]

    @property
    def nodes(self) -> Dict[str, List[int]]:
        """Rows per hop, per node type."""
        return {t: [int(v) for v in n] for t, n in self.num_nodes}

    @property
    def edges(self) -> Dict[Tuple[str, str, str], List[int]]:
        """Edge slots per hop, per edge type."""
        return {tuple(e): [int(v) for v in n] for e, n in self.num_edges}

    @property
    def total_nodes(self) -> int:
        """Rows of every batch of this bucket, over all node types."""
        return sum(sum(n) for _, n in self.num_nodes)

    @property
    def total_edges(self) -> int:
        """Edge slots of every batch of this bucket, over all edge types."""
        return sum(sum(n) for _, n in self.num_edges)

    def fits(
        self, num_nodes: Mapping[str, Sequence[int]], num_edges: Mapping[Tuple[str, str, str], Sequence[int]]
    ) -> bool:
        """Whether a batch of these per-hop counts (PyG's
        ``num_sampled_nodes_dict`` / ``num_sampled_edges_dict``) pads to this
        bucket: the same types and hops, fewer nodes than rows in every hop of
        every node type, no more edges than slots."""
        nodes, edges = self.nodes, self.edges
        return (
            set(num_nodes) == set(nodes)
            and set(num_edges) == set(edges)
            and all(HopBucket(tuple(nodes[t]), ()).fits(n, ()) for t, n in num_nodes.items())
            and all(len(v) == len(edges[k]) and all(a <= b for a, b in zip(v, edges[k])) for k, v in num_edges.items())
        )


def _hetero_hop_sizes(batch: HeteroData) -> tuple:
    """Per-hop node counts per node type and edge counts per edge type of a
    heterogeneous batch (PyG's ``num_sampled_nodes`` / ``num_sampled_edges``)."""
    try:
        ns = {t: tuple(int(v) for v in batch[t].num_sampled_nodes) for t in batch.node_types}
        es = {e: tuple(int(v) for v in batch[e].num_sampled_edges) for e in batch.edge_types}
    except (AttributeError, KeyError, TypeError):
        raise ValueError(
            'pyg_tc: per-hop padding needs batches with num_sampled_nodes and num_sampled_edges per type '
            "(pyg_tc.loader.NeighborLoader's)"
        ) from None
    return ns, es


def _hetero_hop_buckets(
    sizes: list, sigma: float, levels: int, node_multiple: int, edge_multiple: int
) -> List[HeteroHopBucket]:
    """:func:`buckets_from_batches`'s per-hop buckets of heterogeneous
    batches: every (type, hop) count measured and bounded alike; the seed
    block of a node type holds the most seeds seen plus one row."""
    node_types, edge_types = list(sizes[0][0]), list(sizes[0][1])
    shape = ([len(sizes[0][0][t]) for t in node_types], [len(sizes[0][1][e]) for e in edge_types])
    if any(list(n) != node_types or list(e) != edge_types for n, e in sizes) or any(
        ([len(n[t]) for t in node_types], [len(e[k]) for k in edge_types]) != shape for n, e in sizes
    ):
        raise ValueError('pyg_tc: the measured batches have different node types, edge types or hops')
    rows = [[v for t in node_types for v in n[t]] + [v for k in edge_types for v in e[k]] for n, e in sizes]
    t = torch.tensor(rows, dtype=torch.float64)
    top = (t.mean(0) + sigma * t.std(0)).tolist()
    low, high = t.min(0).values.tolist(), t.max(0).values.tolist()

    def bucket(f: float) -> HeteroHopBucket:
        def at(i: int, extra: int, multiple: int) -> int:
            hi = _round_up(top[i] + extra, multiple)
            return _round_up(low[i] + extra + f * (hi - low[i] - extra), multiple)

        i, nodes, edges = 0, [], []
        for k, t_ in zip(node_types, shape[0]):
            # hop 0 (the seeds): every seed slot and one padded row
            block = [int(high[i]) + 1] + [at(i + h, 1, node_multiple) for h in range(1, t_)]
            nodes.append((k, tuple(block)))
            i += t_
        for k, t_ in zip(edge_types, shape[1]):
            edges.append((k, tuple(at(i + h, 0, edge_multiple) for h in range(t_))))
            i += t_
        return HeteroHopBucket(tuple(nodes), tuple(edges))

    out = {bucket(k / levels) for k in range(1, levels + 1)}
    return sorted(out, key=lambda b: (b.total_edges, b.total_nodes, b))


def _hop_sizes(batch: Data) -> tuple:
    ns, es = batch.get('num_sampled_nodes'), batch.get('num_sampled_edges')
    if ns is None or es is None:
        raise ValueError(
            'pyg_tc: per-hop padding needs batches with num_sampled_nodes and num_sampled_edges '
            "(pyg_tc.loader.NeighborLoader's)"
        )
    return tuple(int(v) for v in ns), tuple(int(v) for v in es)


def _hop_buckets(sizes: list, sigma: float, levels: int, node_multiple: int, edge_multiple: int) -> List[HopBucket]:
    """:func:`buckets_from_batches`'s per-hop buckets from measured
    ``(num_sampled_nodes, num_sampled_edges)``."""
    if len({(len(n), len(e)) for n, e in sizes}) != 1:
        raise ValueError('pyg_tc: the measured batches have different numbers of hops')
    H = len(sizes[0][0])
    t = torch.tensor([list(n) + list(e) for n, e in sizes], dtype=torch.float64)
    top = (t.mean(0) + sigma * t.std(0)).tolist()
    low = t.min(0).values.tolist()
    seeds = int(t[:, 0].max().item()) + 1  # the seed block: every seed slot and one padded row

    def bucket(f: float) -> HopBucket:
        def at(i: int, extra: int, multiple: int) -> int:
            hi = _round_up(top[i] + extra, multiple)
            return _round_up(low[i] + extra + f * (hi - low[i] - extra), multiple)

        return HopBucket(
            (seeds, *(at(i, 1, node_multiple) for i in range(1, H))),
            tuple(at(i, 0, edge_multiple) for i in range(H, t.size(1))),
        )

    out = {bucket(k / levels) for k in range(1, levels + 1)}
    return sorted(out, key=lambda b: (b.total_edges, b.total_nodes, b))


def _pad_blocks(t: Tensor, index: Tensor, total: int, dim: int = 0) -> Tensor:
    """``t``, whose entries along ``dim`` come in blocks, with each block
    padded with zeros: entry ``i`` moves to ``index[i]`` of ``total``
    (the ``node_index`` / ``edge_index`` of ``pad_hops_layout``)."""
    shape = list(t.shape)
    shape[dim] = total
    return t.new_zeros(shape).index_copy_(dim, index, t)


def _pad_node_blocks(t: Tensor, index: Tensor, real: Sequence[int], padded: Sequence[int], dim: int = 0) -> Tensor:
    """:func:`_pad_blocks` of a node attribute whose hop blocks hold ``real``
    entries, padded to ``padded``: rows of 64 bytes or more (features) by one
    copy per block and a fill of its padding (memory copies at the copy
    engine's rate, where an indexed copy writes row by row)."""
    if dim % max(t.dim(), 1) != 0 or t.dim() < 2 or t.element_size() * t[0:1].numel() < 64:
        return _pad_blocks(t, index, sum(padded), dim)
    out = t.new_empty((sum(padded), *t.shape[1:]))
    src = dst = 0
    for n, N in zip(real, padded):
        out[dst : dst + n].copy_(t[src : src + n])
        out[dst + n : dst + N].zero_()
        src, dst = src + n, dst + N
    return out


class PadHops(BaseTransform):
    r"""Pads each mini-batch hop by hop to the smallest per-hop bucket it
    fits, so a step can run PyG's ``trim_to_layer`` with static shapes
    (e.g. captured by :class:`~pyg_tc.capture.CapturedStep`):
    ``NeighborLoader(..., transform=PadHops(buckets, batch_size))``.

    Layout (:class:`HopBucket` ``(N_0 .. N_L), (P_1 .. P_L)``): node block
    ``h`` holds hop ``h``'s real nodes (seeds first in block 0), then padded
    rows up to ``N_h`` (zero features, label 0, ``n_id`` 0); edge block ``h``
    holds hop ``h``'s edges in their (CSR) order, then padding slots up to
    ``P_h`` (zero edge attributes, ``e_id`` 0). Node ids are shifted to
    their block. The padding edges of block ``h`` go from the last row of
    node block ``h`` to the last row of node block ``h - 1`` (its *sink*):
    every block keeps a padded row, no real row has a padded neighbour, so
    the real rows' results are those of the unpadded batch
    (:func:`pyg_tc.formats.padding.pad_hops`). Padded rows hold garbage:
    a loss over the seeds (:func:`~pyg_tc.capture.seed_loss`) never reads
    it, but an operation over all rows (e.g. ``BatchNorm``) sees it, as with
    :class:`PadToBuckets`.

    The padded batch's ``num_sampled_nodes`` / ``num_sampled_edges`` are the
    bucket's (``N_h``, ``P_h``, the same for every batch of the bucket), so
    ``trim_to_layer`` cuts at the padded hop boundaries and each layer's
    graph is derived from the batch's with static shapes
    (:func:`~pyg_tc.formats.padding.trimmed`); PyG's meaning (the real
    counts) moves to ``num_real_sampled_nodes`` / ``num_real_sampled_edges``.
    Also added, as by :class:`PadToBuckets`: ``node_mask``, ``seed_mask``,
    ``seed_capacity``, ``num_real_nodes``, ``num_real_edges`` and ``bucket``
    (None, with the batch as it came, when it fits no bucket); ``input_id``
    is padded to ``seed_capacity`` entries. A trimmed model's step::

        step = CapturedStep(model, opt, forward=trimmed_forward)

    (:func:`~pyg_tc.capture.trimmed_forward`).

    Args:
        buckets (List[HopBucket]): the per-hop shapes, e.g. from
            :func:`~pyg_tc.transforms.buckets_from_batches` with
            ``per_hop=True``.
        seed_capacity (int): the loader's ``batch_size`` (below every
            bucket's ``N_0``).
        self_loops (bool, optional): also build what ``GATConv`` /
            ``GATv2Conv`` (``add_self_loops=True``) use under
            ``trim_to_layer``: each layer's trimmed graph
            (:func:`~pyg_tc.formats.padding.trimmed`, the bucket's hop
            boundaries) and its padded self-loop graph, memoised on the
            batch's graph (part of the batch, copied per step), instead of
            the layers deriving them inside the step (on the device, without
            synchronisation, either way). (default: :obj:`False`)
    """

    def __init__(
        self,
        buckets: Sequence[Union[Sequence[Sequence[int]], 'HeteroHopBucket']],
        seed_capacity: int,
        self_loops: bool = False,
    ):
        bs = list(buckets)
        self.hetero = bool(bs) and isinstance(bs[0], HeteroHopBucket)
        if self.hetero:
            if not all(isinstance(b, HeteroHopBucket) for b in bs):
                raise ValueError('pyg_tc: PadHops takes buckets of one kind (HopBucket or HeteroHopBucket)')
            if self_loops:
                raise NotImplementedError('pyg_tc: PadHops(self_loops=True) pads homogeneous batches only')
            self.buckets = sorted(set(bs), key=lambda b: (b.total_edges, b.total_nodes, b))
            self.seed_capacity, self.self_loops = int(seed_capacity), False
            return
        bs = []
        for b in buckets:
            nodes, edges = b
            b = HopBucket(tuple(int(v) for v in nodes), tuple(int(v) for v in edges))
            if len(b.num_nodes) != len(b.num_edges) + 1:
                raise ValueError(f'pyg_tc: a per-hop bucket has one more node count than edge counts, got {b}')
            if b.num_nodes[0] <= seed_capacity:
                raise ValueError(
                    f'pyg_tc: bucket {b} has no more seed rows ({b.num_nodes[0]}) than the '
                    f'{seed_capacity} seeds (one padded row at least)'
                )
            bs.append(b)
        if not bs:
            raise ValueError('pyg_tc: PadHops needs at least one bucket')
        self.buckets = sorted(set(bs), key=lambda b: (b.total_edges, b.total_nodes, b))
        self.seed_capacity, self.self_loops = int(seed_capacity), bool(self_loops)

    def bucket_for(self, num_nodes: Sequence[int], num_edges: Sequence[int]) -> Optional[HopBucket]:
        """The smallest bucket (fewest edge slots, then rows) a batch of
        these per-hop counts fits, or None."""
        return _first_fit(self.buckets, num_nodes, num_edges)

    def forward(self, batch: Data) -> Data:
        """``batch`` padded to its bucket (in place; see the class doc), or
        with only ``seed_capacity`` and the real counts added when it fits
        none. Reads nothing from the device (the hop counts are host
        integers)."""
        if isinstance(batch, HeteroData) and self.hetero:
            return self._pad_hetero(batch)
        if not isinstance(batch, Data) or self.hetero:
            raise TypeError(
                f'pyg_tc: PadHops with {"HeteroHopBucket" if self.hetero else "HopBucket"}s pads '
                f'{"HeteroData" if self.hetero else "Data"} batches, got {type(batch).__name__}'
            )
        ns, es = _hop_sizes(batch)
        n, E = _sizes(batch)
        if sum(ns) != n or sum(es) != E:
            raise ValueError(
                f'pyg_tc: the hop counts {list(ns)} / {list(es)} do not add up to the batch\'s {n} nodes and {E} edges'
            )
        B = int(batch.batch_size) if 'batch_size' in batch else ns[0]
        if B > self.seed_capacity:
            raise ValueError(f'pyg_tc: the batch has {B} seeds but seed_capacity is {self.seed_capacity}')
        bucket = self.bucket_for(ns, es)
        batch.seed_capacity = self.seed_capacity
        batch.num_real_nodes, batch.num_real_edges = n, E
        batch.num_real_sampled_nodes, batch.num_real_sampled_edges = list(ns), list(es)
        batch.bucket = bucket
        if bucket is None:  # larger than every bucket: as it came (an eager step)
            return batch
        N, P = bucket
        g, _ = resolve(batch.edge_index, size=(n, n))
        if g.sampled_hops is None or (g.sampled_hops.num_nodes, g.sampled_hops.num_edges) != (ns, es):
            raise ValueError(
                "pyg_tc: PadHops needs batches whose CSR carries their hop structure (pyg_tc.loader.NeighborLoader's)"
            )
        # the padded CSR, and where each real node and edge went (one index_copy per attribute)
        pg, node_index, edge_index, node_mask, rows = padding.pad_hops(g, N, P, return_index=True)
        if self.self_loops:
            _trimmed_loop_graphs(pg, N, P)
        ei = batch.edge_index.as_tensor() if hasattr(batch.edge_index, 'as_tensor') else batch.edge_index
        dev = ei.device
        _pad_attributes(
            batch,
            lambda v, d: _pad_node_blocks(v, node_index.to(v.device), ns, N, d),
            lambda v, d: _pad_blocks(v, edge_index.to(v.device), sum(P), d),
            self.seed_capacity,
            n,
            E,
        )
        R = bucket.total_nodes
        batch.edge_index = attach(torch.stack([pg.col, rows]).to(ei.dtype), R, pg, sort_order='col')
        batch.num_nodes = R
        batch.num_sampled_nodes, batch.num_sampled_edges = list(N), list(P)
        batch.node_mask = node_mask
        batch.seed_mask = torch.arange(self.seed_capacity, device=dev) < B
        return batch

    def _pad_hetero(self, batch: HeteroData) -> HeteroData:
        """A heterogeneous batch padded hop by hop to its
        :class:`HeteroHopBucket` (in place): each node type's blocks and each
        edge type's blocks as in a homogeneous batch
        (:func:`~pyg_tc.formats.padding.pad_hops_bipartite`), ``node_mask``
        per node type, ``num_sampled_nodes`` / ``num_sampled_edges`` the
        bucket's (the real ones in ``num_real_sampled_nodes`` /
        ``num_real_sampled_edges``), ``seed_mask`` and ``seed_capacity`` on
        the seeds' node type, ``bucket`` global."""
        ns, es = _hetero_hop_sizes(batch)
        seeds = _seed_types(batch, self.seed_capacity)
        for t in batch.node_types:
            if sum(ns[t]) != int(batch[t].num_nodes or 0):
                raise ValueError(f'pyg_tc: the hop counts of node type {t!r} do not add up to its nodes')
            batch[t].num_real_nodes, batch[t].num_real_sampled_nodes = sum(ns[t]), list(ns[t])
        for e in batch.edge_types:
            batch[e].num_real_edges, batch[e].num_real_sampled_edges = sum(es[e]), list(es[e])
        bucket = self.bucket_for(ns, es)
        batch.bucket = bucket
        if bucket is None:  # larger than every bucket: as it came (an eager step)
            return batch
        N, P = bucket.nodes, bucket.edges
        _check_seed_rows(bucket, {t: N[t][0] for t in seeds}, self.seed_capacity)
        dev = _device_of(batch)
        index = {t: padding.block_index(ns[t], N[t], dev) for t in batch.node_types}
        for e in batch.edge_types:
            src, _, dst = e
            store = batch[e]
            ei = store.edge_index
            g, _ = resolve(ei, size=(sum(ns[src]), sum(ns[dst])))
            hops = g.sampled_hops
            if hops is None or (hops.num_nodes, hops.src_nodes, hops.num_edges) != (ns[dst], ns[src], es[e]):
                raise ValueError(
                    f'pyg_tc: PadHops needs batches whose CSR carries their hop structure '
                    f"(pyg_tc.loader.NeighborLoader's); edge type {e} does not"
                )
            pg, edge_index, rows = padding.pad_hops_bipartite(g, N[dst], N[src], P[e], index[dst], index[src])
            total = sum(P[e])
            _pad_attributes(
                batch, None, lambda v, d: _pad_blocks(v, edge_index.to(v.device), total, d), 0, -1, sum(es[e]), store
            )
            plain = ei.as_tensor() if hasattr(ei, 'as_tensor') else ei
            store.edge_index = attach(
                torch.stack([pg.col, rows]).to(plain.dtype), (sum(N[src]), sum(N[dst])), pg, sort_order='col'
            )
            store.num_sampled_edges = list(P[e])
        for t in batch.node_types:
            store, R = batch[t], sum(N[t])
            idx, real, padded = index[t], ns[t], N[t]
            _pad_attributes(
                batch,
                lambda v, d: _pad_node_blocks(v, idx.to(v.device), real, padded, d),
                None,
                self.seed_capacity,
                sum(ns[t]),
                -1,
                store,
            )
            store.num_nodes = R
            store.node_mask = torch.zeros(R, dtype=torch.bool, device=dev).index_fill_(0, idx, True)
            store.num_sampled_nodes = list(N[t])
            if t in seeds:
                store.seed_mask = torch.arange(self.seed_capacity, device=dev) < int(store.batch_size)
        return batch

    def __repr__(self) -> str:
        loops = ', self_loops=True' if self.self_loops else ''
        return f'{type(self).__name__}({[tuple(b) for b in self.buckets]}, seed_capacity={self.seed_capacity}{loops})'


def _trimmed_loop_graphs(pg, N: Sequence[int], P: Sequence[int]) -> None:
    """The padded self-loop graph of a per-hop padded graph ``pg`` (layer
    0) and of the graph ``trim_to_layer`` leaves layer ``i >= 1``: the first
    ``sum(N[:H + 1 - i])`` nodes (sources and targets alike, as GAT's
    ``x``) and ``sum(P[:H - i])`` edges; each memoised where the layers
    look them up."""
    H = len(P)
    pad_loop_graph(pg)
    for i in range(1, H):
        C = sum(N[: H + 1 - i])
        t = padding.trimmed(pg, sum(P[: H - i]), C, C)
        if t is not None:
            pad_loop_graph(t)
