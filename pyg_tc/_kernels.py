"""Find and JIT-build the CUDA kernels in ``kernels/``.

The build runs on first use (never at import), with ninja through
``torch.utils.cpp_extension.load``, into a cache directory keyed by the torch
version, the CUDA version, the GPU architecture and a hash of the kernel
sources. A file lock serialises concurrent builds: a second process waits for
the first and then loads the finished library. Nothing here raises when CUDA
or nvcc is missing: :func:`status` says why the kernels are unavailable and
the ops fall back to the pure-PyTorch reference.
"""
from __future__ import annotations

import hashlib
import os
import os.path as osp
import threading
import time
from typing import Any, Dict, Optional

import torch

_LOCK = threading.Lock()
_STATE: Dict[str, Any] = {'loaded': False, 'tried': False, 'error': None,
                          'build_seconds': None, 'build_dir': None}


def kernel_dir() -> str:
    """Directory holding the CUDA/C++ sources (shipped inside the wheel)."""
    here = osp.dirname(osp.abspath(__file__))
    for cand in (osp.join(here, 'kernels'), osp.join(osp.dirname(here), 'kernels')):
        if osp.isdir(cand) and any(f.endswith('.cu') for f in os.listdir(cand)):
            return cand
    raise FileNotFoundError('pyg_tc: kernel sources not found next to the package')


def sources() -> list:
    d = kernel_dir()
    return sorted(osp.join(d, f) for f in os.listdir(d) if f.endswith(('.cu', '.cpp')))


def _source_hash() -> str:
    h = hashlib.sha256()
    d = kernel_dir()
    for f in sorted(os.listdir(d)):
        if f.endswith(('.cu', '.cpp', '.cuh', '.h')):
            h.update(f.encode())
            with open(osp.join(d, f), 'rb') as fh:
                h.update(fh.read())
    return h.hexdigest()[:12]


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f'{major}{minor}'


def build_dir() -> str:
    root = os.environ.get('PYG_TC_BUILD_DIR') or osp.join(
        os.environ.get('XDG_CACHE_HOME', osp.expanduser('~/.cache')), 'pyg_tc')
    key = (f'torch{torch.__version__}-cuda{torch.version.cuda}-sm{_arch()}-'
           f'{_source_hash()}').replace('+', '_')
    return osp.join(root, key)


def _cccl_include(cuda_home) -> list:
    """CUDA 13 ships cub/thrust under include/cccl."""
    path = osp.join(cuda_home or '', 'include', 'cccl')
    return [path] if osp.isdir(path) else []


def unavailable_reason() -> Optional[str]:
    if os.environ.get('PYG_TC_DISABLE_KERNELS'):
        return 'disabled by PYG_TC_DISABLE_KERNELS'
    if not torch.cuda.is_available():
        return 'no CUDA device visible to torch (CPU build of torch or no GPU)'
    if torch.version.cuda is None:
        return 'torch was built without CUDA'
    from torch.utils import cpp_extension
    if cpp_extension.CUDA_HOME is None:
        return 'CUDA toolkit (nvcc) not found: set CUDA_HOME'
    return None


def load(verbose: bool = False) -> bool:
    """Build (once per machine) and load the kernels. Returns True on success."""
    with _LOCK:
        if _STATE['loaded']:
            return True
        if _STATE['tried']:
            return False
        _STATE['tried'] = True
        reason = unavailable_reason()
        if reason is not None:
            _STATE['error'] = reason
            return False
        try:
            from torch.utils import cpp_extension
            bdir = build_dir()
            os.makedirs(bdir, exist_ok=True)
            arch = _arch()
            os.environ.setdefault('TORCH_CUDA_ARCH_LIST', f'{arch[0]}.{arch[1:]}')
            t0 = time.perf_counter()
            # cpp_extension.load takes its own file lock ('lock' in build_dir)
            # so concurrent processes build once and reuse the result.
            cpp_extension.load(
                name='pyg_tc_kernels',
                sources=sources(),
                build_directory=bdir,
                extra_include_paths=[kernel_dir()] + _cccl_include(cpp_extension.CUDA_HOME),
                extra_cflags=['-O3', '-std=c++20'],
                extra_cuda_cflags=['-O3', '-std=c++20', '--expt-relaxed-constexpr',
                                   f'-gencode=arch=compute_{arch},code=sm_{arch}'],
                is_python_module=False,
                verbose=verbose,
            )
            _STATE['build_seconds'] = time.perf_counter() - t0
            _STATE['build_dir'] = bdir
            _STATE['loaded'] = True
            return True
        except Exception as e:  # pragma: no cover - depends on the machine
            _STATE['error'] = f'build failed: {type(e).__name__}: {e}'
            return False


def is_loaded() -> bool:
    return bool(_STATE['loaded'])


def status() -> Dict[str, Any]:
    return dict(_STATE)
