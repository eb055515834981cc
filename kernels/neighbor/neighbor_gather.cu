// gather_rows(x, index): out[i] = x[index[i]] on the GPU, for an x on the GPU
// or in pinned host memory (read in place over UVA: node features that do not
// fit on the GPU are gathered per batch without a CPU pass). Rows are copied
// as raw bytes, 16 / 8 / 4 / 1 bytes per load by the row's size and
// alignment, the lanes of a team on consecutive words of a row (coalesced);
// each lane issues the loads of several rows before its stores, so rows of
// narrow words (a 100-wide bf16 row is 25 words of 8 bytes) keep as many
// bytes in flight as rows of 16-byte words.
//
// gather_rows_scaled(x, scale, index, dtype): the same gather of an fp8
// (e4m3) matrix, each element upcast on the way: out[i, c] =
// dtype(float(x[index[i], c]) * scale[c]) (scale per column, or one for the
// matrix), one fp32 product and one rounding to dtype, as the reference.
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;

int64_t blocks_for(int64_t items) {
  return std::max<int64_t>(std::min<int64_t>((items + kThreads - 1) / kThreads, 65535LL * 8), 1);
}

// A team of TW lanes (a power of two, the row's words or 32) per row, kRows
// rows per team at a time: each lane loads its word of kRows rows before it
// stores them (16 / 8 / 4 / 1-byte words: 4 / 8 / 16 / 16 rows), so a lane
// keeps 64 bytes in flight whatever the word, with no 64-bit division.
template <typename W>
constexpr int rows_per_team() {
  return sizeof(W) >= 16 ? 4 : sizeof(W) == 8 ? 8 : 16;
}

template <typename W>
__global__ void __launch_bounds__(kThreads) gather_kernel(const W* __restrict__ x, const int64_t* __restrict__ index,
                                                          int64_t M, int64_t N, int64_t words, int64_t pitch,
                                                          int TW, W* __restrict__ out) {
  constexpr int R = rows_per_team<W>();
  const int64_t gid = blockIdx.x * (int64_t)kThreads + threadIdx.x;
  const int lane = (int)(gid % TW);
  const int64_t teams = (int64_t)gridDim.x * kThreads / TW;
  for (int64_t i0 = gid / TW * R; i0 < M; i0 += teams * R) {
    const int n = M - i0 < R ? (int)(M - i0) : R;
    int64_t src[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      src[u] = u < n ? index[i0 + u] : 0;
      CUDA_KERNEL_ASSERT(src[u] >= 0 && src[u] < N);
    }
    for (int64_t w = lane; w < words; w += TW) {
      W v[R];
#pragma unroll
      for (int u = 0; u < R; ++u)
        if (u < n) v[u] = x[src[u] * pitch + w];
#pragma unroll
      for (int u = 0; u < R; ++u)
        if (u < n) out[(i0 + u) * words + w] = v[u];
    }
  }
}

int team_width(int64_t words) {
  int tw = 1;
  while (tw < words && tw < 32) tw *= 2;
  return tw;
}

