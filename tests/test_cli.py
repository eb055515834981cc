"""The command line and the lazy package: ``pyg-tc --help`` (also a bare
``pyg-tc`` or ``python -m pyg_tc``, exit code 0), ``--version`` and every
argument error answer without importing torch or torch_geometric (an
error: exit code 2, the command's usage and one line); ``pyg-tc info`` builds
nothing where nothing can be built; ``pyg-tc bench`` on the CPU reports
reference-path times, not ratios; and ``import pyg_tc`` imports nothing heavy
until a submodule is used (the ops are still defined when they are needed)."""

from __future__ import annotations

import ast
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

import pytest

from pyg_tc import cli

from .conftest import REPO_ROOT

HEAVY = ('torch', 'torch_geometric')


def _python(*args: str, env=None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=check,
        env={**(os.environ if env is None else env), 'PYTHONPATH': str(REPO_ROOT)},
    )


def torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _imported(importtime: str) -> set:
    """Module names in ``python -X importtime`` output."""
    return {line.rsplit('|', 1)[1].strip() for line in importtime.splitlines() if line.startswith('import time:')}


@pytest.mark.parametrize('args', [['--help'], ['bench', '--help'], ['info', '--help']])
def test_help_imports_neither_torch_nor_pyg(args):
    p = _python('-X', 'importtime', '-m', 'pyg_tc', *args)
    assert 'usage: pyg-tc' in p.stdout
    mods = _imported(p.stderr)
    assert 'pyg_tc.cli' in mods
    heavy = sorted(m for m in mods if m.split('.')[0] in HEAVY)
    assert not heavy, f'pyg-tc {" ".join(args)} imported {heavy[:5]}'


HELP_LINES = (
    'usage: pyg-tc [-h] [--version] {info,bench} ...',
    '    info ',
    '    bench ',
    'examples:',
    '  pyg-tc info ',
    '  pyg-tc bench --list ',
)


