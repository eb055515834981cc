"""Command line: ``pyg-tc info`` and ``pyg-tc bench [SUITE]`` (also ``python -m pyg_tc``);
without arguments, the help.

The parser is built without importing torch or torch_geometric (``pyg_tc``
and ``pyg_tc.bench`` import lazily, the ``bench`` options live in the
torch-free :mod:`pyg_tc.bench.cli_args`), so ``--help``, ``--version`` and
argument errors answer at once: every option has an argparse type or
choices, and a bad value or an unknown option prints the usage of the
command it belongs to and one error line (exit code 2). A command imports
what it needs when it runs."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence


def _info(args) -> int:
    import json

    import pyg_tc

    info = pyg_tc.info(build=not args.no_build)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    gpu = info.get('gpu')
    rows = [
        ('pyg_tc', info['pyg_tc']),
        ('python', info['python']),
        ('torch', f'{info["torch"]} (CUDA {info["torch_cuda"] or "none"})'),
        ('torch_geometric', info['torch_geometric']),
        ('torch_sparse', 'installed' if info['torch_sparse'] else 'not installed'),
        (
            'GPU',
            f'{gpu["name"]} (sm_{gpu["capability"].replace(".", "")}, {gpu["memory_gb"]} GB, {gpu["sms"]} SMs)'
            if gpu
            else 'none',
        ),
        ('kernels', info['kernels'] + (f' ({info["kernels_reason"]})' if info.get('kernels_reason') else '')),
        ('backend', info['backend']),
    ]
    if info.get('kernels_build') == 'prebuilt':
        rows.append(('kernel library', f'prebuilt ({info["library"]})'))
    elif info.get('kernels_build') == 'jit':
        rows.append(('kernel library', f'JIT-built here (prebuilt: {info["prebuilt_reason"]})'))
    if info.get('build_seconds') is not None:
        rows.append(('kernel build', f'{info["build_seconds"]:.1f} s'))
    if info.get('build_dir'):
        rows.append(('build dir', info['build_dir']))
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f'{k:<{w}}  {v}')
    return 0


def _bench(args) -> int:
    """``pyg-tc bench [options]``: the default suite; ``pyg-tc bench SUITE ...``: that suite's command line."""
    from .bench import registry

    try:
        if getattr(args, 'suite', None) is not None:
            return registry.run_suite(args.suite, args.suite_args)
        suite = registry.load_suite(registry.DEFAULT)
    except registry.SuitesNotFound as e:
        sys.exit(f'pyg-tc bench: error: {e}')
    suite.run(suite.config_from_args(args))
    return 0


class _ListSuites(argparse.Action):
    """``--list``: prints the suites of :mod:`pyg_tc.bench.registry` and exits."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from .bench.registry import DEFAULT, SUITES

        w = max(map(len, SUITES))
        for name, (_, desc) in SUITES.items():
            print(f'{name:<{w}}  {desc}' + ' (the default)' * (name == DEFAULT))
        parser.exit()


class _CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: an argument it does not know is its own error
    (its usage), not the top-level parser's; ``check(namespace, parser)``,
    when set, completes and checks the parsed options. A first argument in
    ``programs`` names a program that parses the rest itself (``suite`` and
    ``suite_args``, no other option parsed)."""

    check: Optional[Callable[[argparse.Namespace, argparse.ArgumentParser], object]] = None
    programs: Sequence[str] = ()

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        if args and args[0] in self.programs:
            namespace = namespace if namespace is not None else argparse.Namespace()
            namespace.suite, namespace.suite_args = args[0], args[1:]
            for key, value in self._defaults.items():
                setattr(namespace, key, value)
            return namespace, []
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f'unrecognized arguments: {" ".join(extras)}')
        if self.check is not None:
            self.check(namespace, self)
        return namespace, extras


def parser() -> argparse.ArgumentParser:
    """The ``pyg-tc`` argument parser (imports no torch)."""
    from . import __version__
    from .bench.cli_args import add_arguments, read_environment
    from .bench.registry import DEFAULT, SUITES

    p = argparse.ArgumentParser(
        prog='pyg-tc',
        description='pyg_tc: drop-in PyG layers on CUDA sparse kernels',
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='examples:\n'
        '  pyg-tc info            versions, GPU, kernel status (builds the kernels on a GPU)\n'
        '  pyg-tc info --json     the same as JSON (pyg_tc.info())\n'
        '  pyg-tc bench           the default benchmark (on a CPU: a small run of the reference)\n'
        '  pyg-tc bench --list    every benchmark suite\n'
        '  pyg-tc COMMAND --help  the options of a command',
    )
    p.add_argument('--version', action='version', version=f'pyg_tc {__version__}')
    sub = p.add_subparsers(dest='command', required=True, parser_class=_CommandParser)
    pi = sub.add_parser('info', help='versions, GPU and kernel status (builds the kernels on a GPU)')
    pi.add_argument('--json', action='store_true', help='print the raw dictionary as JSON')
    pi.add_argument('--no-build', action='store_true', help='do not build/load the kernels first')
    pi.set_defaults(func=_info)
    pb = sub.add_parser(
        'bench',
        help='run a benchmark suite (JSON + markdown + PNG in --out)',
        description=f'Runs the {DEFAULT} suite: {SUITES[DEFAULT][1]}, with the options below. '
        '"pyg-tc bench SUITE [options]" runs another suite of the source checkout\'s benchmarks/ '
        '(--list lists them; pyg-tc bench SUITE --help gives its options).',
    )
    pb.add_argument('--list', action=_ListSuites, help='list the suites and exit')
    add_arguments(pb)
    pb.programs = tuple(SUITES)
    pb.check = read_environment  # the PYG_TC_BENCH_* variables, checked like the options
    pb.set_defaults(func=_bench)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``pyg-tc`` (``info`` / ``bench [SUITE]``); returns the exit code.
    Without arguments (``pyg-tc``, ``python -m pyg_tc``) it prints the help and returns 0."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    if not argv:
        p.print_help()
        return 0
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == '__main__':
    sys.exit(main())
