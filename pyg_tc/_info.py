"""``pyg_tc.info()``: what is available on this machine, and why not."""
from __future__ import annotations

import platform
from typing import Any, Dict

import torch

from . import _kernels


def info(build: bool = True) -> Dict[str, Any]:
    """Versions, GPU and kernel build status. With ``build=True`` (default) the
    kernels are built/loaded first if a GPU is present, so the report is final."""
    import torch_geometric
    from . import _library
    if build:
        _library.ensure()
    st = _kernels.status()
    gpu = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        gpu = {'name': p.name, 'capability': f'{p.major}.{p.minor}',
               'memory_gb': round(p.total_memory / 2**30, 1), 'sms': p.multi_processor_count}
    try:
        import torch_sparse  # noqa: F401
        has_sparse = True
    except Exception:
        has_sparse = False
    return {
        'pyg_tc': __import__('pyg_tc').__version__,
        'python': platform.python_version(),
        'torch': torch.__version__,
        'torch_cuda': torch.version.cuda,
        'torch_geometric': torch_geometric.__version__,
        'torch_sparse': has_sparse,
        'gpu': gpu,
        'kernels': 'loaded' if st['loaded'] else 'unavailable',
        'kernels_reason': None if st['loaded'] else (st['error'] or 'not built yet'),
        'build_seconds': st['build_seconds'],
        'build_dir': st['build_dir'],
        'backend': 'cuda kernels' if st['loaded'] else 'pure-PyTorch reference',
    }
