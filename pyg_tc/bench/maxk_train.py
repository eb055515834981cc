"""Full-batch training of ReLU and MaxK GNNs on real graphs: test metric and epoch
time per k (the MaxK-GNN paper's Table 5 and Figure 9 on our data).

Per dataset x config (ReLU, then MaxK for each k) x seed: ``torch.manual_seed(seed)``,
``MaxKGNN(conv, in, hidden, out, layers, k, dropout, nonlinear='relu'|'maxk')``, Adam
(weight decay 5e-4 on Planetoid, 0 otherwise, unless ``--weight-decay``), ``epochs``
full-batch epochs of cross-entropy on the train nodes, val and test metrics after
each epoch (eval mode, no grad); reported: test at the first best-val epoch. Epoch
time = forward + backward + step (CUDA events on the GPU, ``perf_counter`` on the
CPU), median over the epochs after the first 5.

Data: Cora, CiteSeer (Planetoid public split, ``NormalizeFeatures`` unless
``--raw-features``, accuracy); Tolokers, Minesweeper (HeterophilousGraphDataset,
split ``seed % 10``, ROC-AUC of P(class 1)); graphs as PyG gives them (undirected).
Each dataset folder is copied from ``--data-root`` to a temporary folder (or
``--cache-dir``) first, because PyG writes ``processed/`` next to ``raw/``.

Outputs in ``--out``: ``maxk_train.jsonl`` (one record per dataset x config x seed),
``maxk_train.md`` (mean ± sample std of the test metric over seeds, median epoch time
and speedup over ReLU, the k=32-within-1-point check) and ``maxk_train.png``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as Fn
from torch import Tensor

# name -> (sub-folder, folder, PyG class, PyG name, metric)
DATASETS: Dict[str, Tuple[str, str, str, str, str]] = {
    'cora': ('planetoid', 'Cora', 'Planetoid', 'Cora', 'accuracy'),
    'citeseer': ('planetoid', 'CiteSeer', 'Planetoid', 'CiteSeer', 'accuracy'),
    'tolokers': ('heterophilous', 'tolokers', 'HeterophilousGraphDataset', 'Tolokers', 'roc_auc'),
    'minesweeper': ('heterophilous', 'minesweeper', 'HeterophilousGraphDataset', 'Minesweeper',
                    'roc_auc'),
}
WARMUP_EPOCHS = 5
CHECK_K, CHECK_POINTS = 32, 1.0
Key = Tuple[str, Optional[int]]  # (dataset, k); k None = ReLU


def log(msg: str) -> None:
    print(msg, flush=True)


def default_data_root() -> Path:
    """``$PYG_TC_SHARED/datasets``, else ``shared/datasets`` beside the checkout,
    else ``.device_data`` in the checkout (the copy on the GPU machine)."""
    repo = Path(__file__).resolve().parents[2]
    env = os.environ.get('PYG_TC_SHARED')
    cands = [Path(env) / 'datasets'] if env else []
    cands += [repo.parent / 'shared' / 'datasets', repo / '.device_data']
    return next((c for c in cands if c.is_dir()), cands[0])


def load_dataset(name: str, data_root: Path, cache_dir: Optional[Path] = None,
                 normalize: bool = True):
    """The ``Data`` of ``name``, loaded from a writable copy of its folder
    (Planetoid features row-normalized unless ``normalize=False``)."""
    import torch_geometric.datasets as D
    import torch_geometric.transforms as T
    sub, folder, cls, pyg_name, _ = DATASETS[name]
    src = Path(data_root) / sub / folder
    if not (src / 'raw').is_dir():
        raise FileNotFoundError(f'{src}/raw not found (set --data-root)')

    def load(root: Path):
        dst = root / folder
        if not dst.exists():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns('processed'))
            for p in [dst, *dst.rglob('*')]:  # the shared copy is read-only
                p.chmod(0o755 if p.is_dir() else 0o644)
        transform = T.NormalizeFeatures() if cls == 'Planetoid' and normalize else None
        return getattr(D, cls)(str(root), pyg_name, transform=transform)[0]

    if cache_dir is not None:
        return load(Path(cache_dir) / sub)
    with tempfile.TemporaryDirectory(prefix='pyg_tc_maxk_') as tmp:
        return load(Path(tmp))


def split_masks(data, seed: int) -> Tuple[Tensor, Tensor, Tensor, int]:
    """(train, val, test) masks and the split; 2-D masks [N, S] use split ``seed % S``."""
    masks = [data.train_mask, data.val_mask, data.test_mask]
    if masks[0].dim() == 1:
        return (*masks, 0)
    split = seed % masks[0].size(1)
    return (*(m[:, split] for m in masks), split)


def roc_auc(score: Tensor, target: Tensor) -> Tensor:
    """Binary ROC-AUC (Mann-Whitney U with average ranks for ties), a 0-d float64
    tensor on ``score``'s device (no host sync); NaN when a class is absent."""
    score, pos = score.detach().double().flatten(), target.flatten().bool()
    _, inv, counts = torch.unique(score, sorted=True, return_inverse=True, return_counts=True)
    first = torch.cumsum(counts, 0) - counts  # 0-based rank of each group's first element
    ranks = (first.double() + (counts.double() + 1) / 2)[inv]  # 1-based average ranks
    n_pos = pos.sum().double()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * (pos.numel() - n_pos))


