// GAT's per-node logit terms in one read of x: out[j, n, h] = sum_c x[n, h, c]
// * att[j, h, c] for k = 1 or 2 attention vectors, x in fp32 / fp16 / bf16,
// att and every product and sum in fp32 (what PyG's `(x * att).sum(-1)`
// computes under autocast, without its [N, H, C] fp32 temporary), and the
// backward: g_x[n, h, c] = sum_j g[j, n, h] * att[j, h, c] (fp32, one
// rounding to x's dtype) and g_att[j, h, c] = sum_n g[j, n, h] * x[n, h, c]
// (fp32 partial sums per slice of rows, summed over the slices by the host).
//
//
// row_dots(a, b): out[n, h] = sum_c a[n, h, c] * b[n, h, c] in fp32 (the
// attention backward's delta, <grad, out> per row and head), one read of each.
//
// Forward: a warp per node; G lanes per head (the power of two >= the head's
// vectors, at most 32), 32 / G heads per pass, the head's lanes reduced with
// shuffles. Backward: a thread per vector of columns of a slice of rows
// (coalesced rows), one partial row of g_att per slice. Vectors are 16 bytes
// where a head's C elements split into whole vectors and the pointers are
// aligned, else single elements.
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <initializer_list>
#include <tuple>
#include <type_traits>

#include "common/align.h"
#include "common/dtype.cuh"

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;

// V elements of a row from `p` (V = 1: one element; else one 16-byte vector),
// as fp32.
template <typename T, int V>
__device__ __forceinline__ void load_f(float (&dst)[V], const T* p) {
  const Pack<T, V> v = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) dst[i] = to_f(v.v[i]);
}

// Lane layout of the row kernels: G lanes per head (the power of two >= the
// head's C / V vectors, at most 32), 32 / G heads per pass; lane q of a head
// reads its vectors q, q + G, ...
template <typename T, int K, int V>
__global__ void __launch_bounds__(kThreads) logits_forward_kernel(const T* __restrict__ x,
                                                                  const float* __restrict__ att, int64_t N, int H,
                                                                  int C, int G, float* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (kThreads / 32);
  const int HC = H * C, per_pass = 32 / G;
  for (int64_t n = (blockIdx.x * (int64_t)kThreads + threadIdx.x) / 32; n < N; n += warps) {
    const T* xr = x + n * HC;
    for (int h0 = 0; h0 < H; h0 += per_pass) {
      const int h = h0 + lane / G, q = lane % G;
      float s[K];
#pragma unroll
      for (int j = 0; j < K; ++j) s[j] = 0.f;
      if (h < H) {
        for (int c = q * V; c < C; c += G * V) {
          float v[V];
          load_f<T, V>(v, xr + h * C + c);
#pragma unroll
          for (int j = 0; j < K; ++j) {
            float w[V];
            load_floats<V>(w, att + j * HC + h * C + c);
#pragma unroll
            for (int i = 0; i < V; ++i) s[j] = fmaf(v[i], w[i], s[j]);
          }
        }
      }
      for (int o = G / 2; o > 0; o >>= 1) {
#pragma unroll
        for (int j = 0; j < K; ++j) s[j] += __shfl_xor_sync(kFullMask, s[j], o);
      }
      if (h < H && q == 0) {
#pragma unroll
        for (int j = 0; j < K; ++j) out[(j * N + n) * H + h] = s[j];
      }
    }
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) row_dots_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                                            int64_t N, int H, int C, int G, float* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (kThreads / 32);
  const int HC = H * C, per_pass = 32 / G;
  for (int64_t n = (blockIdx.x * (int64_t)kThreads + threadIdx.x) / 32; n < N; n += warps) {
    const T* ar = a + n * HC;
    const T* br = b + n * HC;
    for (int h0 = 0; h0 < H; h0 += per_pass) {
      const int h = h0 + lane / G, q = lane % G;
      float s = 0.f;
      if (h < H) {
        for (int c = q * V; c < C; c += G * V) {
          float u[V], w[V];
          load_f<T, V>(u, ar + h * C + c);
          load_f<T, V>(w, br + h * C + c);
#pragma unroll
          for (int i = 0; i < V; ++i) s = fmaf(u[i], w[i], s);
        }
      }
      for (int o = G / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
      if (h < H && q == 0) out[n * H + h] = s;
    }
  }
}

// blockDim.x = kThreads: CW threads across the columns (V consecutive
// columns each), kThreads / CW slices of rows per block; slice s =
// blockIdx.y * (kThreads / CW) + ty covers rows [s * rows, (s + 1) * rows).
template <typename T, int K, int V>
__global__ void __launch_bounds__(kThreads) logits_backward_kernel(const T* __restrict__ x,
                                                                   const float* __restrict__ att,
                                                                   const float* __restrict__ g, int64_t N, int H,
                                                                   int C, int CW, int64_t rows, T* __restrict__ gx,
                                                                   float* __restrict__ partial) {
  const int HC = H * C, tx = threadIdx.x % CW, ty = threadIdx.x / CW;
  const int64_t slice = blockIdx.y * (int64_t)(kThreads / CW) + ty;
  const int64_t begin = slice * rows, end = min(N, begin + rows);
  for (int col = (blockIdx.x * CW + tx) * V; col < HC && threadIdx.x < (kThreads / CW) * CW;
       col += gridDim.x * CW * V) {
    const int h = col / C;  // (C % V == 0: the V columns are one head's)
    float a[K][V], acc[K][V];
#pragma unroll
    for (int j = 0; j < K; ++j)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        a[j][i] = att[j * HC + col + i];
        acc[j][i] = 0.f;
      }
#pragma unroll 4
    for (int64_t n = begin; n < end; ++n) {
      float v[V];
      load_f<T, V>(v, x + n * HC + col);
      float d[V];
#pragma unroll
      for (int i = 0; i < V; ++i) d[i] = 0.f;
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const float gj = g[(j * N + n) * H + h];
#pragma unroll
        for (int i = 0; i < V; ++i) {
          d[i] = fmaf(gj, a[j][i], d[i]);
          acc[j][i] = fmaf(gj, v[i], acc[j][i]);
        }
      }
      Pack<T, V> o;
#pragma unroll
      for (int i = 0; i < V; ++i) o.v[i] = from_f<T>(d[i]);
      *reinterpret_cast<Pack<T, V>*>(gx + n * HC + col) = o;
    }
#pragma unroll
    for (int j = 0; j < K; ++j)
#pragma unroll
      for (int i = 0; i < V; ++i) partial[(slice * K + j) * HC + col + i] = acc[j][i];
  }
}

