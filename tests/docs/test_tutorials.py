"""Every tutorial (tutorials/*.py) runs at small size on the CPU, offline, and ends with a
markdown table (what CI executes; full size on a GPU): on synthetic data without ``--root``,
and on the real datasets of ``$PYG_TC_DATA`` when it is set."""

import os
import shutil
import subprocess
import sys

import pytest

from ..conftest import DATA_ENV, REPO_ROOT, real_data

TUTORIALS = sorted((REPO_ROOT / 'tutorials').glob('[0-9][0-9]_*.py'))
NO_DATA = {'06_gat_large_graph'}  # generates its graphs: no --root to test
RUNS = [
    pytest.param(t, data, id=f'{t.stem}-{data}')
    for t in TUTORIALS
    for data in ('synthetic', 'real')
    if data == 'synthetic' or t.stem not in NO_DATA
]


def tutorial_env(tmp_path) -> dict:
    """The CPU only, one thread each, the checkout on the path, no real data, temporary files in ``tmp_path``."""
    env = dict(
        os.environ, PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES='', OMP_NUM_THREADS='1', TMPDIR=str(tmp_path)
    )
    env.pop(DATA_ENV, None)
    return env


@pytest.fixture(scope='module')
def data_root(tmp_path_factory):
    """A writable copy of the real datasets the tutorials read (skips without ``$PYG_TC_DATA``)."""
    root = tmp_path_factory.mktemp('data')
    for sub in ('planetoid', 'tu', 'heterophilous', 'hetero'):
        shutil.copytree(real_data(sub), root / sub, ignore=shutil.ignore_patterns('processed'))
    for p in [root, *root.rglob('*')]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return root


def test_tutorials_listed():
    listed = (REPO_ROOT / 'tutorials' / 'README.md').read_text()
    assert TUTORIALS and all(f'({t.name})' in listed for t in TUTORIALS)


@pytest.mark.parametrize('script,data', RUNS)
def test_tutorial_runs(script, data, request, tmp_path):
    args = [sys.executable, str(script), '--small', '--device', 'cpu']
    if data == 'real':
        args += ['--root', str(request.getfixturevalue('data_root'))]
    r = subprocess.run(args, cwd=tmp_path, env=tutorial_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert '|---' in r.stdout  # ends with its table
    said = [line for line in r.stdout.splitlines() if line.startswith('No --root')]
    if data == 'synthetic' and script.stem not in NO_DATA:  # one line says so, naming the flag
        assert len(said) == 1 and 'synthetic' in said[0] and '--root DIR' in said[0], r.stdout[:500]
    else:
        assert not said


def test_unusable_root_ends_with_one_line(tmp_path):
    """A ``--root`` where the dataset can be neither read nor downloaded (here a file, not a
    folder): exit status 1 and one line naming the flag, no traceback."""
    root = tmp_path / 'not_a_folder'
    root.write_text('')
    r = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / 'tutorials' / '01_drop_in.py'),
            '--small',
            '--device',
            'cpu',
            '--root',
            str(root),
        ],
        cwd=tmp_path,
        env=tutorial_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 1 and 'Traceback' not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: Cora is not in ') and '--root' in lines[0], r.stderr


def table_rows(stdout: str, first: str):
    """The cells of the markdown table rows of ``stdout`` that start with ``| first |``."""
    return [
        [c.strip() for c in line.split('|')[1:-1]] for line in stdout.splitlines() if line.startswith(f'| {first} |')
    ]


