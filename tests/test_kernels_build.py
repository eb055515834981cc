"""The kernel build: cached per machine and reused by a second process;
import never builds and never fails; info() says why kernels are missing;
every translation unit under kernels/ is built, the build directory does not
depend on the sources, and torch's ninja file rebuilds only what an edit
touches (the last three checked on the CPU, without nvcc)."""

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import pyg_tc
from pyg_tc import _kernels

from .conftest import REPO_ROOT

FAMILIES = ('common', 'attn', 'csr', 'maxk', 'neighbor', 'sgt', 'sort')


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
    pyg_tc.ops.ensure()
    st = _kernels.status()
    assert st['loaded'], st['error']
    code = (
        'import pyg_tc, json; i = pyg_tc.info(); print(json.dumps([i["kernels"], i["build_dir"], i["build_seconds"]]))'
    )
    out = subprocess.run(
        [sys.executable, '-c', code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
        env={**os.environ, 'PYTHONPATH': str(REPO_ROOT)},
    )
    kernels, build_dir, seconds = json.loads(out.stdout.strip().splitlines()[-1])
    assert kernels == 'loaded' and build_dir == st['build_dir']
    assert seconds < 10, f'second process rebuilt the kernels ({seconds:.1f} s)'


@pytest.mark.cuda
def test_concurrent_first_builds_compile_once(tmp_path):
    """Two processes started together on a machine without a build (as the
    ranks of ``torchrun`` are): both load the kernels and every translation
    unit is compiled once (torch's build lock in the build directory; a
    second concurrent ninja run would log the objects twice or fail)."""
    code = 'import pyg_tc, json; i = pyg_tc.info(); print(json.dumps([i["kernels"], i["build_dir"]]))'
    env = {**os.environ, 'PYTHONPATH': str(REPO_ROOT), 'PYG_TC_BUILD_DIR': str(tmp_path / 'build')}
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


def test_sources_are_every_translation_unit_of_the_family_folders():
    kdir = Path(_kernels.kernel_dir())
    assert kdir == REPO_ROOT / 'kernels'
    srcs = _kernels.sources()
    assert srcs == _tree_tus(kdir)
    assert len(srcs) >= 10
    # one folder per family, no translation unit outside them
    assert {Path(s).parent.name for s in srcs} <= set(FAMILIES)
    for fam in FAMILIES:
        assert (kdir / fam).is_dir(), fam
    assert (kdir / 'common' / 'static_switch.h').is_file()
    for fam in ('attn', 'csr', 'maxk', 'sgt'):
        assert (kdir / fam / f'{fam}_params.h').is_file()
    # torch names objects by file name only: names are unique (family prefix)
    stems = [Path(s).stem for s in srcs]
    assert len(stems) == len(set(stems))
    for s in srcs:
        fam = Path(s).parent.name
        assert Path(s).stem.startswith(fam), f'{s}: file names carry the family prefix'


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


def test_one_compile_time_dispatch_style():
    """The static switch macros only: no AT_DISPATCH, no per-file macro
    ladders, no integral_constant or templated lambdas in the launchers."""
    kdir = Path(_kernels.kernel_dir())
    for p in kdir.rglob('*'):
        if p.suffix not in ('.cu', '.cpp', '.cuh', '.h') or p.name == 'static_switch.h':
            continue
        code = re.sub(r'//[^\n]*', ' ', p.read_text())
        rel = p.relative_to(kdir)
        assert 'AT_DISPATCH' not in code, rel
        assert 'integral_constant' not in code, rel
        assert not re.search(r'\[&\]\s*<', code), f'{rel}: templated lambda'
        assert not re.search(r'template\s+operator\s*\(\)', code), rel
        for m in re.findall(r'#\s*define\s+(\w+)\(', code):
            pytest.fail(f'{rel} defines the macro {m}() (switches belong in common/static_switch.h)')


#: the builders' folders and files: one-purpose kernels of host functions in the same file, no params struct
BUILDER_SOURCES = ('csr/csr_build.cu', 'neighbor/', 'sort/')


def kernel_signatures(code: str):
    """(name, parameter list) of every ``__global__`` function in a source without comments."""
    for m in re.finditer(
        r'__global__\s+void\s+(?:__launch_bounds__\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(([^)]*)\)', code
    ):
        yield m.group(1), ' '.join(m.group(2).split())


def test_one_kernel_calling_convention():
    """Every kernel of an op family takes one argument, its params struct by
    value (``const XParams p``); the builders' one-purpose kernels are exempt."""
    kdir = Path(_kernels.kernel_dir())
    checked = 0
    for p in sorted(kdir.rglob('*')):
        rel = p.relative_to(kdir).as_posix()
        if p.suffix not in ('.cu', '.cuh') or rel.startswith(BUILDER_SOURCES):
            continue
        code = re.sub(r'//[^\n]*', ' ', p.read_text())
        for name, params in kernel_signatures(code):
            checked += 1
            assert re.fullmatch(r'const \w+Params p', params), f'{rel}: {name}({params})'
    assert checked >= 10  # the check sees the kernels (attn, csr, sgt, maxk, common)


def test_kernel_signatures_parser():
    """The parser above reads both layouts of a kernel's signature."""
    code = (
        '__global__ void __launch_bounds__(256, min_blocks(NV))\nk1(const AParams p) {}\n'
        '__global__ void k2(const int* __restrict__ a,\n int n) {}'
    )
    assert list(kernel_signatures(code)) == [('k1', 'const AParams p'), ('k2', 'const int* __restrict__ a, int n')]


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


# ---------------------------------------------------------------- torch's ninja file


def _write_ninja(bdir: Path, monkeypatch, cuda_home: Path):
    """build.ninja as cpp_extension.load writes it for a CUDA build of torch
    (torch.version.cuda set), with the arguments _kernels.load passes."""
    from torch.utils import cpp_extension

    writer = getattr(cpp_extension, '_write_ninja_file_to_build_library', None)
    if writer is None:
        pytest.skip('this torch has no _write_ninja_file_to_build_library')
    monkeypatch.setattr(torch.version, 'cuda', torch.version.cuda or '12.8')
    monkeypatch.setattr(cpp_extension, 'CUDA_HOME', str(cuda_home))
    monkeypatch.delenv('TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES', raising=False)
    monkeypatch.setenv('TORCH_NO_COMPILER_WRAPPER', '1')
    args = _kernels.build_args('90', str(cuda_home))
    bdir.mkdir(parents=True, exist_ok=True)
    writer(
        path=str(bdir / 'build.ninja'),
        name=args['name'],
        sources=args['sources'],
        extra_cflags=args['extra_cflags'],
        extra_cuda_cflags=args['extra_cuda_cflags'],
        extra_sycl_cflags=[],
        extra_ldflags=[],
        extra_include_paths=args['extra_include_paths'],
        with_cuda=True,
        with_sycl=False,
        is_standalone=False,
    )
    return args, (bdir / 'build.ninja').read_text()


def _rule(text: str, name: str) -> str:
    m = re.search(rf'^rule {name}\n((?:  .*\n)+)', text, flags=re.M)
    assert m, f'no rule {name}'
    return m.group(1)


def test_ninja_file_builds_each_unit_and_tracks_headers(tmp_path, monkeypatch):
    args, text = _write_ninja(tmp_path / 'build', monkeypatch, tmp_path / 'cuda')
    kdir = _kernels.kernel_dir()
    assert args['sources'] == _kernels.sources()
    # one build statement per translation unit, nvcc for .cu, the C++ compiler for .cpp
    builds = re.findall(r'^build (\S+\.o): (\w+) (\S+)$', text, flags=re.M)
    assert sorted(src for _, _, src in builds) == args['sources']
    assert len({obj for obj, _, _ in builds}) == len(builds)
    for obj, rule, src in builds:
        assert rule == ('cuda_compile' if src.endswith('.cu') else 'compile'), (obj, rule, src)
    # header dependencies: depfiles for both compilers
    cuda_rule = _rule(text, 'cuda_compile')
    assert 'depfile = $out.d' in cuda_rule and 'deps = gcc' in cuda_rule
    assert re.search(r'\$nvcc\s+-MD -MF \$out\.d', cuda_rule)
    cxx_rule = _rule(text, 'compile')
    assert '-MMD -MF $out.d' in cxx_rule and 'deps = gcc' in cxx_rule
    # kernels/ on the include path of both, our flags after torch's
    cflags = re.search(r'^cflags = (.*)$', text, flags=re.M).group(1)
    cuda_cflags = re.search(r'^cuda_cflags = (.*)$', text, flags=re.M).group(1)
    assert f'-I{kdir}' in cflags.split() and f'-I{kdir}' in cuda_cflags.split()
    assert '-gencode=arch=compute_90,code=sm_90' in cuda_cflags
    assert '-O3' in cflags and '-O3' in cuda_cflags


def _includes(path: Path, kdir: Path, seen=None) -> set:
    seen = set() if seen is None else seen
    for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), flags=re.M):
        dep = kdir / inc
        if dep not in seen:
            seen.add(dep)
            _includes(dep, kdir, seen)
    return seen