@pytest.mark.parametrize('how', ['python -m pyg_tc', 'pyg-tc'])
def test_no_arguments_print_the_help(how):
    """``python -m pyg_tc`` and a bare ``pyg-tc`` (the console script, which
    calls :func:`pyg_tc.cli.main` with ``sys.argv == ['pyg-tc']``) print the
    help with both commands and exit 0, without importing torch."""
    if how == 'pyg-tc':
        p = _python(
            '-X',
            'importtime',
            '-c',
            'import sys; from pyg_tc.cli import main; sys.argv = ["pyg-tc"]; sys.exit(main())',
            check=False,
        )
    else:
        p = _python('-X', 'importtime', '-m', 'pyg_tc', check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout == _python('-m', 'pyg_tc', '--help').stdout
    lines = p.stdout.splitlines()
    assert lines[0] == HELP_LINES[0]
    for start in HELP_LINES[1:]:
        assert any(line.startswith(start) for line in lines), f'no line starting {start!r}'
    assert not [line for line in p.stderr.splitlines() if not line.startswith('import time:')]
    assert not [m for m in _imported(p.stderr) if m.split('.')[0] in HEAVY]


def test_main_without_arguments_returns_0(capsys, monkeypatch):
    monkeypatch.setattr(sys, 'argv', ['pyg-tc'])
    assert cli.main() == 0 and cli.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith('usage: pyg-tc') and out.count('usage: pyg-tc') == 2


def test_parsing_bench_options_imports_neither_torch_nor_pyg():
    code = (
        'import json, sys; from pyg_tc import cli; '
        'a = cli.parser().parse_args(["bench", "--graphs", "tiny,large", "--no-training", "--budget", "5", '
        '"--widths", "32, 64,32", "--train-models", "GCN,gin"]); '
        'print(json.dumps([sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torch_geometric")), '
        '{k: v for k, v in vars(a).items() if k != "func"}]))'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith('PYG_TC_BENCH_')}
    heavy, args = json.loads(_python('-c', code, env=env).stdout)
    assert heavy == []
    assert args == dict(
        command='bench',
        graphs=['tiny', 'reddit', 'products', 'arxiv', 'tolokers', 'blogcatalog', 'cornell5'],
        widths=[32, 64],
        dtypes=None,
        out='bench_out',
        training=False,
        train_graphs=None,
        train_models=['gcn', 'gin'],
        quick=False,
        budget=5.0,
    )


def test_bench_options_give_the_same_config(monkeypatch):
    from benchmarks.suites import spmm

    for var in ('GRAPHS', 'WIDTHS', 'DTYPES', 'TRAIN_GRAPHS'):
        monkeypatch.delenv(f'PYG_TC_BENCH_{var}', raising=False)
    a = cli.parser().parse_args(
        [
            'bench',
            '--graphs',
            'tiny',
            '--widths',
            '32',
            '--dtypes',
            'fp32',
            '--quick',
            '--train-models',
            'gcn,sage',
            '--out',
            'x',
        ]
    )
    assert a.func is cli._bench
    cfg = spmm.config_from_args(a)
    assert cfg == spmm.make_config('tiny', '32', 'fp32', 'x', True, True, None, 'gcn,sage', None)
    assert (
        cfg.graphs == ['tiny'] and cfg.widths == [32] and cfg.dtypes == ['fp32'] and cfg.train_models == ['gcn', 'sage']
    )
    assert tuple(spmm.DTYPES) == ('fp32', 'fp16', 'bf16')
    # the environment fills what the command line leaves out, checked the same way
    monkeypatch.setenv('PYG_TC_BENCH_WIDTHS', '64,128')
    assert cli.parser().parse_args(['bench']).widths == [64, 128] == spmm.make_config().widths
    assert cli.parser().parse_args(['bench', '--widths', '32']).widths == [32]
    # from Python: the same checks, as a ValueError of one line
    for kw, msg in (
        (dict(widths='abc'), "'abc' is not a positive integer"),
        (dict(dtypes=['fp64']), "unknown dtype 'fp64'"),
        (dict(graphs='nosuch'), "unknown graph 'nosuch'"),
        (dict(train_models='x'), "unknown model 'x'"),
    ):
        with pytest.raises(ValueError, match=msg) as e:
            spmm.make_config(**kw)
        assert '\n' not in str(e.value)


def test_bench_lists_and_runs_the_registered_suites(tmp_path):
    """``pyg-tc bench --list`` prints every suite of the registry (no torch
    import); ``pyg-tc bench SUITE ...`` hands the rest to that suite's own
    command line (its usage and errors, named ``pyg-tc bench SUITE``); without
    ``benchmarks/`` beside the package, one error line."""
    from pyg_tc.bench.registry import DEFAULT, SUITES

    p = _python('-X', 'importtime', '-m', 'pyg_tc', 'bench', '--list')
    listed = {line.split()[0]: line for line in p.stdout.splitlines()}
    assert list(listed) == list(SUITES) and '(the default)' in listed[DEFAULT]
    # every suite module in benchmarks/suites is registered under its own name, with main(argv, prog)
    modules = {f.stem for f in (REPO_ROOT / 'benchmarks' / 'suites').glob('*.py')} - {'__init__', 'common'}
    assert {name: module for name, (module, _) in SUITES.items()} == {m: f'benchmarks.suites.{m}' for m in modules}
    for m in modules:
        tree = ast.parse((REPO_ROOT / 'benchmarks' / 'suites' / f'{m}.py').read_text())
        (main,) = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == 'main']
        assert [a.arg for a in main.args.args] == ['argv', 'prog'], m
    assert not [m for m in _imported(p.stderr) if m.split('.')[0] in HEAVY]
    p = _python('-m', 'pyg_tc', 'bench', 'cbsr', '--help')
    assert p.stdout.startswith('usage: pyg-tc bench cbsr [-h]') and '--ks' in p.stdout
    p = _python('-m', 'pyg_tc', 'bench', 'cbsr_train', '--conv', 'nosuch', check=False)
    assert p.returncode == 2 and p.stderr.startswith('usage: pyg-tc bench cbsr_train [-h]')
    assert "pyg-tc bench cbsr_train: error: argument --conv: invalid choice: 'nosuch'" in p.stderr.splitlines()[-1]
    a = cli.parser().parse_args(['bench', 'sgt', '--quick', '--graphs', 'tiny'])
    assert (a.suite, a.suite_args, a.func) == ('sgt', ['--quick', '--graphs', 'tiny'], cli._bench)
    # an installed package without the checkout: the suites are not there
    shutil.copytree(REPO_ROOT / 'pyg_tc', tmp_path / 'pyg_tc', ignore=shutil.ignore_patterns('__pycache__'))
    for args in (['bench', 'cbsr'], ['bench', '--no-training']):
        p = subprocess.run(
            [sys.executable, '-m', 'pyg_tc', *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, 'PYTHONPATH': str(tmp_path)},
        )
        assert (
            p.returncode == 1
            and p.stdout == ''
            and p.stderr.splitlines()
            == [
                f'pyg-tc bench: error: the benchmark suites ship with the source checkout: clone pyg_tc, pip install '
                f'-e . and run from there (no benchmarks/ next to {tmp_path.resolve()})'
            ]
        )


