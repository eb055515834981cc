"""The small_graphs suite (benchmarks/suites/small_graphs.py) through ``pyg-tc
bench``'s registry on the CPU: a dry run of its code on the Cora-shaped random
graph (the captured rows run eagerly there; the times mean nothing)."""

import json

import pytest
import torch

from pyg_tc.bench import run_suite


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_small_graphs_suite_runs_every_run_of_a_model(tmp_path, monkeypatch):
    monkeypatch.delenv('PYG_TC_DATA', raising=False)  # the random graph of Cora's shape
    out = tmp_path / 'out'
    argv = ['--out', str(out), '--graphs', 'cora', '--models', 'gat', '--steps', '2', '--rounds', '1']
    assert run_suite('small_graphs', [*argv, '--profile-steps', '1']) == 0
    steps = [json.loads(line) for line in (out / 'small_graphs.jsonl').read_text().splitlines()]
    steps = [r for r in steps if r.get('kind') == 'step']
    assert [r['run'] for r in steps] == [
        'PyG eager',
        'PyG eager, again',
        'PyG captured',
        'pyg_tc eager',
        'pyg_tc eager, kernels only',
        'pyg_tc captured',
    ]
    assert all(r['wall_ms'] > 0 and 'error' not in r and not r['real'] for r in steps)
    assert steps[0]['x_pyg_eager'] == 1.0
    assert (out / 'small_graphs.md').read_text().startswith('# Full-graph training on small graphs (CPU)')
