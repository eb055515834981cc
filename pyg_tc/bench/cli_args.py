"""The ``pyg-tc bench`` options, declared without importing torch (or
torch_geometric), so ``pyg-tc --help`` and ``pyg-tc bench --help`` answer at
once and a bad value is refused at once, with argparse's usage and one
error line (exit code 2); the ``spmm`` suite (``benchmarks/suites/spmm.py``)
turns the options into its Config."""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable, Dict, List, Sequence

from .catalog import ALL_NAMES, resolve_names

#: the dtypes of the ``spmm`` suite (the keys of its ``DTYPES``)
DTYPE_NAMES = ('fp32', 'fp16', 'bf16')
#: the model kinds of the training benchmark
MODELS = ('gcn', 'sage', 'gin')


class CommaList:
    """An argparse ``type``: a comma-separated list, each item converted and
    checked by ``item`` (which raises ValueError with a one-line message).
    Returns the list; an empty list or a bad item is an argparse error.

    Example:
        >>> CommaList(positive_int, 'widths')('32, 64')
        [32, 64]
    """

    def __init__(self, item: Callable[[str], Any], what: str):
        self.item, self.what = item, what

    def __call__(self, text: str) -> List[Any]:
        tokens = [t.strip() for t in text.split(',') if t.strip()]
        if not tokens:
            raise argparse.ArgumentTypeError(f'expected a comma list of {self.what}, got {text!r}')
        try:
            out = [self.item(t) for t in tokens]
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return list(dict.fromkeys(out))

    def __repr__(self) -> str:  # argparse names the type in some messages
        return self.what


def choice(options: Sequence[str], what: str) -> Callable[[str], str]:
    """An item check: one of ``options`` (case-insensitive)."""

    def check(s: str) -> str:
        if s.lower() not in options:
            raise ValueError(f'unknown {what} {s!r}; choose from {", ".join(options)}')
        return s.lower()

    return check


def positive_int(s: str) -> int:
    """An item check: an integer > 0."""
    try:
        v = int(s)
    except ValueError:
        v = 0
    if v <= 0:
        raise ValueError(f'{s!r} is not a positive integer')
    return v


def positive_float(s: str) -> float:
    """An argparse ``type``: a finite number > 0."""
    try:
        v = float(s)
    except ValueError:
        v = float('nan')
    if not 0 < v < float('inf'):
        raise argparse.ArgumentTypeError(f'{s!r} is not a positive number')
    return v


def graph_list(text: str) -> List[str]:
    """An argparse ``type``: graph names and groups (``all``, ``large``,
    ``synthetic``, ``real``), groups expanded, each name checked."""
    try:
        names = resolve_names(text, [])
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not names:
        raise argparse.ArgumentTypeError(f'expected a comma list of graphs, got {text!r}')
    return names


#: option dest -> (environment variable read when the option is not given, type)
ENVIRONMENT: Dict[str, tuple] = {
    'graphs': ('PYG_TC_BENCH_GRAPHS', graph_list),
    'widths': ('PYG_TC_BENCH_WIDTHS', CommaList(positive_int, 'widths')),
    'dtypes': ('PYG_TC_BENCH_DTYPES', CommaList(choice(DTYPE_NAMES, 'dtype'), 'dtypes')),
    'train_graphs': ('PYG_TC_BENCH_TRAIN_GRAPHS', graph_list),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``pyg-tc bench`` options (also those of ``pyg-tc bench spmm``, the same suite)."""
    p.add_argument(
        '--graphs',
        type=graph_list,
        metavar='LIST',
        help='comma list of graphs or groups (all, large, synthetic, real); '
        f'known: {", ".join(ALL_NAMES)}; env PYG_TC_BENCH_GRAPHS',
    )
    p.add_argument(
        '--widths',
        type=ENVIRONMENT['widths'][1],
        metavar='LIST',
        help='comma list of feature widths (default 32,64,128,256); env PYG_TC_BENCH_WIDTHS',
    )
    p.add_argument(
        '--dtypes',
        type=ENVIRONMENT['dtypes'][1],
        metavar='LIST',
        help=f'comma list of {",".join(DTYPE_NAMES)} (default all); env PYG_TC_BENCH_DTYPES',
    )
    p.add_argument('--out', default='bench_out', help='output directory (default ./bench_out)')
    p.add_argument(
        '--training',
        action=argparse.BooleanOptionalAction,
        default=True,
        help='also run the end-to-end training step benchmark (default on)',
    )
    p.add_argument(
        '--train-graphs',
        type=graph_list,
        metavar='LIST',
        help='graphs for the training benchmark (default reddit on a '
        'GPU, tiny on the CPU; arxiv with --quick); env PYG_TC_BENCH_TRAIN_GRAPHS',
    )
    p.add_argument(
        '--train-models',
        type=CommaList(choice(MODELS, 'model'), 'models'),
        default=['gcn'],
        metavar='LIST',
        help=f'comma list of {",".join(MODELS)} (default gcn)',
    )
    p.add_argument('--quick', action='store_true', help='a small subset with fewer repetitions')
    p.add_argument(
        '--budget',
        type=positive_float,
        default=None,
        metavar='SECONDS',
        help='start no new graph after this many seconds (outputs stay complete)',
    )


def read_environment(args: argparse.Namespace, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Fills the options not given from their ``PYG_TC_BENCH_*`` variable,
    checked like the option (a bad value: ``parser.error``, exit code 2)."""
    for dest, (var, kind) in ENVIRONMENT.items():
        value = os.environ.get(var)
        if getattr(args, dest, None) is None and value:
            try:
                setattr(args, dest, kind(value))
            except argparse.ArgumentTypeError as e:
                parser.error(f'{var}={value!r}: {e}')
    return args
