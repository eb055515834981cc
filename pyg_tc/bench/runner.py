"""The whole benchmark run: environment, copy bandwidth, SpMM suite, training.

Defaults depend on the machine: on a GPU the full suite; without CUDA a tiny
R-MAT graph through the pure-PyTorch reference (a smoke run, said so in the
output). Graphs, widths and dtypes can be restricted by argument or by the
environment (``PYG_TC_BENCH_GRAPHS``, ``PYG_TC_BENCH_WIDTHS``,
``PYG_TC_BENCH_DTYPES``, ``PYG_TC_BENCH_TRAIN_GRAPHS``); ``budget_s`` stops
starting new graphs once that many seconds have passed, so a run inside a
time limit still writes a complete report.
"""
from __future__ import annotations

import gc
import os
import time
import traceback
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch

from . import graphs as G
from .report import Reporter, environment
from .spmm import DTYPES, WIDTHS, bench_graph
from .timing import copy_bandwidth
from .training import MODELS, bench_training


def log(msg: str) -> None:
    print(msg, flush=True)


def _split(spec, cast=str) -> Optional[List]:
    if spec is None or spec == '' or (isinstance(spec, (list, tuple)) and not spec):
        return None
    if isinstance(spec, str):
        spec = [s for s in spec.split(',') if s.strip()]
    return [cast(s.strip() if isinstance(s, str) else s) for s in spec]


@dataclass
class Config:
    graphs: List[str]
    widths: List[int]
    dtypes: List[str]
    out: str = 'bench_out'
    training: bool = True
    train_graphs: List[str] = field(default_factory=list)
    train_models: List[str] = field(default_factory=lambda: ['gcn'])
    train_steps: int = 10
    train_rep: int = 20
    warmup: int = 10
    rep: int = 50
    max_time_s: float = 1.0
    budget_s: Optional[float] = None
    quick: bool = False


def make_config(graphs=None, widths=None, dtypes=None, out: str = 'bench_out', training: bool = True,
                quick: bool = False, train_graphs=None, train_models=None,
                budget_s: Optional[float] = None, cuda: Optional[bool] = None) -> Config:
    """Arguments win over the environment, the environment over the defaults
    for this machine (GPU or CPU, quick or full)."""
    env = os.environ.get
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if cuda:
        dg = G.QUICK_GPU_SUITE if quick else G.GPU_SUITE
        dw = [32, 128] if quick else list(WIDTHS)
        dt = ['arxiv'] if quick else ['reddit']
    else:
        dg, dw, dt = G.CPU_SUITE, ([32, 64] if quick else list(WIDTHS)), ['tiny']
    graphs = G.resolve_names(graphs if graphs is not None else env('PYG_TC_BENCH_GRAPHS'), dg)
    widths = _split(widths if widths is not None else env('PYG_TC_BENCH_WIDTHS'), int) or dw
    dtypes = _split(dtypes if dtypes is not None else env('PYG_TC_BENCH_DTYPES')) or list(DTYPES)
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise ValueError(f'unknown dtype(s) {bad}; choose from {list(DTYPES)}')
    tg = G.resolve_names(train_graphs if train_graphs is not None else env('PYG_TC_BENCH_TRAIN_GRAPHS'), dt)
    tm = _split(train_models) or ['gcn']
    if any(m not in MODELS for m in tm):
        raise ValueError(f'unknown model(s) {tm}; choose from {MODELS}')
    fast = quick or not cuda
    return Config(graphs=graphs, widths=widths, dtypes=dtypes, out=out, training=training,
                  train_graphs=tg, train_models=tm, train_steps=5 if fast else 10,
                  train_rep=5 if fast else 20, warmup=3 if fast else 10, rep=10 if fast else 50,
                  max_time_s=0.5 if fast else 1.0, budget_s=budget_s, quick=quick)


