"""The MaxK training suite (benchmarks/suites/cbsr_train.py): a 3-epoch CPU run on
Cora end to end, and the shared ROC-AUC (common.py) against a brute-force pairwise count."""

from __future__ import annotations

import json
import math

import torch

from benchmarks.suites import cbsr_train, common


def test_roc_auc_matches_pairwise_count_with_ties():
    g = torch.Generator().manual_seed(0)
    for n in (2, 7, 50, 301):
        score = torch.randint(0, 6, (n,), generator=g).float() / 5  # many ties
        target = torch.randint(0, 2, (n,), generator=g)
        target[0], target[1] = 0, 1  # both classes present
        pos, neg = score[target == 1], score[target == 0]
        diff = pos[:, None] - neg[None, :]
        brute = ((diff > 0).double() + 0.5 * (diff == 0).double()).mean()
        got = common.roc_auc(score, target)
        assert got.dtype == torch.float64
        assert abs(float(got) - float(brute)) < 1e-12, (n, float(got), float(brute))
    assert float(common.roc_auc(torch.tensor([0.1, 0.2, 0.9]), torch.tensor([0, 0, 1]))) == 1.0
    assert float(common.roc_auc(torch.ones(4), torch.tensor([0, 1, 0, 1]))) == 0.5


def test_cora_run_writes_records_and_tables(tmp_path, cora_root):
    out = tmp_path / 'out'
    rc = cbsr_train.main(
        [
            '--datasets',
            'cora',
            '--epochs',
            '3',
            '--seeds',
            '1',
            '--ks',
            '4',
            '--hidden',
            '16',
            '--layers',
            '2',
            '--device',
            'cpu',
            '--data-root',
            str(cora_root),
            '--cache-dir',
            str(tmp_path / 'cache'),
            '--out',
            str(out),
        ]
    )
    assert rc == 0
    recs = [json.loads(line) for line in (out / 'cbsr_train.jsonl').read_text().splitlines()]
    assert [(r['dataset'], r['config'], r['k'], r['seed']) for r in recs] == [
        ('cora', 'relu', None, 0),
        ('cora', 'maxk', 4, 0),
    ]
    for r in recs:
        assert r['metric'] == 'accuracy' and r['weight_decay'] == 5e-4
        for key in ('val', 'test'):
            assert math.isfinite(r[key]) and 0.0 <= r[key] <= 1.0
        assert r['epoch_ms'] > 0 and r['params'] > 0 and 0 <= r['best_epoch'] < 3
    md = (out / 'cbsr_train.md').read_text()
    assert '| dataset | metric | ReLU | k=4 |' in md
    assert md.count('| cora |') == 2  # metric table and epoch-time table
    assert '- cora: not run (needs ReLU and k=32)' in md
    assert not (cora_root / 'planetoid' / 'Cora' / 'processed').exists()
