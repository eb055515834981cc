// Launcher-side helpers (the kernel translation units, compiled by nvcc
// without ATen): launch checks and the dynamic shared-memory attribute.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace pyg_tc {

// Kernels that take more than the default 48 KiB of dynamic shared memory
// must opt in before their launch.
template <typename Kernel>
inline void set_max_dynamic_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

}  // namespace pyg_tc
