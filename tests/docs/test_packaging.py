"""The wheel is a complete PyG-ecosystem package: SPDX license with its file,
``py.typed``, the kernel sources, classifiers and the ``pyg-tc`` script, and
nothing of the checkout's ``benchmarks/`` package.

Built from a copy of the sources the wheel needs (setuptools writes build/
and *.egg-info next to them) without build isolation (offline, with the
installed setuptools; skipped where it predates SPDX license expressions)."""

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser

import pytest

from ..conftest import REPO_ROOT


@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
    setuptools = pytest.importorskip('setuptools')
    if int(setuptools.__version__.split('.')[0]) < 77:
        pytest.skip(f'setuptools {setuptools.__version__} predates SPDX license expressions (77)')
    src = tmp_path_factory.mktemp('src')
    for name in ('pyproject.toml', 'setup.py', 'README.md', 'LICENSE'):
        shutil.copy(REPO_ROOT / name, src / name)
    for name in ('pyg_tc', 'kernels', 'benchmarks'):  # what the wheel is built from, and what it must leave out
        shutil.copytree(REPO_ROOT / name, src / name, ignore=shutil.ignore_patterns('__pycache__'))
    out = tmp_path_factory.mktemp('wheel')
    r = subprocess.run(
        [sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation', '-q', '-w', str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = out.glob('pyg_tc-*.whl')
    return zipfile.ZipFile(path)


def test_wheel_metadata(wheel):
    meta_name = next(n for n in wheel.namelist() if n.endswith('.dist-info/METADATA'))
    meta = Parser().parsestr(wheel.read(meta_name).decode())
    assert meta['License-Expression'] == 'MIT'
    assert meta.get_all('License-File') == ['LICENSE']
    assert not any(c.startswith('License ::') for c in meta.get_all('Classifier'))  # SPDX instead
    assert 'Typing :: Typed' in meta.get_all('Classifier')
    assert meta['Author'] == 'pyg_tc contributors'
    assert all(url.split(', ', 1)[1].startswith('https://') for url in meta.get_all('Project-URL'))


def test_wheel_files(wheel):
    names = set(wheel.namelist())
    dist_info = next(n.split('/')[0] for n in names if n.endswith('.dist-info/METADATA'))
    license_text = wheel.read(f'{dist_info}/licenses/LICENSE').decode()
    assert license_text.startswith('MIT License') and 'pyg_tc contributors' in license_text
    assert 'pyg_tc/py.typed' in names
    assert any(n.startswith('pyg_tc/kernels/csr/') and n.endswith('.cu') for n in names)
    entry_points = wheel.read(f'{dist_info}/entry_points.txt').decode()
    assert 'pyg-tc = pyg_tc.cli:main' in entry_points
    assert {n.split('/')[0] for n in names} == {'pyg_tc', dist_info}  # no benchmarks/ (a checkout's own)
