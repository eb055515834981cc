"""The ``pyg-tc bench`` options, declared without importing torch (or
torch_geometric), so ``pyg-tc --help`` and ``pyg-tc bench --help`` answer at
once; :func:`pyg_tc.bench.runner.config_from_args` turns them into a Config."""
from __future__ import annotations

import argparse

from .catalog import ALL_NAMES

#: the dtypes of the suite (the keys of :data:`pyg_tc.bench.runner.DTYPES`)
DTYPE_NAMES = ('fp32', 'fp16', 'bf16')
#: the model kinds of the training benchmark
MODELS = ('gcn', 'sage', 'gin')


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench`` options (shared by ``pyg-tc bench`` and ``benchmarks/run_suite.py``)."""
    p.add_argument('--graphs', help='comma list of graphs or groups (all, large, synthetic, real); '
                   f'known: {", ".join(ALL_NAMES)}; env PYG_TC_BENCH_GRAPHS')
    p.add_argument('--widths', help='comma list of feature widths (default 32,64,128,256); env PYG_TC_BENCH_WIDTHS')
    p.add_argument('--dtypes', help=f'comma list of {",".join(DTYPE_NAMES)} (default all); env PYG_TC_BENCH_DTYPES')
    p.add_argument('--out', default='bench_out', help='output directory (default ./bench_out)')
    p.add_argument('--training', action=argparse.BooleanOptionalAction, default=True,
                   help='also run the end-to-end training step benchmark (default on)')
    p.add_argument('--train-graphs', help='graphs for the training benchmark (default reddit on a '
                   'GPU, tiny on the CPU; arxiv with --quick); env PYG_TC_BENCH_TRAIN_GRAPHS')
    p.add_argument('--train-models', default='gcn', help=f'comma list of {",".join(MODELS)} (default gcn)')
    p.add_argument('--quick', action='store_true', help='a small subset with fewer repetitions')
    p.add_argument('--budget', type=float, default=None, metavar='SECONDS',
                   help='start no new graph after this many seconds (outputs stay complete)')
