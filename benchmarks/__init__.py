"""pyg_tc's benchmarks, run from a source checkout (not part of the installed
package): the suites in :mod:`benchmarks.suites` (``pyg-tc bench SUITE`` or
``python -m benchmarks.suites.SUITE``), the one-off probes in
:mod:`benchmarks.probes` (sweeps and profiler workloads behind single
decisions) and ``gpu_run.sh``; see ``benchmarks/README.md``."""
