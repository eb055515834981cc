"""Full-batch training of ReLU and MaxK GNNs on real graphs: test metric and epoch
time per k (the MaxK-GNN paper's Table 5 and Figure 9 on our data; protocol and
results of record in ``docs/cbsr.md``).

Per dataset x config (ReLU, then MaxK for each k) x seed: ``torch.manual_seed(seed)``,
``MaxKGNN(conv, in, hidden, out, layers, k, dropout, nonlinear='relu'|'maxk')``, Adam
(weight decay 5e-4 on Planetoid, 0 otherwise, unless ``--weight-decay``), test metric
at the first best-val epoch (:func:`.common.fit`). Cora, CiteSeer: Planetoid public split,
``NormalizeFeatures`` unless ``--raw-features``, accuracy; Tolokers, Minesweeper:
split ``seed % 10``, ROC-AUC of P(class 1). Writes ``cbsr_train.jsonl`` (one record
per dataset x config x seed), ``cbsr_train.md`` and ``cbsr_train.png`` in ``--out``
(``pyg-tc bench cbsr_train``: the CBSR family's training suite).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, Text, log

from . import common
from .common import DATASETS, default_data_root, fit, split_masks

CHECK_K, CHECK_POINTS = 32, 1.0
Key = Tuple[str, Optional[int]]  # (dataset, k); k None = ReLU


def build_model(args: argparse.Namespace, in_ch: int, out_ch: int, k: Optional[int]):
    """MaxKGNN with the run's layout (``k=None``: the ReLU model)."""
    from pyg_tc.nn.models import MaxKGNN

    return MaxKGNN(
        conv=args.conv,
        in_channels=in_ch,
        hidden_channels=args.hidden,
        out_channels=out_ch,
        num_layers=args.layers,
        k=args.hidden if k is None else k,
        dropout=args.dropout,
        norm=args.norm,
        nonlinear='relu' if k is None else 'maxk',
        backend=args.backend,
    )


def train_one(args: argparse.Namespace, data, metric: str, k: Optional[int], seed: int, weight_decay: float) -> dict:
    """One run: val / test at the best-val epoch, median epoch ms, parameter count."""
    train, val, test, split = split_masks(data, seed)
    torch.manual_seed(seed)
    model = build_model(args, data.num_features, int(data.y.max()) + 1, k).to(data.x.device)
    return dict(
        metric=metric,
        split=split,
        weight_decay=weight_decay,
        params=sum(p.numel() for p in model.parameters()),
        **fit(model, data, (train, val, test), metric, args.epochs, args.lr, weight_decay),
    )


# -- report ------------------------------------------------------------------


def _label(k: Optional[int]) -> str:
    return 'ReLU' if k is None else f'k={k}'


def summarize(records: Sequence[dict]) -> Dict[Key, dict]:
    """(dataset, k) -> mean / sample std (%) of the test metric over seeds, median epoch ms."""
    groups: Dict[Key, List[dict]] = {}
    for r in records:
        if 'test' in r:
            groups.setdefault((r['dataset'], r['k']), []).append(r)
    out = {}
    for key, rs in groups.items():
        t = [100 * r['test'] for r in rs]
        out[key] = dict(
            dataset=key[0],
            k=key[1],
            mean=statistics.fmean(t),
            std=statistics.stdev(t) if len(t) > 1 else 0.0,
            ms=statistics.median(r['epoch_ms'] for r in rs),
        )
    return out


def _by_dataset(records: List[dict]) -> List[dict]:
    """One row per dataset: its metric and, per config (ReLU, k=...), 'acc <config>'
    (mean ± std) and 'ms <config>' (median epoch ms and speedup over ReLU)."""
    s, rows = summarize(records), []
    for d, m in {r['dataset']: r['metric'] for r in records if 'test' in r}.items():  # in order of appearance
        row, base = dict(dataset=d, metric=m), s.get((d, None), {}).get('ms')
        for (dd, k), v in s.items():
            if dd == d:
                row[f'acc {_label(k)}'] = f"{v['mean']:.2f} ± {v['std']:.2f}"
                row[f'ms {_label(k)}'] = f"{v['ms']:.2f}" + (
                    f" ({base / v['ms']:.2f}x)" if k is not None and base else ''
                )
        rows.append(row)
    return rows


def _check(records: List[dict]) -> List[str]:
    s = summarize(records)
    lines = []
    for d in dict.fromkeys(r['dataset'] for r in records if 'test' in r):
        if (d, None) not in s or (d, CHECK_K) not in s:
            lines.append(f'- {d}: not run (needs ReLU and k={CHECK_K})')
            continue
        a, b = s[d, CHECK_K]['mean'], s[d, None]['mean']
        lines.append(
            f'- {d}: k={CHECK_K} {a:.2f} vs ReLU {b:.2f} ({a - b:+.2f} points): '
            + ('met' if a >= b - CHECK_POINTS else 'NOT met')
        )
    return lines


def _panels(records: List[dict]) -> List[Panel]:
    s = summarize(records)
    metric = {r['dataset']: r['metric'] for r in records if 'test' in r}
    out = []
    for d, m in metric.items():
        relu = s.get((d, None))
        ks = sorted(k for dd, k in s if dd == d and k is not None)
        out.append(
            Panel(
                lambda _, d=d: [v for (dd, k), v in s.items() if dd == d and k is not None],
                'k',
                'mean',
                style='line',
                label='MaxK',
                yerr='std',
                logx=2,
                xticks=ks,
                title=d,
                xlabel='k',
                ylabel='test ' + {'roc_auc': 'ROC-AUC'}.get(m, m) + ' (%)',
                hline=relu and relu['mean'],
                hline_label=relu and 'ReLU',
                band=relu and (relu['mean'] - relu['std'], relu['mean'] + relu['std']),
            )
        )
    return out


