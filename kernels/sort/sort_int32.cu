// Stable radix sort of non-negative int32 keys with an int32 permutation, for
// building CSR formats: cub's LSD radix sort over only the key bits that are
// used (ceil(log2(num_nodes))), in double-buffer mode. It needs 4 int32
// arrays of the edge count plus cub's small temp storage, about half of what
// torch.sort takes for the same job (int64 indices, each double-buffered),
// which sets the peak memory of building a 100M-edge graph.
//
// The whole family is this file: entry point, cub call and CUDA registration
// (cub needs nvcc; the schema is defined in Python, pyg_tc/ops).
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cub/device/device_radix_sort.cuh>

#include <tuple>

namespace pyg_tc {
namespace {

std::tuple<at::Tensor, at::Tensor> sort_int32_cuda(const at::Tensor& keys, int64_t end_bit) {
  TORCH_CHECK(keys.is_cuda() && keys.scalar_type() == at::kInt && keys.dim() == 1,
              "pyg_tc: sort_int32 needs a 1-D int32 CUDA tensor");
  TORCH_CHECK(end_bit >= 1 && end_bit <= 31, "pyg_tc: sort_int32 end_bit must be in [1, 31]");
  c10::cuda::CUDAGuard guard(keys.device());
  const int64_t n = keys.numel();
  TORCH_CHECK(n < (1ll << 31), "pyg_tc: sort_int32 supports fewer than 2^31 keys");
  auto k0 = keys.contiguous().clone();
  auto v0 = at::arange(n, keys.options());
  if (n <= 1) return {k0, v0};
  auto k1 = at::empty_like(k0);
  auto v1 = at::empty_like(v0);
  auto stream = c10::cuda::getCurrentCUDAStream();
  cub::DoubleBuffer<unsigned> dk(reinterpret_cast<unsigned*>(k0.data_ptr<int>()),
                                 reinterpret_cast<unsigned*>(k1.data_ptr<int>()));
  cub::DoubleBuffer<int> dv(v0.data_ptr<int>(), v1.data_ptr<int>());
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, dk, dv, (int)n, 0,
                                                 (int)end_bit, stream));
  auto temp = at::empty({(int64_t)temp_bytes}, keys.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, dk, dv, (int)n, 0,
                                                 (int)end_bit, stream));
  const bool k_in_0 = dk.Current() == reinterpret_cast<unsigned*>(k0.data_ptr<int>());
  const bool v_in_0 = dv.Current() == v0.data_ptr<int>();
  return {k_in_0 ? k0 : k1, v_in_0 ? v0 : v1};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) { m.impl("sort_int32", &sort_int32_cuda); }

}  // namespace pyg_tc
