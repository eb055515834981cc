"""Benchmarks: one harness and per-family suites that declare their cases.

* Harness: ``timing.py`` (per-call and kernel-only timing, memory, copy
  bandwidth, :func:`measure` for one case's implementations and baselines)
  and ``report.py`` (environment, progress, the :class:`Reporter` writing
  JSON lines + markdown tables + PNG plots from declared columns).
* Suites: ``runner.py`` (``pyg-tc bench``: SpMM vs torch.sparse / cuSPARSE,
  training step vs PyG), ``maxk.py``, ``maxk_train.py``, ``tcgnn.py``.
* ``graphs.py``: the R-MAT generator and the real graphs (offline).

Entry points: ``pyg-tc bench`` / ``python -m pyg_tc bench`` /
``python benchmarks/run_suite.py``; from Python, ``run(make_config(...))``.
Measured results live in ``docs/`` (benchmarks.md, maxk.md, tcgnn.md).
"""
from .graphs import BenchGraph, load_graph, rmat, shared_dir
from .report import Reporter
from .runner import Config, bench_graph, bench_training, main, make_config, run, summarize
from .timing import Timing, bench, copy_bandwidth, kernel_time, measure, track_memory

__all__ = ['BenchGraph', 'load_graph', 'rmat', 'shared_dir', 'Config', 'main', 'make_config', 'run',
           'bench_graph', 'summarize', 'Timing', 'bench', 'copy_bandwidth', 'track_memory',
           'bench_training', 'kernel_time', 'measure', 'Reporter']
