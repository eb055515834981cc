"""Benchmarks: one harness and per-family suites that declare their cases.

* Harness: ``timing.py`` (per-call and kernel-only timing, memory, copy
  bandwidth, :func:`measure` for one case's implementations and baselines)
  and ``report.py`` (environment, progress, the :class:`Reporter` writing
  JSON lines + markdown tables + PNG plots from declared columns).
* Suites: ``runner.py`` (``pyg-tc bench``: SpMM vs torch.sparse / cuSPARSE,
  training step vs PyG), ``maxk.py``, ``maxk_train.py``, ``tcgnn.py``.
* ``graphs.py``: the R-MAT generator and the real graphs (offline);
  ``catalog.py`` their names and the default suites.
* ``cli_args.py``: the ``pyg-tc bench`` options. It and ``catalog.py`` import
  no torch, and this package imports its names lazily, so the command line
  parses (and ``--help`` answers) without loading torch.

Entry points: ``pyg-tc bench`` / ``python -m pyg_tc bench`` /
``python benchmarks/run_suite.py``; from Python, ``run(make_config(...))``.
Measured results live in ``docs/`` (benchmarks.md, maxk.md, tcgnn.md).
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any, List

__all__ = ['BenchGraph', 'load_graph', 'rmat', 'shared_dir', 'Config', 'main', 'make_config', 'run',
           'bench_graph', 'summarize', 'Timing', 'bench', 'copy_bandwidth', 'track_memory',
           'bench_training', 'kernel_time', 'measure', 'Reporter']

#: public name -> its module (imported on first access: the package itself
#: loads no torch, so the command line can use :mod:`.cli_args`)
_LAZY = {**dict.fromkeys(('BenchGraph', 'load_graph', 'rmat', 'shared_dir'), 'graphs'),
         'Reporter': 'report',
         **dict.fromkeys(('Config', 'bench_graph', 'bench_training', 'main', 'make_config', 'run', 'summarize'),
                         'runner'),
         **dict.fromkeys(('Timing', 'bench', 'copy_bandwidth', 'kernel_time', 'measure', 'track_memory'), 'timing')}

if TYPE_CHECKING:
    from .graphs import BenchGraph, load_graph, rmat, shared_dir
    from .report import Reporter
    from .runner import Config, bench_graph, bench_training, main, make_config, run, summarize
    from .timing import Timing, bench, copy_bandwidth, kernel_time, measure, track_memory


def __getattr__(name: str) -> Any:
    """Imports a public name, or a submodule, on first access (and keeps it)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(f'.{_LAZY[name]}', __name__), name)
    elif not name.startswith('__') and importlib.util.find_spec(f'{__name__}.{name}') is not None:
        value = importlib.import_module(f'.{name}', __name__)
    else:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
