"""Load the CUDA kernels in ``kernels/``: the library built ahead of time by
``pip install`` where it runs on this machine, else a JIT build.

**Ahead of time.** ``pip install --no-build-isolation .`` with a CUDA build
of torch and a CUDA toolkit compiles every translation unit into
``pyg_tc/_C*.so`` (``setup.py``: ``torch.utils.cpp_extension.CUDAExtension``
with :func:`aot_extension_args`, architectures from ``TORCH_CUDA_ARCH_LIST``)
and writes ``pyg_tc/_C.json`` beside it (torch and CUDA versions,
architectures, a hash of the sources). :func:`prebuilt` takes that library
when its torch version is this torch's, one of its architectures runs on
this GPU and the sources are the ones it was built from; ``PYG_TC_JIT=1``
skips it.

**JIT.** Otherwise the build runs on first use (never at import), with ninja through
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

import ctypes
import functools
import glob
import hashlib
import json
import os
import os.path as osp
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

NAME = 'pyg_tc_kernels'
# Bump when the layout of kernels/ changes the object files of the build
# (their names are the sources' file names): a fresh build directory then.
LAYOUT = 'families2'
TU_SUFFIXES = ('.cu', '.cpp')
HEADER_SUFFIXES = ('.cuh', '.h')

#: the ahead-of-time library's module name (``pyg_tc/_C*.so``) and its metadata file
AOT_NAME = '_C'
AOT_META = '_C.json'
#: architectures of an ahead-of-time build where ``TORCH_CUDA_ARCH_LIST`` is unset and no GPU is
#: visible (sm_80 is the kernels' minimum; the PTX of sm_90 runs on later GPUs)
DEFAULT_ARCHS = '8.0;9.0+PTX'

_LOCK = threading.Lock()
_STATE: Dict[str, Any] = {
    'loaded': False,
    'tried': False,
    'error': None,
    'build_seconds': None,
    'build_dir': None,
    'mode': None,  # 'prebuilt' or 'jit' once loaded
    'library': None,  # the loaded shared library's path
    'prebuilt_reason': None,  # why the ahead-of-time library was not taken
    'coop_units': [],  # coop_units() per CUDA device, asked of the library when it loads
}


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


def _hash(files: List[str]) -> str:
    """A hash of ``files`` (their paths under ``kernels/`` and contents)."""
    h = hashlib.sha256()
    d = kernel_dir()
    for f in sorted(files):
        h.update(osp.relpath(f, d).encode())
        with open(f, 'rb') as fh:
            h.update(fh.read())
    return h.hexdigest()[:12]


def _header_hash() -> str:
    return _hash(headers())


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


def extra_cuda_cflags(arch: Optional[str] = None) -> List[str]:
    """Flags of the nvcc translation units (after torch's own), for sm_<arch>
    (the JIT build); without ``arch``, torch adds the architectures of
    ``TORCH_CUDA_ARCH_LIST`` (the ahead-of-time build)."""
    flags = ['-O3', '-std=c++20', '--expt-relaxed-constexpr']
    return flags + ([f'-gencode=arch=compute_{arch},code=sm_{arch}'] if arch else [])


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


# ---------------------------------------------------------------- ahead of time


def sources_hash() -> str:
    """A hash of every source and header under ``kernels/``."""
    return _hash(sources() + headers())


def aot_archs() -> str:
    """The architectures of an ahead-of-time build: ``TORCH_CUDA_ARCH_LIST``, else
    the visible GPUs', else :data:`DEFAULT_ARCHS`. Raises for one below sm_80."""
    archs = os.environ.get('TORCH_CUDA_ARCH_LIST', '').strip()
    if not archs and torch.cuda.is_available():
        caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
        archs = ';'.join(f'{a}.{b}' for a, b in sorted(caps))
    archs = archs or DEFAULT_ARCHS
    for a in archs.replace(' ', ';').split(';'):
        if a and _arch_tuple(a)[0] < (8, 0):
            raise ValueError(f'pyg_tc: the kernels need sm_80 or later; TORCH_CUDA_ARCH_LIST has {a}')
    return archs


def _arch_tuple(a: str) -> Tuple[Tuple[int, int], bool, bool]:
    """'9.0a+PTX' -> ((9, 0), arch-specific 'a', PTX)."""
    ptx = a.upper().endswith('+PTX')
    a = a[:-4] if ptx else a
    specific = a.endswith(('a', 'f'))
    major, minor = a.rstrip('af').split('.')
    return (int(major), int(minor)), specific, ptx


def arch_runs(archs: str, capability: Tuple[int, int]) -> bool:
    """Whether a library built for ``archs`` (``TORCH_CUDA_ARCH_LIST``'s
    syntax) runs on a GPU of ``capability``: a cubin of the same major and a
    minor at most the GPU's (exactly the GPU's for an 'a' / 'f' variant), or
    the PTX of an architecture at most the GPU's."""
    for a in archs.replace(' ', ';').split(';'):
        if not a:
            continue
        (major, minor), specific, ptx = _arch_tuple(a)
        if (major, minor) == tuple(capability) or (not specific and major == capability[0] and minor <= capability[1]):
            return True
        if ptx and (major, minor) <= tuple(capability):
            return True
    return False


def aot_extension_args() -> Dict[str, Any]:
    """The keyword arguments of ``CUDAExtension`` in ``setup.py`` (after the
    name): the JIT build's sources, include paths and flags, with paths
    relative to the repository root."""
    from torch.utils import cpp_extension

    root = osp.dirname(kernel_dir())
    return dict(
        sources=[osp.relpath(s, root) for s in sources()],
        include_dirs=[kernel_dir()] + _cccl_include(cpp_extension.CUDA_HOME),
        extra_compile_args={'cxx': extra_cflags(), 'nvcc': extra_cuda_cflags()},
    )


def aot_metadata(archs: str) -> Dict[str, Any]:
    """What ``setup.py`` writes to ``_C.json`` beside the library."""
    return {'torch': torch.__version__, 'cuda': torch.version.cuda, 'archs': archs, 'sources': sources_hash()}


def prebuilt(here: Optional[str] = None) -> Tuple[Optional[str], Optional[str]]:
    """``(path, None)`` of the ahead-of-time library in ``here`` (the
    package's folder) where it runs on this GPU, else ``(None, why not)``."""
    if os.environ.get('PYG_TC_JIT', '').lower() in ('1', 'true', 'yes'):
        return None, 'PYG_TC_JIT=1'
    here = here or osp.dirname(osp.abspath(__file__))
    libs = sorted(glob.glob(osp.join(here, f'{AOT_NAME}.*so')) + glob.glob(osp.join(here, f'{AOT_NAME}.so')))
    meta_path = osp.join(here, AOT_META)
    if not libs or not osp.isfile(meta_path):
        return None, 'not installed (pip install --no-build-isolation . on a machine with a CUDA toolkit builds it)'
    with open(meta_path) as fh:
        meta = json.load(fh)
    if meta.get('torch') != torch.__version__:
        return None, f'built for torch {meta.get("torch")}, this is torch {torch.__version__}'
    cap = torch.cuda.get_device_capability()
    if not arch_runs(meta.get('archs', ''), cap):
        return None, f'built for {meta.get("archs")}, this GPU is sm_{cap[0]}{cap[1]}'
    try:
        current = sources_hash()
    except FileNotFoundError:
        current = meta.get('sources')  # no sources shipped: nothing to be stale against
    if meta.get('sources') != current:
        return None, 'the kernel sources changed after it was built'
    return libs[-1], None


# ---------------------------------------------------------------- launch settings

#: the overrides of the kernels' measured launch rules (sweeps and tests): name ->
#: the environment variable read when the kernels load. Values: ``spmm_config`` a
#: (lanes, vectors) pair, ``sddmm_inflight`` 4 or 8, the others a bool; None: the rule.
OVERRIDES = {
    'spmm_config': 'PYG_TC_SPMM_CONFIG',
    'spmm_coop': 'PYG_TC_SPMM_COOP',
    'spmm_two_level': 'PYG_TC_SPMM_TWO_LEVEL',
    'sddmm_inflight': 'PYG_TC_SDDMM_INFLIGHT',
    'cbsr_pair': 'PYG_TC_CBSR_PAIR',
    'attn_nv4': 'PYG_TC_ATTN_NV4',
}
_OVERRIDDEN: Dict[str, Any] = {}


def _parse_override(name: str, raw: str) -> Any:
    raw = raw.strip()
    try:
        if name == 'spmm_config':
            lanes, vectors = raw.split(',')
            return int(lanes), int(vectors)
        if name == 'sddmm_inflight':
            return int(raw)
    except ValueError:
        raise ValueError(f'pyg_tc: {OVERRIDES[name]}={raw!r} is not understood') from None
    if raw not in ('0', '1'):
        raise ValueError(f'pyg_tc: {OVERRIDES[name]}={raw!r} must be 0 or 1')
    return raw == '1'


def _environment_overrides() -> Dict[str, Any]:
    return {n: _parse_override(n, os.environ[v]) for n, v in OVERRIDES.items() if os.environ.get(v, '').strip()}


@functools.lru_cache(maxsize=1)
def _library(path: str) -> ctypes.CDLL:
    """The loaded library's C interface (``kernels/common/launch_config.cpp``)."""
    lib = ctypes.CDLL(path)
    lib.pyg_tc_set_override.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64]
    lib.pyg_tc_set_override.restype = ctypes.c_int
    lib.pyg_tc_coop_units.argtypes = [ctypes.c_int]
    lib.pyg_tc_coop_units.restype = ctypes.c_int64
    return lib