FAKE_COMPILER = '''#!{python}
# Stands in for nvcc and c++: writes the object and a gcc-style depfile of
# the quoted includes (searched in the -I directories), and logs the source.
import os, re, sys
args = sys.argv[1:]
def after(flag):
    return args[args.index(flag) + 1] if flag in args else None
src, obj, dep = after('-c'), after('-o'), after('-MF')
incs = [a[2:] for a in args if a.startswith('-I')]
deps, todo = [], [src]
while todo:
    text = open(todo.pop()).read()
    for inc in re.findall(r'^\\s*#\\s*include\\s+"([^"]+)"', text, flags=re.M):
        for d in incs:
            p = os.path.join(d, inc)
            if os.path.isfile(p) and p not in deps:
                deps.append(p)
                todo.append(p)
                break
open(obj, 'w').write('object of ' + src)
if dep:
    open(dep, 'w').write(obj + ': ' + ' '.join([src] + deps) + '\\n')
with open(os.environ['FAKE_COMPILER_LOG'], 'a') as log:
    log.write(src + '\\n')
'''


def test_ninja_rebuilds_only_what_an_edit_touches(tmp_path, monkeypatch):
    """Runs torch's ninja file with a stand-in compiler: editing a .cu file
    recompiles that unit only; editing a header recompiles its dependents."""
    ninja = shutil.which('ninja')
    if ninja is None:
        pytest.skip('ninja not installed')
    kdir = tmp_path / 'kernels'
    shutil.copytree(_kernels.kernel_dir(), kdir)
    monkeypatch.setattr(_kernels, 'kernel_dir', lambda: str(kdir))
    fake = tmp_path / 'fakecc'
    fake.write_text(FAKE_COMPILER.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / 'compiled.log'
    monkeypatch.setenv('PYTORCH_NVCC', str(fake))
    monkeypatch.setenv('CXX', str(fake))
    monkeypatch.setenv('FAKE_COMPILER_LOG', str(log))
    bdir = tmp_path / 'build'
    args, text = _write_ninja(bdir, monkeypatch, tmp_path / 'cuda')
    objects = re.findall(r'^build (\S+\.o): ', text, flags=re.M)

    def build():
        log.write_text('')
        subprocess.run([ninja, '-C', str(bdir)] + objects, check=True, capture_output=True)
        return sorted(log.read_text().split())

    def touch(p: Path):
        time.sleep(0.05)  # a later mtime than the objects, also on coarse clocks
        p.write_text(p.read_text() + '\n// edited\n')

    assert build() == sorted(args['sources'])  # first build: everything
    assert build() == []  # nothing changed: nothing rebuilt
    cu = kdir / 'sgt' / 'sgt_sddmm.cu'
    touch(cu)
    assert build() == [str(cu)]
    for header in ('csr/csr_params.h', 'common/dtype.cuh', 'common/static_switch.h'):
        touch(kdir / header)
        expected = sorted(s for s in args['sources'] if kdir / header in _includes(Path(s), kdir))
        assert expected, header
        assert build() == expected, header
