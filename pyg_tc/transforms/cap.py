"""CapNeighbors: ES-SpMM's capped graph, built once for repeated inference."""

from __future__ import annotations

from typing import ContextManager, Optional

from torch_geometric.data import Data
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from ..formats.csr import DEFAULT_CHUNK
from ..ops.es_spmm import Sampling, capped_graph, check_sampling, sampled_aggregation
from .degree_bucket import DegreeBucketTransform


@functional_transform('pyg_tc_cap_neighbors')
class CapNeighbors(BaseTransform):
    r"""Attaches the :class:`~pyg_tc.formats.CSRGraph` of ``data.edge_index``
    (as :class:`DegreeBucketTransform`) together with ES-SpMM's capped graph
    (:mod:`pyg_tc.ops.es_spmm`): rows with more than ``max_neighbors`` edges
    keep ``max_neighbors`` of them, chosen by ``sampling`` with ``seed``.
    Inside ``pyg_tc.sampled_aggregation(max_neighbors, sampling, seed)``
    (the same settings; :meth:`sampled_aggregation` gives the block) every
    pyg_tc layer aggregates over this capped graph (sums scaled by ``deg /
    max_neighbors``, means over the kept edges; GCN's normalisation from the
    full degrees) without building it per call; outside the block the
    layers aggregate exactly. The edge order of ``data`` is kept
    (``edge_weight`` stays aligned)::

        cap = CapNeighbors(32, seed=0)
        data = cap(data)
        with cap.sampled_aggregation():   # pyg_tc.sampled_aggregation(32, "uniform", 0)
            out = model(data.x, data.edge_index)

    Args:
        max_neighbors: the cap ``S``.
        sampling: ``'uniform'``, ``'bucket'`` or ``'fastrand'``.
        seed: the sample's seed (a fixed sample; an int).
        chunk: the schedule's unit size (:class:`DegreeBucketTransform`).
    """

    def __init__(
        self, max_neighbors: int, sampling: str = 'uniform', seed: int = 0, chunk: Optional[int] = DEFAULT_CHUNK
    ):
        check_sampling(max_neighbors, sampling)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f'CapNeighbors: seed must be an int (a fixed sample), got {seed!r}')
        self.spec = Sampling(max_neighbors, sampling, seed)
        self.chunk = chunk

    def forward(self, data: Data) -> Data:
        """Attach the graph and its capped graph to ``data``."""
        if 'edge_index' not in data or data.edge_index is None:
            raise ValueError('CapNeighbors needs data.edge_index')
        data = DegreeBucketTransform(self.chunk)(data)  # the graph, attached (kept if already there)
        S, sampling, seed = self.spec
        capped_graph(DegreeBucketTransform.graph(data), S, sampling, seed)  # built now, reused by every call
        return data

    def sampled_aggregation(self) -> ContextManager[Sampling]:
        """The :func:`pyg_tc.sampled_aggregation` block of this transform's
        settings, in which the layers use the capped graph it attached."""
        return sampled_aggregation(*self.spec)

    def __repr__(self) -> str:
        S, sampling, seed = self.spec
        return f'{self.__class__.__name__}(max_neighbors={S}, sampling={sampling!r}, seed={seed})'
