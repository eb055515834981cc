// Schemas of every pyg_tc op. Kernel files register implementations with
// TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m); the CPU implementation (the pure-PyTorch
// reference), fake kernels and autograd are registered in Python
// (pyg_tc/ops/_registry.py). Where this extension is not loaded (no CUDA), the
// same schema strings are defined from Python; tests/test_registry.py checks
// that both lists agree.
#include <torch/library.h>

TORCH_LIBRARY(pyg_tc, m) {
  // Forward CSR (rows = targets) with its schedule, then the transpose
  // (t_*) that the registered backward needs.
  m.def(
      "spmm_csr(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor units, "
      "Tensor heavy_rows, Tensor heavy_ptr, Tensor? diag, int num_slots, str reduce, "
      "Tensor t_rowptr, Tensor t_col, Tensor t_perm, Tensor? t_value, Tensor t_units, "
      "Tensor t_heavy_rows, Tensor t_heavy_ptr, int t_num_slots) -> Tensor");
  m.def(
      "sddmm_csr(Tensor col, Tensor a, Tensor b, Tensor units, Tensor rowptr, "
      "Tensor heavy_rows, Tensor heavy_ptr, int num_slots, Tensor t_rowptr, Tensor t_col, "
      "Tensor t_perm, Tensor t_units, Tensor t_heavy_rows, Tensor t_heavy_ptr, "
      "int t_num_slots) -> Tensor");
  // MaxK-GNN: top-k selection to CBSR (values, uint8/int16 column indices),
  // forward SpGEMM (CSR x CBSR -> dense) and backward SSpMM (sampled A^T x
  // dense -> CBSR values), both over the forward CSR and its unit schedule.
  m.def("maxk_select(Tensor x, int k) -> (Tensor, Tensor)");
  m.def(
      "cbsr_spmm(Tensor rowptr, Tensor col, Tensor? value, Tensor values, Tensor indices, "
      "int width, Tensor units, Tensor heavy_rows, Tensor heavy_ptr, int num_slots, "
      "Tensor? diag, str reduce) -> Tensor");
  m.def(
      "cbsr_sspmm(Tensor rowptr, Tensor col, Tensor? value, Tensor grad, Tensor indices, "
      "Tensor units, Tensor heavy_rows, Tensor heavy_ptr, int num_slots, Tensor? diag, "
      "str reduce) -> Tensor");
  // TC-GNN: tensor-core SpMM / SDDMM over SGT blocks (pyg_tc/formats/sgt.py).
  // Forward direction (units, cols, mask, cell_ptr, split windows), then the
  // transpose (t_*) and the transpose-cell -> forward-cell map for autograd.
  // precision: 0 = TF32 for fp32 inputs, 1 = 3xTF32 (fp32-accurate).
  m.def(
      "sgt_spmm(Tensor units, Tensor cols, Tensor mask, Tensor cell_ptr, Tensor heavy, "
      "Tensor heavy_ptr, int num_slots, Tensor cell_val, Tensor x, Tensor? diag, int num_rows, "
      "int precision, int warps, Tensor t_units, Tensor t_cols, Tensor t_mask, Tensor t_cell_ptr, "
      "Tensor t_heavy, Tensor t_heavy_ptr, int t_num_slots, Tensor t_cell) -> Tensor");
  m.def(
      "sgt_sddmm(Tensor units, Tensor cols, Tensor mask, Tensor cell_ptr, Tensor heavy, "
      "Tensor heavy_ptr, int num_slots, Tensor a, Tensor b, int num_cells, int precision, "
      "int warps, Tensor t_units, Tensor t_cols, Tensor t_mask, Tensor t_cell_ptr, "
      "Tensor t_heavy, Tensor t_heavy_ptr, int t_num_slots, Tensor t_cell) -> Tensor");
  // Stable sort of non-negative int32 keys < 2^end_bit: (sorted keys, int32 permutation).
  m.def("sort_int32(Tensor keys, int end_bit) -> (Tensor, Tensor)");
}
