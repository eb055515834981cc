"""Losses with static shapes (no boolean indexing, no synchronisation), for
captured steps: over a full graph's mask (:func:`~pyg_tc.capture.masked_loss`), a padded
mini-batch's seeds (:func:`~pyg_tc.capture.seed_loss`), a padded batch's graphs
(:func:`~pyg_tc.capture.graph_loss`), and :func:`~pyg_tc.capture.step_loss`, which picks one by the batch."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data, HeteroData


def step_loss(out: Tensor, batch: Data) -> Tensor:
    r""":func:`~pyg_tc.capture.graph_loss` on a batch of graphs (a PyG
    ``Batch``, padded or not), :func:`~pyg_tc.capture.seed_loss` on a mini-batch (a batch
    with ``batch_size`` or ``bucket``), :func:`~pyg_tc.capture.masked_loss` on a full graph:
    the default loss of :class:`~pyg_tc.capture.CapturedStep`.

    Args:
        out (torch.Tensor): the model's output for every row of the batch.
        batch (torch_geometric.data.Data): the batch or the graph.

    Shapes:
        - **input:** out :math:`(|\mathcal{V}|, C)`
        - **output:** a scalar
    """
    if isinstance(batch, Batch):
        return graph_loss(out, batch)
    if isinstance(batch, HeteroData):
        if batch.get('bucket') is not None or _seed_store(batch, required=False) is not None:
            return seed_loss(out, batch)
        raise ValueError(
            'pyg_tc: the default loss of a full HeteroData graph is ambiguous (which node type?): pass '
            "loss_fn=lambda out, data: masked_loss(out, data['paper']) (your node type)"
        )
    if batch.get('bucket') is not None or batch.get('batch_size') is not None:
        return seed_loss(out, batch)
    return masked_loss(out, batch)


def masked_loss(
    out: Tensor,
    data: Data,
    mask: str = 'train_mask',
    loss: Callable[..., Tensor] = torch.nn.functional.cross_entropy,
    target: str = 'y',
) -> Tensor:
    r"""PyG's full-graph loss ``loss(out[data[mask]], data[target][data[mask]])``
    with static shapes (no boolean indexing, no synchronisation): the mean of
    ``loss(..., reduction='none')`` over every node, weighted by the mask
    (over every node when ``data`` has no such mask). What
    :class:`~pyg_tc.capture.CapturedStep` uses on a full graph.

    Args:
        out (torch.Tensor): the model's output for every node.
        data (torch_geometric.data.Data): the graph.
        mask (str, optional): the node mask attribute (default ``'train_mask'``).
        loss (Callable, optional): a loss taking ``reduction='none'``
            (default: cross-entropy).
        target (str, optional): the label attribute (default ``'y'``).

    Shapes:
        - **input:** out :math:`(|\mathcal{V}|, C)`, ``data[target]``
          :math:`(|\mathcal{V}|, *)`, ``data[mask]`` :math:`(|\mathcal{V}|)`
        - **output:** a scalar
    """
    per = loss(out, data[target], reduction='none')
    if per.dim() > 1:
        per = per.flatten(1).mean(1)
    m = data.get(mask)
    if m is None:
        return per.mean()
    m = m.to(per.dtype)
    return (per * m).sum() / m.sum().clamp(min=1)


def seed_loss(
    out: Tensor, batch: Data, loss: Callable[..., Tensor] = torch.nn.functional.cross_entropy, target: str = 'y'
) -> Tensor:
    r"""The mean of ``loss(out[i], batch[target][i])`` over the real seeds of a
    padded batch, with static shapes (no boolean indexing, no
    synchronisation): the first ``seed_capacity`` rows, weighted by
    ``seed_mask``. On an unpadded batch, PyG's
    ``loss(out[:batch_size], y[:batch_size])``. On a heterogeneous batch
    (``HeteroData``), ``out`` is the output for the seeds' node type (the
    one with ``batch_size``), whose ``seed_mask`` and labels it reads.

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
    padded = batch.get('bucket') is not None
    if isinstance(batch, HeteroData):
        batch = _seed_store(batch)
    if not padded:
        B = int(batch.batch_size)
        return loss(out[:B], batch[target][:B])
    S = batch.seed_capacity
    per = loss(out[:S], batch[target][:S], reduction='none')
    m = batch.seed_mask.to(per.dtype)
    if per.dim() > 1:
        per = per.flatten(1).mean(1)
    return (per * m).sum() / m.sum().clamp(min=1)


def _seed_store(batch: HeteroData, required: bool = True):
    """The node store of a heterogeneous mini-batch's seeds (the node type
    with ``batch_size``), or None (``required=False``) when there is none."""
    stores = [s for s in batch.node_stores if 'batch_size' in s]
    if len(stores) == 1:
        return stores[0]
    if not required and not stores:
        return None
    raise ValueError(
        f'pyg_tc: seed_loss needs the seeds of one node type (a node type with batch_size), got '
        f'{[s._key for s in stores]}'
    )


def graph_loss(
    out: Tensor, batch: Batch, loss: Callable[..., Tensor] = torch.nn.functional.cross_entropy, target: str = 'y'
) -> Tensor:
    r"""The mean of ``loss(out[i], batch[target][i])`` over the real graphs of
    a padded batch, with static shapes (weighted by ``graph_mask``); on an
    unpadded batch PyG's ``loss(out, batch[target])``.

    Args:
        out (torch.Tensor): the model's output, one row per graph slot.
        batch (torch_geometric.data.Batch): the (padded) batch.
        loss (Callable, optional): a loss taking ``reduction='none'``
            (default: cross-entropy).
        target (str, optional): the graph label attribute (default ``'y'``).

    Shapes:
        - **input:** out :math:`(|\mathcal{G}|, C)`, ``batch[target]``
          :math:`(|\mathcal{G}|, *)`
        - **output:** a scalar
    """
    m = batch.get('graph_mask')
    if m is None:
        return loss(out, batch[target])
    per = loss(out, batch[target], reduction='none')
    if per.dim() > 1:
        per = per.flatten(1).mean(1)
    m = m.to(per.dtype)
    return (per * m).sum() / m.sum().clamp(min=1)
