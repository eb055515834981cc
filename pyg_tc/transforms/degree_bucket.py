"""DegreeBucketTransform: precompute the CSR kernels' row schedule."""

from __future__ import annotations

from typing import Optional

from torch_geometric.data import Data
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from ..formats.carrier import TCEdgeIndex, attach, plain_tensor
from ..formats.csr import DEFAULT_CHUNK, CSRGraph


@functional_transform('pyg_tc_degree_bucket')
class DegreeBucketTransform(BaseTransform):
    r"""Builds the :class:`~pyg_tc.formats.CSRGraph` of ``data.edge_index``
    (target-sorted CSR, its transpose for the backward pass, and for both the
    degree-bucket schedule: light rows packed many per warp, medium rows one
    lane group each, heavy rows split into ``chunk``-edge units reduced in
    order by a second pass) and attaches it to ``data.edge_index``, which
    becomes a :class:`~pyg_tc.formats.TCEdgeIndex`. The edge order is kept, so
    ``edge_attr`` / ``edge_weight`` stay aligned.

    Runs on the device of ``data.edge_index`` (vectorised torch): on the CPU
    for datasets, on the GPU for mini-batches (e.g. as the ``transform`` of a
    ``NeighborLoader`` after moving the batch, or inside the training loop).
    Layers that receive an adjacency without the metadata build the same
    schedule on first use and cache it on the tensor.

    Args:
        chunk: maximum edges per scheduling unit (rows above it are "heavy");
            None picks it from the edge count (:func:`pyg_tc.formats.csr.auto_chunk`).
        validate: run :meth:`~pyg_tc.formats.CSRGraph.validate` after building (slow; tests).
    """

    def __init__(self, chunk: Optional[int] = DEFAULT_CHUNK, validate: bool = False):
        if chunk is not None and chunk < 1:
            raise ValueError(f'chunk must be positive, got {chunk}')
        self.chunk = chunk
        self.check = validate

    def forward(self, data: Data) -> Data:
        """Attach the CSR format with its degree-bucket schedule to ``data``."""
        if 'edge_index' not in data or data.edge_index is None:
            raise ValueError('DegreeBucketTransform needs data.edge_index')
        ei = data.edge_index
        if isinstance(ei, TCEdgeIndex):
            return data
        N = data.num_nodes
        src = plain_tensor(ei)
        graph = CSRGraph.from_coo(src[0], src[1], N, N, self.chunk)
        if self.check:
            graph.validate()
        data.edge_index = attach(ei, N, graph)
        return data

    @staticmethod
    def graph(data: Data) -> Optional[CSRGraph]:
        """The attached graph, or None."""
        entry = getattr(data.edge_index, '_pyg_tc_graph', None)
        return None if entry is None else entry[1]

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(chunk={self.chunk})'