ERRORS = [
    (['bench', '--graphs', 'nosuch'], "argument --graphs: unknown graph 'nosuch'; known: reddit"),
    (['bench', '--graphs', 'tiny,reddit@2'], "argument --graphs: edge fraction must be in (0, 1], got 'reddit@2'"),
    (['bench', '--dtypes', 'fp64'], "argument --dtypes: unknown dtype 'fp64'; choose from fp32, fp16, bf16"),
    (['bench', '--widths', 'abc'], "argument --widths: 'abc' is not a positive integer"),
    (['bench', '--widths', '32,-1'], "argument --widths: '-1' is not a positive integer"),
    (['bench', '--widths', ','], "argument --widths: expected a comma list of widths, got ','"),
    (['bench', '--train-models', 'x'], "argument --train-models: unknown model 'x'; choose from gcn, sage, gin"),
    (['bench', '--train-graphs', 'tiny,x'], "argument --train-graphs: unknown graph 'x'"),
    (['bench', '--budget', 'soon'], "argument --budget: 'soon' is not a positive number"),
    (['bench', '--budget', '0'], "argument --budget: '0' is not a positive number"),
    (['bench', '--nosuch'], 'unrecognized arguments: --nosuch'),
    (['bench', '--graphs', 'tiny', 'extra'], 'unrecognized arguments: extra'),
    (['info', '--nosuch'], 'unrecognized arguments: --nosuch'),
    (['--nosuch', 'info'], 'unrecognized arguments: --nosuch'),
    (['nosuch'], "argument command: invalid choice: 'nosuch'"),
    (['--no-build'], 'the following arguments are required: command'),
]


@pytest.mark.parametrize('args,message', ERRORS, ids=lambda v: ' '.join(v) if isinstance(v, list) else None)
def test_bad_arguments_give_the_commands_usage_and_one_error_line(args, message):
    """Exit code 2, the usage of the command the argument belongs to, one
    error line, no traceback, and no torch import (so it answers at once)."""
    t0 = time.perf_counter()
    p = _python('-X', 'importtime', '-m', 'pyg_tc', *args, check=False)
    elapsed = time.perf_counter() - t0
    command = args[0] if args and args[0] in ('info', 'bench') else None
    prog = f'pyg-tc {command}' if command else 'pyg-tc'
    err = [line for line in p.stderr.splitlines() if not line.startswith('import time:')]
    assert p.returncode == 2 and p.stdout == ''
    assert err[0].startswith(f'usage: {prog} [-h]') and err[-1].startswith(f'{prog}: error: {message}')
    assert [line for line in err if 'error:' in line] == [err[-1]] and 'Traceback' not in p.stderr
    heavy = sorted(m for m in _imported(p.stderr) if m.split('.')[0] in HEAVY)
    assert not heavy, f'{args} imported {heavy[:3]}'
    assert elapsed < 10  # no torch import: about 0.1 s; generous for a busy machine


def test_bad_environment_values_are_argument_errors():
    env = {**os.environ, 'PYG_TC_BENCH_DTYPES': 'fp32,fp8'}
    p = _python('-m', 'pyg_tc', 'bench', env=env, check=False)
    assert p.returncode == 2 and 'Traceback' not in p.stderr and p.stderr.startswith('usage: pyg-tc bench')
    assert p.stderr.splitlines()[-1] == (
        "pyg-tc bench: error: PYG_TC_BENCH_DTYPES='fp32,fp8': unknown dtype 'fp8'; choose from fp32, fp16, bf16"
    )


