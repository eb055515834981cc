"""The mini-batch suite (benchmarks/suites/minibatch.py) at toy size on the CPU:
records per (model, implementation), the same losses as PyG's layers, and
the three outputs. Needs a sampler backend (skips with the reason)."""

import json

import pytest


def test_minibatch_suite_cpu(tmp_path):
    from torch_geometric.typing import WITH_PYG_LIB, WITH_TORCH_SPARSE

    if not (WITH_PYG_LIB or WITH_TORCH_SPARSE):
        pytest.skip('neighbour sampling needs pyg-lib or torch_sparse')
    from benchmarks.suites.minibatch import main

    out = tmp_path / 'mb'
    assert (
        main(
            [
                '--out',
                str(out),
                '--graphs',
                'tiny',
                '--models',
                'sage,gat',
                '--batches',
                '3',
                '--batch-size',
                '64',
                '--fanout',
                '5,5',
                '--width',
                '16',
                '--hidden',
                '16',
                '--classes',
                '5',
                '--device',
                'cpu',
                '--workers',
                '1',
            ]
        )
        == 0
    )
    recs = [json.loads(line) for line in open(out / 'minibatch.jsonl')]
    mb = [r for r in recs if r.get('kind') == 'minibatch']
    assert {(r['model'], r['impl']) for r in mb} == {(m, i) for m in ('sage', 'gat') for i in ('pyg', 'pyg_tc')}
    for r in mb:
        assert r['loss_max_diff_vs_pyg'] < 1e-4  # the same batches, the same weights
        assert r['compute_ms'] > 0 and r['sample_ms'] > 0
        assert (r['build_ms'] > 0) == (r['impl'] == 'pyg_tc')
    # the overlapped epoch: one record per (model, implementation), timed over the same number of batches
    ep = [r for r in recs if r.get('kind') == 'epoch']
    assert {(r['model'], r['impl']) for r in ep} == {(m, i) for m in ('sage', 'gat') for i in ('pyg', 'pyg_tc')}
    for r in ep:
        assert r['epoch_batches'] == 3 and r['epoch_batch_ms'] > 0 and r['workers'] == 1
        assert ('epoch_speedup' in r) == (r['impl'] == 'pyg_tc')
    md = (out / 'minibatch.md').read_text()
    assert '## An epoch with sampling overlapped' in md
    assert (out / 'minibatch.md').is_file() and (out / 'minibatch.png').is_file()


def test_minibatch_budget_checked_per_model_and_epoch(tmp_path, monkeypatch):
    """--budget stops the run between models and before an epoch part, not only between graphs:
    here it runs out after the first model's per-batch part."""
    from torch_geometric.typing import WITH_PYG_LIB, WITH_TORCH_SPARSE

    if not (WITH_PYG_LIB or WITH_TORCH_SPARSE):
        pytest.skip('neighbour sampling needs pyg-lib or torch_sparse')
    import benchmarks.suites.minibatch as mb

    calls = []
    monkeypatch.setattr(mb, '_past_budget', lambda a: calls.append(1) or len(calls) > 1)
    out = tmp_path / 'mb'
    assert (
        mb.main(
            [
                '--out',
                str(out),
                '--graphs',
                'tiny',
                '--models',
                'sage,gat',
                '--batches',
                '2',
                '--batch-size',
                '64',
                '--fanout',
                '5,5',
                '--width',
                '8',
                '--hidden',
                '8',
                '--classes',
                '3',
                '--device',
                'cpu',
                '--workers',
                '0',
                '--budget',
                '1e9',
            ]
        )
        == 0
    )
    recs = [json.loads(line) for line in open(out / 'minibatch.jsonl')]
    assert {(r['model'], r['impl']) for r in recs if r.get('kind') == 'minibatch'} == {
        ('sage', 'pyg'),
        ('sage', 'pyg_tc'),
    }
    assert not [r for r in recs if r.get('kind') == 'epoch'] and len(calls) == 3
