# The kernel sources live in kernels/ at the repository root, one folder per
# kernel family. They ship inside the wheel as the package data of
# pyg_tc.kernels (the family folders as its subpackages), so the JIT build
# works from an installed wheel too.
#
# Ahead-of-time build: where torch is importable at build time (pip install
# --no-build-isolation .), torch has CUDA and a CUDA toolkit is found, every
# translation unit is compiled into pyg_tc/_C*.so (CUDAExtension, the
# architectures of TORCH_CUDA_ARCH_LIST, else the visible GPUs', else
# pyg_tc._kernels.DEFAULT_ARCHS) with pyg_tc/_C.json beside it, and the
# kernels load with no compiler at run time. Elsewhere the install is pure
# Python and the kernels are JIT-built on first use.
# PYG_TC_BUILD_KERNELS=0 skips the ahead-of-time build; =1 makes it required.
import importlib.util
import json
import os
import sys

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = sorted(
    d
    for d in os.listdir(os.path.join(HERE, 'kernels'))
    if os.path.isdir(os.path.join(HERE, 'kernels', d)) and not d.startswith(('.', '_'))
)


def _kernels_module():
    """pyg_tc/_kernels.py, without importing the package (it needs only torch)."""
    spec = importlib.util.spec_from_file_location('pyg_tc_build', os.path.join(HERE, 'pyg_tc', '_kernels.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_extension():
    """([the CUDAExtension], {'build_ext': its command}), or ([], {}) where the
    kernels are not built ahead of time."""
    want = os.environ.get('PYG_TC_BUILD_KERNELS', 'auto').lower()
    if want in ('0', 'no', 'false'):
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension
    except ImportError:
        why = 'torch is not importable at build time (pip install --no-build-isolation . builds them)'
    else:
        why = (
            'torch was built without CUDA'
            if torch.version.cuda is None
            else 'no CUDA toolkit (nvcc) found: set CUDA_HOME'
            if CUDA_HOME is None
            else None
        )
    if why is not None:
        if want in ('1', 'yes', 'true'):
            raise RuntimeError(f'PYG_TC_BUILD_KERNELS=1, but {why}')
        print(f'pyg_tc: kernels not built ahead of time ({why}); they build on first use', file=sys.stderr)
        return [], {}
    kernels = _kernels_module()
    archs = kernels.aot_archs()
    os.environ['TORCH_CUDA_ARCH_LIST'] = archs

    class BuildKernels(BuildExtension):
        def run(self):
            super().run()
            for ext in self.extensions:
                meta = os.path.join(os.path.dirname(self.get_ext_fullpath(ext.name)), kernels.AOT_META)
                with open(meta, 'w') as fh:
                    json.dump(kernels.aot_metadata(archs), fh)

    ext = CUDAExtension(f'pyg_tc.{kernels.AOT_NAME}', **kernels.aot_extension_args())
    return [ext], {'build_ext': BuildKernels}


if __name__ == '__main__':
    ext_modules, cmdclass = kernel_extension()
    setup(
        packages=(
            find_packages(include=['pyg_tc', 'pyg_tc.*'])
            + ['pyg_tc.kernels']
            + [f'pyg_tc.kernels.{d}' for d in FAMILIES]
        ),
        package_dir={'pyg_tc.kernels': 'kernels'},
        ext_modules=ext_modules,
        cmdclass=cmdclass,
    )