void check(const at::Tensor& x, const at::Tensor& att) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 3 && x.is_contiguous(),
              "pyg_tc: att_logits: x must be a contiguous [N, H, C] CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16,
              "pyg_tc: att_logits: x must be float32, float16 or bfloat16");
  TORCH_CHECK(att.is_cuda() && att.scalar_type() == at::kFloat && att.is_contiguous() && att.dim() == 3 &&
                  (att.size(0) == 1 || att.size(0) == 2) && att.size(1) == x.size(1) && att.size(2) == x.size(2),
              "pyg_tc: att_logits: att must be a contiguous fp32 CUDA tensor [k, H, C], k = 1 or 2");
  TORCH_CHECK(x.size(1) * x.size(2) < (1ll << 31), "pyg_tc: att_logits: rows too wide");
}

template <typename F>
void by_dtype(at::ScalarType dt, int k, F&& f) {
  auto with_k = [&](auto tag) {
    using T = decltype(tag);
    if (k == 1) f(T{}, std::integral_constant<int, 1>{});
    else f(T{}, std::integral_constant<int, 2>{});
  };
  if (dt == at::kFloat) with_k(float{});
  else if (dt == at::kHalf) with_k(__half{});
  else with_k(__nv_bfloat16{});
}

int lanes_per_head(int64_t vectors) {
  int G = 1;
  while (G < vectors && G < 32) G *= 2;
  return G;
}

