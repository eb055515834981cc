"""Loaders whose batches carry pyg_tc's CSR.

* :class:`NeighborSampler`: a ``torch_geometric.sampler.BaseSampler`` with
  PyG's neighbour-sampling semantics that samples on the GPU (plug it into
  PyG's loaders with ``neighbor_sampler=``);
* :class:`NeighborLoader`, :class:`LinkNeighborLoader`: PyG's loaders (same
  signatures, plus ``device=``) whose batches are sampled, gathered and
  formatted on the GPU: change one import; ``feature_storage=`` keeps the
  node features in half precision or fp8 (:class:`FeatureStorage`);
* :class:`GraphLoader`: PyG's ``DataLoader`` for batches of small graphs,
  padded (:class:`~pyg_tc.transforms.PadGraphs`) as they are collated, or
  assembled on the GPU.

Static-shape batches come from the transforms :class:`~pyg_tc.transforms.PadToBuckets`,
:class:`~pyg_tc.transforms.PadHops` and :class:`~pyg_tc.transforms.PadGraphs`;
captured steps over them from :mod:`pyg_tc.capture`.
"""

from .features import FeatureStorage, quantize_fp8
from .graph_loader import GraphLoader
from .loader import LinkNeighborLoader, NeighborLoader
from .sampler import NeighborSampler

__all__ = ['NeighborSampler', 'NeighborLoader', 'LinkNeighborLoader', 'GraphLoader', 'FeatureStorage', 'quantize_fp8']