def test_version_without_torch(capsys):
    import pyg_tc

    p = _python('-X', 'importtime', '-m', 'pyg_tc', '--version')
    assert p.stdout == f'pyg_tc {pyg_tc.__version__}\n' and re.fullmatch(r'\d+\.\d+\.\d+\S*', pyg_tc.__version__)
    assert not [m for m in _imported(p.stderr) if m.split('.')[0] in HEAVY]
    with pytest.raises(SystemExit) as e:
        cli.main(['--version'])
    assert e.value.code == 0 and capsys.readouterr().out == f'pyg_tc {pyg_tc.__version__}\n'


INFO_KEYS = {
    'pyg_tc',
    'python',
    'torch',
    'torch_cuda',
    'torch_geometric',
    'torch_sparse',
    'gpu',
    'kernels',
    'kernels_reason',
    'kernels_build',
    'prebuilt_reason',
    'library',
    'build_seconds',
    'build_dir',
    'backend',
}


@pytest.mark.skipif(torch_cuda(), reason='with a GPU, info builds / loads the kernels (by design)')
def test_info_without_cuda_is_quick_and_builds_nothing():
    """Nothing can be built without CUDA: ``pyg-tc info`` imports torch only
    (not torch_geometric, not the op modules, not the extension builder),
    about the time of ``import torch``. Measured in subprocesses: its CPU time
    at most 1 s above that of ``import torch`` alone in the same environment
    (which takes 1.5-2.2 s of CPU time on a loaded 2-core machine), its wall
    time with slack."""

    def cpu_of(*args):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = _python(*args)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return out, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, time.perf_counter() - t0

    _, torch_cpu, _ = cpu_of('-c', 'import torch')
    p, cpu, wall = cpu_of('-m', 'pyg_tc', 'info', '--json')
    info = json.loads(p.stdout)
    assert set(info) == INFO_KEYS
    assert info['kernels'] == 'unavailable' and info['backend'] == 'pure-PyTorch reference'
    assert 'CUDA' in info['kernels_reason'] and info['build_seconds'] is None and info['build_dir'] is None
    import torch_geometric

    assert info['torch_geometric'] == torch_geometric.__version__
    assert cpu < torch_cpu + 1.0, f'pyg-tc info took {cpu:.1f} s of CPU time, import torch {torch_cpu:.1f} s'
    assert wall < 10.0, f'pyg-tc info took {wall:.1f} s'
    code = (
        'import json, sys; from pyg_tc import cli, _kernels; cli.main(["info"]); '
        'print(json.dumps([_kernels.status()["tried"], sorted(sys.modules)]))'
    )
    tried, mods = json.loads(_python('-c', code).stdout.splitlines()[-1])
    assert tried is False  # no build was even tried
    assert 'torch' in mods and 'pyg_tc._info' in mods
    for m in ('torch_geometric', 'pyg_tc.ops', 'pyg_tc._library', 'torch.utils.cpp_extension', 'torch_sparse'):
        assert m not in mods, f'pyg-tc info imported {m}'


def test_info_prints_a_table(capsys):
    assert cli.main(['info', '--no-build']) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:8]] == [
        'pyg_tc',
        'python',
        'torch',
        'torch_geometric',
        'torch_sparse',
        'GPU',
        'kernels',
        'backend',
    ]


