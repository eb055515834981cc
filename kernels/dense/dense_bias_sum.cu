// bias_sum(xs, bias, init): a layer's output epilogue in one pass,
//
//   out[n, f] = init[n, f] + sum_r (float(xs[r][n, f]) + bias[r, f])      (fp32)
//
// for k = 1 to 8 inputs of one dtype (fp32 / fp16 / bf16, [N, F] contiguous),
// `bias` [k, F] fp32 (optional) and `init` [N, F] fp32 (optional). The terms
// are added left to right, each rounded to fp32 as PyTorch rounds
// `x.float() + b` and `y1 + y2`, so the result equals the unfused expression
// ((x1 + b1) + (x2 + b2)) + ... bit for bit. Without `init` the first term
// starts the sum.
//
// This is what a half layer output plus its fp32 bias (PyG's `out + bias`
// under autocast) and `HeteroConv`'s sum over edge types cost as PyTorch
// operations: a mixed-dtype addition with a broadcast operand, which PyTorch
// runs element by element (no vector loads), then fp32 additions that read
// and write every partial sum.
//
// A thread per 16-byte vector of the inputs (one element where F is not a
// whole number of vectors or a pointer is not 16-byte aligned), the number of
// inputs a template argument.
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <optional>
#include <type_traits>

#include "common/align.h"
#include "common/dtype.cuh"

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxInputs = 8;

template <typename T>
struct BiasSumParams {
  const T* x[kMaxInputs];  // k inputs [N, F]
  int k;
  const float* bias;  // [k, F], or nullptr
  const float* init;  // [N, F], or nullptr
  int64_t total;      // N * F
  int64_t F;
  float* out;  // [N, F]
};

// Term r at element e (column col): float(x[r][e]) + bias[r, col].
template <typename T, int V>
__device__ __forceinline__ void term(float (&t)[V], const T* x, const float* bias, int64_t e) {
  const Pack<T, V> v = *reinterpret_cast<const Pack<T, V>*>(x + e);
#pragma unroll
  for (int i = 0; i < V; ++i) t[i] = to_f(v.v[i]);
  if (bias != nullptr) {
    float b[V];
    load_floats<V>(b, bias);
#pragma unroll
    for (int i = 0; i < V; ++i) t[i] = __fadd_rn(t[i], b[i]);
  }
}

// K inputs (a template argument: the params' pointer array is indexed with
// constants, so it stays in the parameter space). A thread walks vectors
// `stride` apart; its column advances by `stride % F` per step (one modulo
// per thread, at the start).
template <typename T, int V, int K>
__global__ void __launch_bounds__(kThreads) bias_sum_kernel(const BiasSumParams<T> p) {
  const int64_t vectors = p.total / V, FV = p.F / V;
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  const int64_t step = stride % FV;
  int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x;
  int64_t cv = i % FV;
  for (; i < vectors; i += stride) {
    const int64_t e = i * V, col = cv * V;  // (F % V == 0: the V elements are one row's)
    float acc[V];
    if (p.init != nullptr) load_floats<V>(acc, p.init + e);
#pragma unroll
    for (int r = 0; r < K; ++r) {
      float t[V];
      term<T, V>(t, p.x[r], p.bias != nullptr ? p.bias + r * p.F + col : nullptr, e);
      if (r == 0 && p.init == nullptr) {
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = t[j];
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = __fadd_rn(acc[j], t[j]);
      }
    }
    store_floats<V>(p.out + e, acc);
    cv += step;
    if (cv >= FV) cv -= FV;
  }
}

template <typename T, int V>
void launch_k(const BiasSumParams<T>& p, int64_t blocks, cudaStream_t stream) {
  const dim3 g((unsigned)blocks), b(kThreads);
  switch (p.k) {
    case 1: bias_sum_kernel<T, V, 1><<<g, b, 0, stream>>>(p); break;
    case 2: bias_sum_kernel<T, V, 2><<<g, b, 0, stream>>>(p); break;
    case 3: bias_sum_kernel<T, V, 3><<<g, b, 0, stream>>>(p); break;
    case 4: bias_sum_kernel<T, V, 4><<<g, b, 0, stream>>>(p); break;
    case 5: bias_sum_kernel<T, V, 5><<<g, b, 0, stream>>>(p); break;
    case 6: bias_sum_kernel<T, V, 6><<<g, b, 0, stream>>>(p); break;
    case 7: bias_sum_kernel<T, V, 7><<<g, b, 0, stream>>>(p); break;
    default: bias_sum_kernel<T, V, 8><<<g, b, 0, stream>>>(p); break;
  }
}

