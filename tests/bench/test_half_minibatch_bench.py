"""The half-precision mini-batch suite (benchmarks/suites/half_minibatch.py)
end to end on the CPU: quick settings, every part's records, the report, and
the accuracy summary's pairing with fp32 over the same seeds."""

import json

from benchmarks.suites import half_minibatch


def test_half_minibatch_suite_quick(tmp_path):
    half_minibatch.main(['--quick', '--parts', 'gather,epoch,gat', '--models', 'sage,gat', '--out', str(tmp_path)])
    recs = [json.loads(line) for line in open(tmp_path / 'half_minibatch.jsonl')]
    assert recs[0]['kind'] == 'env' and not [r for r in recs if r.get('kind') == 'skipped']
    epochs = [r for r in recs if r.get('kind') == 'epoch']
    assert {(r['model'], r['precision'], r['mode']) for r in epochs} == {
        (m, p, mode) for m in ('sage', 'gat') for p in half_minibatch.PRECISIONS for mode in ('eager', 'captured')
    }
    for r in epochs:  # half features: half the bytes of fp32 per batch
        fp32 = next(
            q for q in epochs if q['model'] == r['model'] and q['mode'] == r['mode'] and q['precision'] == 'fp32'
        )
        want = 1.0 if r['precision'] == 'fp32' else 0.5
        assert abs(r['x_mb_per_batch'] / fp32['x_mb_per_batch'] - want) < 0.2
    gathers = {r['storage'] for r in recs if r.get('kind') == 'gather'}
    assert gathers == {'fp32', 'bf16 as stored', 'bf16', 'fp16', 'fp8'}
    gat = [r for r in recs if r.get('kind') == 'gat']
    assert [(r['impl'], r['precision']) for r in gat][0] == ('PyG', 'fp32') and len(gat) == 4
    md = (tmp_path / 'half_minibatch.md').read_text()
    assert '## Epochs' in md and '## Feature gather' in md and '## Full-graph GAT' in md


def test_accuracy_rows_pair_seeds_with_fp32():
    recs = [
        dict(kind='accuracy', dataset='d', model='m', precision=p, seed=s, test=t)
        for p, s, t in [('fp32', 0, 0.50), ('fp32', 1, 0.60), ('bf16', 0, 0.52), ('fp8', 1, 0.40)]
    ]
    rows = {r['precision']: r for r in half_minibatch.acc_rows(recs)}
    assert rows['fp32']['runs'] == 2 and rows['fp32']['within'] == '-'
    assert rows['bf16']['runs'] == 1 and abs(rows['bf16']['diff'] - 2.0) < 1e-9  # against fp32's seed 0 only
    assert rows['bf16']['within'] == 'no'  # one seed: fp32's std over it is 0
    assert abs(rows['fp8']['diff'] + 20.0) < 1e-9 and rows['fp8']['within'] == 'no'
