"""Sparse formats: metadata tensors, builders and validation (the ops that
run on them and their references: :mod:`pyg_tc.ops`; the kernels' CPU
emulations: :mod:`pyg_tc.testing`)."""

from .csr import DEFAULT_CHUNK, CSRGraph, Schedule, build_schedule
from .carrier import TCEdgeIndex, attach, clear_graph, csr_order, get_graph, has_graph, plain_tensor, resolve
from .cbsr import CBSR
from . import padding  # noqa: F401  (defines the padding ops)

__all__ = [
    'CSRGraph',
    'Schedule',
    'build_schedule',
    'TCEdgeIndex',
    'attach',
    'clear_graph',
    'has_graph',
    'plain_tensor',
    'get_graph',
    'resolve',
    'csr_order',
    'DEFAULT_CHUNK',
    'CBSR',
]
