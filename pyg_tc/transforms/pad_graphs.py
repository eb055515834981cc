r"""Static-shape batches of many small graphs (``DataLoader`` batches for
graph classification): each batch padded to one of a few buckets of
(graphs, nodes, edges), so a step captured per bucket
(:class:`~pyg_tc.capture.CapturedStep`) serves every batch.

A padded batch (:class:`~pyg_tc.transforms.PadGraphs`) keeps PyG's layout and adds:

* rows ``n .. bucket.num_nodes - 1`` after the real nodes: zero features,
  isolated (no edges reach them), at least one; ``batch.batch`` sends every
  padded row to the last graph slot ``bucket.num_graphs - 1``, the padding
  slot;
* graph slots ``G .. bucket.num_graphs - 1`` after the real graphs (at least
  one: the padding slot): empty but for the padding slot; graph-level
  attributes (``y``) padded with zeros, ``ptr`` extended (empty graphs, then
  the padding slot's rows), ``num_graphs`` the bucket's;
* edges in CSR order (sorted by target, edge attributes permuted alike) and
  edge slots ``E .. bucket.num_edges - 1``: loops of the last padded row in
  ``edge_index``, past the last row's end in pyg_tc's CSR (no kernel reads
  them), zero edge attributes;
* ``node_mask`` (bool per row), ``graph_mask`` (bool per graph slot: real or
  not), ``num_real_nodes``, ``num_real_edges``, ``num_real_graphs`` and
  ``bucket`` (a batch larger than every bucket comes back with its edges in
  CSR order, its CSR attached and no ``bucket``: ``batch.get('bucket')`` is
  None).

So PyG's readouts give the real graphs' values in rows ``0 .. G - 1`` when
called with the static number of graphs: ``global_add_pool(x, batch.batch,
size=batch.num_graphs)`` (likewise ``global_mean_pool``, ``global_max_pool``;
without ``size`` PyG reads ``batch.max()`` from the GPU, which a captured
step cannot); rows ``G ..`` hold zeros (empty graphs) and the padding slot's
values. :func:`~pyg_tc.capture.graph_loss` is the loss over the real graphs with static
shapes. :class:`~pyg_tc.loader.GraphLoader` pads in its collate function, so with
``num_workers`` the padding and the CSR are built in the loader's worker
processes, not in the step.

Operations over all rows see the padded rows: a ``BatchNorm`` over nodes in
training mode (PyG's ``MLP`` has one by default) would compute its
statistics with them. :func:`~pyg_tc.capture.padding_aware` makes a model's batch norms
take them over the real rows only, inside :func:`~pyg_tc.capture.padding` (which
:class:`~pyg_tc.capture.CapturedStep` enters for every padded batch), so
padded batches give the unpadded batch's results on the real graphs
(tested: GIN with PyG's ``MLP`` and batch norm, GCN, GAT; add, mean and max
readouts; outputs, losses, gradients and running statistics).
"""

from __future__ import annotations

import math
from typing import Iterable, List, NamedTuple, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Batch
from torch_geometric.transforms import BaseTransform

from ..formats.carrier import attach, plain_tensor
from ..formats.csr import CSRGraph
from ..formats.padding import pad
from .pad import _pad_attributes, _pad_rows, _round_up


class GraphBucket(NamedTuple):
    """The static shape of a padded batch of graphs.

    Args:
        num_graphs (int): graph slots (more than the real graphs: the last
            slot is the padding slot).
        num_nodes (int): rows (more than the real nodes: one padded row at
            least).
        num_edges (int): edge slots.
    """

    num_graphs: int
    num_nodes: int
    num_edges: int

    def fits(self, num_graphs: int, num_nodes: int, num_edges: int) -> bool:
        """Whether a batch of these counts pads to this bucket."""
        return num_graphs < self.num_graphs and num_nodes < self.num_nodes and num_edges <= self.num_edges


def _counts(batch: Batch) -> tuple:
    return int(batch.num_graphs), int(batch.num_nodes), int(batch.edge_index.size(1))


def graph_buckets(
    batches: Iterable[Batch],
    num_batches: int = 20,
    sigma: float = 5.0,
    levels: int = 1,
    node_multiple: int = 64,
    edge_multiple: int = 256,
) -> List[GraphBucket]:
    """Buckets from measured batches of graphs: their node and edge counts'
    mean plus ``sigma`` standard deviations (then one more row), rounded up;
    graph slots: the most graphs a batch had, plus the padding slot.

    Args:
        batches (Iterable[torch_geometric.data.Batch]): a ``DataLoader`` (or
            any iterable of batches); its first ``num_batches`` are measured
            (at least 2).
        num_batches (int, optional): batches measured (default 20).
        sigma (float, optional): standard deviations above the mean (default 5.0).
        levels (int, optional): buckets returned; above 1, smaller ones evenly
            spaced down to the smallest batch seen (an epoch's short last
            batch). Default 1.
        node_multiple (int, optional): nodes rounded up to a multiple of it.
        edge_multiple (int, optional): edges rounded up to a multiple of it.

    Returns the buckets, smallest first.
    """
    if num_batches < 2 or levels < 1:
        raise ValueError(
            f'pyg_tc: graph_buckets needs num_batches >= 2 and levels >= 1, got {num_batches} and {levels}'
        )
    sizes = []
    for i, b in enumerate(batches):
        if i == num_batches:
            break
        sizes.append(_counts(b))
    if len(sizes) < 2:
        raise ValueError(f'pyg_tc: graph_buckets saw {len(sizes)} batch(es); it needs at least 2')
    t = torch.tensor(sizes, dtype=torch.float64)
    graphs = int(t[:, 0].max().item()) + 1
    top = t.mean(0) + sigma * t.std(0)
    low = t.min(0).values
    out = set()
    for k in range(1, levels + 1):
        f = k / levels
        n = low[1].item() + f * (top[1].item() - low[1].item())
        e = low[2].item() + f * (top[2].item() - low[2].item())
        g = int(math.ceil(low[0].item() + f * (graphs - 1 - low[0].item()))) + 1
        out.add(GraphBucket(g, _round_up(n + 1, node_multiple), _round_up(e, edge_multiple)))
    return sorted(out)