def run(cfg: Config) -> Dict[str, str]:
    """Run the benchmarks of ``cfg``; returns the paths of the written outputs."""
    import pyg_tc
    t0 = time.perf_counter()
    log('[info] loading pyg_tc (builds the CUDA kernels on first use on a GPU) ...')
    info = pyg_tc.info()
    log(f'[info] pyg_tc {info["pyg_tc"]}, torch {info["torch"]}, PyG {info["torch_geometric"]}, '
        f'GPU: {(info["gpu"] or {}).get("name", "none")}, backend: {info["backend"]}'
        + (f' (kernel build {info["build_seconds"]:.0f} s)' if info.get('build_seconds') else ''))
    notes = []
    if info['kernels'] != 'loaded':
        msg = (f'CUDA kernels unavailable ({info["kernels_reason"]}): pyg_tc runs the pure-PyTorch '
               f'reference path, so its timings are NOT kernel timings')
        if not torch.cuda.is_available():
            msg += '; this is a CPU smoke run on small graphs'
        log('[warn] ' + msg)
        notes.append(msg)
    dev = G.default_device()
    copy = copy_bandwidth(dev)
    log(f'[info] copy bandwidth (read + write) on {dev}: {copy["copy_gbps"]:.0f} GB/s')
    rep = Reporter(cfg.out, environment(info, copy))
    log(f'[info] graphs {cfg.graphs}, widths {cfg.widths}, dtypes {cfg.dtypes}, '
        f'training {cfg.train_graphs if cfg.training else "off"} {cfg.train_models}, out {cfg.out}')

    def over_budget(what: str) -> bool:
        if cfg.budget_s is not None and time.perf_counter() - t0 > cfg.budget_s:
            msg = f'time budget of {cfg.budget_s:.0f} s spent: skipped {what}'
            log('[warn] ' + msg)
            notes.append(msg)
            return True
        return False

    def safely(what: str, fn):
        try:
            for rec in fn():
                rep.add(rec)
        except Exception as e:
            msg = f'{what} failed: {type(e).__name__}: {e}'
            log('[error] ' + msg)
            traceback.print_exc()
            notes.append(msg)
        gc.collect()
        if dev.type == 'cuda':
            torch.cuda.empty_cache()
        rep.write(notes)

    for i, name in enumerate(cfg.graphs):
        if over_budget('graphs ' + ', '.join(cfg.graphs[i:])):
            break
        t = time.perf_counter()

        def one(name=name):
            bg = G.load_graph(name, dev)
            log(f'[graph] {name}: {bg.num_nodes:,} nodes, {bg.num_edges:,} edges ({bg.source}), '
                f'loaded in {time.perf_counter() - t:.1f} s')
            return bench_graph(bg, cfg.widths, cfg.dtypes, copy['copy_gbps'], cfg.warmup, cfg.rep,
                               cfg.max_time_s, log, info['backend'])
        safely(f'spmm on {name}', one)

    if cfg.training:
        for i, name in enumerate(cfg.train_graphs):
            if over_budget('training on ' + ', '.join(cfg.train_graphs[i:])):
                break
            safely(f'training on {name}', lambda name=name: bench_training(
                G.load_graph(name, dev), cfg.train_models, cfg.train_steps, cfg.train_rep, log=log))

    paths = rep.write(notes)
    log(f'[done] {time.perf_counter() - t0:.1f} s; wrote ' + ', '.join(paths.values()))
    _print_summary(rep)
    return paths


def _print_summary(rep: Reporter) -> None:
    from .report import _c
    from .spmm import summarize
    for key, v in summarize(rep.records).items():
        log(f'[summary] {key:12s} cases {v["cases"]:3d}  geomean x cuSPARSE '
            f'{_c(v["geomean_vs_cusparse"], ".2f")}  min {_c(v["min_vs_cusparse"], ".2f")}  '
            f'geomean x pyg_tc fp32 {_c(v["geomean_vs_pyg_tc_fp32"], ".2f")}  '
            f'kernel-only geomean {_c(v.get("kernel_geomean_vs_cusparse"), ".2f")} '
            f'min {_c(v.get("kernel_min_vs_cusparse"), ".2f")}  '
            f'max rel err {_c(v["max_rel_err"], ".1e")}')


def add_arguments(p) -> None:
    """The ``bench`` options (shared by ``pyg-tc bench`` and ``benchmarks/run_suite.py``)."""
    import argparse
    p.add_argument('--graphs', help='comma list of graphs or groups (all, large, synthetic, real); '
                   f'known: {", ".join(G.ALL_NAMES)}; env PYG_TC_BENCH_GRAPHS')
    p.add_argument('--widths', help='comma list of feature widths (default 32,64,128,256); '
                   'env PYG_TC_BENCH_WIDTHS')
    p.add_argument('--dtypes', help='comma list of fp32,fp16,bf16 (default all); env PYG_TC_BENCH_DTYPES')
    p.add_argument('--out', default='bench_out', help='output directory (default ./bench_out)')
    p.add_argument('--training', action=argparse.BooleanOptionalAction, default=True,
                   help='also run the end-to-end training step benchmark (default on)')
    p.add_argument('--train-graphs', help='graphs for the training benchmark (default reddit on a '
                   'GPU, tiny on the CPU; arxiv with --quick); env PYG_TC_BENCH_TRAIN_GRAPHS')
    p.add_argument('--train-models', default='gcn', help=f'comma list of {",".join(MODELS)} (default gcn)')
    p.add_argument('--quick', action='store_true', help='a small subset with fewer repetitions')
    p.add_argument('--budget', type=float, default=None, metavar='SECONDS',
                   help='start no new graph after this many seconds (outputs stay complete)')


def config_from_args(a) -> Config:
    return make_config(a.graphs, a.widths, a.dtypes, a.out, a.training, a.quick, a.train_graphs,
                       a.train_models, a.budget)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python benchmarks/run_suite.py [options]``: the same as ``pyg-tc bench``."""
    import argparse
    p = argparse.ArgumentParser(prog='pyg-tc bench', description='pyg_tc benchmark suite')
    add_arguments(p)
    run(config_from_args(p.parse_args(argv)))
    return 0