def set_override(name: str, value: Any) -> None:
    """Set one launch-rule override of the loaded kernels (None: the rule);
    :func:`pyg_tc.testing.kernel_overrides` is the way tests and sweeps call it."""
    if name not in OVERRIDES:
        raise ValueError(f'pyg_tc: unknown launch override {name!r} (one of {", ".join(OVERRIDES)})')
    if not _STATE['loaded']:
        raise RuntimeError('pyg_tc: the kernels are not loaded')
    if name == 'spmm_config':
        a, b = (0, 0) if value is None else value
    else:
        a, b = (-1 if value is None else int(value)), 0
    rc = _library(_STATE['library']).pyg_tc_set_override(name.encode(), a, b)
    if rc != 0:
        allowed = {
            'spmm_config': '(lanes, vectors) with lanes in 4, 8, 16, 32 and vectors in 1, 2',
            'sddmm_inflight': '4 or 8',
        }.get(name, 'a bool')
        raise ValueError(f'pyg_tc: unsupported {name}={value!r} ({OVERRIDES[name]}): {allowed}')
    if value is None:
        _OVERRIDDEN.pop(name, None)
    else:
        _OVERRIDDEN[name] = value


def overrides() -> Dict[str, Any]:
    """The launch-rule overrides in force."""
    return dict(_OVERRIDDEN)


