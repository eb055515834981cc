"""``GraphLoader``: PyG's ``DataLoader`` for batches of small graphs, padded
(:class:`~pyg_tc.transforms.PadGraphs`) as they are collated or assembled on
the GPU (:mod:`pyg_tc.loader.device_graphs`)."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import torch
from torch_geometric.data import Batch
from torch_geometric.loader import DataLoader

from ..formats.carrier import attach
from ..transforms.pad_graphs import PadGraphs, _csr_order
from .device_graphs import DeviceGraphs


class GraphLoader(DataLoader):
    r"""PyG's ``DataLoader`` whose batches are padded (``pad``) as they are
    collated, so with ``num_workers`` the padding and the batch's CSR are
    built in the worker processes; same arguments as PyG's, plus ``pad`` and
    ``device``::

        loader = GraphLoader(dataset, batch_size=128, shuffle=True, num_workers=2,
                             pad=PadGraphs(buckets))
        for batch in loader:
            loss = step(batch.to('cuda'))

    With ``device``, the dataset is stored there once and every batch is
    assembled there (:mod:`pyg_tc.loader.device_graphs`: no collate and no
    CSR build per batch, no worker processes), the same batches in the same
    order::

        loader = GraphLoader(dataset, batch_size=128, shuffle=True, device='cuda',
                             pad=PadGraphs(buckets))
        for batch in loader:  # already on the GPU
            loss = step(batch)

    Args:
        dataset (torch_geometric.data.Dataset or list): the graphs.
        batch_size (int, optional): graphs per batch (default 1).
        shuffle (bool, optional): reshuffle every epoch (default False).
        pad (PadGraphs, optional): the padding (default: none; the batch's
            edges are then put in CSR order and its CSR attached).
        device (torch.device or str, optional): store the dataset on this
            device and assemble the batches there (the dataset is read once:
            its ``transform`` runs once per graph, not per epoch).
        **kwargs: PyG's ``DataLoader`` arguments (``follow_batch``,
            ``exclude_keys``, ``num_workers``, ...; with ``device`` neither
            ``follow_batch`` nor ``num_workers``).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        pad: Optional[PadGraphs] = None,
        device: Any = None,
        **kwargs: Any,
    ):
        if device is not None and (kwargs.get('num_workers') or kwargs.get('follow_batch')):
            raise ValueError(
                'pyg_tc: GraphLoader(device=...) assembles batches on the device: no num_workers and no follow_batch'
            )
        super().__init__(dataset, batch_size, shuffle, **kwargs)
        self.pad = pad
        self.collate_fn = _PaddedCollate(self.collate_fn, pad)
        #: the dataset stored on ``device`` (None: PyG's collate on the host)
        self.graphs = None if device is None else DeviceGraphs(dataset, device, kwargs.get('exclude_keys') or ())

    def __iter__(self) -> Iterator[Batch]:
        if self.graphs is None:
            return super().__iter__()
        return self._device_batches()

    def _device_batches(self) -> Iterator[Batch]:
        order = iter(self.batch_sampler)
        # PyG's (torch's) loader draws its workers' base seed from the generator here, before the
        # sampler draws the order: drawn alike, the order is the same as without ``device``
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        for ids in order:
            yield self.graphs.batch(ids, self.pad)


class _PaddedCollate:
    """PyG's collater, then the padding (a picklable object: worker processes get it)."""

    def __init__(self, collate: Callable, pad: Optional[PadGraphs]):
        self.collate, self.pad = collate, pad

    def __call__(self, data_list: list) -> Batch:
        batch = self.collate(data_list)
        if self.pad is not None:
            return self.pad(batch)
        g = _csr_order(batch)  # (reorders batch.edge_index first)
        batch.edge_index = attach(batch.edge_index, int(batch.num_nodes), g, sort_order='col')
        return batch
