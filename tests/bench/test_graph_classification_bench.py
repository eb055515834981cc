"""The graph_classification suite (benchmarks/suites/graph_classification.py)
through ``pyg-tc bench``'s registry on the CPU, on synthetic ENZYMES: PyG's
model and pyg_tc's start from the same weights and see the same batches, so on
the CPU (pyg_tc's reference sums as PyG does) they score alike."""

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


def test_graph_classification_suite_runs_the_same_model_three_ways(tmp_path, monkeypatch):
    monkeypatch.delenv('PYG_TC_DATA', raising=False)  # synthetic ENZYMES
    out = tmp_path / 'out'
    argv = ['--out', str(out), '--datasets', 'ENZYMES', '--models', 'gin', '--batch-sizes', '128']
    assert run_suite('graph_classification', [*argv, '--seeds', '1', '--epochs', '2']) == 0
    recs = [json.loads(line) for line in (out / 'graph_classification.jsonl').read_text().splitlines()]
    rows = {r['run']: r for r in recs if r.get('kind') == 'epoch'}
    assert list(rows) == ['PyG eager', 'pyg_tc eager', 'pyg_tc padded + captured']
    assert all(r['epoch_ms'] > 0 and r['graphs'] == 600 and not r['real'] for r in rows.values())
    assert rows['PyG eager']['x_pyg'] == 1.0
    assert rows['pyg_tc eager']['accuracy'] == rows['PyG eager']['accuracy']
    assert (out / 'graph_classification.png').is_file()
