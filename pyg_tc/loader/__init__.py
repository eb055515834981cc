"""Mini-batches sampled on the GPU, with pyg_tc's CSR attached.

* :class:`NeighborSampler`: a ``torch_geometric.sampler.BaseSampler`` with
  PyG's neighbour-sampling semantics that samples on the GPU (plug it into
  PyG's loaders with ``neighbor_sampler=``);
* :class:`NeighborLoader`, :class:`LinkNeighborLoader`: PyG's loaders (same
  signatures, plus ``device=``) whose batches are sampled, gathered and
  formatted on the GPU: change one import.
"""
from .loader import LinkNeighborLoader, NeighborLoader
from .sampler import NeighborSampler

__all__ = ['NeighborSampler', 'NeighborLoader', 'LinkNeighborLoader']
