"""Differentiable sparse ops: one module per kernel family, one dispatch point.

* :mod:`~pyg_tc.ops.csr`: SpMM / SDDMM on the CSR engine (``spmm_csr``, ``sddmm_csr``);
* :mod:`~pyg_tc.ops.sgt`: TC-GNN's tensor-core SpMM / SDDMM (``sgt_spmm``, ``sgt_sddmm``);
* :mod:`~pyg_tc.ops.cbsr`: MaxK-GNN's top-k and CBSR SpGEMM / SSpMM
  (``maxk_select``, ``cbsr_spmm``, ``cbsr_sspmm``);
* :mod:`~pyg_tc.ops.attn`: fuseGNN's fused attention (``attn_gat``,
  ``attn_gatv2`` and their backward ops) and ``edge_softmax``;
* the format builders' GPU ops (the int32 radix sort ``sort_int32``, ``csr_transpose``,
  ``csr_schedules``, ``csr_padded_schedules``, ``csr_pad_hops``) are defined in
  :mod:`pyg_tc.formats.csr`, beside their references: the formats sit below the ops;
* :mod:`~pyg_tc.ops.neighbor`: mini-batch neighbour sampling whose output is the batch's CSR
  (``neighbor_sample``) and the row gather of its features (``gather_rows``);
  :mod:`~pyg_tc.ops.hetero_neighbor`: the same for heterogeneous graphs
  (``hetero_neighbor_sample``, every edge type of a hop in turn);
* :mod:`~pyg_tc.ops.es_spmm`: ES-SpMM's edge sampling (capped rows, the
  sampled aggregation and :func:`~pyg_tc.sampled_aggregation`);
* :mod:`~pyg_tc.ops.dense`: the layers' output epilogue (``bias_sum``: a half output plus its
  fp32 bias, and ``HeteroConv``'s sum over edge types, in one pass);
* :mod:`~pyg_tc.ops.dispatch`: the backend vocabulary and the one place that
  chooses an implementation per call (``'auto'``, ``'csr'``, ``'sgt'``,
  ``'reference'``; CBSR features take the CBSR kernels).

Each op module holds its schema, checks, reference, fake kernel and
autograd (an op of the private ``pyg_tc._library``). CUDA kernels run fp32 / fp16 / bf16
on a GPU with the kernels built; otherwise, and for float64, the
pure-PyTorch reference runs through the same registered op.
"""

from .._library import ensure
from . import attn, cbsr, csr, dense, dispatch, es_spmm, hetero_neighbor, neighbor, sgt  # noqa: F401 (define the ops)
from .csr import sddmm_graph, sddmm_reference, spmm_graph, spmm_reference
from .attn import (
    attention_weights,
    edge_softmax,
    gat_attention,
    gatv2_attention,
)
from .dispatch import BACKENDS, aggregate, choose_backend, edge_scores, sddmm, spmm
from .es_spmm import sampled_aggregation, sampled_spmm_reference
from .cbsr import (
    cbsr_spmm_graph,
    cbsr_spmm_reference,
    cbsr_sspmm_reference,
    check_k,
    maxk,
    maxk_reference,
)
from .sgt import (
    sgt_of,
    sgt_sddmm_cells,
    sgt_sddmm_graph,
    sgt_spmm_cells,
    sgt_spmm_graph,
)

__all__ = [
    'spmm',
    'sddmm',
    'aggregate',
    'edge_scores',
    'spmm_graph',
    'sddmm_graph',
    'maxk',
    'cbsr_spmm_graph',
    'sgt_spmm_graph',
    'sgt_sddmm_graph',
    'sgt_spmm_cells',
    'sgt_sddmm_cells',
    'sgt_of',
    'choose_backend',
    'check_k',
    'ensure',
    'BACKENDS',
    'spmm_reference',
    'sddmm_reference',
    'maxk_reference',
    'cbsr_spmm_reference',
    'cbsr_sspmm_reference',
    'gat_attention',
    'gatv2_attention',
    'edge_softmax',
    'attention_weights',
    'sampled_aggregation',
    'sampled_spmm_reference',
]