template <typename W>
void launch(const at::Tensor& x, const at::Tensor& index, at::Tensor& out, int64_t row_bytes, int64_t pitch_bytes,
            cudaStream_t stream) {
  const int64_t M = index.numel(), words = row_bytes / (int64_t)sizeof(W);
  const int tw = team_width(words);
  const int64_t teams = (M + rows_per_team<W>() - 1) / rows_per_team<W>();
  gather_kernel<W><<<(unsigned)blocks_for(teams * tw), kThreads, 0, stream>>>(
      static_cast<const W*>(x.data_ptr()), index.data_ptr<int64_t>(), M, x.size(0), words,
      pitch_bytes / (int64_t)sizeof(W), tw, static_cast<W*>(out.data_ptr()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Rows padded to 16 bytes (a row-strided view whose pitch and base are
// 16-byte aligned, as FeatureStorage keeps half features): 16-byte loads of
// whole chunks (the padding read, never written), each chunk stored as
// 16 / sizeof(S) words of S up to the row's end (the output is contiguous).
template <typename S>
__global__ void __launch_bounds__(kThreads)
    gather_chunks_kernel(const uint4* __restrict__ x, const int64_t* __restrict__ index, int64_t M, int64_t N,
                         int64_t chunks, int64_t pitch, int64_t row_words, int TW, S* __restrict__ out) {
  constexpr int R = 4, K = 16 / sizeof(S);
  const int64_t gid = blockIdx.x * (int64_t)kThreads + threadIdx.x;
  const int lane = (int)(gid % TW);
  const int64_t teams = (int64_t)gridDim.x * kThreads / TW;
  for (int64_t i0 = gid / TW * R; i0 < M; i0 += teams * R) {
    const int n = M - i0 < R ? (int)(M - i0) : R;
    int64_t src[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      src[u] = u < n ? index[i0 + u] : 0;
      CUDA_KERNEL_ASSERT(src[u] >= 0 && src[u] < N);
    }
    for (int64_t c = lane; c < chunks; c += TW) {
      uint4 v[R];
#pragma unroll
      for (int u = 0; u < R; ++u)
        if (u < n) v[u] = x[src[u] * pitch + c];
#pragma unroll
      for (int u = 0; u < R; ++u) {
        if (u < n) {
          const S* part = reinterpret_cast<const S*>(&v[u]);
          S* dst = out + (i0 + u) * row_words + c * K;
#pragma unroll
          for (int k = 0; k < K; ++k)
            if (c * K + k < row_words) dst[k] = part[k];
        }
      }
    }
  }
}

template <typename S>
void launch_chunks(const at::Tensor& x, const at::Tensor& index, at::Tensor& out, int64_t row_bytes,
                   int64_t pitch_bytes, cudaStream_t stream) {
  const int64_t M = index.numel(), chunks = (row_bytes + 15) / 16;
  const int tw = team_width(chunks);
  const int64_t teams = (M + 3) / 4;
  gather_chunks_kernel<S><<<(unsigned)blocks_for(teams * tw), kThreads, 0, stream>>>(
      static_cast<const uint4*>(x.data_ptr()), index.data_ptr<int64_t>(), M, x.size(0), chunks, pitch_bytes / 16,
      row_bytes / (int64_t)sizeof(S), tw, static_cast<S*>(out.data_ptr()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void check_gather(const at::Tensor& x, const at::Tensor& index, const char* op) {
  TORCH_CHECK(index.is_cuda() && index.scalar_type() == at::kLong && index.dim() == 1,
              "pyg_tc: ", op, ": index must be a 1-D int64 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1, "pyg_tc: ", op, ": x must have at least one dimension");
  TORCH_CHECK(x.is_cuda() || x.is_pinned(), "pyg_tc: ", op, ": x must be on the GPU or in pinned host memory");
}

// The last row's whole 16-byte chunks lie in x's storage (a padded matrix's view).
bool chunks_in_storage(const at::Tensor& x, int64_t row_bytes, int64_t pitch) {
  const int64_t end = x.storage_offset() * (int64_t)x.element_size() + (x.size(0) - 1) * pitch + (row_bytes + 15) / 16 * 16;
  return (int64_t)x.storage().nbytes() >= end;
}

// x contiguous, or a 2-D view of rows at a larger stride (a row-padded matrix)
bool rows_ok(const at::Tensor& x) {
  return x.is_contiguous() || (x.dim() == 2 && x.stride(1) == 1 && x.stride(0) >= x.size(1));
}

at::Tensor gather_rows_cuda(const at::Tensor& x, const at::Tensor& index) {
  check_gather(x, index, "gather_rows");
  TORCH_CHECK(rows_ok(x), "pyg_tc: gather_rows: x must be contiguous, or 2-D with contiguous rows");
  c10::cuda::CUDAGuard guard(index.device());
  auto sizes = x.sizes().vec();
  sizes[0] = index.numel();
  auto out = at::empty(sizes, x.options().device(index.device()).pinned_memory(false).memory_format(
                                   at::MemoryFormat::Contiguous));
  const int64_t row_bytes = x.numel() && x.size(0) ? x.numel() / x.size(0) * (int64_t)x.element_size() : 0;
  if (index.numel() == 0 || row_bytes == 0) return out;
  const int64_t pitch = x.is_contiguous() ? row_bytes : x.stride(0) * (int64_t)x.element_size();
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto xa = reinterpret_cast<uintptr_t>(x.data_ptr()), oa = reinterpret_cast<uintptr_t>(out.data_ptr());
  const auto addr = xa | oa | (uintptr_t)pitch;
  if (row_bytes % 16 == 0 && addr % 16 == 0) launch<uint4>(x, index, out, row_bytes, pitch, stream);
  else if ((xa | (uintptr_t)pitch) % 16 == 0 && chunks_in_storage(x, row_bytes, pitch)) {
    // whole 16-byte chunks read from padded rows
    if (row_bytes % 8 == 0 && oa % 8 == 0) launch_chunks<uint2>(x, index, out, row_bytes, pitch, stream);
    else if (row_bytes % 4 == 0 && oa % 4 == 0) launch_chunks<uint32_t>(x, index, out, row_bytes, pitch, stream);
    else if (row_bytes % 2 == 0 && oa % 2 == 0) launch_chunks<uint16_t>(x, index, out, row_bytes, pitch, stream);
    else launch_chunks<uint8_t>(x, index, out, row_bytes, pitch, stream);
  } else if (row_bytes % 8 == 0 && addr % 8 == 0) launch<uint2>(x, index, out, row_bytes, pitch, stream);
  else if (row_bytes % 4 == 0 && addr % 4 == 0) launch<uint32_t>(x, index, out, row_bytes, pitch, stream);
  else launch<uint8_t>(x, index, out, row_bytes, pitch, stream);
  return out;
}

// -- fp8 rows, upcast ----------------------------------------------------------

__device__ __forceinline__ float fp8_to_f(uint8_t b) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3)));
}

template <typename T> __device__ __forceinline__ T round_to(float v);
template <> __device__ __forceinline__ float round_to<float>(float v) { return v; }
template <> __device__ __forceinline__ __half round_to<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 round_to<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// V consecutive elements of a row per item (V divides F; the loads of V
// bytes and the stores of V outputs aligned to their size).
template <typename T, int V>
struct alignas(sizeof(T) * V) OutPack {
  T v[V];
};
template <int V> struct InWord;
template <> struct InWord<4> { using type = uint32_t; };
template <> struct InWord<2> { using type = uint16_t; };
template <> struct InWord<1> { using type = uint8_t; };

// As gather_kernel: a team of TW lanes per row, each lane on V consecutive
// elements (V-byte loads, V-element stores), 8 rows per team at a time.
constexpr int kScaledRows = 8;

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    gather_scaled_kernel(const uint8_t* __restrict__ x, const float* __restrict__ scale, int scale_stride,
                         const int64_t* __restrict__ index, int64_t M, int64_t N, int64_t F, int TW,
                         T* __restrict__ out) {
  using In = typename InWord<V>::type;
  constexpr int R = kScaledRows;
  const int64_t items = F / V;
  const int64_t gid = blockIdx.x * (int64_t)kThreads + threadIdx.x;
  const int lane = (int)(gid % TW);
  const int64_t teams = (int64_t)gridDim.x * kThreads / TW;
  for (int64_t i0 = gid / TW * R; i0 < M; i0 += teams * R) {
    const int n = M - i0 < R ? (int)(M - i0) : R;
    int64_t src[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      src[u] = u < n ? index[i0 + u] : 0;
      CUDA_KERNEL_ASSERT(src[u] >= 0 && src[u] < N);
    }
    for (int64_t w = lane; w < items; w += TW) {
      In v[R];
#pragma unroll
      for (int u = 0; u < R; ++u)
        if (u < n) v[u] = reinterpret_cast<const In*>(x + src[u] * F)[w];
      float s[V];
#pragma unroll
      for (int e = 0; e < V; ++e) s[e] = __ldg(scale + (w * V + e) * scale_stride);
#pragma unroll
      for (int u = 0; u < R; ++u) {
        if (u < n) {
          OutPack<T, V> o;
#pragma unroll
          for (int e = 0; e < V; ++e) o.v[e] = round_to<T>(fp8_to_f((uint8_t)((v[u] >> (8 * e)) & 0xff)) * s[e]);
          reinterpret_cast<OutPack<T, V>*>(out + (i0 + u) * F)[w] = o;
        }
      }
    }
  }
}

template <typename T, int V>
void launch_scaled(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& index, at::Tensor& out,
                   cudaStream_t stream) {
  const int64_t M = index.numel(), F = x.size(1);
  const int tw = team_width(F / V);
  const int64_t teams = (M + kScaledRows - 1) / kScaledRows;
  gather_scaled_kernel<T, V><<<(unsigned)blocks_for(teams * tw), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(x.data_ptr()), scale.data_ptr<float>(), scale.numel() == 1 ? 0 : 1,
      index.data_ptr<int64_t>(), M, x.size(0), F, tw, static_cast<T*>(out.data_ptr()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void dispatch_scaled(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& index, at::Tensor& out,
                     cudaStream_t stream) {
  const int64_t F = x.size(1);
  const auto xa = reinterpret_cast<uintptr_t>(x.data_ptr()), oa = reinterpret_cast<uintptr_t>(out.data_ptr());
  if (F % 4 == 0 && xa % 4 == 0 && oa % (4 * sizeof(T)) == 0) launch_scaled<T, 4>(x, scale, index, out, stream);
  else if (F % 2 == 0 && xa % 2 == 0 && oa % (2 * sizeof(T)) == 0) launch_scaled<T, 2>(x, scale, index, out, stream);
  else launch_scaled<T, 1>(x, scale, index, out, stream);
}

at::Tensor gather_rows_scaled_cuda(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& index,
                                   at::ScalarType dtype) {
  check_gather(x, index, "gather_rows_scaled");
  TORCH_CHECK(x.is_contiguous(), "pyg_tc: gather_rows_scaled: x must be contiguous");
  TORCH_CHECK(x.scalar_type() == at::kFloat8_e4m3fn && x.dim() == 2,
              "pyg_tc: gather_rows_scaled: x must be a 2-D float8_e4m3fn matrix");
  TORCH_CHECK(scale.is_cuda() && scale.scalar_type() == at::kFloat && scale.is_contiguous() &&
                  (scale.numel() == 1 || scale.numel() == x.size(1)),
              "pyg_tc: gather_rows_scaled: scale must be a contiguous fp32 CUDA tensor of 1 or x.size(1) values");
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16,
              "pyg_tc: gather_rows_scaled: dtype must be float32, float16 or bfloat16");
  c10::cuda::CUDAGuard guard(index.device());
  auto out = at::empty({index.numel(), x.size(1)}, x.options().dtype(dtype).device(index.device()).pinned_memory(false));
  if (index.numel() == 0 || x.size(1) == 0) return out;
  auto stream = c10::cuda::getCurrentCUDAStream();
  if (dtype == at::kFloat) dispatch_scaled<float>(x, scale, index, out, stream);
  else if (dtype == at::kHalf) dispatch_scaled<__half>(x, scale, index, out, stream);
  else dispatch_scaled<__nv_bfloat16>(x, scale, index, out, stream);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("gather_rows", &gather_rows_cuda);
  m.impl("gather_rows_scaled", &gather_rows_scaled_cuda);
}

}  // namespace pyg_tc
