"""pyg_tc's benchmarks, run from a source checkout (not part of the installed
package): the suites in :mod:`benchmarks.suites` (``pyg-tc bench SUITE`` or
``python -m benchmarks.suites.SUITE``) and the scripts beside them (probes,
``sampling.py``, ``captured_step.py``, ``gpu_run.sh``); see ``benchmarks/README.md``."""
