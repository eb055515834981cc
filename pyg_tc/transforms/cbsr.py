"""CBSRTransform: the graph-side preprocessing of the MaxK-GNN CBSR kernels."""

from __future__ import annotations

from typing import Optional

from torch_geometric.data import Data
from torch_geometric.data.datapipes import functional_transform

from ..formats.carrier import TCEdgeIndex, plain_tensor
from ..formats.csr import CSRGraph
from .degree_bucket import DegreeBucketTransform


@functional_transform('pyg_tc_cbsr')
class CBSRTransform(DegreeBucketTransform):
    r"""MaxK-GNN's warp-level partition: every row of the target-sorted
    adjacency is split into edge groups of at most ``group_size`` nonzeros
    (one warp each in the SpGEMM and SSpMM kernels); rows longer than that
    get several groups whose partial rows are reduced in order, so the
    forward pass needs no global atomics. Built for both directions.

    Design decision: the edge groups are the units of the CSR engine's
    :class:`~pyg_tc.formats.Schedule` (``chunk = group_size``), so one
    attached :class:`~pyg_tc.formats.CSRGraph` serves the dense SpMM and the
    CBSR kernels; ``data.edge_index`` becomes a
    :class:`~pyg_tc.formats.TCEdgeIndex` carrying it, as with
    :class:`DegreeBucketTransform`. It runs on the device of the edge index
    (vectorised torch: the GPU builder for mini-batches).

    Args:
        group_size: maximum nonzeros per edge group (``None``: the engine's
            rule, :func:`pyg_tc.formats.csr.auto_chunk`).
        validate: run :meth:`validate` after building.
    """

    def __init__(self, group_size: Optional[int] = None, validate: bool = False):
        super().__init__(chunk=group_size, validate=validate)

    def forward(self, data: Data) -> Data:
        """Attach the CSR format and schedule the CBSR kernels use to ``data``."""
        ei = data.edge_index if 'edge_index' in data else None
        g = getattr(ei, '_pyg_tc_graph', None) if isinstance(ei, TCEdgeIndex) else None
        if g is not None and self.chunk is not None and g[1].chunk != self.chunk:
            # An attached graph with another group size: rebuild from the edges.
            data.edge_index = plain_tensor(ei)
        return super().forward(data)

    @staticmethod
    def validate(graph: CSRGraph) -> CSRGraph:
        """Every edge in exactly one group of at most ``chunk`` edges, groups
        inside their row, every row written once (both directions); raises
        ValueError."""
        return graph.validate()

    @staticmethod
    def stats(data: Data) -> dict:
        """Edge groups, groups of split rows, largest group, group size."""
        g = DegreeBucketTransform.graph(data)
        if g is None:
            raise ValueError('CBSRTransform.stats: data.edge_index carries no pyg_tc graph; apply CBSRTransform first')
        u = g.sched.units
        lens = (u[:, 2] - u[:, 1]) if u.numel() else u.new_zeros(0)
        return {
            'edge_groups': int(u.size(0)),
            'split_groups': g.sched.num_slots,
            'max_group': int(lens.max()) if lens.numel() else 0,
            'group_size': g.chunk,
        }

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(group_size={self.chunk})'
