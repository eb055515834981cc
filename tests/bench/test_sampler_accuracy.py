"""The sampler_accuracy suite (benchmarks/suites/sampler_accuracy.py): the within-one-standard-deviation rule, the
comparison records, and a run end to end on its synthetic graph (seconds)."""

import json
import statistics

import pytest


@pytest.fixture(scope='module')
def sa():
    from benchmarks.suites import sampler_accuracy

    return sampler_accuracy


def test_within_one_std_uses_the_smaller_std(sa):
    a, b = [80.0, 82.0, 84.0], [81.0, 81.5, 82.0]  # std 2 and 0.5
    c = sa.within_one_std(a, b)
    assert c['mean_a'] == pytest.approx(82.0) and c['mean_b'] == pytest.approx(81.5)
    assert c['std_a'] == pytest.approx(statistics.stdev(a)) and c['tol'] == pytest.approx(0.5)
    assert c['diff'] == pytest.approx(-0.5) and c['within']  # exactly one (smaller) std apart
    c = sa.within_one_std(a, [x + 0.1 for x in b])  # 0.4 apart
    assert c['within']
    c = sa.within_one_std(a, [x - 0.1 for x in b])  # 0.6 apart: within a's std, not b's
    assert not c['within'] and c['diff'] == pytest.approx(-0.6)
    assert sa.within_one_std([1.0, 1.0], [1.0, 1.0])['within']
    assert not sa.within_one_std([1.0, 1.0], [1.0, 3.0])['within']  # the smaller std is 0
    assert sa.mean_std([5.0]) == (5.0, 0.0)


def test_compare_record(sa):
    runs = [
        dict(kind='run', graph='g', model='sage', sampler=s, seed=i, metric='accuracy', test=t)
        for s, ts in (('pyg', [0.30, 0.32, 0.34]), ('pyg_tc', [0.31, 0.33, 0.35]))
        for i, t in enumerate(ts)
    ]
    runs.append(dict(kind='run', graph='g', model='gat', sampler='pyg', seed=0, metric='accuracy', test=0.9))
    r = sa.compare(runs, 'g', 'sage')
    assert r['kind'] == 'compare' and r['seeds'] == 3 and r['metric'] == 'accuracy'
    assert r['pyg_mean'] == pytest.approx(32.0) and r['pyg_tc_mean'] == pytest.approx(33.0)
    assert r['pyg_std'] == pytest.approx(2.0) and r['diff'] == pytest.approx(1.0) and r['within']
    with pytest.raises(RuntimeError, match='both samplers'):
        sa.compare(runs, 'g', 'gat')
    # the figure: the difference in units of the smaller std
    ratios = [x['ratio'] for x in sa._gaps([r, dict(r, diff=0.0, tol=0.0), dict(r, diff=0.5, tol=0.0)])]
    assert ratios == [pytest.approx(0.5), 0.0, float('inf')]


def test_bad_arguments(sa):
    for argv in (['--graphs', 'nope'], ['--models', 'gcn'], ['--samplers', 'dgl'], ['--sage-fanout', '5,5']):
        with pytest.raises(SystemExit):
            sa.parse_args(argv)


def test_end_to_end_on_the_synthetic_graph(sa, tmp_path):
    from torch_geometric.typing import WITH_PYG_LIB, WITH_TORCH_SPARSE

    samplers = ['pyg', 'pyg_tc'] if WITH_PYG_LIB or WITH_TORCH_SPARSE else ['pyg_tc']
    out = tmp_path / 'sa'
    assert (
        sa.main(
            [
                '--graphs',
                'tiny',
                '--seeds',
                '2',
                '--epochs',
                '2',
                '--batch-size',
                '128',
                '--samplers',
                ','.join(samplers),
                '--out',
                str(out),
                '--name',
                'acc',
            ]
        )
        == 0
    )
    recs = [json.loads(line) for line in open(out / 'acc.jsonl')]
    assert recs[0]['kind'] == 'env' and recs[-1]['kind'] == 'summary'
    runs = [r for r in recs if r.get('kind') == 'run']
    assert sorted((r['model'], r['sampler'], r['seed']) for r in runs) == sorted(
        (m, s, i) for m in ('sage', 'gat') for s in samplers for i in (0, 1)
    )
    for r in runs:
        assert r['metric'] == 'roc_auc' and 0.5 < r['test'] <= 1 and 1 <= r['best_epoch'] <= 2
        assert r['edges_per_batch'] > 0
    md = (out / 'acc.md').read_text()
    assert md.startswith("# Accuracy with pyg_tc's sampler against PyG's\n\n| run | |\n|---|---|\n")
    compares = [r for r in recs if r.get('kind') == 'compare']
    if samplers == ['pyg_tc']:
        assert not compares
        return
    assert [(r['graph'], r['model']) for r in compares] == [('tiny', 'sage'), ('tiny', 'gat')]
    for r in compares:
        tests = {s: [100 * q['test'] for q in runs if q['model'] == r['model'] and q['sampler'] == s] for s in samplers}
        assert r['pyg_tc_mean'] == pytest.approx(statistics.fmean(tests['pyg_tc']))
        assert r['within'] == (abs(r['diff']) <= r['tol'])
        assert f"| tiny | {r['model']} | ROC AUC | " in md
    assert recs[-1]['summary'] == dict(cases=2, within_one_std=sum(r['within'] for r in compares))
    assert (out / 'acc.png').is_file()
    # --render rewrites the same report from the records
    assert sa.main(['--render', str(out / 'acc.jsonl'), '--out', str(tmp_path / 'again'), '--name', 'acc']) == 0
    assert (tmp_path / 'again' / 'acc.md').read_text() == md
    assert (tmp_path / 'again' / 'acc.png').is_file()