def test_minibatch_tutorial_with_pyg_tc_loader(tmp_path):
    """Tutorial 4's table: PyG's and pyg_tc's layers on the same batches of PyG's loader (here,
    without a sampler backend, its k-hop fallback: the same accuracy, float-rounding loss
    differences), and pyg_tc's layers on ``pyg_tc.loader.NeighborLoader``'s own batches, which
    needs no backend: an accuracy, a sampling time and no format build; and the captured row,
    those batches padded (on the CPU the step runs eagerly): the same losses."""
    r = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / 'tutorials' / '04_minibatch.py'),
            '--small',
            '--device',
            'cpu',
            '--no-sampler',
        ],
        cwd=tmp_path,
        env=tutorial_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = table_rows(r.stdout, 'PyG') + table_rows(r.stdout, 'pyg_tc')
    assert [(c[0], c[1]) for c in rows] == [
        ('PyG', 'k-hop subgraphs (no sampler backend)'),
        ('pyg_tc', 'k-hop subgraphs (no sampler backend)'),
        ('pyg_tc', 'pyg_tc.loader.NeighborLoader [10, 5]'),
    ]
    assert rows[0][2] == rows[1][2] and float(rows[1][-1]) < 1e-5  # same batches: same accuracy and losses
    own = rows[2]
    assert own[2].endswith('%') and 0 < float(own[2][:-1]) <= 100
    assert float(own[3]) > 0 and float(own[5]) == pytest.approx(float(own[3]) + float(own[4]), abs=0.15)
    assert own[6].startswith('none') and own[7].startswith('-')
    # the captured row (eager on the CPU): the own loader's batches padded; the same losses and accuracy
    (cap,) = table_rows(r.stdout, 'pyg_tc captured')
    assert cap[1] == 'pyg_tc.loader.NeighborLoader [10, 5], padded' and cap[2] == own[2]
    assert float(cap[3]) >= float(own[3]) and float(cap[-1].split()[0]) < 1e-5 and 'vs own loader' in cap[-1]


def test_multi_gpu_tutorial_under_torchrun(tmp_path):
    """Tutorial 9 as the recipe documents it: ``torchrun --nproc_per_node=2`` (gloo on the CPU),
    each rank memory-mapping the graph local rank 0 saved (without ``--root``: in the temporary
    folder) and sampling with pyg_tc's loader (the default); the ranks end with identical
    parameters and match one process replaying their batches (the script exits 1 otherwise)."""
    r = subprocess.run(
        [
            sys.executable,
            '-m',
            'torch.distributed.run',
            '--standalone',
            '--nproc_per_node=2',
            str(REPO_ROOT / 'tutorials' / '09_multi_gpu.py'),
            '--small',
            '--device',
            'cpu',
        ],
        cwd=tmp_path,
        env=tutorial_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert 'parameters on every rank identical (max diff 0.0e+00)' in r.stdout and ': OK' in r.stdout
    assert (tmp_path / 'ddp_cora_synthetic.pt').is_file()  # saved once, memory-mapped by both ranks
    assert [c[2] for c in table_rows(r.stdout, 2)] == ['pyg_tc.loader.NeighborLoader [15, 10]']


def test_multi_gpu_tutorial_pyg_tc_loader_check(tmp_path):
    """Tutorial 9 with ``--loader pyg_tc`` on 2 spawned CPU ranks, PyG's layers and pyg_tc's on
    its batches (their edge_index carries pyg_tc's CSR): each passes the check, the ranks'
    parameters bitwise identical and equal to one process replaying every rank's batches; the
    same batches for both (the epoch reseeds torch's generator), so the same accuracy."""
    r = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / 'tutorials' / '09_multi_gpu.py'),
            '--small',
            '--device',
            'cpu',
            '--loader',
            'pyg_tc',
            '--layers',
            'PyG,pyg_tc',
        ],
        cwd=tmp_path,
        env=tutorial_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = table_rows(r.stdout, 2)
    assert [(c[1], c[2]) for c in rows] == [
        ('PyG', 'pyg_tc.loader.NeighborLoader [15, 10]'),
        ('pyg_tc', 'pyg_tc.loader.NeighborLoader [15, 10]'),
    ]
    assert rows[0][-1] == rows[1][-1] and rows[0][-1].endswith('%')
    checks = [line for line in r.stdout.splitlines() if line.startswith('check (2 processes')]
    assert len(checks) == 2 and all('identical (max diff 0.0e+00)' in c and c.endswith(': OK') for c in checks)


@pytest.mark.parametrize('model', ['sage', 'gat'])
def test_multi_gpu_tutorial_captured_check(model, tmp_path):
    """``--captured --prefetch 2`` on 2 spawned CPU ranks (batches made on each loader's thread):
    the batches padded to per-hop buckets agreed over the ranks, each layer trimmed (GAT's
    self-loop graphs derived in the step), DDP with ``static_graph=True`` and ``CapturedStep``
    (eager on the CPU); the check holds on the padded batches (``seed_loss``), and the row says how
    the step ran."""
    r = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / 'tutorials' / '09_multi_gpu.py'),
            '--small',
            '--device',
            'cpu',
            '--captured',
            '--model',
            model,
            '--prefetch',
            '2',
        ],
        cwd=tmp_path,
        env=tutorial_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    step = 'captured, per-hop padded'
    assert [c[2] for c in table_rows(r.stdout, 2)] == [
        f'pyg_tc.loader.NeighborLoader [15, 10], prefetch 2, step {step}'
    ]
    assert 'parameters on every rank identical (max diff 0.0e+00)' in r.stdout and ': OK' in r.stdout