@pytest.mark.skipif(torch_cuda(), reason='the reference-path report is what a machine without CUDA gets')
def test_bench_on_the_cpu_reports_reference_times_without_ratios(tmp_path):
    """``pyg-tc bench`` without CUDA: times of pyg_tc's reference path (so
    labelled), each with its confidence interval and a noisy flag, no
    speed-up or bandwidth anywhere, and a time plot instead of speedup.png."""
    out = tmp_path / 'b'
    p = _python(
        '-m',
        'pyg_tc',
        'bench',
        '--quick',
        '--graphs',
        'tiny',
        '--widths',
        '32',
        '--dtypes',
        'fp32,',
        '--no-training',
        '--out',
        str(out),
    )
    assert '[done]' in p.stdout and 'Traceback' not in p.stderr
    recs = [json.loads(line) for line in (out / 'results.jsonl').read_text().splitlines()]
    (sp,) = [r for r in recs if r['kind'] == 'spmm']
    ratios = [k for r in recs for k in r if 'speedup' in k or '_vs_' in k or 'gbps_' in k or 'frac_copy' in k]
    assert not ratios and recs[0]['copy_gbps'] > 0  # the machine's copy bandwidth stays in the header
    assert sp['backend'] == 'pure-PyTorch reference' and sp['timing_target_ci'] == 0.05
    for impl in ('pyg_tc', 'cpu_sparse'):
        assert sp[f'{impl}_ms'] > 0 and sp[f'{impl}_reps'] >= 10 and isinstance(sp[f'{impl}_noisy'], bool)
        ci = float(sp[f'{impl}_ci'])
        assert sp[f'{impl}_noisy'] == (ci > 0.05)
    summary = recs[-1]['summary']['all/fp32']
    assert set(summary) == {'group', 'dtype', 'cases', 'graphs', 'max_rel_err', 'noisy_timings'}
    md = (out / 'report.md').read_text()
    assert 'reference path' in md and 'no speed-up is computed' in md and '| pyg_tc (reference) ms |' in md
    assert ' ±' in md and ' x ' not in md and 'speedup' not in md.lower()
    assert not (out / 'speedup.png').exists()
    pytest.importorskip('matplotlib')
    assert (out / 'spmm_times.png').stat().st_size > 0


def test_import_is_lazy_and_the_names_still_work():
    code = '''
import json, sys
heavy = lambda: sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_geometric'))[:3]
import pyg_tc
out = {'after_import': heavy(), 'version': pyg_tc.__version__, 'dir': sorted(set(pyg_tc.__all__) - set(dir(pyg_tc)))}
try:
    pyg_tc.no_such_name
except AttributeError as e:
    out['missing'] = str(e)
from pyg_tc import nn, info, sampled_aggregation
from pyg_tc.formats import CSRGraph
import torch
out['names'] = [nn.GCNConv.__module__, info.__module__, sampled_aggregation.__module__, CSRGraph.__module__,
                pyg_tc.transforms.CapNeighbors.__module__, pyg_tc.ops.spmm.__module__]
out['defined'] = hasattr(torch.ops.pyg_tc, 'spmm_csr')
print(json.dumps(out))
'''
    out = json.loads(_python('-c', code).stdout)
    assert out['after_import'] == [] and out['version'] and out['dir'] == []
    assert out['missing'] == "module 'pyg_tc' has no attribute 'no_such_name'"
    assert out['names'] == [
        'pyg_tc.nn.conv',
        'pyg_tc._info',
        'pyg_tc.ops.es_spmm',
        'pyg_tc.formats.csr',
        'pyg_tc.transforms.cap',
        'pyg_tc.ops.dispatch',
    ]
    assert out['defined']


def test_ops_are_defined_when_needed_without_importing_pyg_tc_ops():
    """``pyg_tc.formats`` alone does not import the op modules: it defines
    only the builders' own ops (below it, called directly); looking another
    op up imports them, and so does loading the kernels (``ensure()``, which
    ``info()`` calls where the kernels can be built), so every op is defined
    before its CUDA fallback is registered."""
    code = (
        'import json, sys; import pyg_tc.formats; from pyg_tc import _library; '
        'before = "pyg_tc.ops" in sys.modules; own = sorted(_library.OPS); '
        'name = _library.op("spmm_csr").name; '
        'print(json.dumps([before, own, name, sorted(_library.OPS)]))'
    )
    before, own, name, ops = json.loads(_python('-c', code).stdout)
    # the ops the formats' sources declare (``Op('name(...``), read from the files
    declared = sorted(
        re.findall(
            r"\bOp\(\s*'(\w+)\(", ''.join(p.read_text() for p in (REPO_ROOT / 'pyg_tc' / 'formats').glob('*.py'))
        )
    )
    assert before is False and len(declared) >= 4 and own == declared
    assert name == 'spmm_csr' and {'spmm_csr', 'edge_softmax', 'sampled_spmm', 'sort_int32'} <= set(ops)
    code = (
        'import json, sys, pyg_tc; from pyg_tc import _library; _library.ensure(); '
        'print(json.dumps(["pyg_tc.ops" in sys.modules, sorted(_library.OPS)]))'
    )
    loaded, ops = json.loads(_python('-c', code).stdout)
    assert loaded and {'spmm_csr', 'edge_softmax', 'sampled_spmm'} <= set(ops)
