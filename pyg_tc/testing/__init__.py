"""Test helpers, as ``torch_geometric.testing``: the CPU emulations of the
CUDA kernels (:mod:`pyg_tc.testing.emulate`)."""

from .emulate import (
    emulate_attention,
    emulate_cbsr_spmm,
    emulate_cbsr_sspmm,
    emulate_csr_spmm,
    emulate_sgt_sddmm,
    emulate_sgt_spmm,
)

__all__ = [
    'emulate_csr_spmm',
    'emulate_sgt_spmm',
    'emulate_sgt_sddmm',
    'emulate_cbsr_spmm',
    'emulate_cbsr_sspmm',
    'emulate_attention',
]