#: :func:`coop_units` where no kernels are loaded (the rule's value on a GPU of 132 SMs)
COOP_UNITS_WITHOUT_KERNELS = 132 * 256


def coop_units(device: Optional[int] = None) -> int:
    """Schedule units below which the csr SpMM runs in cooperative mode on
    ``device`` (the current CUDA device by default): the kernels' own rule
    (``kernels/common/launch_config.h``), asked once per device when they
    load (a list lookup here, so compiled code can call it); where they are
    not loaded, :data:`COOP_UNITS_WITHOUT_KERNELS`."""
    per_device = _STATE['coop_units']
    if not per_device:
        return COOP_UNITS_WITHOUT_KERNELS
    return per_device[torch.cuda.current_device() if device is None else device]


# ---------------------------------------------------------------- loading


def unavailable_reason() -> Optional[str]:
    if os.environ.get('PYG_TC_DISABLE_KERNELS'):
        return 'disabled by PYG_TC_DISABLE_KERNELS'
    if not torch.cuda.is_available():
        return 'no CUDA device visible to torch (CPU build of torch or no GPU)'
    if torch.version.cuda is None:
        return 'torch was built without CUDA'
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME is None:
        path, why = prebuilt()
        if path is None:
            return f'no prebuilt kernels ({why}) and no CUDA toolkit (nvcc) to build them: set CUDA_HOME'
    return None


def _jit_build(verbose: bool) -> str:
    from torch.utils import cpp_extension

    arch = _arch()
    bdir = build_dir(arch)
    os.makedirs(bdir, exist_ok=True)
    os.environ.setdefault('TORCH_CUDA_ARCH_LIST', f'{arch[0]}.{arch[1:]}')
    t0 = time.perf_counter()
    # cpp_extension.load takes its own file lock ('lock' in build_dir) so
    # concurrent processes build once and reuse the result; its ninja run
    # recompiles only what changed since the last build.
    cpp_extension.load(
        **build_args(arch, cpp_extension.CUDA_HOME), build_directory=bdir, is_python_module=False, verbose=verbose
    )
    _STATE['build_seconds'] = time.perf_counter() - t0
    _STATE['build_dir'] = bdir
    return osp.join(bdir, f'{NAME}.so')


def load(verbose: bool = False) -> bool:
    """Load the kernels: the ahead-of-time library where it runs here, else
    a JIT build (once per machine, then incrementally). Applies the launch
    overrides of the environment (:data:`OVERRIDES`; a malformed one raises).
    Returns True on success."""
    with _LOCK:
        if _STATE['loaded']:
            return True
        if _STATE['tried']:
            return False
        env_overrides = _environment_overrides()  # raises before anything is tried
        _STATE['tried'] = True
        reason = unavailable_reason()
        if reason is not None:
            _STATE['error'] = reason
            return False
        try:
            path, _STATE['prebuilt_reason'] = prebuilt()
            if path is not None:
                torch.ops.load_library(path)
                _STATE['mode'] = 'prebuilt'
            else:
                path = _jit_build(verbose)
                _STATE['mode'] = 'jit'
            lib = _library(path)
            _STATE['coop_units'] = [
                v if v > 0 else COOP_UNITS_WITHOUT_KERNELS
                for v in (lib.pyg_tc_coop_units(d) for d in range(torch.cuda.device_count()))
            ]
            _STATE['library'], _STATE['loaded'] = path, True
        except Exception as e:  # pragma: no cover - depends on the machine
            _STATE['error'] = f'build failed: {type(e).__name__}: {e}'
            return False
    for name, value in env_overrides.items():
        set_override(name, value)
    return True


def status() -> Dict[str, Any]:
    return dict(_STATE)