def reporter(out: Path, setup: str, ks: Sequence[int]) -> Reporter:
    """The suite's outputs: cbsr_train.jsonl, cbsr_train.md (metric and time per k), cbsr_train.png."""
    cols = lambda what, *first: (
        [Col(c, c) for c in ('dataset', *first)]
        + [  # noqa: E731
            Col(_label(k), f'{what} {_label(k)}') for k in (None, *ks)
        ]
    )
    return Reporter(
        str(out),
        'cbsr_train.jsonl',
        'cbsr_train.md',
        'MaxK-GNN vs ReLU, full-batch training',
        sections=[
            Table(
                '## Test metric (%) at the best-val epoch, mean ± std over seeds', _by_dataset, cols('acc', 'metric')
            ),
            Table('## Median epoch time in ms (speedup over ReLU)', _by_dataset, cols('ms')),
            Text(f'## Target: k={CHECK_K} at most {CHECK_POINTS:g} point below ReLU (means)', _check),
        ],
        figures=[Figure('cbsr_train.png', _panels, ncols=4)],
        header=lambda env, recs: [setup],
        tag='cbsr_train',
    )


# -- command line ------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> argparse.Namespace:
    """The command line, with datasets, ks and seeds parsed."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n\n')[0])
    a = p.add_argument
    a('--datasets', default='cora,citeseer,tolokers,minesweeper', help=', '.join(DATASETS))
    a('--conv', default='sage', choices=['sage', 'gcn', 'gin'])
    a('--ks', default='4,8,16,32,64', help='MaxK k values (k >= hidden keeps everything)')
    a('--seeds', default='5', help='number of seeds (0..n-1), or a comma list')
    a('--epochs', type=int, default=300)
    a('--hidden', type=int, default=256)
    a('--layers', type=int, default=3)
    a('--dropout', type=float, default=0.5)
    a('--lr', type=float, default=0.01)
    a('--weight-decay', type=float, default=None, help='default: 5e-4 Planetoid, 0 otherwise')
    a('--no-norm', dest='norm', action='store_false', help='no LayerNorm after each conv')
    a(
        '--raw-features',
        dest='normalize',
        action='store_false',
        help='Planetoid: no NormalizeFeatures (binary bag-of-words features)',
    )
    a('--backend', default='auto')
    a('--data-root', type=Path, default=None, help='folder with planetoid/ and heterophilous/ (default $PYG_TC_DATA)')
    a('--cache-dir', type=Path, default=None, help='keep dataset copies here (else a temp dir)')
    a('--out', type=Path, default=Path('cbsr_train_out'))
    a('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    args = p.parse_args(argv)
    args.datasets = [d.strip().lower() for d in args.datasets.split(',') if d.strip()]
    if any(d not in DATASETS for d in args.datasets):
        p.error(f'unknown dataset in {args.datasets}; known: {", ".join(DATASETS)}')
    args.ks = [int(t) for t in args.ks.split(',') if t.strip()]
    args.seeds = (
        [int(t) for t in args.seeds.split(',') if t.strip()] if ',' in args.seeds else list(range(int(args.seeds)))
    )
    if args.epochs < 1 or not args.seeds:
        p.error('need --epochs >= 1 and at least one seed')
    args.data_root = args.data_root or default_data_root()
    if args.data_root is None:
        p.error('no datasets folder: pass --data-root DIR or set PYG_TC_DATA')
    return args


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Command line: see the module docstring; returns the exit code."""
    args = parse_args(argv, prog)
    dev = torch.device(args.device)
    setup = (
        f'{args.conv}, {args.layers} layers, hidden {args.hidden}, dropout {args.dropout}, '
        f'LayerNorm {args.norm}, lr {args.lr}, {args.epochs} epochs, seeds {args.seeds}, '
        f"Planetoid features {'row-normalized' if args.normalize else 'raw'}, {dev}"
        + (f' ({torch.cuda.get_device_name(dev)})' if dev.type == 'cuda' else '')
        + f', torch {torch.__version__}'
    )
    log(f'[cbsr_train] {setup}; data from {args.data_root}')
    rep = reporter(args.out, setup, args.ks)

    def dataset(name: str) -> Iterator[dict]:
        _, _, cls, _, metric = DATASETS[name]
        data = common.load_dataset(name, args.data_root, args.cache_dir, args.normalize).to(dev)
        wd = args.weight_decay if args.weight_decay is not None else (5e-4 if cls == 'Planetoid' else 0.0)
        log(
            f'[cbsr_train] {name}: {data.num_nodes} nodes, {data.num_edges} edges, '
            f'{data.num_features} features, metric {metric}, weight decay {wd:g}'
        )
        for k in [None, *args.ks]:
            for seed in args.seeds:
                rec = dict(
                    dataset=name,
                    config='relu' if k is None else 'maxk',
                    k=k,
                    seed=seed,
                    conv=args.conv,
                    hidden=args.hidden,
                    layers=args.layers,
                    epochs=args.epochs,
                    lr=args.lr,
                    dropout=args.dropout,
                    norm=args.norm,
                    normalize_features=args.normalize and cls == 'Planetoid',
                    device=str(dev),
                )
                rec.update(train_one(args, data, metric, k, seed, wd))
                yield rec

    paths = rep.run([('dataset', n, lambda n=n: dataset(n)) for n in args.datasets], dev)
    print(open(paths['markdown']).read())
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
