"""Sparse formats: metadata tensors, builders, validation and CPU emulation."""
from .csr import DEFAULT_CHUNK, CSRGraph, Schedule, build_schedule, emulate_spmm
from .carrier import TCEdgeIndex, attach, clear_graph, get_graph, has_graph, plain_tensor
from .cbsr import CBSR, emulate_cbsr_spmm, emulate_cbsr_sspmm

__all__ = ['CSRGraph', 'Schedule', 'build_schedule', 'emulate_spmm', 'TCEdgeIndex', 'attach',
           'clear_graph', 'has_graph', 'plain_tensor',
           'get_graph', 'DEFAULT_CHUNK', 'CBSR', 'emulate_cbsr_spmm', 'emulate_cbsr_sspmm']
