"""Find and JIT-build the CUDA kernels in ``kernels/``.

The build runs on first use (never at import), with ninja through
``torch.utils.cpp_extension.load``: every ``.cu`` / ``.cpp`` under the
family folders of ``kernels/`` is one translation unit (:func:`sources`),
compiled with ``kernels/`` on the include path (``#include
"common/static_switch.h"``). The build directory is keyed by the torch
version, the CUDA version, the GPU architecture and the source layout only,
not by the sources' contents, so after an edit ninja recompiles only the
translation units whose source or included headers changed (torch's ninja
file tracks headers through depfiles: ``-MMD`` for the C++ compiler, ``-MD``
for nvcc on a CUDA build of torch; where it does not write them for nvcc,
see :func:`header_deps_tracked`, the key also carries a hash of the
headers). A file lock serialises concurrent builds: a second process waits
for the first and then loads the finished library. Nothing here raises when
CUDA or nvcc is missing: :func:`status` says why the kernels are unavailable
and the ops fall back to the pure-PyTorch reference.
"""

from __future__ import annotations

import hashlib
import os
import os.path as osp
import threading
import time
from typing import Any, Dict, List, Optional

import torch

NAME = 'pyg_tc_kernels'
# Bump when the layout of kernels/ changes the object files of the build
# (their names are the sources' file names): a fresh build directory then.
LAYOUT = 'families1'
TU_SUFFIXES = ('.cu', '.cpp')
HEADER_SUFFIXES = ('.cuh', '.h')

_LOCK = threading.Lock()
_STATE: Dict[str, Any] = {'loaded': False, 'tried': False, 'error': None, 'build_seconds': None, 'build_dir': None}


def _files(root: str, suffixes) -> List[str]:
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(('.', '__')))
        out += [osp.join(d, f) for f in files if f.endswith(suffixes)]
    return sorted(out)


def kernel_dir() -> str:
    """Directory holding the CUDA/C++ sources (shipped inside the wheel as the
    package data of ``pyg_tc.kernels``; ``kernels/`` of the checkout otherwise)."""
    here = osp.dirname(osp.abspath(__file__))
    for cand in (osp.join(here, 'kernels'), osp.join(osp.dirname(here), 'kernels')):
        if osp.isdir(cand) and _files(cand, TU_SUFFIXES):
            return cand
    raise FileNotFoundError('pyg_tc: kernel sources not found next to the package')


def sources() -> List[str]:
    """Every translation unit (``.cu`` / ``.cpp``) under ``kernels/``, recursively.

    torch names an object file after its source's file name only, so the file
    names must be unique across the family folders (hence the family prefix)."""
    srcs = _files(kernel_dir(), TU_SUFFIXES)
    seen: Dict[str, str] = {}
    for s in srcs:
        stem = osp.splitext(osp.basename(s))[0]
        if stem in seen:
            raise RuntimeError(
                f'pyg_tc: kernel sources {seen[stem]} and {s} share the file name '
                f'{stem!r} (their objects would collide in the build directory)'
            )
        seen[stem] = s
    return srcs


def headers() -> List[str]:
    return _files(kernel_dir(), HEADER_SUFFIXES)


def _header_hash() -> str:
    h = hashlib.sha256()
    d = kernel_dir()
    for f in headers():
        h.update(osp.relpath(f, d).encode())
        with open(f, 'rb') as fh:
            h.update(fh.read())
    return h.hexdigest()[:12]


def header_deps_tracked() -> bool:
    """Whether the ninja file of ``torch.utils.cpp_extension`` records the
    headers each nvcc translation unit includes (``depfile = $out.d``, ``deps =
    gcc``, ``nvcc -MD -MF $out.d``): torch writes that rule on CUDA builds of
    torch unless ``TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES=1``. C++ units
    are always tracked (``-MMD``). When nvcc units are not, :func:`build_dir`
    adds a hash of the headers to its key, so a header edit starts a fresh
    build instead of linking stale objects."""
    return torch.version.cuda is not None and os.environ.get('TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES', '0') != '1'


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f'{major}{minor}'


def build_dir(arch: Optional[str] = None) -> str:
    """The build directory: ``$PYG_TC_BUILD_DIR`` (or ``~/.cache/pyg_tc``) /
    a key of the torch version, CUDA version, GPU architecture and
    :data:`LAYOUT`; not of the sources, so ninja rebuilds incrementally."""
    root = os.environ.get('PYG_TC_BUILD_DIR') or osp.join(
        os.environ.get('XDG_CACHE_HOME', osp.expanduser('~/.cache')), 'pyg_tc'
    )
    key = f'torch{torch.__version__}-cuda{torch.version.cuda}-sm{arch or _arch()}-{LAYOUT}'
    if not header_deps_tracked():
        key += f'-h{_header_hash()}'
    return osp.join(root, key.replace('+', '_'))


def _cccl_include(cuda_home) -> list:
    """CUDA 13 ships cub/thrust under include/cccl."""
    path = osp.join(cuda_home or '', 'include', 'cccl')
    return [path] if osp.isdir(path) else []


def extra_cflags() -> List[str]:
    """Flags of the C++ translation units (after torch's own)."""
    return ['-O3', '-std=c++20']


def extra_cuda_cflags(arch: str) -> List[str]:
    """Flags of the nvcc translation units (after torch's own), for sm_<arch>."""
    return ['-O3', '-std=c++20', '--expt-relaxed-constexpr', f'-gencode=arch=compute_{arch},code=sm_{arch}']


def build_args(arch: str, cuda_home: Optional[str]) -> Dict[str, Any]:
    """The arguments of ``cpp_extension.load`` (also used by the tests to
    write the same ninja file without building)."""
    return dict(
        name=NAME,
        sources=sources(),
        extra_include_paths=[kernel_dir()] + _cccl_include(cuda_home),
        extra_cflags=extra_cflags(),
        extra_cuda_cflags=extra_cuda_cflags(arch),
    )


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
    """Build (once per machine, then incrementally) and load the kernels.
    Returns True on success."""
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

            arch = _arch()
            bdir = build_dir(arch)
            os.makedirs(bdir, exist_ok=True)
            os.environ.setdefault('TORCH_CUDA_ARCH_LIST', f'{arch[0]}.{arch[1:]}')
            t0 = time.perf_counter()
            # cpp_extension.load takes its own file lock ('lock' in build_dir)
            # so concurrent processes build once and reuse the result; its
            # ninja run recompiles only what changed since the last build.
            cpp_extension.load(
                **build_args(arch, cpp_extension.CUDA_HOME),
                build_directory=bdir,
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


def status() -> Dict[str, Any]:
    return dict(_STATE)
