#!/usr/bin/env bash
# Compile every translation unit under kernels/ (the .cu and .cpp files of the
# family folders, found recursively) for sm_80 and sm_90 (compile only: the
# CPU torch wheel cannot load CUDA code, but a kernel that does not compile
# fails here). The flags are the JIT build's (pyg_tc/_kernels.py): torch's
# own nvcc flags plus extra_cuda_cflags(arch) for .cu files, the C++
# compiler with extra_cflags() for .cpp files (these have no device code, so
# they compile once).
#   ARCHS="90" bash .ci/compile_kernels.sh   # one architecture only
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
CXX=${CXX:-c++}
ARCHS=${ARCHS:-"80 90"}
if ! command -v "$NVCC" >/dev/null; then echo "compile_kernels: nvcc not found" >&2; exit 1; fi
# pyg_tc/_kernels.py without importing the package (it only needs torch)
kernels_py() {
  python - "$@" <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location('pyg_tc_kernels_build', 'pyg_tc/_kernels.py')
k = importlib.util.module_from_spec(spec)
spec.loader.exec_module(k)
what = sys.argv[1]
if what == 'sources':
    print('\n'.join(k.sources()))
elif what == 'cflags':
    print(' '.join(k.extra_cflags()))
elif what == 'cuda_cflags':
    print(' '.join(k.extra_cuda_cflags(sys.argv[2])))
EOF
}
TORCH_INC=$(python -c "import torch.utils.cpp_extension as c; print(' '.join('-isystem '+p for p in c.include_paths()))")
NVCC_COMMON=$(python -c "import torch.utils.cpp_extension as c; print(' '.join(c.COMMON_NVCC_FLAGS))")
PYINC=$(python -c "import sysconfig; print(sysconfig.get_paths()['include'])")
CUDA_ROOT=${CUDA_HOME:-/usr/local/cuda}
CCCL=""; [ -d "$CUDA_ROOT/include/cccl" ] && CCCL="-I$CUDA_ROOT/include/cccl"
# -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE: the CPU torch wheel has no cuda_cmake_macros.h
COMMON="-DTORCH_EXTENSION_NAME=pyg_tc_kernels -DTORCH_API_INCLUDE_EXTENSION_H -Ikernels $CCCL
  $TORCH_INC -isystem $CUDA_ROOT/include -isystem $PYINC -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE"
mapfile -t SOURCES < <(kernels_py sources)
[ "${#SOURCES[@]}" -gt 0 ] || { echo "compile_kernels: no sources found" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0
for f in "${SOURCES[@]}"; do
  rel=${f#"$PWD/"}
  if [[ "$f" == *.cpp ]]; then
    echo "c++ ${rel}"
    # shellcheck disable=SC2046,SC2086
    "$CXX" -c "$f" -o "$out/$(basename "$f").o" $COMMON -fPIC -std=c++20 $(kernels_py cflags)
    n=$((n + 1))
    continue
  fi
  for arch in $ARCHS; do
    echo "nvcc sm_${arch} ${rel}"
    # shellcheck disable=SC2046,SC2086
    "$NVCC" -c "$f" -o "$out/$(basename "$f").sm${arch}.o" $COMMON $NVCC_COMMON \
      --compiler-options -fPIC $(kernels_py cuda_cflags "$arch")
  done
  n=$((n + 1))
done
echo "compile_kernels: all ${n} translation units compiled (nvcc for sm_${ARCHS// /, sm_})"