def _csr_order(batch: Batch) -> CSRGraph:
    """Puts ``batch``'s edges (and edge attributes) in CSR order, sorted by
    target, and returns their graph."""
    ei = plain_tensor(batch.edge_index)
    n = int(batch.num_nodes)
    if ei.size(1) > 1 and bool((ei[1, 1:] < ei[1, :-1]).any()):
        perm = torch.sort(ei[1], stable=True).indices
        store = batch._store
        for key in [k for k in store.keys() if k != 'edge_index' and store.is_edge_attr(k)]:
            value = store[key]
            if isinstance(value, Tensor):
                batch[key] = value.index_select(batch.__cat_dim__(key, value, store), perm)
        ei = ei.index_select(1, perm)
    batch.edge_index = ei
    return CSRGraph.from_coo(ei[0], ei[1], n, n)  # sorted by target: no permutation


class PadGraphs(BaseTransform):
    r"""Pads each ``DataLoader`` batch of graphs to the smallest bucket it fits
    (see the module doc)::

        loader = DataLoader(dataset, batch_size=128, shuffle=True)
        pad = PadGraphs(graph_buckets(loader, levels=2))
        loader = GraphLoader(dataset, batch_size=128, shuffle=True, pad=pad, num_workers=2)

    Args:
        buckets (List[GraphBucket] or List[Tuple[int, int, int]]): the
            (graphs, nodes, edges) shapes, e.g. from :func:`~pyg_tc.transforms.graph_buckets`.
    """

    def __init__(self, buckets: Sequence[Sequence[int]]):
        bs = sorted(GraphBucket(int(g), int(n), int(e)) for g, n, e in buckets)
        if not bs:
            raise ValueError('pyg_tc: PadGraphs needs at least one bucket')
        for b in bs:
            if b.num_graphs < 2 or b.num_nodes < 2:
                raise ValueError(f'pyg_tc: bucket {tuple(b)} leaves no padding slot (graphs and nodes >= 2)')
        self.buckets = bs

    def bucket_for(self, num_graphs: int, num_nodes: int, num_edges: int) -> Optional[GraphBucket]:
        """The smallest bucket a batch fits, or None."""
        return next((b for b in self.buckets if b.fits(num_graphs, num_nodes, num_edges)), None)

    def forward(self, batch: Batch) -> Batch:
        """``batch`` padded to its bucket (in place; see the module doc)."""
        if not isinstance(batch, Batch) or 'batch' not in batch:
            raise TypeError(
                f'pyg_tc: PadGraphs pads DataLoader batches of graphs (torch_geometric.data.Batch '
                f'with a batch vector), got {type(batch).__name__}'
            )
        G, n, E = _counts(batch)
        g = _csr_order(batch)
        bucket = self.bucket_for(G, n, E)
        batch.num_real_graphs, batch.num_real_nodes, batch.num_real_edges = G, n, E
        batch.bucket = bucket
        if bucket is None:  # larger than every bucket: as it came, its CSR attached (an eager step)
            batch.edge_index = attach(batch.edge_index, n, g, sort_order='col')
            return batch
        S, N, P = bucket
        store = batch._store
        graph_keys = [
            k
            for k in store.keys()
            if k not in ('ptr', 'batch')
            and isinstance(store[k], Tensor)
            and not store.is_node_attr(k)
            and not store.is_edge_attr(k)
            and store[k].dim() >= 1
            and store[k].size(0) == G
        ]
        _pad_attributes(batch, lambda v, d: _pad_rows(v, N, d), lambda v, d: _pad_rows(v, P, d), 0, n, E)
        for key in graph_keys:
            batch[key] = _pad_rows(store[key], S)
        dev = batch.batch.device
        batch.batch = torch.cat([batch.batch[:n], torch.full((N - n,), S - 1, dtype=batch.batch.dtype, device=dev)])
        ptr = batch.ptr
        batch.ptr = torch.cat([ptr, ptr.new_full((S - 1 - G,), n), ptr.new_full((1,), N)])
        ei = batch.edge_index
        ei = torch.cat([ei, ei.new_full((2, P - E), N - 1)], 1)
        batch.edge_index = attach(ei, N, pad(g, N, P), sort_order='col')
        batch.num_nodes = N
        batch._num_graphs = S
        batch.node_mask = torch.arange(N, device=dev) < n
        batch.graph_mask = torch.arange(S, device=dev) < G
        return batch

    def __repr__(self) -> str:
        return f'{type(self).__name__}({[tuple(b) for b in self.buckets]})'
