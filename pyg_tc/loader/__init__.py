"""Mini-batches sampled on the GPU, with pyg_tc's CSR attached.

* :class:`NeighborSampler`: a ``torch_geometric.sampler.BaseSampler`` with
  PyG's neighbour-sampling semantics that samples on the GPU (plug it into
  PyG's loaders with ``neighbor_sampler=``);
* :class:`NeighborLoader`, :class:`LinkNeighborLoader`: PyG's loaders (same
  signatures, plus ``device=``) whose batches are sampled, gathered and
  formatted on the GPU: change one import;
* :class:`PadToBuckets` (with :func:`buckets_from_batches`,
  :func:`seed_loss`): static-shape batches; :class:`PadHops` (with
  :func:`trimmed_forward`): per-hop padded ones, for ``trim_to_layer``;
* :class:`PadGraphs` (with :func:`graph_buckets`, :func:`graph_loss`,
  :class:`GraphLoader`, :func:`padding_aware`): static-shape ``DataLoader``
  batches of small graphs;
* :class:`CapturedStep` (with :func:`step_loss`, :func:`masked_loss`) and
  :class:`CapturedForward`: the training step and the inference forward
  captured in a CUDA graph, on a full graph or per bucket of padded batches.
"""

from .loader import LinkNeighborLoader, NeighborLoader
from .pad import (
    Bucket,
    HopBucket,
    PadHops,
    PadToBuckets,
    buckets_from_batches,
    buckets_from_fanouts,
    masked_loss,
    seed_loss,
    trimmed_forward,
)
from .pad_graphs import GraphBucket, GraphLoader, PadGraphs, graph_buckets, graph_loss, padding, padding_aware
from .sampler import NeighborSampler
from .step import CapturedForward, CapturedStep, step_loss

__all__ = [
    'NeighborSampler',
    'NeighborLoader',
    'LinkNeighborLoader',
    'PadToBuckets',
    'Bucket',
    'buckets_from_batches',
    'buckets_from_fanouts',
    'seed_loss',
    'masked_loss',
    'step_loss',
    'CapturedStep',
    'CapturedForward',
    'PadHops',
    'HopBucket',
    'trimmed_forward',
    'PadGraphs',
    'GraphBucket',
    'graph_buckets',
    'graph_loss',
    'GraphLoader',
    'padding',
    'padding_aware',
]
