"""The benchmark suites: each declares its cases, baselines and report columns
for the harness of :mod:`pyg_tc.bench` and has a ``main(argv)`` command line.
``common.py`` holds what they share: the real datasets and the full-batch
training loop. Run one with ``pyg-tc bench SUITE [options]`` or
``python -m benchmarks.suites.SUITE [options]`` from the repository root;
``pyg-tc bench --list`` lists them."""
