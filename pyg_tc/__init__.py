"""pyg_tc: drop-in PyG layers and transforms on hand-written CUDA sparse kernels.

The package imports lazily (PEP 562): ``import pyg_tc`` loads neither torch nor
torch_geometric, so ``pyg-tc --help`` answers at once. ``pyg_tc.nn``,
``pyg_tc.ops``, ``pyg_tc.formats``, ``pyg_tc.transforms``, ``pyg_tc.loader``,
``pyg_tc.capture``, ``pyg_tc.info`` and
``pyg_tc.sampled_aggregation`` are imported on first access, and so is any
other submodule (``pyg_tc.bench``); ``from pyg_tc import nn`` and ``import
pyg_tc.nn`` work as before.

The ``torch.ops.pyg_tc.*`` ops are defined when :mod:`pyg_tc.ops` is imported,
which ``pyg_tc.nn``, ``pyg_tc.transforms``, ``pyg_tc.sampled_aggregation`` and
:func:`pyg_tc.info` (when it builds the kernels) all do. Code that calls
``torch.ops.pyg_tc.<op>`` directly imports :mod:`pyg_tc.ops` first (a bare
``import pyg_tc`` does not define them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _lazy

__version__ = '0.1.0'

__all__ = ['formats', 'ops', 'transforms', 'nn', 'loader', 'capture', 'info', 'sampled_aggregation', '__version__']

#: lazily imported name -> (module, attribute or None for the module itself)
_LAZY = {
    'formats': ('.formats', None),
    'ops': ('.ops', None),
    'transforms': ('.transforms', None),
    'nn': ('.nn', None),
    'loader': ('.loader', None),
    'capture': ('.capture', None),
    'info': ('._info', 'info'),
    'sampled_aggregation': ('.ops.es_spmm', 'sampled_aggregation'),
}

if TYPE_CHECKING:  # what static tools (and IDEs) see
    from . import capture, formats, loader, nn, ops, transforms
    from ._info import info
    from .ops.es_spmm import sampled_aggregation


__getattr__, __dir__ = _lazy.attach(__name__, _LAZY, __all__)
