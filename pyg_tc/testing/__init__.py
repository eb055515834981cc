"""Test helpers, as ``torch_geometric.testing``: the CPU emulations of the
CUDA kernels (:mod:`pyg_tc.testing.emulate`) and overrides of their launch
rules (:func:`kernel_overrides`)."""

from .emulate import (
    emulate_attention,
    emulate_cbsr_spmm,
    emulate_cbsr_sspmm,
    emulate_csr_spmm,
    emulate_sgt_sddmm,
    emulate_sgt_spmm,
)
from .kernels import kernel_overrides

__all__ = [
    'kernel_overrides',
    'emulate_csr_spmm',
    'emulate_sgt_spmm',
    'emulate_sgt_sddmm',
    'emulate_cbsr_spmm',
    'emulate_cbsr_sspmm',
    'emulate_attention',
]
