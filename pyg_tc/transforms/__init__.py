"""Data transforms that precompute format metadata and attach it to Data."""
from .cbsr import CBSRTransform
from .degree_bucket import DegreeBucketTransform

__all__ = ['DegreeBucketTransform', 'CBSRTransform']
