"""The HalfGNN suite (benchmarks/suites/half.py) end to end on the CPU: quick
settings, every part's records, the report and its accuracy summary (on Cora:
synthetic, and the real one with $PYG_TC_DATA)."""

import json

import pytest

from benchmarks.suites import half


def test_half_suite_quick(tmp_path, cora_root):
    half.main(
        [
            '--out',
            str(tmp_path),
            '--part',
            'train,accuracy',
            '--models',
            'gcn,gin-mean',
            '--acc-models',
            'gcn',
            '--precisions',
            'fp32,bf16',
            '--device',
            'cpu',
            '--epochs',
            '3',
            '--data-root',
            str(cora_root),
        ]
    )
    recs = [json.loads(line) for line in open(tmp_path / 'half.jsonl')]
    assert recs[0]['kind'] == 'env'
    train = [r for r in recs if r.get('kind') == 'train']
    assert {(r['model'], r['impl'], r['precision']) for r in train} == {
        (m, i, p) for m in ('gcn', 'gin-mean') for i in ('pyg_tc', 'pyg') for p in ('fp32', 'bf16')
    }
    assert all(r['status'] == 'ok' and r['finite'] for r in train)
    tc = [r for r in train if r['impl'] == 'pyg_tc' and r['precision'] == 'bf16']
    assert all(r['speedup_vs_tc_fp32'] > 0 and r['speedup_vs_pyg'] > 0 for r in tc)
    acc = [r for r in recs if r.get('kind') == 'accuracy']
    assert {r['precision'] for r in acc} == {'fp32', 'bf16'} and all(r['status'] == 'ok' for r in acc)
    rows = half.acc_rows(recs)
    bf = next(r for r in rows if r['precision'] == 'bf16')
    fp = next(r for r in rows if r['precision'] == 'fp32')
    assert bf['diff'] == pytest.approx(bf['mean'] - fp['mean'])
    md = open(tmp_path / 'half.md').read()
    assert '## 2. Training step' in md and '## 3. Accuracy' in md


def test_acc_rows_target():
    recs = [
        dict(
            kind='accuracy',
            dataset='cora',
            model='gcn',
            precision=p,
            seed=s,
            metric='accuracy',
            status='ok',
            test=t,
            epoch_ms=1.0,
            finite=True,
        )
        for p, ts in (('fp32', (0.80, 0.82)), ('fp16', (0.803, 0.821)), ('bf16', (0.78, 0.80)))
        for s, t in enumerate(ts)
    ]
    rows = {r['precision']: r for r in half.acc_rows(recs)}
    assert rows['fp16']['diff'] == pytest.approx(0.2) and rows['fp16']['within'] == 'yes'
    assert rows['bf16']['diff'] == pytest.approx(-2.0) and rows['bf16']['within'] == 'no'
    assert rows['fp32']['within'] == '-'
