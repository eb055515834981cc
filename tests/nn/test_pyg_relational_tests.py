"""PyG's own RGCNConv and HeteroConv tests (``test/nn/conv/test_rgcn_conv.py``
and ``test_hetero_conv.py`` of the PyG suite beside the repository,
``../shared/pyg_suite``) with pyg_tc's layer swapped into
``torch_geometric``, as the suite's plugin does for the layers it lists.
Skipped where that suite is not there (a user's clone)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ..conftest import REPO_ROOT

SUITE = REPO_ROOT.parent / 'shared' / 'pyg_suite'
TESTS = SUITE / 'test' / 'nn' / 'conv'

PLUGIN = '''
import sys
import torch_geometric, torch_geometric.nn
import pyg_tc.nn
orig = torch_geometric.nn.LAYER
for name, mod in list(sys.modules.items()):
    if mod is not None and name.startswith('torch_geometric'):
        for attr, val in list(getattr(mod, '__dict__', {}).items()):
            if val is orig:
                setattr(mod, attr, pyg_tc.nn.LAYER)
assert torch_geometric.nn.LAYER is pyg_tc.nn.LAYER
'''


@pytest.mark.parametrize('layer,test', [('RGCNConv', 'test_rgcn_conv.py'), ('HeteroConv', 'test_hetero_conv.py')])
def test_pygs_tests_pass_with_pyg_tcs_layer(tmp_path, layer, test):
    TEST = TESTS / test
    if not TEST.is_file():
        pytest.skip(f'the PyG suite is not beside the repository ({SUITE})')
    (tmp_path / 'swap_rgcn.py').write_text(PLUGIN.replace('LAYER', layer))
    env = dict(os.environ, PYG_TC_ALWAYS_KERNELS='1')
    env['PYTHONPATH'] = os.pathsep.join([str(tmp_path), str(REPO_ROOT), str(SUITE), env.get('PYTHONPATH', '')])
    run = subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-p', 'swap_rgcn', '-p', 'no:cacheprovider', str(TEST)],
        cwd=SUITE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert ' passed' in run.stdout and 'failed' not in run.stdout
