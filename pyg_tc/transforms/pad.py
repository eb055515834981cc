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
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Data
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
) -> Union[List[Bucket], List['HopBucket']]:
    """Buckets from measured batches: their node and edge counts' mean plus
    ``sigma`` standard deviations (then one more row), rounded up.

    Args:
        batches (Iterable[torch_geometric.data.Data]): a loader (or any iterable of batches);
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

    Returns the buckets, smallest first."""
    if num_batches < 2:
        raise ValueError(f'pyg_tc: buckets_from_batches needs at least 2 batches, got num_batches={num_batches}')
    if levels < 1:
        raise ValueError(f'pyg_tc: levels must be >= 1, got {levels}')
    sizes = []
    for i, b in enumerate(batches):
        if i == num_batches:
            break
        sizes.append(_hop_sizes(b) if per_hop else _sizes(b))
    if len(sizes) < 2:
        raise ValueError(f'pyg_tc: buckets_from_batches saw {len(sizes)} batch(es); it needs at least 2')
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
    batch: Data,
    pad_nodes: Callable[[Tensor, int], Tensor],
    pad_edges: Callable[[Tensor, int], Tensor],
    seed_capacity: int,
    num_nodes: int,
    num_edges: int,
) -> None:
    """Pads ``batch``'s tensor attributes in place: node attributes with
    ``pad_nodes(value, cat_dim)``, edge attributes with ``pad_edges``, and
    the per-seed ``input_id`` / ``seed_time`` to ``seed_capacity`` entries.
    A tensor is a node or edge attribute by PyG's rule (``is_node_attr`` /
    ``is_edge_attr`` of a ``Data``: its size along its cat dimension is the
    batch's ``num_nodes`` or ``num_edges``; a tie goes to the edges when
    ``'edge'`` is in the key), applied with the counts the caller knows."""
    store = batch._store
    for key, value in list(store.items()):
        if key in ('edge_index', 'num_nodes') or not isinstance(value, Tensor) or value.dim() == 0:
            continue
        dim = batch.__cat_dim__(key, value, store)
        if not isinstance(dim, int):
            continue
        size = value.size(dim)
        if size == num_nodes and (num_nodes != num_edges or 'edge' not in key):
            batch[key] = pad_nodes(value, dim)
        elif size == num_edges:
            batch[key] = pad_edges(value, dim)
    for key in ('input_id', 'seed_time'):  # one entry per seed: seed_capacity of them
        value = batch.get(key)
        if isinstance(value, Tensor) and value.dim() >= 1 and value.size(0) <= seed_capacity:
            batch[key] = _pad_rows(value, seed_capacity)


def _first_fit(buckets: Sequence[Any], num_nodes: Any, num_edges: Any) -> Optional[Any]:
    """The first of ``buckets`` (sorted smallest first) a batch of these
    counts fits, or None."""
    return next((b for b in buckets if b.fits(num_nodes, num_edges)), None)


class PadToBuckets(BaseTransform):
    r"""Pads each mini-batch to the smallest bucket it fits (see the module
    doc): ``NeighborLoader(..., transform=PadToBuckets(buckets, batch_size))``.

    Args:
        buckets (List[Bucket] or List[Tuple[int, int]]): the (nodes, edges)
            shapes, e.g. from :func:`~pyg_tc.transforms.buckets_from_batches`.
        seed_capacity (int): the loader's ``batch_size`` (the seed rows
            every padded batch reserves).
        self_loops (bool, optional): also build the padded self-loop graph
            that ``GATConv`` / ``GATv2Conv`` (``add_self_loops=True``) use
            (``pyg_tc.formats.loops.pad_loop_graph``) with the batch, instead
            of the layers deriving it inside the step (on the device, without
            synchronisation, either way) (default: False).
    """

    def __init__(self, buckets: Sequence[Sequence[int]], seed_capacity: int, self_loops: bool = False):
        bs = sorted(Bucket(int(n), int(e)) for n, e in buckets)
        if not bs:
            raise ValueError('pyg_tc: PadToBuckets needs at least one bucket')
        for b in bs:
            if b.num_nodes <= seed_capacity:
                raise ValueError(f'pyg_tc: bucket {tuple(b)} has no more rows than the {seed_capacity} seeds')
        self.buckets, self.seed_capacity, self.self_loops = bs, int(seed_capacity), bool(self_loops)

    def bucket_for(self, num_nodes: int, num_edges: int) -> Optional[Bucket]:
        """The smallest bucket a batch fits, or None."""
        return _first_fit(self.buckets, num_nodes, num_edges)

    def forward(self, batch: Data) -> Data:
        """``batch`` padded to its bucket (in place; see the module doc), or
        with only ``seed_capacity`` and the real counts added when it fits
        none."""
        if not isinstance(batch, Data):
            raise NotImplementedError(f'pyg_tc: PadToBuckets pads homogeneous batches, got {type(batch).__name__}')
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

    def __repr__(self) -> str:
        return f'{type(self).__name__}({[tuple(b) for b in self.buckets]}, seed_capacity={self.seed_capacity})'


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

    def __init__(self, buckets: Sequence[Sequence[Sequence[int]]], seed_capacity: int, self_loops: bool = False):
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
        if not isinstance(batch, Data):
            raise NotImplementedError(f'pyg_tc: PadHops pads homogeneous batches, got {type(batch).__name__}')
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
            lambda v, d: _pad_blocks(v, node_index.to(v.device), sum(N), d),
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
