"""pyg_tc: drop-in PyG layers and transforms on hand-written CUDA sparse kernels."""
from __future__ import annotations

__version__ = '0.1.0'

from . import formats, ops, transforms, nn  # noqa: E402
from ._info import info  # noqa: E402
from .ops.sample import sampled_aggregation  # noqa: E402

__all__ = ['formats', 'ops', 'transforms', 'nn', 'info', 'sampled_aggregation', '__version__']
