"""Mini-batches sampled on the GPU, with pyg_tc's CSR attached.

* :class:`NeighborSampler`: a ``torch_geometric.sampler.BaseSampler`` with
  PyG's neighbour-sampling semantics that samples on the GPU (plug it into
  PyG's loaders with ``neighbor_sampler=``);
* :class:`NeighborLoader`, :class:`LinkNeighborLoader`: PyG's loaders (same
  signatures, plus ``device=``) whose batches are sampled, gathered and
  formatted on the GPU: change one import;
* :class:`PadToBuckets` (with :func:`buckets_from_batches`,
  :func:`seed_loss`): static-shape batches; :class:`PadHops` (with
  :func:`trimmed_forward`): per-hop padded ones, for ``trim_to_layer``; :class:`CapturedStep`: the
  training step captured in a CUDA graph per bucket.
"""
from .loader import LinkNeighborLoader, NeighborLoader
from .pad import (Bucket, HopBucket, PadHops, PadToBuckets, buckets_from_batches, buckets_from_fanouts, seed_loss,
                  trimmed_forward)
from .sampler import NeighborSampler
from .step import CapturedStep

__all__ = ['NeighborSampler', 'NeighborLoader', 'LinkNeighborLoader', 'PadToBuckets', 'Bucket',
           'buckets_from_batches', 'buckets_from_fanouts', 'seed_loss', 'CapturedStep', 'PadHops', 'HopBucket',
           'trimmed_forward']
