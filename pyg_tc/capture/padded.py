"""Models on padded batches: batch norms whose statistics come from the real
rows (:func:`~pyg_tc.capture.padding_aware`, :func:`~pyg_tc.capture.padding`) and the forward of a model that
trims by layer on per-hop padded batches (:func:`~pyg_tc.capture.trimmed_forward`)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, Iterator, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData


_masks = threading.local()


@contextlib.contextmanager
def padding(batch: Any) -> Iterator[None]:
    """Inside: the batch norms of :func:`padding_aware` models take their
    statistics over ``batch``'s real rows (``node_mask``) and real graphs
    (``graph_mask``), picking the mask whose length is the input's row count
    (a heterogeneous batch: any node type's; a count that two node types
    share raises); nothing changes for a batch without masks. :class:`~pyg_tc.capture.CapturedStep`
    enters it for every step.

    Args:
        batch (torch_geometric.data.Data): a padded batch (or anything without masks).
    """
    masks = {}
    stores = list(batch.node_stores) if isinstance(batch, HeteroData) else [batch]
    for store in stores:
        for key in ('node_mask', 'graph_mask'):
            m = store.get(key) if hasattr(store, 'get') else None
            if isinstance(m, Tensor):
                # two node types with as many rows: which mask a norm's input needs is unknown
                masks[m.size(0)] = _AMBIGUOUS if m.size(0) in masks else m
    old = getattr(_masks, 'by_rows', None)
    _masks.by_rows = masks or None
    try:
        yield
    finally:
        _masks.by_rows = old


_AMBIGUOUS = object()


def _mask_for(rows: int) -> Optional[Tensor]:
    masks: Optional[Dict[int, Tensor]] = getattr(_masks, 'by_rows', None)
    mask = None if masks is None else masks.get(rows)
    if mask is _AMBIGUOUS:
        raise ValueError(
            f'pyg_tc: a padding-aware batch norm got {rows} rows, and several node types of this heterogeneous '
            f'batch are padded to {rows} rows: which rows are real is ambiguous. Give the node types buckets '
            f'with different row counts'
        )
    return mask


class _PaddingAwareBatchNorm(torch.nn.BatchNorm1d):
    """``BatchNorm1d`` whose training statistics (and running statistics)
    come from the real rows inside :func:`padding` (the same parameters,
    buffers and ``state_dict``)."""

    def forward(self, x: Tensor) -> Tensor:
        mask = _mask_for(x.size(0)) if self.training and x.dim() == 2 else None
        if mask is None:
            return super().forward(x)
        m = mask.to(x.dtype).unsqueeze(1)
        count = m.sum()
        n = count.clamp(min=1)
        mean = (x * m).sum(0) / n
        var = ((x - mean).square() * m).sum(0) / n
        out = (x - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            out = out * self.weight + self.bias
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                f = (1.0 / self.num_batches_tracked.to(x.dtype)) if self.momentum is None else self.momentum
                unbiased = var * n / (count - 1).clamp(min=1)
                self.running_mean.mul_(1 - f).add_(f * mean.detach())
                self.running_var.mul_(1 - f).add_(f * unbiased.detach())
        return out


def padding_aware(model: torch.nn.Module) -> torch.nn.Module:
    """Makes every ``torch.nn.BatchNorm1d`` of ``model`` (PyG's ``BatchNorm``
    and ``MLP`` hold one) take its training statistics over the real rows
    inside :func:`padding`; in place (parameters, buffers and ``state_dict``
    unchanged), returns ``model``.

    Args:
        model (torch.nn.Module): the model.
    """
    for mod in model.modules():
        if type(mod) is torch.nn.BatchNorm1d:
            mod.__class__ = _PaddingAwareBatchNorm
    return model


def trimmed_forward(model: torch.nn.Module, batch: Data) -> Tensor:
    r"""``model(x, edge_index)`` with PyG's ``trim_to_layer`` hop counts
    (``num_sampled_nodes_per_hop``, ``num_sampled_edges_per_hop``; a
    ``torch_geometric.nn.models.BasicGNN`` takes them): the ``forward=`` of a
    :class:`~pyg_tc.capture.CapturedStep` over :class:`~pyg_tc.transforms.PadHops`' batches,
    whose hop counts are the bucket's. On a ``HeteroData`` batch
    ``model(x_dict, edge_index_dict, num_sampled_nodes_dict=...,
    num_sampled_edges_dict=...)``, the names of PyG's heterogeneous
    ``trim_to_layer`` examples.

    Args:
        model (torch.nn.Module): a model taking ``(x, edge_index,
            num_sampled_nodes_per_hop=..., num_sampled_edges_per_hop=...)``.
        batch (torch_geometric.data.Data): a (per-hop padded) batch.

    Shapes:
        - **input:** ``batch.x`` :math:`(|\mathcal{V}|, F)`
        - **output:** the model's output: with ``trim_to_layer``, the rows
          its last layer keeps (the seed block and the first hop's), seeds
          first
    """
    if isinstance(batch, HeteroData):
        return model(
            batch.x_dict,
            batch.edge_index_dict,
            num_sampled_nodes_dict=batch.num_sampled_nodes_dict,
            num_sampled_edges_dict=batch.num_sampled_edges_dict,
        )
    return model(
        batch.x,
        batch.edge_index,
        num_sampled_nodes_per_hop=batch.num_sampled_nodes,
        num_sampled_edges_per_hop=batch.num_sampled_edges,
    )
