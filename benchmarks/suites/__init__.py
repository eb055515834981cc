"""The benchmark suites: each declares its cases, baselines and report columns
for the harness of :mod:`pyg_tc.bench` and has a ``main(argv, prog)`` command
line; one module per suite, named as the suite (after the kernel family it
measures: ``sgt``, ``cbsr``, ...; the paper it reproduces is in its
description). ``common.py`` holds what they share: the real datasets and the
full-batch training loop; their models come from :mod:`pyg_tc.bench.models`.
Run one with ``pyg-tc bench SUITE [options]`` or ``python -m
benchmarks.suites.SUITE [options]`` from the repository root; ``pyg-tc bench
--list`` lists them. The one-off probes are in :mod:`benchmarks.probes`."""