def evaluate(out: Tensor, y: Tensor, mask: Tensor, metric: str) -> Tensor:
    if metric == 'accuracy':
        return (out[mask].argmax(-1) == y[mask]).double().mean()
    return roc_auc(out[mask].softmax(-1)[:, 1], y[mask])


def build_model(args: argparse.Namespace, in_ch: int, out_ch: int, k: Optional[int]):
    from pyg_tc.nn.models import MaxKGNN
    return MaxKGNN(conv=args.conv, in_channels=in_ch, hidden_channels=args.hidden,
                   out_channels=out_ch, num_layers=args.layers,
                   k=args.hidden if k is None else k, dropout=args.dropout, norm=args.norm,
                   nonlinear='relu' if k is None else 'maxk', backend=args.backend)


def train_one(args: argparse.Namespace, data, metric: str, k: Optional[int], seed: int,
              weight_decay: float) -> dict:
    """One run: val / test at the best-val epoch, median epoch ms, parameter count."""
    dev = data.x.device
    train, val, test, split = split_masks(data, seed)
    torch.manual_seed(seed)
    model = build_model(args, data.num_features, int(data.y.max()) + 1, k).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=weight_decay)
    x, y, ei, cuda = data.x, data.y, data.edge_index, dev.type == 'cuda'
    times: list = []
    vals: List[Tensor] = []
    tests: List[Tensor] = []
    for _ in range(args.epochs):
        model.train()
        if cuda:
            ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ev[0].record()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = Fn.cross_entropy(model(x, ei)[train], y[train])
        loss.backward()
        opt.step()
        if cuda:
            ev[1].record()
        times.append(ev if cuda else (time.perf_counter() - t0) * 1e3)
        model.eval()
        with torch.no_grad():
            out = model(x, ei)
            vals.append(evaluate(out, y, val, metric))
            tests.append(evaluate(out, y, test, metric))
    if cuda:
        torch.cuda.synchronize(dev)
        times = [a.elapsed_time(b) for a, b in times]
    best = int(torch.stack(vals).argmax())
    return dict(metric=metric, split=split, val=float(vals[best]), test=float(tests[best]),
                best_epoch=best, last_loss=float(loss.detach()), weight_decay=weight_decay,
                epoch_ms=statistics.median(times[WARMUP_EPOCHS:] or times),
                params=sum(p.numel() for p in model.parameters()))


# -- reports -----------------------------------------------------------------

def _label(k: Optional[int]) -> str:
    return 'ReLU' if k is None else f'k={k}'


def summarize(records: Sequence[dict]) -> Dict[Key, dict]:
    """(dataset, k) -> mean / sample std (%) of the test metric over seeds, median epoch ms."""
    groups: Dict[Key, List[dict]] = {}
    for r in records:
        groups.setdefault((r['dataset'], r['k']), []).append(r)
    out = {}
    for key, rs in groups.items():
        t = [100 * r['test'] for r in rs]
        out[key] = dict(mean=statistics.fmean(t), std=statistics.stdev(t) if len(t) > 1 else 0.0,
                        ms=statistics.median(r['epoch_ms'] for r in rs))
    return out


def write_markdown(records: Sequence[dict], path: Path, ks: Sequence[int], setup: str) -> None:
    s, cols = summarize(records), [None, *ks]
    metric = {r['dataset']: r['metric'] for r in records}  # in order of appearance
    head = ' | '.join(_label(k) for k in cols) + ' |'
    sep = '|---' * (len(cols) + 2) + '|'
    lines = ['# MaxK-GNN vs ReLU, full-batch training', '', setup, '',
             '## Test metric (%) at the best-val epoch, mean ± std over seeds', '',
             '| dataset | metric | ' + head, sep]
    for d in metric:
        cells = [f"{s[d, k]['mean']:.2f} ± {s[d, k]['std']:.2f}" if (d, k) in s else '-' for k in cols]
        lines.append(f'| {d} | {metric[d]} | ' + ' | '.join(cells) + ' |')
    lines += ['', '## Median epoch time in ms (speedup over ReLU)', '', '| dataset | ' + head, sep[4:]]
    for d in metric:
        base = s[d, None]['ms'] if (d, None) in s else None
        cells = ['-' if (d, k) not in s else f"{s[d, k]['ms']:.2f}" + (
            f" ({base / s[d, k]['ms']:.2f}x)" if k is not None and base else '') for k in cols]
        lines.append(f'| {d} | ' + ' | '.join(cells) + ' |')
    lines += ['', f'## Target: k={CHECK_K} at most {CHECK_POINTS:g} point below ReLU (means)', '']
    for d in metric:
        if (d, None) not in s or (d, CHECK_K) not in s:
            lines.append(f'- {d}: not run (needs ReLU and k={CHECK_K})')
            continue
        a, b = s[d, CHECK_K]['mean'], s[d, None]['mean']
        lines.append(f'- {d}: k={CHECK_K} {a:.2f} vs ReLU {b:.2f} ({a - b:+.2f} points): '
                     + ('met' if a >= b - CHECK_POINTS else 'NOT met'))
    path.write_text('\n'.join(lines) + '\n')