def test_multi_gpu_tutorial_with_loader_workers(tmp_path):
    """Tutorial 9 with PyG's loader and sampling workers per rank (``--loader pyg --workers 2``):
    the spawned ranks fork their NeighborLoader workers (a spawned rank's default start method
    would pickle the shared graph to each worker); the check still holds (without a sampler
    backend the option is ignored)."""
    r = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / 'tutorials' / '09_multi_gpu.py'),
            '--small',
            '--device',
            'cpu',
            '--loader',
            'pyg',
            '--workers',
            '2',
        ],
        cwd=tmp_path,
        env=tutorial_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert 'parameters on every rank identical (max diff 0.0e+00)' in r.stdout and ': OK' in r.stdout


@pytest.mark.parametrize('loader', ['pyg_tc', 'pyg'])
def test_multi_gpu_tutorial_loader_floor(loader, tmp_path):
    """``--layers loader,pyg_tc``: a row that only makes the batches (the epoch's floor, no
    model, no accuracy) next to pyg_tc's checked row, each naming the loader."""
    env = tutorial_env(tmp_path)
    r = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / 'tutorials' / '09_multi_gpu.py'),
            '--small',
            '--device',
            'cpu',
            '--layers',
            'loader,pyg_tc',
            '--loader',
            loader,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = table_rows(r.stdout, 2)
    assert [c[1] for c in rows] == ['loader', 'pyg_tc']
    names = {
        'pyg_tc': ['pyg_tc.loader.NeighborLoader [15, 10]'],
        'pyg': ["PyG's NeighborLoader [15, 10]", 'k-hop subgraphs (no sampler backend)'],
    }[loader]
    assert rows[0][2] == rows[1][2] and rows[0][2] in names
    assert rows[0][-1] == '-' and rows[1][-1].endswith('%')
    assert ': OK' in r.stdout


def test_multi_gpu_tutorial_bad_arguments(tmp_path):
    """Unknown layers, and sampling workers for pyg_tc's loader (which has none): a usage error."""
    script = str(REPO_ROOT / 'tutorials' / '09_multi_gpu.py')
    env = tutorial_env(tmp_path)
    bad = subprocess.run(
        [sys.executable, script, '--layers', 'dgl'], env=env, capture_output=True, text=True, timeout=600
    )
    assert bad.returncode == 2 and "unknown ['dgl']" in bad.stderr
    bad = subprocess.run(
        [sys.executable, script, '--workers', '2'], env=env, capture_output=True, text=True, timeout=600
    )
    assert bad.returncode == 2 and '--workers' in bad.stderr and '--loader pyg' in bad.stderr


def test_gat_tutorial_measuring_keeps_nothing_alive():
    """Tutorial 6's ``kept_for_backward`` counts what autograd saves without keeping it: an op
    that saves its own output (as ``exp`` does) once leaked its whole graph through the hook, which
    kept PyG's 60 GB forward allocated on the GPU through pyg_tc's measurement."""
    import gc
    import importlib.util
    import weakref

    import torch

    spec = importlib.util.spec_from_file_location('tutorial6', REPO_ROOT / 'tutorials' / '06_gat_large_graph.py')
    tutorial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tutorial)

    class Exp(torch.autograd.Function):  # saves its output, as exp's formula does
        @staticmethod
        def forward(ctx, a):
            out = a.exp()
            ctx.save_for_backward(out)
            return out

        @staticmethod
        def backward(ctx, g):
            return g * ctx.saved_tensors[0]

    x, w, refs = torch.randn(50, 8), torch.randn(8, 8, requires_grad=True), []

    def fn():
        y = Exp.apply(x @ w)
        refs.append(weakref.ref(y))
        return y.sum()

    loss, kept = tutorial.kept_for_backward(fn)
    assert kept == pytest.approx(2 * 50 * 8 * 4 / 2**20)  # x (for w's gradient) and exp's output
    with pytest.raises(RuntimeError, match='not for backward'):
        loss.backward()
    del loss
    gc.collect()
    assert refs[0]() is None
