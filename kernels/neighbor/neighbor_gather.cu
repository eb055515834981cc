// gather_rows(x, index): out[i] = x[index[i]] on the GPU, for an x on the GPU
// or in pinned host memory (read in place over UVA: node features that do not
// fit on the GPU are gathered per batch without a CPU pass). Rows are copied
// as raw bytes, 16 / 8 / 4 / 1 bytes per load by the row's size and
// alignment, consecutive threads on consecutive words of a row (coalesced).
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;

template <typename W>
__global__ void gather_kernel(const W* __restrict__ x, const int64_t* __restrict__ index, int64_t M, int64_t N,
                              int64_t words, W* __restrict__ out) {
  const int64_t total = M * words;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = t / words, w = t - i * words;
    const int64_t r = index[i];
    CUDA_KERNEL_ASSERT(r >= 0 && r < N);
    out[t] = x[r * words + w];
  }
}

template <typename W>
void launch(const at::Tensor& x, const at::Tensor& index, at::Tensor& out, int64_t row_bytes, cudaStream_t stream) {
  const int64_t M = index.numel(), words = row_bytes / (int64_t)sizeof(W);
  const int64_t total = M * words;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65535LL * 8);
  gather_kernel<W><<<(unsigned)std::max<int64_t>(blocks, 1), kThreads, 0, stream>>>(
      static_cast<const W*>(x.data_ptr()), index.data_ptr<int64_t>(), M, x.size(0), words,
      static_cast<W*>(out.data_ptr()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor gather_rows_cuda(const at::Tensor& x, const at::Tensor& index) {
  TORCH_CHECK(index.is_cuda() && index.scalar_type() == at::kLong && index.dim() == 1,
              "pyg_tc: gather_rows: index must be a 1-D int64 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1, "pyg_tc: gather_rows: x must have at least one dimension");
  TORCH_CHECK(x.is_cuda() || x.is_pinned(), "pyg_tc: gather_rows: x must be on the GPU or in pinned host memory");
  TORCH_CHECK(x.is_contiguous(), "pyg_tc: gather_rows: x must be contiguous");
  c10::cuda::CUDAGuard guard(index.device());
  auto sizes = x.sizes().vec();
  sizes[0] = index.numel();
  auto out = at::empty(sizes, x.options().device(index.device()).pinned_memory(false));
  const int64_t row_bytes = x.numel() && x.size(0) ? x.nbytes() / x.size(0) : 0;
  if (index.numel() == 0 || row_bytes == 0) return out;
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto addr = reinterpret_cast<uintptr_t>(x.data_ptr()) | reinterpret_cast<uintptr_t>(out.data_ptr());
  if (row_bytes % 16 == 0 && addr % 16 == 0) launch<uint4>(x, index, out, row_bytes, stream);
  else if (row_bytes % 8 == 0 && addr % 8 == 0) launch<uint2>(x, index, out, row_bytes, stream);
  else if (row_bytes % 4 == 0 && addr % 4 == 0) launch<uint32_t>(x, index, out, row_bytes, stream);
  else launch<uint8_t>(x, index, out, row_bytes, stream);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) { m.impl("gather_rows", &gather_rows_cuda); }

}  // namespace pyg_tc
