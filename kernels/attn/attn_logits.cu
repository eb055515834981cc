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
// Forward: a warp per node; G lanes per head (the power of two >= C, at most
// 32), 32 / G heads per pass, the head's lanes reduced with shuffles.
// Backward: a thread per column of a slice of rows (coalesced rows), one
// partial row of g_att per slice.
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <tuple>
#include <type_traits>

#include "common/dtype.cuh"

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;

template <typename T, int K>
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
        for (int c = q; c < C; c += G) {
          const float v = to_f(xr[h * C + c]);
#pragma unroll
          for (int j = 0; j < K; ++j) s[j] = fmaf(v, att[j * HC + h * C + c], s[j]);
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

template <typename T>
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
      if (h < H)
        for (int c = q; c < C; c += G) s = fmaf(to_f(ar[h * C + c]), to_f(br[h * C + c]), s);
      for (int o = G / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
      if (h < H && q == 0) out[n * H + h] = s;
    }
  }
}

// blockDim.x = kThreads: CW threads across the columns, kThreads / CW slices
// of rows per block; slice s = blockIdx.y * (kThreads / CW) + ty covers rows
// [s * rows, (s + 1) * rows).
template <typename T, int K>
__global__ void __launch_bounds__(kThreads) logits_backward_kernel(const T* __restrict__ x,
                                                                   const float* __restrict__ att,
                                                                   const float* __restrict__ g, int64_t N, int H,
                                                                   int C, int CW, int64_t rows, T* __restrict__ gx,
                                                                   float* __restrict__ partial) {
  const int HC = H * C, tx = threadIdx.x % CW, ty = threadIdx.x / CW;
  const int64_t slice = blockIdx.y * (int64_t)(kThreads / CW) + ty;
  const int64_t begin = slice * rows, end = min(N, begin + rows);
  for (int col = blockIdx.x * CW + tx; col < HC && threadIdx.x < (kThreads / CW) * CW; col += gridDim.x * CW) {
    const int h = col / C;
    float a[K], acc[K];
#pragma unroll
    for (int j = 0; j < K; ++j) {
      a[j] = att[j * HC + col];
      acc[j] = 0.f;
    }
    for (int64_t n = begin; n < end; ++n) {
      const float v = to_f(x[n * HC + col]);
      float d = 0.f;
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const float gj = g[(j * N + n) * H + h];
        d = fmaf(gj, a[j], d);
        acc[j] = fmaf(gj, v, acc[j]);
      }
      gx[n * HC + col] = from_f<T>(d);
    }
#pragma unroll
    for (int j = 0; j < K; ++j) partial[(slice * K + j) * HC + col] = acc[j];
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

int lanes_per_head(int64_t C) {
  int G = 1;
  while (G < C && G < 32) G *= 2;
  return G;
}

at::Tensor att_logits_cuda(const at::Tensor& x, const at::Tensor& att) {
  check(x, att);
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), H = x.size(1), C = x.size(2), k = att.size(0);
  auto out = at::empty({k, N, H}, x.options().dtype(at::kFloat));
  if (N == 0 || H == 0) return out;
  if (C == 0) return out.zero_();
  const int G = lanes_per_head(C);
  const int64_t blocks = std::min<int64_t>((N + kThreads / 32 - 1) / (kThreads / 32), 65535LL * 16);
  auto stream = c10::cuda::getCurrentCUDAStream();
  by_dtype(x.scalar_type(), (int)k, [&](auto t, auto kk) {
    using T = decltype(t);
    logits_forward_kernel<T, decltype(kk)::value><<<(unsigned)blocks, kThreads, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()), att.data_ptr<float>(), N, (int)H, (int)C, G,
        out.data_ptr<float>());
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
    row_dots_kernel<T><<<(unsigned)blocks, kThreads, 0, stream>>>(static_cast<const T*>(a.data_ptr()),
                                                                    static_cast<const T*>(b.data_ptr()), N, (int)H,
                                                                    (int)C, lanes_per_head(C), out.data_ptr<float>());
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
  const int CW = (int)std::min<int64_t>(kThreads, (HC + 31) / 32 * 32);
  const int per_block = kThreads / CW;
  const int64_t col_blocks = (HC + CW - 1) / CW;
  // about 2048 slices of rows over all column blocks (at least 16 rows each)
  const int64_t target = std::max<int64_t>(1, 2048 / col_blocks);
  const int64_t rows = std::max<int64_t>(16, (N + target - 1) / target);
  const int64_t slices = (N + rows - 1) / rows;
  const int64_t row_blocks = (slices + per_block - 1) / per_block;
  TORCH_CHECK(row_blocks < 65536, "pyg_tc: att_logits_backward: too many rows");
  auto partial = at::zeros({row_blocks * per_block, k, HC}, x.options().dtype(at::kFloat));
  auto stream = c10::cuda::getCurrentCUDAStream();
  by_dtype(x.scalar_type(), (int)k, [&](auto t, auto kk) {
    using T = decltype(t);
    logits_backward_kernel<T, decltype(kk)::value>
        <<<dim3((unsigned)col_blocks, (unsigned)row_blocks), kThreads, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), att.data_ptr<float>(), grad.data_ptr<float>(), N, (int)H,
            (int)C, CW, rows, static_cast<T*>(gx.data_ptr()), partial.data_ptr<float>());
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
