"""Data transforms: format metadata precomputed and attached to ``Data``
(:class:`SGTTransform`, :class:`CBSRTransform`, :class:`DegreeBucketTransform`,
:class:`ReorderTransform`, :class:`CapNeighbors`), and static-shape batches
padded to buckets (:class:`PadToBuckets` and :class:`PadHops` for sampled
mini-batches, :class:`PadGraphs` for batches of small graphs), for captured
steps (:mod:`pyg_tc.capture`)."""

from .cap import CapNeighbors
from .cbsr import CBSRTransform
from .degree_bucket import DegreeBucketTransform
from .pad import (
    Bucket,
    HeteroBucket,
    HeteroHopBucket,
    HopBucket,
    PadHops,
    PadToBuckets,
    buckets_from_batches,
    buckets_from_fanouts,
)
from .pad_graphs import GraphBucket, PadGraphs, graph_buckets
from .reorder import ReorderTransform, rcm_order
from .sgt import SGTTransform

__all__ = [
    'DegreeBucketTransform',
    'CBSRTransform',
    'ReorderTransform',
    'rcm_order',
    'SGTTransform',
    'CapNeighbors',
    'PadToBuckets',
    'Bucket',
    'buckets_from_batches',
    'buckets_from_fanouts',
    'PadHops',
    'HopBucket',
    'HeteroBucket',
    'HeteroHopBucket',
    'PadGraphs',
    'GraphBucket',
    'graph_buckets',
]
