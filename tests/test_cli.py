"""The command line and the lazy package: ``pyg-tc --help`` parses without
importing torch or torch_geometric, and ``import pyg_tc`` imports nothing heavy
until a submodule is used (the ops are still defined when they are needed)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pyg_tc import cli

from .conftest import REPO_ROOT

HEAVY = ('torch', 'torch_geometric')


def _python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO_ROOT, check=True,
                          env={**os.environ, 'PYTHONPATH': str(REPO_ROOT)})


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


def test_parsing_bench_options_imports_neither_torch_nor_pyg():
    code = ('import json, sys; from pyg_tc import cli; '
            'a = cli.parser().parse_args(["bench", "--graphs", "tiny", "--no-training", "--budget", "5"]); '
            'print(json.dumps([sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torch_geometric")), '
            '{k: v for k, v in vars(a).items() if k != "func"}]))')
    heavy, args = json.loads(_python('-c', code).stdout)
    assert heavy == []
    assert args == dict(command='bench', graphs='tiny', widths=None, dtypes=None, out='bench_out', training=False,
                        train_graphs=None, train_models='gcn', quick=False, budget=5.0)


def test_bench_options_give_the_same_config():
    from pyg_tc.bench import runner
    a = cli.parser().parse_args(['bench', '--graphs', 'tiny', '--widths', '32', '--dtypes', 'fp32', '--quick',
                                 '--train-models', 'gcn,sage', '--out', 'x'])
    assert a.func is cli._bench
    cfg = runner.config_from_args(a)
    assert cfg == runner.make_config('tiny', '32', 'fp32', 'x', True, True, None, 'gcn,sage', None)
    assert cfg.graphs == ['tiny'] and cfg.widths == [32] and cfg.dtypes == ['fp32'] and cfg.train_models == [
        'gcn', 'sage']
    assert tuple(runner.DTYPES) == ('fp32', 'fp16', 'bf16')
    with pytest.raises(SystemExit):
        cli.parser().parse_args(['bench', '--no-such-option'])


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
    assert out['names'] == ['pyg_tc.nn.conv', 'pyg_tc._info', 'pyg_tc.ops.sample', 'pyg_tc.formats.csr',
                            'pyg_tc.transforms.cap', 'pyg_tc.ops.dispatch']
    assert out['defined']


def test_ops_are_defined_when_needed_without_importing_pyg_tc_ops():
    """``pyg_tc.formats`` alone does not import the op modules; looking an op
    up imports them, and so does loading the kernels (``info()``,
    ``ensure()``), so every op is defined before its CUDA fallback is
    registered."""
    code = ('import json, sys; import pyg_tc.formats; from pyg_tc import _library; '
            'before = "pyg_tc.ops" in sys.modules; name = _library.op("sort_int32").name; '
            'print(json.dumps([before, name, sorted(_library.OPS)]))')
    before, name, ops = json.loads(_python('-c', code).stdout)
    assert before is False and name == 'sort_int32' and {'spmm_csr', 'edge_softmax', 'sampled_spmm'} <= set(ops)
    code = ('import json, sys, pyg_tc; from pyg_tc import _library; v = pyg_tc.info()["pyg_tc"]; '
            'print(json.dumps([v, "pyg_tc.ops" in sys.modules, sorted(_library.OPS)]))')
    version, loaded, ops = json.loads(_python('-c', code).stdout)
    assert version and loaded and {'spmm_csr', 'edge_softmax', 'sampled_spmm'} <= set(ops)