// The vector path (16-byte loads and stores): a head's C elements are whole
// vectors and every pointer is 16-byte aligned.
template <typename T>
bool vector_path(int64_t C, std::initializer_list<const void*> ptrs) {
  if (C % vec16<T>() != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

// f(T{}, integral_constant<int, V>{}) with V = vec16<T>() on the vector path, else 1.
template <typename T, typename F>
void by_width(bool vec, F&& f) {
  if (vec) f(std::integral_constant<int, vec16<T>()>{});
  else f(std::integral_constant<int, 1>{});
}

at::Tensor att_logits_cuda(const at::Tensor& x, const at::Tensor& att) {
  check(x, att);
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), H = x.size(1), C = x.size(2), k = att.size(0);
  auto out = at::empty({k, N, H}, x.options().dtype(at::kFloat));
  if (N == 0 || H == 0) return out;
  if (C == 0) return out.zero_();
  const int64_t blocks = std::min<int64_t>((N + kThreads / 32 - 1) / (kThreads / 32), 65535LL * 16);
  auto stream = c10::cuda::getCurrentCUDAStream();
  by_dtype(x.scalar_type(), (int)k, [&](auto t, auto kk) {
    using T = decltype(t);
    by_width<T>(vector_path<T>(C, {x.data_ptr(), att.data_ptr()}), [&](auto vv) {
      constexpr int V = decltype(vv)::value;
      logits_forward_kernel<T, decltype(kk)::value, V><<<(unsigned)blocks, kThreads, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), att.data_ptr<float>(), N, (int)H, (int)C, lanes_per_head(C / V),
          out.data_ptr<float>());
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor row_dots_cuda(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.is_cuda() && a.dim() == 3 && a.is_contiguous() && b.is_contiguous() && a.sizes() == b.sizes() &&
                  a.scalar_type() == b.scalar_type() && b.device() == a.device(),
              "pyg_tc: row_dots: a and b must be contiguous CUDA tensors [N, H, C] of one dtype");
  TORCH_CHECK(a.scalar_type() == at::kFloat || a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16,
              "pyg_tc: row_dots: a must be float32, float16 or bfloat16");
  c10::cuda::CUDAGuard guard(a.device());
  const int64_t N = a.size(0), H = a.size(1), C = a.size(2);
  auto out = at::empty({N, H}, a.options().dtype(at::kFloat));
  if (N == 0 || H == 0) return out;
  if (C == 0) return out.zero_();
  const int64_t blocks = std::min<int64_t>((N + kThreads / 32 - 1) / (kThreads / 32), 65535LL * 16);
  auto stream = c10::cuda::getCurrentCUDAStream();
  by_dtype(a.scalar_type(), 1, [&](auto t, auto) {
    using T = decltype(t);
    by_width<T>(vector_path<T>(C, {a.data_ptr(), b.data_ptr()}), [&](auto vv) {
      constexpr int V = decltype(vv)::value;
      row_dots_kernel<T, V><<<(unsigned)blocks, kThreads, 0, stream>>>(
          static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()), N, (int)H, (int)C,
          lanes_per_head(C / V), out.data_ptr<float>());
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor> att_logits_backward_cuda(const at::Tensor& x, const at::Tensor& att,
                                                            const at::Tensor& grad) {
  check(x, att);
  const int64_t N = x.size(0), H = x.size(1), C = x.size(2), k = att.size(0), HC = H * C;
  TORCH_CHECK(grad.is_cuda() && grad.scalar_type() == at::kFloat && grad.is_contiguous() && grad.dim() == 3 &&
                  grad.size(0) == k && grad.size(1) == N && grad.size(2) == H,
              "pyg_tc: att_logits_backward: grad must be a contiguous fp32 CUDA tensor [k, N, H]");
  c10::cuda::CUDAGuard guard(x.device());
  auto gx = at::empty_like(x);
  if (N == 0 || HC == 0) return {gx, at::zeros_like(att)};
  auto stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor partial;
  by_dtype(x.scalar_type(), (int)k, [&](auto t, auto kk) {
    using T = decltype(t);
    by_width<T>(vector_path<T>(C, {x.data_ptr(), gx.data_ptr()}), [&](auto vv) {
      constexpr int V = decltype(vv)::value;
      const int64_t threads_per_row = HC / V;  // (C % V == 0 on the vector path)
      const int CW = (int)std::min<int64_t>(kThreads, (threads_per_row + 31) / 32 * 32);
      const int per_block = kThreads / CW;
      const int64_t col_blocks = (threads_per_row + CW - 1) / CW;
      // about 2048 slices of rows over all column blocks (at least 16 rows each)
      const int64_t target = std::max<int64_t>(1, 2048 / col_blocks);
      const int64_t rows = std::max<int64_t>(16, (N + target - 1) / target);
      const int64_t slices = (N + rows - 1) / rows;
      const int64_t row_blocks = (slices + per_block - 1) / per_block;
      TORCH_CHECK(row_blocks < 65536, "pyg_tc: att_logits_backward: too many rows");
      partial = at::zeros({row_blocks * per_block, k, HC}, x.options().dtype(at::kFloat));
      logits_backward_kernel<T, decltype(kk)::value, V>
          <<<dim3((unsigned)col_blocks, (unsigned)row_blocks), kThreads, 0, stream>>>(
              static_cast<const T*>(x.data_ptr()), att.data_ptr<float>(), grad.data_ptr<float>(), N, (int)H,
              (int)C, CW, rows, static_cast<T*>(gx.data_ptr()), partial.data_ptr<float>());
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {gx, partial.sum(0).view({k, H, C})};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("att_logits", &att_logits_cuda);
  m.impl("att_logits_backward", &att_logits_backward_cuda);
  m.impl("row_dots", &row_dots_cuda);
}

}  // namespace pyg_tc
