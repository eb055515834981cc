"""``pyg_tc.info()``: what is available on this machine, and why not.

Quick where nothing is to be built: without a CUDA device it imports only
torch (not torch_geometric, not the op modules), so ``pyg-tc info`` answers
in about the time of ``import torch``."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import sys
from typing import Any, Dict


def _version(package: str) -> str:
    """``package``'s version, without importing it when it is not imported yet."""
    module = sys.modules.get(package)
    if module is not None and getattr(module, '__version__', None):
        return module.__version__
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:  # e.g. a source checkout on sys.path
        return importlib.import_module(package).__version__


def _installed(package: str) -> bool:
    """Whether ``package`` is installed (found on the path; not imported, so
    that ``pyg-tc info`` stays quick: importing torch_sparse alone takes
    longer than the whole report)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def info(build: bool = True) -> Dict[str, Any]:
    """Versions, GPU and kernel build status. With ``build=True`` (default) the
    kernels are loaded first if they can be (a CUDA device, and the library
    built by ``pip install`` or a CUDA toolkit for the JIT build), so the
    report is final; where they cannot, nothing is built and
    ``kernels_reason`` says why. ``kernels_build`` says which library runs:
    ``'prebuilt'`` (built ahead of time) or ``'jit'`` (built on this machine,
    ``prebuilt_reason`` saying why the prebuilt one was not taken)."""
    import torch

    from . import __version__, _kernels

    reason = _kernels.unavailable_reason()
    if build and reason is None:
        from . import _library

        _library.ensure()
    st = _kernels.status()
    gpu = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        gpu = {
            'name': p.name,
            'capability': f'{p.major}.{p.minor}',
            'memory_gb': round(p.total_memory / 2**30, 1),
            'sms': p.multi_processor_count,
        }
    return {
        'pyg_tc': __version__,
        'python': platform.python_version(),
        'torch': torch.__version__,
        'torch_cuda': torch.version.cuda,
        'torch_geometric': _version('torch_geometric'),
        'torch_sparse': _installed('torch_sparse'),
        'gpu': gpu,
        'kernels': 'loaded' if st['loaded'] else 'unavailable',
        'kernels_reason': None if st['loaded'] else (st['error'] or reason or 'not built yet'),
        'kernels_build': st['mode'],
        'prebuilt_reason': st['prebuilt_reason'],
        'library': st['library'],
        'build_seconds': st['build_seconds'],
        'build_dir': st['build_dir'],
        'backend': 'cuda kernels' if st['loaded'] else 'pure-PyTorch reference',
    }
