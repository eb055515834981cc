"""One-off probes: the sweeps, profiler workloads and A/B runs behind single
decisions (kernel configurations, warps per unit, half-precision rules, the
host overhead of a layer), run by hand or by ``benchmarks/gpu_run.sh`` as
``python benchmarks/probes/NAME.py`` from the repository root. Unlike the
suites in :mod:`benchmarks.suites` they are not in ``pyg-tc bench`` and keep
no results of record of their own; the decisions they informed cite them."""
