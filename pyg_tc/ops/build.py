"""The format builders' GPU ops (kernels: ``kernels/csr/csr_build.cu``):

* ``csr_transpose(col, rows, num_cols) -> (t_rowptr, t_col, t_perm)``: the
  transpose of a CSR given the source (``col``) and target (``rows``) of every
  CSR position, sources sorted stably;
* ``csr_schedules(rowptrs, chunk) -> [units, heavy_rows, heavy_ptr] * n +
  [slots]``: the degree-bucket schedule of each ``rowptr``
  (:class:`~pyg_tc.formats.csr.Schedule`), with one synchronisation in all;
* ``csr_padded_schedules(rowptrs, chunk, num_edges) -> [units, heavy_rows,
  heavy_ptr] * n``: the same with array sizes fixed by the rows,
  ``num_edges`` and ``chunk`` (filler entries), without synchronisation
  (padded batches, and inside a captured step);
* ``csr_pad_hops(rowptr, col, num_nodes, num_edges, pad_nodes, pad_edges) ->
  [rowptr, col, rows, node_index, edge_index, node_mask]``: a sampled
  batch's CSR padded hop by hop (``CSRGraph.pad_hops``),
  one launch, without synchronisation.

Their references are the pure-PyTorch builders of :mod:`pyg_tc.formats.csr`,
which calls these ops on CUDA tensors when the kernels are loaded. The ops
are defined in :mod:`pyg_tc.formats.csr`, beside their references (the
formats sit below the ops and call them directly, never importing this
package); this module names them among the op families.
"""

from __future__ import annotations

from ..formats.csr import (
    csr_pad_hops,
    csr_padded_schedules,
    csr_schedules,
    csr_transpose,  # noqa: F401
    pad_hops_reference,
    padded_schedules_reference,
    schedules_reference,
    transpose_reference,
)
