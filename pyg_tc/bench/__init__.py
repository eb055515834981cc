"""The benchmark harness, and the registry of the suites that use it.

* ``timing.py``: per-call and kernel-only timing, memory, copy bandwidth,
  :func:`measure` for one case's implementations and baselines.
* ``report.py``: environment, progress, the :class:`Reporter` writing JSON
  lines + markdown tables + PNG plots from declared columns.
* ``graphs.py``: the R-MAT generator and the real graphs (offline);
  ``catalog.py`` their names and the default graph lists.
* ``models.py``: the benchmarks' and tutorials' models
  (:class:`~pyg_tc.bench.models.Net`: a stack of convolutions from
  ``torch_geometric.nn`` or ``pyg_tc.nn``; :class:`~pyg_tc.bench.models.GraphNet`:
  the same with sum pooling and a head, for graph classification).
* ``registry.py``: the suites by name (``pyg-tc bench SUITE``); they live in
  ``benchmarks/suites/`` of the source checkout, not in the installed package.
* ``cli_args.py``: the ``pyg-tc bench`` options. It, ``catalog.py`` and
  ``registry.py`` import no torch, and this package imports its names lazily,
  so the command line parses (and ``--help`` answers) without loading torch.

Measured results live in ``docs/`` (benchmarks.md, cbsr.md, sgt.md, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _lazy

__all__ = [
    'BenchGraph',
    'load_graph',
    'rmat',
    'data_dir',
    'Timing',
    'bench',
    'copy_bandwidth',
    'track_memory',
    'kernel_time',
    'measure',
    'loop_time',
    'loop_ms',
    'PhaseTimer',
    'kernel_profile',
    'Reporter',
    'SUITES',
    'load_suite',
    'run_suite',
]

#: public name -> its module (imported on first access: the package itself
#: loads no torch, so the command line can use :mod:`.cli_args`)
_LAZY = {
    **dict.fromkeys(('BenchGraph', 'load_graph', 'rmat', 'data_dir'), 'graphs'),
    'Reporter': 'report',
    **dict.fromkeys(('SUITES', 'load_suite', 'run_suite'), 'registry'),
    **dict.fromkeys(
        (
            'Timing',
            'bench',
            'copy_bandwidth',
            'kernel_time',
            'measure',
            'track_memory',
            'loop_time',
            'loop_ms',
            'PhaseTimer',
            'kernel_profile',
        ),
        'timing',
    ),
}

if TYPE_CHECKING:
    from .graphs import BenchGraph, data_dir, load_graph, rmat
    from .registry import SUITES, load_suite, run_suite
    from .report import Reporter
    from .timing import (
        PhaseTimer,
        Timing,
        bench,
        copy_bandwidth,
        kernel_profile,
        kernel_time,
        loop_ms,
        loop_time,
        measure,
        track_memory,
    )


__getattr__, __dir__ = _lazy.attach(__name__, {name: (f'.{module}', name) for name, module in _LAZY.items()}, __all__)
