"""The ES-SpMM accuracy suite (benchmarks/suites/es_spmm.py) end to end on the
CPU (the reference path; on Cora: synthetic, and the real one with $PYG_TC_DATA),
and its metric helpers."""

import json

import torch

from benchmarks.suites import es_spmm


def test_es_suite_quick(tmp_path, cora_root):
    es_spmm.main(
        [
            '--out',
            str(tmp_path),
            '--datasets',
            'cora',
            '--models',
            'gcn',
            '--seeds',
            '1',
            '--epochs',
            '3',
            '--caps',
            '4,1000',
            '--samplings',
            'uniform,bucket',
            '--part',
            'accuracy,trainmode',
            '--device',
            'cpu',
            '--data-root',
            str(cora_root),
        ]
    )
    recs = [json.loads(line) for line in open(tmp_path / 'es_spmm.jsonl')]
    graph = next(r for r in recs if r.get('kind') == 'graph')
    assert 0 < graph['kept_4'] < 1 and graph['kept_1000'] == 1.0
    acc = [r for r in recs if r.get('kind') == 'accuracy']
    assert {r['training'] for r in acc} == {'exact', 'trained uniform S=32'}
    for r in acc:
        if r['S'] == 1000:  # nothing capped: the exact result
            assert r['loss_vs_exact'] == 0.0
    rows = es_spmm.table_rows(recs)
    assert {r['sampling'] for r in rows} == {'exact', 'uniform', 'bucket'}
    assert '## Test metric' in open(tmp_path / 'es_spmm.md').read()


def test_micro_f1_top_k():
    y = torch.tensor([[1.0, 0, 1, 0], [0, 1, 0, 0]])
    out = torch.tensor([[0.9, 0.1, 0.8, 0.2], [0.5, 0.4, 0.0, 0.0]])  # node 2 predicts label 0: wrong
    m = torch.tensor([True, True])
    # predicted {0, 2} and {0}; true {0, 2} and {1}: tp 2, |pred| 3, |true| 3
    assert es_spmm.metric_of(out, y, m, 'micro_f1') == 2 * 2 / 6


def test_es_kernels_and_infer_parts(tmp_path):
    """Code path of the timing parts on the CPU (references; not a measurement)."""
    es_spmm.main(
        [
            '--out',
            str(tmp_path),
            '--part',
            'kernels,infer',
            '--graphs',
            'tiny',
            '--caps',
            '4',
            '--widths',
            '8',
            '--models',
            'gcn',
            '--device',
            'cpu',
        ]
    )
    recs = [json.loads(line) for line in open(tmp_path / 'es_spmm.jsonl')]
    ker = [r for r in recs if r.get('kind') == 'kernel']
    assert len(ker) == 1 and 0 < ker[0]['kept'] < 1
    assert all(ker[0][f'{s}_ms'] > 0 for s in ('uniform', 'bucket', 'fastrand', 'pyg_tc_presampled'))
    inf = [r for r in recs if r.get('kind') == 'infer']
    assert len(inf) == 1 and inf[0]['sampled_ms'] > 0
