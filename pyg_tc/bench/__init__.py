"""Benchmark suite: synthetic and real graphs, SpMM kernel timings against
cuSPARSE, an end-to-end training step against PyG, and JSON/markdown/PNG
reports. Entry points: ``pyg-tc bench`` / ``python -m pyg_tc bench`` /
``python benchmarks/run_suite.py``; from Python, ``run(make_config(...))``.
"""
from .graphs import BenchGraph, load_graph, rmat, shared_dir
from .runner import Config, main, make_config, run
from .spmm import bench_graph, summarize
from .timing import Timing, bench, copy_bandwidth, track_memory
from .training import bench_training

__all__ = ['BenchGraph', 'load_graph', 'rmat', 'shared_dir', 'Config', 'main', 'make_config', 'run',
           'bench_graph', 'summarize', 'Timing', 'bench', 'copy_bandwidth', 'track_memory',
           'bench_training']