template <typename T>
void launch(const BiasSumParams<T>& p, bool vec, cudaStream_t stream) {
  constexpr int VW = 16 / sizeof(T);
  const int V = vec ? VW : 1;
  const int64_t vectors = p.total / V;
  const int64_t blocks = std::min<int64_t>((vectors + kThreads - 1) / kThreads, 1LL << 20);
  if (vec) launch_k<T, VW>(p, blocks, stream);
  else launch_k<T, 1>(p, blocks, stream);
}

at::Tensor bias_sum_cuda(at::TensorList xs, const std::optional<at::Tensor>& bias,
                         const std::optional<at::Tensor>& init) {
  const int64_t k = (int64_t)xs.size();
  TORCH_CHECK(k >= 1 && k <= kMaxInputs, "pyg_tc: bias_sum: takes 1 to ", kMaxInputs, " inputs, got ", k);
  const at::Tensor& x0 = xs[0];
  TORCH_CHECK(x0.is_cuda() && x0.dim() == 2, "pyg_tc: bias_sum: inputs must be [N, F] CUDA tensors");
  TORCH_CHECK(x0.scalar_type() == at::kFloat || x0.scalar_type() == at::kHalf || x0.scalar_type() == at::kBFloat16,
              "pyg_tc: bias_sum: inputs must be float32, float16 or bfloat16");
  for (const at::Tensor& x : xs)
    TORCH_CHECK(x.is_contiguous() && x.sizes() == x0.sizes() && x.scalar_type() == x0.scalar_type() &&
                    x.device() == x0.device(),
                "pyg_tc: bias_sum: inputs must be contiguous tensors of one shape, dtype and device");
  const int64_t N = x0.size(0), F = x0.size(1);
  if (bias.has_value())
    TORCH_CHECK(bias->device() == x0.device() && bias->scalar_type() == at::kFloat && bias->is_contiguous() &&
                    bias->dim() == 2 && bias->size(0) == k && bias->size(1) == F,
                "pyg_tc: bias_sum: bias must be a contiguous fp32 tensor [k, F] on the inputs' device");
  if (init.has_value())
    TORCH_CHECK(init->device() == x0.device() && init->scalar_type() == at::kFloat && init->is_contiguous() &&
                    init->sizes() == x0.sizes(),
                "pyg_tc: bias_sum: init must be a contiguous fp32 tensor [N, F] on the inputs' device");
  c10::cuda::CUDAGuard guard(x0.device());
  auto out = at::empty({N, F}, x0.options().dtype(at::kFloat));
  if (N == 0 || F == 0) return out;
  auto stream = c10::cuda::getCurrentCUDAStream();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    BiasSumParams<T> p{};
    bool vec = F % (16 / (int64_t)sizeof(T)) == 0 && aligned16(out.data_ptr());
    for (int64_t r = 0; r < k; ++r) {
      p.x[r] = static_cast<const T*>(xs[r].data_ptr());
      vec = vec && aligned16(p.x[r]);
    }
    p.k = (int)k;
    p.bias = bias.has_value() ? bias->data_ptr<float>() : nullptr;
    p.init = init.has_value() ? init->data_ptr<float>() : nullptr;
    vec = vec && (p.bias == nullptr || aligned16(p.bias)) && (p.init == nullptr || aligned16(p.init));
    p.total = N * F;
    p.F = F;
    p.out = out.data_ptr<float>();
    launch<T>(p, vec, stream);
  };
  if (x0.scalar_type() == at::kFloat) run(float{});
  else if (x0.scalar_type() == at::kHalf) run(__half{});
  else run(__nv_bfloat16{});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) { m.impl("bias_sum", &bias_sum_cuda); }

}  // namespace pyg_tc
