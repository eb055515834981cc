"""Data transforms that precompute format metadata and attach it to Data."""

from .cap import CapNeighbors
from .cbsr import CBSRTransform
from .degree_bucket import DegreeBucketTransform
from .reorder import ReorderTransform, rcm_order
from .sgt import SGTTransform

__all__ = ['DegreeBucketTransform', 'CBSRTransform', 'ReorderTransform', 'rcm_order', 'SGTTransform', 'CapNeighbors']
