// Attention family (fused GAT / GATv2 / given-score attention): the parameters
// of the forward and the two backward walks, filled once by attn_host.cpp and
// passed by value to the kernels (attn_forward.cu, attn_backward_rows.cu,
// attn_backward_cols.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pyg_tc {

struct AttnParams {
  // The walk: a unit schedule over the forward CSR (rows = targets, `col` =
  // sources) or, for the source-side backward, over the transpose (rows =
  // sources, `col` = t_col = targets, `perm` = t_perm = forward edge ids).
  const int4* units{};
  int64_t num_units{};
  const int* col{};
  const int* perm{};  // nullptr: the position is the forward edge id
  const int* heavy_rows{};
  const int* heavy_ptr{};
  int64_t num_heavy{};
  float* ws{};  // [num_slots, ws_stride] fp32 partial states of split rows
  int ws_stride{};
  // Inputs: x [Ns, H*C] (T); GAT terms a_src [Ns, H], a_dst [Nd, H],
  // score [E, H] (fp32, nullptr = absent); GATv2: x_r [Nd, H*C] (T),
  // att [H*C] (fp32), edge [E, H*C] (T, nullptr = absent).
  const void* x{};
  const float* a_src{};
  const float* a_dst{};
  const float* score{};
  const void* x_r{};
  const float* att{};
  const void* edge{};
  float slope{};
  // attention dropout: drop with probability p_drop, keep scaled by
  // keep_scale; Philox key and offset read from rng [2] on the device
  float p_drop{};
  float keep_scale{1.f};
  const int64_t* rng{};
  int H{}, C{};
  // lane layout: L lanes per unit (G = 32 / L units per warp), LH lanes per
  // head, HS = L / LH heads per unit; blockIdx.y picks the slice of heads
  int L{}, LH{}, HS{};
  // forward outputs: out [Nd, H*C] (T), lse [Nd, H] (fp64: the backward's
  // e^(s - lse) is then as exact as the forward's e^(s - m) / l)
  void* out{};
  double* lse{};
  // backward inputs: grad [Nd, H*C] (T), lse [Nd, H] as fp32 pairs (hi, lo)
  // with hi + lo = the fp64 lse (e^((s - hi) - lo): no fp64 work per edge),
  // delta [Nd, H] (fp32)
  const void* grad{};
  const float2* lse_in{};
  const float* delta{};
  // backward outputs (nullptr = not wanted). Row walk: g_dst [Nd, H],
  // g_score [E, H] (GAT); g_r [Nd, H*C] (T), g_att [Nd, H*C] fp32 per-row
  // partials, g_edge [E, H*C] (T) (GATv2). Transpose walk: g_x [Ns, H*C]
  // (T), g_src [Ns, H] (GAT).
  float* g_dst{};
  float* g_score{};
  void* g_r{};
  float* g_att{};
  void* g_edge{};
  void* g_x{};
  float* g_src{};
  // launch configuration (the lane layout rule in attn_host.cpp); the
  // launchers turn it into template arguments with attn_switch
  // (attn_device.cuh)
  bool vec{};  // 16-byte vectors
  bool nv4{};  // four vectors per lane (heads of 4 vectors or more)
  bool v2{};  // GATv2 scores (else GAT / given scores)
};

// The second passes over split (heavy) rows, one block per row
// (attn_device.cuh): the forward's softmax merge of the slots' (acc, m, l)
// states into out [Nd, H*C] (T) and lse [Nd, H] (fp64), and the backward's sum of
// the slots' first n_t floats into out_t [., n_t] (T) and the next n_f into
// out_f [., n_f] (fp32; either output nullptr = not wanted).
struct MergeSoftmaxParams {
  const int* heavy_rows{};
  const int* heavy_ptr{};
  const float* ws{};
  int stride{};
  int H{}, C{};
  void* out{};
  double* lse{};
};

struct MergeSumParams {
  const int* heavy_rows{};
  const int* heavy_ptr{};
  const float* ws{};
  int stride{};
  int n_t{};
  void* out_t{};
  int n_f{};
  float* out_f{};
};

// Defined for float, __half, __nv_bfloat16 in attn_forward.cu /
// attn_backward_rows.cu / attn_backward_cols.cu.
template <typename T> void run_attn_forward(const AttnParams& p, cudaStream_t stream);
template <typename T> void run_attn_backward_rows(const AttnParams& p, cudaStream_t stream);
template <typename T> void run_attn_backward_cols(const AttnParams& p, cudaStream_t stream);

}  // namespace pyg_tc
