"""The TC-GNN benchmark (the SGT suite, benchmarks/suites/sgt.py) end to end on the CPU: every
section with --quick on the 'tiny' synthetic graph (the ops run their reference
implementations: a code-path check, not a measurement), and the accuracy
section for 3 epochs on Cora."""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks.suites import sgt as suite
from benchmarks.suites.common import sparse_baseline


@pytest.fixture(autouse=True)
def _one_thread():
    """Small tensors: one intra-op thread avoids OpenMP spin-waits on a loaded machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


BASE = sparse_baseline('cpu')[0]  # torch.sparse.mm on the CPU: not called cuSPARSE


def _records(out):
    return [json.loads(line) for line in (out / 'sgt.jsonl').read_text().splitlines()]


def test_quick_cpu_sections_write_records_and_report(tmp_path):
    out = tmp_path / 'out'
    rc = suite.main(
        [
            '--out',
            str(out),
            '--device',
            'cpu',
            '--quick',
            '--graphs',
            'tiny',
            '--train-graphs',
            'tiny',
            '--sections',
            'kernels,auto,build,table6,train',
        ]
    )
    assert rc == 0
    recs = _records(out)
    assert recs[0]['kind'] == 'env' and recs[0]['device'] == 'cpu'
    assert not [r for r in recs if r['kind'] == 'skipped']
    by = lambda k: [r for r in recs if r['kind'] == k]  # noqa: E731

    st = by('sgt_stats')
    assert [r['order'] for r in st] == ['native', 'rcm', 'random']
    for r in st:
        assert r['graph'] == 'tiny' and r['edges'] == 20_000
        assert r['blocks'] <= r['blocks_without_sgt'] and r['nnz_per_block'] > 0

    for kind, impls in (
        ('spmm', (BASE, 'csr', 'tcu', 'tcu_tf32', 'pyg')),
        ('sddmm', ('csr', 'tcu', 'tcu_tf32', 'pyg')),
    ):
        rs = by(kind)
        assert [(r['order'], r['F'], r['dtype']) for r in rs] == [('native', 16, 'float32'), ('rcm', 16, 'float32')]
        for r in rs:
            for i in impls:
                assert r[f'{i}_ms'] > 0, (kind, i, r.get(f'{i}_error'))
                assert r[f'{i}_err'] < 1e-5, (kind, i)
            assert r['auto'] == 'csr' and r['auto_vs_best'] >= 1.0  # no kernels on the CPU
            assert r['tcu_vs_csr'] > 0 and r['nnz_per_block'] > 0
    for r in by('spmm'):
        assert r[f'tcu_vs_{BASE}'] > 0 and 'cusparse_ms' not in r and r['csr_bytes'] > 0 and r['tcu_bytes'] > 0

    (au,) = by('auto')
    assert au['rule_warps'] in suite.WARPS and au['best_warps'] in suite.WARPS
    assert all(au[f'tcu_w{w}_ms'] > 0 for w in suite.WARPS) and au['best_backend'] in ('sgt', 'csr')

    (bu,) = by('build')
    assert bu['sgt_build_ms'] > 0 and bu['csr_build_ms'] > 0 and bu['build_over_tcu_spmm'] > 0

    t6 = by('table6')
    assert [r['dbw'] for r in t6] == [1, 4]
    for r in t6:
        assert r['nnz'] == r['n'] // 16 * r['dbw'] * 256
        assert r['nnz_per_block'] == 128.0  # dense 16x16 blocks = two full 16x8 SGT blocks
        assert math.isclose(r['sparsity_pct'], 100 * (1 - r['nnz'] / r['n'] ** 2))
        assert all(r[f'{i}_gflops'] > 0 for i in ('tcu', 'tcu_tf32', 'csr', BASE))

    tr = by('train')
    assert [(r['model'], r['impl']) for r in tr] == [(m, i) for m in suite.MODELS for i in suite.TRAIN_IMPLS]
    for r in tr:
        assert r['status'] == 'ok', r
        assert r['epoch_ms'] > 0
        if r['impl'] != 'pyg':  # same initial weights and dropout masks as PyG
            assert r['loss_diff_vs_pyg'] < 1e-4 and r['speedup_vs_pyg'] > 0

    md = (out / 'sgt.md').read_text()
    for title in (
        '## SGT statistics',
        '## SpMM',
        '### Where tensor cores lose',
        '## SDDMM',
        "## Warps per CTA and backend='auto'",
        '## SGT build cost',
        '## TC-GNN Table 6',
        '## Training epoch',
    ):
        assert title in md, title
    pytest.importorskip('matplotlib')
    assert (out / 'sgt.png').stat().st_size > 0


def test_accuracy_section_on_cora(tmp_path, cora_root):
    out = tmp_path / 'out'
    rc = suite.main(
        [
            '--out',
            str(out),
            '--device',
            'cpu',
            '--sections',
            'accuracy',
            '--datasets',
            'cora',
            '--epochs',
            '3',
            '--seeds',
            '1',
            '--data-root',
            str(cora_root),
            '--cache-dir',
            str(tmp_path / 'cache'),
        ]
    )
    assert rc == 0
    recs = [r for r in _records(out) if r['kind'] == 'accuracy']
    assert [(r['model'], r['impl']) for r in recs] == [(m, i) for m in suite.MODELS for i in suite.ACC_IMPLS]
    for r in recs:
        assert r['status'] == 'ok', r
        assert r['dataset'] == 'cora' and r['epochs'] == 3 and 0 <= r['best_epoch'] < 3
        assert 0.0 <= r['val'] <= 1.0 and 0.0 <= r['test'] <= 1.0
    md = (out / 'sgt.md').read_text()
    assert '## Test accuracy' in md and md.count('| cora |') == len(recs)
    assert not (cora_root / 'planetoid' / 'Cora' / 'processed').exists()


def test_edge_fraction_graph_names():
    from pyg_tc.bench.graphs import load_graph, resolve_names

    assert resolve_names('tiny@0.5,tiny', []) == ['tiny@0.5', 'tiny']
    full, half = load_graph('tiny', 'cpu'), load_graph('tiny@0.5', 'cpu')
    assert half.num_nodes == full.num_nodes and half.num_edges == full.num_edges // 2
    assert half.name == 'tiny@0.5' and '0.5 of the edges' in half.source
    with pytest.raises(ValueError):
        load_graph('tiny@1.5', 'cpu')
    with pytest.raises(ValueError):
        resolve_names('nosuch@0.5', [])
