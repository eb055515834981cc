"""Static-shape mini-batches: each batch padded to one of a few buckets of
(nodes, edges), so a CUDA graph captured per bucket (:class:`~pyg_tc.loader.CapturedStep`)
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
:func:`~pyg_tc.loader.seed_loss`. Padding applies to homogeneous batches whose
``edge_index`` carries pyg_tc's CSR (:class:`pyg_tc.loader.NeighborLoader`'s);
a batch larger than every bucket comes back unpadded (``bucket`` None), and
:class:`~pyg_tc.loader.CapturedStep` runs it eagerly.

Decision: buckets bound the batch's totals (nodes, edges), not each hop:
a padded batch is aggregated whole, in one kernel per layer (the captured
step does not trim by hop; eager steps on unpadded batches can use
``trim_to_layer``), so per-hop buckets would only multiply the shapes. Buckets come from measured batches (:func:`~pyg_tc.loader.buckets_from_batches`:
the mean plus ``sigma`` standard deviations of ``num_batches`` batches, as
NVIDIA's MLPerf GNN code sizes its padded batches) or from the fan-out bounds
(:func:`~pyg_tc.loader.buckets_from_fanouts`: never exceeded, but large).
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, List, NamedTuple, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from ..formats.carrier import attach, resolve
from ..formats.loops import pad_loop_graph


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


def buckets_from_batches(batches: Iterable[Data], num_batches: int = 20, sigma: float = 5.0,
                         levels: int = 1, node_multiple: int = 256, edge_multiple: int = 1024) -> List[Bucket]:
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

    Returns the buckets, smallest first."""
    if num_batches < 2:
        raise ValueError(f'pyg_tc: buckets_from_batches needs at least 2 batches, got num_batches={num_batches}')
    if levels < 1:
        raise ValueError(f'pyg_tc: levels must be >= 1, got {levels}')
    sizes = []
    for i, b in enumerate(batches):
        if i == num_batches:
            break
        sizes.append(_sizes(b))
    if len(sizes) < 2:
        raise ValueError(f'pyg_tc: buckets_from_batches saw {len(sizes)} batch(es); it needs at least 2')
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
        out.append(Bucket(_round_up(low[0].item() + 1 + f * (top_n - low[0].item() - 1), node_multiple),
                          _round_up(low[1].item() + f * (top_e - low[1].item()), edge_multiple)))
    return sorted(set(out))


def buckets_from_fanouts(batch_size: int, num_neighbors: Sequence[int], num_nodes: int,
                         node_multiple: int = 256, edge_multiple: int = 1024) -> List[Bucket]:
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


class PadToBuckets(BaseTransform):
    r"""Pads each mini-batch to the smallest bucket it fits (see the module
    doc): ``NeighborLoader(..., transform=PadToBuckets(buckets, batch_size))``.

    Args:
        buckets (List[Bucket] or List[Tuple[int, int]]): the (nodes, edges)
            shapes, e.g. from :func:`~pyg_tc.loader.buckets_from_batches`.
        seed_capacity (int): the loader's ``batch_size`` (the seed rows
            every padded batch reserves).
        self_loops (bool, optional): also build the padded self-loop graph
            that ``GATConv`` / ``GATv2Conv`` (``add_self_loops=True``) use
            (``pyg_tc.formats.loops.pad_loop_graph``), so a step with GAT layers
            builds nothing either (default: False).
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
        for b in self.buckets:
            if b.fits(num_nodes, num_edges):
                return b
        return None

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
            raise ValueError('pyg_tc: PadToBuckets needs batches whose edges are in CSR order '
                             "(pyg_tc.loader.NeighborLoader's)")
        pg = g.pad(N, P)
        if self.self_loops:
            pad_loop_graph(pg)
        store = batch._store
        node_keys = [k for k in store.keys() if k not in ('edge_index', 'num_nodes') and store.is_node_attr(k)]
        edge_keys = [k for k in store.keys() if k != 'edge_index' and store.is_edge_attr(k)]
        for keys, rows in ((node_keys, N), (edge_keys, P)):
            for key in keys:
                value = store[key]
                if isinstance(value, Tensor):
                    batch[key] = _pad_rows(value, rows, batch.__cat_dim__(key, value, store))
        for key in ('input_id', 'seed_time'):  # one entry per seed: seed_capacity of them
            value = batch.get(key)
            if isinstance(value, Tensor) and value.dim() >= 1 and value.size(0) <= self.seed_capacity:
                batch[key] = _pad_rows(value, self.seed_capacity)
        ei = batch.edge_index.as_tensor() if hasattr(batch.edge_index, 'as_tensor') else batch.edge_index
        ei = torch.cat([ei, ei.new_full((2, P - E), N - 1)], 1)
        batch.edge_index = attach(ei, N, pg, sort_order='col')
        batch.num_nodes = N
        batch.node_mask = torch.arange(N, device=dev) < n
        batch.seed_mask = torch.arange(self.seed_capacity, device=dev) < B
        return batch

    def __repr__(self) -> str:
        return f'{type(self).__name__}({[tuple(b) for b in self.buckets]}, seed_capacity={self.seed_capacity})'


def seed_loss(out: Tensor, batch: Data, loss: Callable[..., Tensor] = torch.nn.functional.cross_entropy,
              target: str = 'y') -> Tensor:
    r"""The mean of ``loss(out[i], batch[target][i])`` over the real seeds of a
    padded batch, with static shapes (no boolean indexing, no
    synchronisation): the first ``seed_capacity`` rows, weighted by
    ``seed_mask``. On an unpadded batch, PyG's
    ``loss(out[:batch_size], y[:batch_size])``.

    Args:
        out (torch.Tensor): the model's output for every row of the batch.
        batch (torch_geometric.data.Data): the (padded) batch.
        loss (Callable, optional): a loss taking ``reduction='none'``
            (default: cross-entropy).
        target (str, optional): the batch's label attribute (default ``'y'``).

    Shapes:
        - **input:** out :math:`(|\mathcal{V}|, C)`, ``batch[target]``
          :math:`(|\mathcal{V}|, *)`
        - **output:** a scalar
    """
    if batch.get('bucket') is None:
        B = int(batch.batch_size)
        return loss(out[:B], batch[target][:B])
    S = batch.seed_capacity
    per = loss(out[:S], batch[target][:S], reduction='none')
    m = batch.seed_mask.to(per.dtype)
    if per.dim() > 1:
        per = per.flatten(1).mean(1)
    return (per * m).sum() / m.sum().clamp(min=1)
