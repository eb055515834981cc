"""The kernel build: cached per machine and reused by a second process;
import never builds and never fails; info() says why kernels are missing."""
import json
import os
import subprocess
import sys

import pytest
import torch

import pyg_tc
from pyg_tc import _kernels

from .conftest import REPO_ROOT


def test_import_does_not_build_and_info_explains():
    code = ('import pyg_tc, pyg_tc._kernels as k, json; '
            'print(json.dumps([k.status()["tried"], pyg_tc.info()["kernels_reason"], '
            'pyg_tc.info()["backend"]]))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         cwd=REPO_ROOT, check=True, env={**os.environ, 'PYTHONPATH': str(REPO_ROOT)})
    tried, reason, backend = json.loads(out.stdout.strip().splitlines()[-1])
    assert tried is False  # importing pyg_tc did not try to build
    if not torch.cuda.is_available():
        assert backend == 'pure-PyTorch reference' and 'CUDA' in reason


def test_disable_kernels_env_gives_reference():
    code = 'import pyg_tc; print(pyg_tc.info()["kernels_reason"])'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         cwd=REPO_ROOT, check=True,
                         env={**os.environ, 'PYTHONPATH': str(REPO_ROOT), 'PYG_TC_DISABLE_KERNELS': '1'})
    assert 'PYG_TC_DISABLE_KERNELS' in out.stdout


@pytest.mark.cuda
def test_second_process_reuses_the_build():
    pyg_tc.ops.ensure()
    st = _kernels.status()
    assert st['loaded'], st['error']
    code = ('import pyg_tc, json; i = pyg_tc.info(); '
            'print(json.dumps([i["kernels"], i["build_dir"], i["build_seconds"]]))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True,
                         cwd=REPO_ROOT, env={**os.environ, 'PYTHONPATH': str(REPO_ROOT)})
    kernels, build_dir, seconds = json.loads(out.stdout.strip().splitlines()[-1])
    assert kernels == 'loaded' and build_dir == st['build_dir']
    assert seconds < 10, f'second process rebuilt the kernels ({seconds:.1f} s)'
