#!/usr/bin/env bash
# Compile every file in kernels/ with nvcc for sm_80 and sm_90 (compile only:
# the CPU torch wheel cannot load CUDA code, but a kernel that does not compile
# fails here). Uses the same flags as the JIT build in pyg_tc/_kernels.py.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null; then echo "compile_kernels: nvcc not found" >&2; exit 1; fi
TORCH_INC=$(python -c "import torch.utils.cpp_extension as c; print(' '.join('-I'+p for p in c.include_paths()))")
PYINC=$(python -c "import sysconfig; print(sysconfig.get_paths()['include'])")
CUDA_ROOT=${CUDA_HOME:-/usr/local/cuda}
CCCL=""; [ -d "$CUDA_ROOT/include/cccl" ] && CCCL="-I$CUDA_ROOT/include/cccl"
out=$(mktemp -d)
for f in kernels/*.cu kernels/*.cpp; do
  for arch in 80 90; do
    echo "nvcc sm_${arch} ${f}"
    "$NVCC" -c "$f" -o "$out/$(basename "$f").sm${arch}.o" $TORCH_INC -I"$PYINC" -Ikernels $CCCL \
      -std=c++20 -O3 -Xcompiler -fPIC --expt-relaxed-constexpr -D_GLIBCXX_USE_CXX11_ABI=1 \
      -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=pyg_tc_kernels \
      -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE \
      -gencode "arch=compute_${arch},code=sm_${arch}" -x cu
  done
done
rm -rf "$out"
echo "compile_kernels: all kernels compiled for sm_80 and sm_90"
