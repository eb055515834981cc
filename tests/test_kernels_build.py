"""The kernel build: the ahead-of-time library taken where it runs here
(setup.py's extension, the checks of pyg_tc._kernels.prebuilt), else a JIT
build cached per machine and reused by a second process; import never builds
and never fails; info() says why kernels are missing; every translation unit
under kernels/ is built and the JIT build directory does not depend on the
sources; the launch overrides are read from the environment once."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pyg_tc
from pyg_tc import _kernels

from .conftest import REPO_ROOT


def test_import_does_not_build_and_info_explains():
    code = (
        'import pyg_tc, pyg_tc._kernels as k, json; '
        'print(json.dumps([k.status()["tried"], pyg_tc.info()["kernels_reason"], '
        'pyg_tc.info()["backend"]]))'
    )
    out = subprocess.run(
        [sys.executable, '-c', code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=True,
        env={**os.environ, 'PYTHONPATH': str(REPO_ROOT)},
    )
    tried, reason, backend = json.loads(out.stdout.strip().splitlines()[-1])
    assert tried is False  # importing pyg_tc did not try to build
    if not torch.cuda.is_available():
        assert backend == 'pure-PyTorch reference' and 'CUDA' in reason


def test_disable_kernels_env_gives_reference():
    code = 'import pyg_tc; print(pyg_tc.info()["kernels_reason"])'
    out = subprocess.run(
        [sys.executable, '-c', code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=True,
        env={**os.environ, 'PYTHONPATH': str(REPO_ROOT), 'PYG_TC_DISABLE_KERNELS': '1'},
    )
    assert 'PYG_TC_DISABLE_KERNELS' in out.stdout


@pytest.mark.cuda
def test_second_process_reuses_the_build():
    code = (
        'import pyg_tc, json; i = pyg_tc.info(); print(json.dumps([i["kernels"], i["build_dir"], i["build_seconds"]]))'
    )
    env = {**os.environ, 'PYTHONPATH': str(REPO_ROOT), 'PYG_TC_JIT': '1'}
    runs = [
        subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, cwd=REPO_ROOT, env=env)
        for _ in range(2)
    ]
    (k0, d0, _), (k1, d1, seconds) = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    assert k0 == k1 == 'loaded' and d0 == d1
    assert seconds < 10, f'second process rebuilt the kernels ({seconds:.1f} s)'


@pytest.mark.cuda
def test_concurrent_first_builds_compile_once(tmp_path):
    """Two processes started together on a machine without a build (as the
    ranks of ``torchrun`` are): both load the kernels and every translation
    unit is compiled once (torch's build lock in the build directory; a
    second concurrent ninja run would log the objects twice or fail)."""
    code = 'import pyg_tc, json; i = pyg_tc.info(); print(json.dumps([i["kernels"], i["build_dir"]]))'
    env = {**os.environ, 'PYTHONPATH': str(REPO_ROOT), 'PYG_TC_BUILD_DIR': str(tmp_path / 'build'), 'PYG_TC_JIT': '1'}
    procs = [
        subprocess.Popen(
            [sys.executable, '-c', code],
            cwd=REPO_ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=1800) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    results = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    assert [r[0] for r in results] == ['loaded', 'loaded'] and results[0][1] == results[1][1]
    log = Path(results[0][1]) / '.ninja_log'
    built = [line.split('\t')[3] for line in log.read_text().splitlines()[1:] if line.strip()]
    assert built and len(built) == len(set(built)), 'an object was compiled twice'
    assert sum(o.endswith('.o') for o in built) == len(_kernels.sources())


# ---------------------------------------------------------------- layout and sources


def _tree_tus(root: Path):
    return sorted(str(p) for p in root.rglob('*') if p.suffix in ('.cu', '.cpp'))


def test_sources_are_every_translation_unit():
    kdir = Path(_kernels.kernel_dir())
    assert kdir == REPO_ROOT / 'kernels'
    srcs = _kernels.sources()
    assert srcs == _tree_tus(kdir) and len(srcs) >= 10
    # torch names objects by file name only: the names are unique
    stems = [Path(s).stem for s in srcs]
    assert len(stems) == len(set(stems))


def test_duplicate_file_names_are_rejected(tmp_path, monkeypatch):
    for fam in ('csr', 'maxk'):
        (tmp_path / fam).mkdir()
        (tmp_path / fam / 'host.cu').write_text('')
    monkeypatch.setattr(_kernels, 'kernel_dir', lambda: str(tmp_path))
    with pytest.raises(RuntimeError, match='share the file name'):
        _kernels.sources()


def test_includes_are_relative_to_the_kernel_dir():
    kdir = Path(_kernels.kernel_dir())
    files = [p for p in kdir.rglob('*') if p.suffix in ('.cu', '.cpp', '.cuh', '.h')]
    for p in files:
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', p.read_text(), flags=re.M):
            assert (kdir / inc).is_file(), f'{p.relative_to(kdir)} includes "{inc}" (not under kernels/)'


def test_build_dir_ignores_source_contents(tmp_path, monkeypatch):
    kdir = tmp_path / 'kernels'
    shutil.copytree(_kernels.kernel_dir(), kdir)
    monkeypatch.setattr(_kernels, 'kernel_dir', lambda: str(kdir))
    monkeypatch.setenv('PYG_TC_BUILD_DIR', str(tmp_path / 'build'))
    cu = kdir / 'csr' / 'csr_spmm.cu'
    header = kdir / 'common' / 'dtype.cuh'

    monkeypatch.setattr(_kernels, 'header_deps_tracked', lambda: True)
    d0 = _kernels.build_dir('90')
    assert d0.startswith(str(tmp_path / 'build'))
    assert _kernels.build_dir('80') != d0
    cu.write_text(cu.read_text() + '\n// edited\n')
    header.write_text(header.read_text() + '\n// edited\n')
    (kdir / 'csr' / 'csr_extra.cu').write_text('// a new translation unit\n')
    assert _kernels.build_dir('90') == d0

    # without nvcc depfiles the headers (only) key the directory
    monkeypatch.setattr(_kernels, 'header_deps_tracked', lambda: False)
    d1 = _kernels.build_dir('90')
    cu.write_text(cu.read_text() + '\n// edited again\n')
    assert _kernels.build_dir('90') == d1
    header.write_text(header.read_text() + '\n// edited again\n')
    assert _kernels.build_dir('90') != d1


def test_header_deps_tracked_follows_torch(monkeypatch):
    monkeypatch.setattr(torch.version, 'cuda', '12.8')
    monkeypatch.delenv('TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES', raising=False)
    assert _kernels.header_deps_tracked()
    monkeypatch.setenv('TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES', '1')
    assert not _kernels.header_deps_tracked()
    monkeypatch.setattr(torch.version, 'cuda', None)
    monkeypatch.delenv('TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES')
    assert not _kernels.header_deps_tracked()


# ---------------------------------------------------------------- ahead of time


@pytest.mark.parametrize(
    'archs, capability, runs',
    [
        ('8.0;9.0+PTX', (8, 0), True),
        ('8.0;9.0+PTX', (8, 6), True),  # a cubin runs on a later minor of its major
        ('8.0;9.0+PTX', (9, 0), True),
        ('8.0;9.0+PTX', (12, 0), True),  # the PTX of 9.0, compiled by the driver
        ('8.0;9.0', (10, 0), False),
        ('8.6', (8, 0), False),
        ('9.0a', (9, 0), True),
        ('9.0a', (9, 1), False),  # arch-specific: that GPU only
        ('9.0', (8, 9), False),
    ],
)
def test_arch_runs(archs, capability, runs):
    assert _kernels.arch_runs(archs, capability) is runs


def _fake_aot(where: Path, **meta):
    (where / '_C.cpython-312-x86_64-linux-gnu.so').write_bytes(b'')
    full = {'torch': torch.__version__, 'cuda': '13.0', 'archs': '9.0', 'sources': _kernels.sources_hash(), **meta}
    (where / '_C.json').write_text(json.dumps(full))


def test_prebuilt_is_taken_only_where_it_runs(tmp_path, monkeypatch):
    monkeypatch.delenv('PYG_TC_JIT', raising=False)
    monkeypatch.setattr(torch.cuda, 'get_device_capability', lambda *a: (9, 0))
    path, why = _kernels.prebuilt(str(tmp_path))
    assert path is None and 'not installed' in why
    _fake_aot(tmp_path)
    path, why = _kernels.prebuilt(str(tmp_path))
    assert why is None and path == str(tmp_path / '_C.cpython-312-x86_64-linux-gnu.so')
    monkeypatch.setenv('PYG_TC_JIT', '1')
    assert _kernels.prebuilt(str(tmp_path)) == (None, 'PYG_TC_JIT=1')
    monkeypatch.delenv('PYG_TC_JIT')
    for meta, reason in (
        ({'torch': '2.0.0'}, 'built for torch 2.0.0'),
        ({'archs': '8.0'}, 'this GPU is sm_90'),
        ({'sources': 'stale'}, 'sources changed'),
    ):
        _fake_aot(tmp_path, **meta)
        path, why = _kernels.prebuilt(str(tmp_path))
        assert path is None and reason in why, (meta, why)


def _setup_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location('pyg_tc_setup', REPO_ROOT / 'setup.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: setup() does not run
    return module


def test_setup_builds_the_kernels_where_torch_has_cuda(monkeypatch, tmp_path):
    from torch.utils import cpp_extension

    setup = _setup_module()
    monkeypatch.setattr(torch.version, 'cuda', '13.0')
    monkeypatch.setattr(cpp_extension, 'CUDA_HOME', str(tmp_path))
    monkeypatch.setenv('TORCH_CUDA_ARCH_LIST', '8.0;9.0+PTX')
    monkeypatch.delenv('PYG_TC_BUILD_KERNELS', raising=False)
    monkeypatch.chdir(REPO_ROOT)
    (ext,), cmdclass = setup.kernel_extension()
    assert ext.name == 'pyg_tc._C' and set(cmdclass) == {'build_ext'}
    assert [str(REPO_ROOT / s) for s in ext.sources] == _kernels.sources()  # relative to the root
    assert _kernels.kernel_dir() in ext.include_dirs
    nvcc = ext.extra_compile_args['nvcc']
    assert '-O3' in nvcc and not any('gencode' in f for f in nvcc)  # torch adds TORCH_CUDA_ARCH_LIST's
    # below sm_80 the kernels do not compile: a clear error
    monkeypatch.setenv('TORCH_CUDA_ARCH_LIST', '7.5;8.0')
    with pytest.raises(ValueError, match='sm_80'):
        setup.kernel_extension()
    # skipped on request, or where torch has no CUDA (unless required)
    monkeypatch.setenv('PYG_TC_BUILD_KERNELS', '0')
    assert setup.kernel_extension() == ([], {})
    monkeypatch.setattr(torch.version, 'cuda', None)
    monkeypatch.setenv('PYG_TC_BUILD_KERNELS', 'auto')
    assert setup.kernel_extension() == ([], {})
    monkeypatch.setenv('PYG_TC_BUILD_KERNELS', '1')
    with pytest.raises(RuntimeError, match='without CUDA'):
        setup.kernel_extension()


# ---------------------------------------------------------------- launch overrides


def test_environment_overrides_are_parsed(monkeypatch):
    for var in _kernels.OVERRIDES.values():
        monkeypatch.delenv(var, raising=False)
    assert _kernels._environment_overrides() == {}
    monkeypatch.setenv('PYG_TC_SPMM_CONFIG', '8,2')
    monkeypatch.setenv('PYG_TC_SPMM_COOP', '0')
    monkeypatch.setenv('PYG_TC_SDDMM_INFLIGHT', '8')
    assert _kernels._environment_overrides() == {'spmm_config': (8, 2), 'spmm_coop': False, 'sddmm_inflight': 8}
    for var, bad in (('PYG_TC_SPMM_CONFIG', '8'), ('PYG_TC_SPMM_TWO_LEVEL', 'yes')):
        monkeypatch.setenv(var, bad)
        with pytest.raises(ValueError, match=var):
            _kernels._environment_overrides()
        monkeypatch.delenv(var)


@pytest.mark.cuda
def test_environment_overrides_apply_at_load_and_bad_values_raise():
    code = 'import pyg_tc, json; pyg_tc.ops.ensure(); print(json.dumps(pyg_tc._kernels.overrides()))'
    env = {**os.environ, 'PYTHONPATH': str(REPO_ROOT), 'PYG_TC_SPMM_CONFIG': '8,2', 'PYG_TC_CBSR_PAIR': '0'}
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, env=env)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {'spmm_config': [8, 2], 'cbsr_pair': False}
    env['PYG_TC_SPMM_CONFIG'] = '7,3'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env)
    assert out.returncode != 0 and 'unsupported spmm_config' in out.stderr


@pytest.mark.cuda
def test_coop_units_is_the_kernels_rule():
    from pyg_tc.formats.csr import coop_units

    assert pyg_tc.ops.ensure()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert coop_units() == _kernels.coop_units(0) == sms * 256
    assert len(_kernels.status()['coop_units']) == torch.cuda.device_count()
