"""``benchmarks/gpu_run.sh``: its arguments, what it records and which commands
each suite runs. No GPU here: ``nvidia-smi`` and the Python interpreter are
stand-ins that record how they were called (``PYTHON`` selects the interpreter)."""

import os
import re
import shutil
import stat
import subprocess

import pytest

from ..conftest import REPO_ROOT

SCRIPT = REPO_ROOT / 'benchmarks' / 'gpu_run.sh'
pytestmark = pytest.mark.skipif(shutil.which('bash') is None, reason='needs bash')


def _stub(path, body):
    path.write_text('#!/usr/bin/env bash\n' + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_gpu(tmp_path):
    """A PATH with a fake nvidia-smi, and a fake python that logs its arguments and
    PYG_TC_DATA, fails when asked to run the benchmark (`-m pyg_tc bench`) and FAIL_BENCH is set."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    _stub(
        bin_dir / 'nvidia-smi',
        'if [ "$1" = -L ]; then echo "GPU 0: Fake"; else\n'
        'echo "name, driver_version, memory.total [MiB], clocks.current.sm [MHz], clocks.current.memory [MHz]"\n'
        'echo "NVIDIA Fake GPU, 999.99.99, 81559 MiB, 1980 MHz, 2619 MHz"; fi\n',
    )
    log = tmp_path / 'python_calls.log'
    python = _stub(
        bin_dir / 'fakepython',
        f'echo "$* | data=${{PYG_TC_DATA:-}}" >> {log}\n'
        'case "$*" in "-m pyg_tc bench"*) [ -n "${FAIL_BENCH:-}" ] && exit 3;; esac\n'
        'case "$*" in -c*) echo "{}";; esac\nexit 0\n',
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith('_ARGS') and k != 'PYG_TC_DATA'}
    env.update(PATH=f'{bin_dir}:{env["PATH"]}', PYTHON=str(python))
    return env, log


def run(args, env):
    return subprocess.run(
        ['bash', str(SCRIPT), *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_usage_and_bad_arguments(fake_gpu, tmp_path):
    env, _ = fake_gpu
    r = run(['--help'], env)
    assert r.returncode == 0 and 'OUTDIR' in r.stdout and 'cbsrtrain' in r.stdout
    r = run([], env)
    assert r.returncode == 2 and 'usage: bash benchmarks/gpu_run.sh OUTDIR' in r.stderr
    r = run([str(tmp_path / 'o'), 'tests,nosuch'], env)
    assert r.returncode == 2 and "unknown suite 'nosuch'" in r.stderr
    r = run([str(tmp_path / 'o'), '--data', str(tmp_path / 'missing')], env)
    assert r.returncode == 2 and 'does not exist' in r.stderr
    r = run([str(tmp_path / 'o'), '--bogus'], env)
    assert r.returncode == 2 and 'unknown option --bogus' in r.stderr
    assert not (tmp_path / 'o').exists()  # nothing written before the arguments are checked


def test_needs_nvidia_smi(tmp_path):
    env = {'PATH': '/usr/bin:/bin', 'HOME': str(tmp_path)}
    if shutil.which('nvidia-smi', path=env['PATH']):
        pytest.skip('a real nvidia-smi is installed')
    r = run([str(tmp_path / 'o')], env)
    assert r.returncode == 2 and 'needs a CUDA machine' in r.stderr


def test_suites_write_their_logs_to_the_named_folder(fake_gpu, tmp_path):
    env, log = fake_gpu
    data = tmp_path / 'datasets'
    data.mkdir()
    out = tmp_path / 'out'  # created by the script
    env = dict(env, CBSR_ARGS='--graphs reddit --ks 16', TEST_ARGS='tests/ops')
    r = run([str(out), 'tests,cbsr', 'bench', '--data', str(data)], env)
    assert r.returncode == 0, r.stderr
    info = (out / 'info.txt').read_text()
    for field in ('date: ', 'commit: ', 'NVIDIA Fake GPU, 999.99.99', f'data: {data}'):
        assert field in info
    assert {'info.txt', 'tests.log', 'cbsr.log', 'bench.log'} <= {p.name for p in out.iterdir()}
    calls = log.read_text().splitlines()
    assert any(c.startswith('-m pytest -q -rf -m cuda') and 'tests/ops' in c for c in calls)
    assert f'-m benchmarks.suites.cbsr --out {out}/cbsr --graphs reddit --ks 16 | data={data}' in calls
    assert any(c.startswith(f'-m pyg_tc bench --out {out}/bench') for c in calls)
    assert not any('benchmarks.suites.gat' in c for c in calls)  # only the suites asked for


def test_a_failing_suite_fails_the_run_and_the_rest_still_runs(fake_gpu, tmp_path):
    env, log = fake_gpu
    r = run([str(tmp_path / 'out'), 'bench', 'overhead'], dict(env, FAIL_BENCH='1'))
    assert r.returncode == 1
    assert any('benchmarks/probes/layer_overhead.py' in c for c in log.read_text().splitlines())


def test_suites_that_read_datasets_say_what_is_missing(fake_gpu, tmp_path):
    env, log = fake_gpu
    r = run([str(tmp_path / 'out'), 'graphcls'], env)
    assert r.returncode == 1 and '--data DIR or PYG_TC_DATA' in r.stderr
    data = tmp_path / 'datasets'
    data.mkdir()
    r = run([str(tmp_path / 'out'), 'graphcls', f'--data={data}'], env)
    assert r.returncode == 1 and f'{data}/tu not found' in r.stderr
    (data / 'tu').mkdir()
    r = run([str(tmp_path / 'out'), 'graphcls', f'--data={data}'], env)
    assert r.returncode == 0, r.stderr
    assert any('tutorials/05_graph_classification.py --root' in c for c in log.read_text().splitlines())


def test_every_script_and_module_it_runs_exists():
    """Each ``$PY path.py`` and ``$PY -m module`` of the script names a file of the checkout
    (scripts and suites move: benchmarks/probes/, benchmarks/suites/)."""
    text = SCRIPT.read_text()
    scripts = re.findall(r'\$PY ([\w/]+\.py)', text)
    modules = [m for m in re.findall(r'\$PY -m ([\w.]+)', text) if m.startswith('benchmarks.')]
    assert scripts and modules
    for path in scripts + [m.replace('.', '/') + '.py' for m in modules]:
        assert (REPO_ROOT / path).is_file(), path
