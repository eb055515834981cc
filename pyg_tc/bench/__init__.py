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

from typing import TYPE_CHECKING

from .. import _lazy

__all__ = ['BenchGraph', 'load_graph', 'rmat', 'data_dir', 'Config', 'main', 'make_config', 'run',
           'bench_graph', 'summarize', 'Timing', 'bench', 'copy_bandwidth', 'track_memory',
           'bench_training', 'kernel_time', 'measure', 'Reporter']

#: public name -> its module (imported on first access: the package itself
#: loads no torch, so the command line can use :mod:`.cli_args`)
_LAZY = {**dict.fromkeys(('BenchGraph', 'load_graph', 'rmat', 'data_dir'), 'graphs'),
         'Reporter': 'report',
         **dict.fromkeys(('Config', 'bench_graph', 'bench_training', 'main', 'make_config', 'run', 'summarize'),
                         'runner'),
         **dict.fromkeys(('Timing', 'bench', 'copy_bandwidth', 'kernel_time', 'measure', 'track_memory'), 'timing')}

if TYPE_CHECKING:
    from .graphs import BenchGraph, data_dir, load_graph, rmat
    from .report import Reporter
    from .runner import Config, bench_graph, bench_training, main, make_config, run, summarize
    from .timing import Timing, bench, copy_bandwidth, kernel_time, measure, track_memory


__getattr__, __dir__ = _lazy.attach(__name__, {name: (f'.{module}', name) for name, module in _LAZY.items()},
                                    __all__)
