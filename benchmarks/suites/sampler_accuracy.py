"""Accuracy with pyg_tc's neighbour sampler against PyG's: the same models,
trained on mini-batches from either sampler, reach the same test metric
(JSON lines + markdown + PNG).

Per graph x model x seed x sampler: ``torch.manual_seed(seed)``, the model
(PyG's layers for both samplers, so that only the sampler differs), Adam;
each epoch runs over the training nodes of the dataset's first split in
shuffled mini-batches of ``--batch-size`` seeds, sampled either by PyG's
``NeighborLoader`` (pyg-lib) or by ``pyg_tc.loader.NeighborLoader``; after
each epoch, full-neighbourhood inference on the whole graph gives the
validation and test metric; a run reports the test metric at its first best
validation epoch. Metrics: ROC AUC of P(class 1) on the binary graphs
(Tolokers, Minesweeper), accuracy otherwise (Actor, Cora, CiteSeer).

Models: ``sage``: 3 x ``SAGEConv``, hidden 64, fan-out ``--sage-fanout``
(15,10,5); ``gat``: 2 x ``GATConv`` (4 heads of 16, then 1 head), fan-out
``--gat-fanout`` (10,10); ReLU and dropout ``--dropout`` between layers.

Per graph x model, the comparison: mean ± standard deviation (sample, over
seeds) of each sampler's test metric, and whether the means differ by at most
the smaller of the two standard deviations ("within one standard deviation").

Without CUDA, ``--device cpu`` runs pyg_tc's sampler as its pure-PyTorch
reference, which gives the same batches as the GPU kernel bit for bit.

Run: ``pyg-tc bench sampler_accuracy --data $PYG_TC_DATA --out DIR
[--graphs tolokers,minesweeper,actor] [--models sage,gat] [--seeds 5]
[--epochs 30]``; ``--graphs tiny`` is a synthetic graph that needs no data;
``--render JSONL --out DIR --name NAME`` rewrites the outputs from the records.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as Fn
from torch import Tensor

from pyg_tc.bench.models import Net
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, Text, environment, log

from .common import DATASETS, evaluate, load_dataset

#: sampler key -> label in the records and the report
SAMPLERS = {'pyg': "PyG's NeighborLoader", 'pyg_tc': 'pyg_tc NeighborLoader'}
METRIC_NAMES = {'roc_auc': 'ROC AUC', 'accuracy': 'accuracy'}


# -- data ----------------------------------------------------------------------


def tiny_graph(seed: int = 0, num_nodes: int = 600):
    """A small synthetic binary task: a feature carries the label with noise,
    80% of each node's 8 in-edges come from its own class; two random
    50 / 25 / 25 splits as 2-D masks ``[N, 2]`` (like the real datasets)."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    N = num_nodes
    y = torch.randint(0, 2, (N,), generator=g)
    x = torch.randn(N, 8, generator=g)
    x[:, 0] += y.float()
    dst = torch.arange(N).repeat_interleave(8)
    same = torch.rand(dst.numel(), generator=g) < 0.8
    by_class = [(y == c).nonzero().view(-1) for c in (0, 1)]
    src = torch.empty_like(dst)
    for c in (0, 1):
        for want, pool in ((same, by_class[c]), (~same, by_class[1 - c])):
            m = (y[dst] == c) & want
            src[m] = pool[torch.randint(0, pool.numel(), (int(m.sum()),), generator=g)]
    masks = []
    for _ in range(2):
        perm = torch.randperm(N, generator=g)
        m = torch.zeros(3, N, dtype=torch.bool)
        m[0, perm[: N // 2]], m[1, perm[N // 2 : 3 * N // 4]], m[2, perm[3 * N // 4 :]] = True, True, True
        masks.append(m)
    m = torch.stack(masks, -1)  # [3, N, 2]
    return Data(
        x=x, y=y, edge_index=torch.stack([src, dst]), num_nodes=N, train_mask=m[0], val_mask=m[1], test_mask=m[2]
    )


def load(name: str, data_dir: Optional[Path]):
    """``(data, metric)``: ``tiny`` is synthetic, the others come from a temporary copy of ``data_dir``."""
    if name == 'tiny':
        return tiny_graph(), 'roc_auc'
    if data_dir is None:
        raise FileNotFoundError(f'{name}: no data folder (pass --data or set PYG_TC_DATA)')
    return load_dataset(name, data_dir), DATASETS[name][4]


def first_split(data) -> Tuple[Tensor, Tensor, Tensor]:
    """The (train, val, test) masks of the dataset's first split."""
    return tuple(m[:, 0] if m.dim() == 2 else m for m in (data.train_mask, data.val_mask, data.test_mask))


# -- model and training ------------------------------------------------------------


def make_model(kind: str, in_channels: int, out_channels: int, dropout: float) -> Net:
    """PyG's layers: ``sage`` (3 x SAGEConv, hidden 64) or ``gat`` (GATConv
    with 4 heads of 16, then one head); ReLU and dropout in between."""
    import torch_geometric.nn as pyg_nn

    if kind not in ('sage', 'gat'):
        raise ValueError(f'unknown model {kind!r}; known: sage, gat')
    dims = [in_channels, 64, 64, out_channels] if kind == 'sage' else [in_channels, 64, out_channels]
    return Net(pyg_nn, kind, dims, dropout, heads=4, last_heads=1, input_dropout=False)


def make_loader(sampler: str, data, fanout: List[int], train: Tensor, batch_size: int):
    """The training loader of ``sampler`` ('pyg': PyG's NeighborLoader, 'pyg_tc': pyg_tc's sampler, on
    the CPU without CUDA, where its reference runs)."""
    from torch_geometric.data import Data

    bare = Data(x=data.x, y=data.y, edge_index=data.edge_index, num_nodes=data.num_nodes)
    kw = dict(input_nodes=train.nonzero().view(-1), batch_size=batch_size, shuffle=True)
    if sampler == 'pyg':
        from torch_geometric.loader import NeighborLoader

        return NeighborLoader(bare, fanout, **kw)
    from pyg_tc.loader import NeighborLoader

    if torch.cuda.is_available():
        return NeighborLoader(bare, fanout, device='cuda', **kw)
    return NeighborLoader(bare, fanout, device='cpu', cpu_sampler='reference', **kw)


def train_run(data, metric: str, kind: str, sampler: str, seed: int, a) -> dict:
    """One run: the val / test metric at the first best-val epoch, the
    sampled edges per batch and the training time."""
    train, val, test = first_split(data)
    torch.manual_seed(seed)
    model = make_model(kind, data.num_features, int(data.y.max()) + 1, a.dropout)
    loader = make_loader(sampler, data, a.fanout[kind], train, a.batch_size)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    best, edges, batches, t_train = None, 0, 0, 0.0
    for epoch in range(1, a.epochs + 1):
        model.train()
        t0 = time.perf_counter()
        for b in loader:
            opt.zero_grad()
            loss = Fn.cross_entropy(model(b.x, b.edge_index)[: b.batch_size], b.y[: b.batch_size])
            loss.backward()
            opt.step()
            edges += b.edge_index.size(1)
            batches += 1
        t_train += time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            out = model(data.x, data.edge_index)
        v, t = float(evaluate(out, data.y, val, metric)), float(evaluate(out, data.y, test, metric))
        if best is None or v > best[0]:
            best = (v, t, epoch)
    return dict(
        metric=metric,
        val=best[0],
        test=best[1],
        best_epoch=best[2],
        epochs=a.epochs,
        edges_per_batch=edges / batches,
        train_s=t_train,
    )


# -- comparison -------------------------------------------------------------------


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def within_one_std(a: Sequence[float], b: Sequence[float]) -> dict:
    """Means and standard deviations of ``a`` and ``b``, the difference of
    the means (b - a), the smaller standard deviation, and whether the means
    differ by at most that (``within``)."""
    (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
    tol = min(sa, sb)
    return dict(mean_a=ma, std_a=sa, mean_b=mb, std_b=sb, diff=mb - ma, tol=tol, within=abs(mb - ma) <= tol)


def compare(records: List[dict], graph: str, model: str) -> dict:
    """The comparison record of (graph, model) from its runs (test metric in %)."""
    runs = [r for r in records if r.get('kind') == 'run' and r['graph'] == graph and r['model'] == model]
    tests = {s: [100 * r['test'] for r in runs if r['sampler'] == s] for s in SAMPLERS}
    if not all(tests.values()):
        raise RuntimeError(
            f'{graph} {model}: runs of both samplers needed, got '
            + ', '.join(f'{s}: {len(v)}' for s, v in tests.items())
        )
    c = within_one_std(tests['pyg'], tests['pyg_tc'])
    return dict(
        kind='compare',
        graph=graph,
        model=model,
        metric=runs[0]['metric'],
        seeds=len(tests['pyg']),
        pyg_mean=c['mean_a'],
        pyg_std=c['std_a'],
        pyg_tc_mean=c['mean_b'],
        pyg_tc_std=c['std_b'],
        diff=c['diff'],
        tol=c['tol'],
        within=c['within'],
    )


# -- report ----------------------------------------------------------------------


def _pm(m: float, s: float) -> str:
    return f'{m:.2f} ± {s:.2f}'


def _gaps(records: List[dict]) -> List[dict]:
    """Per (graph, model): the difference of the means in units of the smaller std (within one std: <= 1)."""
    return [
        dict(
            case=f"{r['graph']} {r['model']}",
            ratio=abs(r['diff']) / r['tol'] if r['tol'] else 0.0 if r['diff'] == 0 else math.inf,
        )
        for r in records
        if r.get('kind') == 'compare'
    ]


def _conclusion(records: List[dict]) -> List[str]:
    cs = [r for r in records if r.get('kind') == 'compare']
    if not cs:
        return []
    n = sum(r['within'] for r in cs)
    lines = [f'{n} of {len(cs)} (graph, model) cases have their means within one standard deviation.']
    lines += [
        f"- {r['graph']} {r['model']}: the means differ by {abs(r['diff']):.2f} points, more than the "
        f"smaller std {r['tol']:.2f}"
        for r in cs
        if not r['within']
    ]
    return lines


def summary(records: List[dict]) -> dict:
    """Cases compared and cases within one standard deviation."""
    cs = [r for r in records if r.get('kind') == 'compare']
    return dict(cases=len(cs), within_one_std=sum(r['within'] for r in cs))


def _setup(env: dict) -> List[str]:
    """The lines under the run block: samplers, training, evaluation, command (from the env record)."""
    where = (
        f"on {env['gpu']}"
        if env['device'] == 'cuda'
        else "on the CPU: pyg_tc's sampler ran as its pure-PyTorch reference (`device='cpu'`), which gives "
        "the same batches as its GPU kernel bit for bit"
    )
    threads = env.get('threads')
    return [
        f"- Samplers: PyG's `NeighborLoader` ({env['pyg_backend']}) and `pyg_tc.loader.NeighborLoader`, "
        f"{where}. Layers: PyG's (`torch_geometric.nn`) for both.",
        f"- Training: the first split of each dataset; {env['epochs']} epochs of mini-batches of "
        f"{env['batch_size']} shuffled training nodes; Adam, lr {env['lr']:g}, dropout {env['dropout']:g}; "
        f"SAGE: 3 layers, hidden 64, fan-out {env['fanout']['sage']}; GAT: 2 layers, 4 heads of 16, fan-out "
        f"{env['fanout']['gat']}. Seeds {env['seeds']}: the same initial weights for both samplers.",
        '- Evaluation: full-neighbourhood inference on the whole graph after each epoch; the test metric at '
        'the first best validation epoch (ROC AUC on the binary graphs, accuracy otherwise), in %.',
        f"- Command: `{env['command']}`" + (f' ({threads} thread{"s" * (threads > 1)})' if threads else '') + '.',
    ]


def reporter(a, env: dict) -> Reporter:
    """The outputs: ``<name>.jsonl``, ``<name>.md``, ``<name>.png`` in ``--out``."""
    return Reporter(
        str(a.out),
        f'{a.name}.jsonl',
        f'{a.name}.md',
        "Accuracy with pyg_tc's sampler against PyG's",
        env=env,
        env_mode='first',
        tag='sampler_accuracy',
        summary=summary,
        header=lambda env, recs: _setup(env),
        sections=[
            Table(
                '## Test metric (%), mean ± std over seeds',
                'compare',
                [
                    Col('graph', 'graph'),
                    Col('model', 'model'),
                    Col('metric', lambda r: METRIC_NAMES.get(r['metric'], r['metric'])),
                    Col("PyG's sampler", lambda r: _pm(r['pyg_mean'], r['pyg_std'])),
                    Col("pyg_tc's sampler", lambda r: _pm(r['pyg_tc_mean'], r['pyg_tc_std'])),
                    Col('difference', 'diff', '+.2f'),
                    Col('smaller std', 'tol', '.2f'),
                    Col('within one std', lambda r: 'yes' if r['within'] else 'no', bold=True),
                ],
            ),
            Text('## Conclusion', _conclusion),
            Table(
                '## Runs',
                'run',
                note=lambda rows: (
                    'train s: the training epochs\' time'
                    + (
                        " on the CPU, where pyg_tc's sampler runs its pure-PyTorch reference (a check of "
                        'its batches, not of its speed)'
                        if env['device'] == 'cpu'
                        else ''
                    )
                    + '.'
                ),
                cols=[
                    Col('graph', 'graph'),
                    Col('model', 'model'),
                    Col('sampler', lambda r: SAMPLERS[r['sampler']]),
                    Col('seed', 'seed'),
                    Col('val %', lambda r: 100 * r['val'], '.2f'),
                    Col('test %', lambda r: 100 * r['test'], '.2f'),
                    Col('best epoch', 'best_epoch'),
                    Col('edges / batch', 'edges_per_batch', ',.0f'),
                    Col('train s', 'train_s', '.1f'),
                ],
            ),
        ],
        figures=[
            Figure(
                f'{a.name}.png',
                [
                    Panel(
                        _gaps,
                        'case',
                        'ratio',
                        hline=1.0,
                        hline_label='one std',
                        ylabel='|difference| / std',
                        title="test metric: difference of the samplers' means over the smaller std "
                        '(within one std: at most 1)',
                    )
                ],
            )
        ],
    )


# -- command line ------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> argparse.Namespace:
    """The command line, parsed and checked."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n\n')[0])
    a = p.add_argument
    a(
        '--data',
        type=Path,
        default=os.environ.get('PYG_TC_DATA') or None,
        help='datasets folder (heterophilous/, actor/, planetoid/); default: $PYG_TC_DATA',
    )
    a('--graphs', default='tolokers,minesweeper,actor', help=', '.join([*DATASETS, 'tiny']))
    a('--models', default='sage,gat')
    a('--samplers', default='pyg,pyg_tc', help='pyg (PyG\'s NeighborLoader), pyg_tc')
    a('--seeds', type=int, default=5, help='seeds 0 .. n-1')
    a('--epochs', type=int, default=30)
    a('--batch-size', type=int, default=512)
    a('--lr', type=float, default=0.01)
    a('--dropout', type=float, default=0.2)
    a('--sage-fanout', default='15,10,5')
    a('--gat-fanout', default='10,10')
    a('--threads', type=int, default=None, help='torch.set_num_threads (default: torch\'s)')
    a('--out', type=Path, default=Path('sampler_accuracy_out'))
    a('--name', default='sampler_accuracy', help='the outputs\' file name (without extension)')
    a('--render', type=Path, metavar='JSONL', help='only rewrite the outputs from these records')
    args = p.parse_args(argv)
    args.command = shlex.join(
        [*(prog or 'python -m benchmarks.suites.sampler_accuracy').split(), *(sys.argv[1:] if argv is None else argv)]
    )
    args.graphs = [g.strip().lower() for g in args.graphs.split(',') if g.strip()]
    args.models = [m.strip() for m in args.models.split(',') if m.strip()]
    args.samplers = [s.strip() for s in args.samplers.split(',') if s.strip()]
    if bad := [g for g in args.graphs if g not in DATASETS and g != 'tiny']:
        p.error(f'unknown graph {bad[0]!r}; known: {", ".join([*DATASETS, "tiny"])}')
    if bad := [m for m in args.models if m not in ('sage', 'gat')]:
        p.error(f'unknown model {bad[0]!r}; known: sage, gat')
    if bad := [s for s in args.samplers if s not in SAMPLERS]:
        p.error(f'unknown sampler {bad[0]!r}; known: {", ".join(SAMPLERS)}')
    if args.seeds < 1 or args.epochs < 1 or args.batch_size < 1:
        p.error('need --seeds, --epochs and --batch-size >= 1')
    args.seeds = list(range(args.seeds))
    args.fanout = {
        'sage': [int(k) for k in args.sage_fanout.split(',')],
        'gat': [int(k) for k in args.gat_fanout.split(',')],
    }
    if len(args.fanout['sage']) != 3 or len(args.fanout['gat']) != 2:
        p.error('--sage-fanout needs 3 hops and --gat-fanout 2 (one per layer)')
    return args


def pyg_backend() -> str:
    """The library behind PyG's ``NeighborLoader`` here, with its version."""
    import torch_geometric.typing as tgt

    if tgt.WITH_PYG_LIB:
        import pyg_lib

        return f'pyg-lib {pyg_lib.__version__}'
    if tgt.WITH_TORCH_SPARSE:
        import torch_sparse

        return f'torch_sparse {torch_sparse.__version__}'
    return 'none'


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Command line: see the module docstring; returns the exit code."""
    a = parse_args(argv, prog)
    if a.render:
        records = [json.loads(line) for line in open(a.render) if line.strip()]
        env = next(r for r in records if r.get('kind') == 'env')
        rep = reporter(a, {k: v for k, v in env.items() if k != 'kind'})
        rep.records = [r for r in records if r.get('kind') != 'summary']
        paths = rep.write()
        log('[sampler_accuracy] wrote ' + ', '.join(paths.values()))
        return 0
    if a.threads:
        torch.set_num_threads(a.threads)
    backend = pyg_backend()
    if 'pyg' in a.samplers and backend == 'none':
        log("[sampler_accuracy] PyG's NeighborLoader needs pyg-lib (or torch_sparse): not installed")
        return 2
    dev = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    env = environment(
        dev,
        pyg_backend=backend,
        threads=torch.get_num_threads(),
        graphs=a.graphs,
        models=a.models,
        seeds=a.seeds,
        epochs=a.epochs,
        batch_size=a.batch_size,
        lr=a.lr,
        dropout=a.dropout,
        fanout=a.fanout,
        command=a.command,
    )
    log(f"[sampler_accuracy] {dev}, {backend}, {torch.get_num_threads()} threads; data from {a.data}")
    rep = reporter(a, env)
    state: Dict[str, tuple] = {}

    def graph_items(name: str) -> Iterator[tuple]:
        def loaded() -> Iterator[dict]:
            data, metric = state[name] = load(name, a.data)
            log(
                f'[sampler_accuracy] {name}: {data.num_nodes} nodes, {data.num_edges} edges, '
                f'{data.num_features} features, {int(first_split(data)[0].sum())} training nodes, {metric}'
            )
            return iter(())

        yield ('graph', name, loaded)
        for kind in a.models:
            for seed in a.seeds:
                for s in a.samplers:

                    def run(kind=kind, seed=seed, s=s) -> Iterator[dict]:
                        if name not in state:
                            raise FileNotFoundError(f'{name} was not loaded')
                        data, metric = state[name]
                        yield dict(
                            kind='run',
                            graph=name,
                            model=kind,
                            sampler=s,
                            impl=s,
                            seed=seed,
                            **train_run(data, metric, kind, s, seed, a),
                        )

                    yield ('run', f'{name} {kind} {s} seed {seed}', run)
            if set(SAMPLERS) <= set(a.samplers):
                yield ('compare', f'{name} {kind}', lambda kind=kind: iter([compare(rep.records, name, kind)]))

    rep.run([it for g in a.graphs for it in graph_items(g)], device=dev)
    return 0


if __name__ == '__main__':
    sys.exit(main())