def write_plot(records: Sequence[dict], path: Path, ks: Sequence[int]) -> None:
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        log(f'[maxk] matplotlib not available: {path.name} not written')
        return
    s, metric = summarize(records), {r['dataset']: r['metric'] for r in records}
    fig, axes = plt.subplots(1, len(metric), figsize=(4 * len(metric), 3.3), squeeze=False)
    for ax, d in zip(axes[0], metric):
        kk = [k for k in ks if (d, k) in s]
        ax.errorbar(kk, [s[d, k]['mean'] for k in kk], yerr=[s[d, k]['std'] for k in kk],
                    marker='o', capsize=3, label='MaxK')
        if (d, None) in s:
            m, sd = s[d, None]['mean'], s[d, None]['std']
            ax.axhline(m, color='k', ls='--', lw=1, label='ReLU')
            ax.axhspan(m - sd, m + sd, color='k', alpha=0.1, lw=0)
        ax.set_xscale('log', base=2)
        ax.set_xticks(list(ks), [str(k) for k in ks])
        ax.set(title=d, xlabel='k', ylabel='test ' + {'roc_auc': 'ROC-AUC'}.get(metric[d], metric[d])
               + ' (%)')
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- command line ------------------------------------------------------------

def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
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
    a('--raw-features', dest='normalize', action='store_false',
      help='Planetoid: no NormalizeFeatures (binary bag-of-words features)')
    a('--backend', default='auto')
    a('--data-root', type=Path, default=None, help='folder with planetoid/ and heterophilous/')
    a('--cache-dir', type=Path, default=None, help='keep dataset copies here (else a temp dir)')
    a('--out', type=Path, default=Path('maxk_out'))
    a('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    args = p.parse_args(argv)
    args.datasets = [d.strip().lower() for d in args.datasets.split(',') if d.strip()]
    if any(d not in DATASETS for d in args.datasets):
        p.error(f'unknown dataset in {args.datasets}; known: {", ".join(DATASETS)}')
    args.ks = [int(t) for t in args.ks.split(',') if t.strip()]
    args.seeds = ([int(t) for t in args.seeds.split(',') if t.strip()] if ',' in args.seeds
                  else list(range(int(args.seeds))))
    if args.epochs < 1 or not args.seeds:
        p.error('need --epochs >= 1 and at least one seed')
    args.data_root = args.data_root or default_data_root()
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    dev = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    jsonl, md, png = (args.out / f'maxk_train.{e}' for e in ('jsonl', 'md', 'png'))
    jsonl.write_text('')
    records: List[dict] = []
    setup = (f'{args.conv}, {args.layers} layers, hidden {args.hidden}, dropout {args.dropout}, '
             f'LayerNorm {args.norm}, lr {args.lr}, {args.epochs} epochs, seeds {args.seeds}, '
             f"Planetoid features {'row-normalized' if args.normalize else 'raw'}, {dev}"
             + (f' ({torch.cuda.get_device_name(dev)})' if dev.type == 'cuda' else '')
             + f', torch {torch.__version__}')
    log(f'[maxk] {setup}; data from {args.data_root}')
    for name in args.datasets:
        _, _, cls, _, metric = DATASETS[name]
        data = load_dataset(name, args.data_root, args.cache_dir, args.normalize).to(dev)
        wd = args.weight_decay if args.weight_decay is not None else (
            5e-4 if cls == 'Planetoid' else 0.0)
        log(f'[maxk] {name}: {data.num_nodes} nodes, {data.num_edges} edges, '
            f'{data.num_features} features, metric {metric}, weight decay {wd:g}')
        for k in [None, *args.ks]:
            for seed in args.seeds:
                rec = dict(dataset=name, config='relu' if k is None else 'maxk', k=k, seed=seed,
                           conv=args.conv, hidden=args.hidden, layers=args.layers,
                           epochs=args.epochs, lr=args.lr, dropout=args.dropout, norm=args.norm,
                           normalize_features=args.normalize and cls == 'Planetoid',
                           device=str(dev))
                rec.update(train_one(args, data, metric, k, seed, wd))
                records.append(rec)
                with jsonl.open('a') as f:
                    f.write(json.dumps(rec) + '\n')
                log(f"[maxk] {name} {_label(k)} seed {seed}: val {100 * rec['val']:.2f} test "
                    f"{100 * rec['test']:.2f} ({metric}, epoch {rec['best_epoch']}), "
                    f"{rec['epoch_ms']:.2f} ms/epoch")
        write_markdown(records, md, args.ks, setup)  # rewritten after each dataset
        write_plot(records, png, args.ks)
    log(f'[maxk] wrote {jsonl}, {md.name}, {png.name}\n\n' + md.read_text())
    return 0
