"""Graph classification on DataLoader batches: PyG against pyg_tc eager and
padded + captured (JSON + markdown + PNG).

Per dataset (PROTEINS_full and ENZYMES: the real TU datasets when
``$PYG_TC_DATA`` holds them, else synthetic ones of their shape; Molecules:
synthetic molecule-shaped graphs as ZINC's, ``pyg_tc.datasets.synthetic``),
model (3 layers, hidden 64, sum pooling, a linear head: GIN with PyG's
``MLP`` (batch norm included), GCN, GAT with 4 heads of 16) and batch size,
from the same initial weights and the same batches (a seeded shuffle, an
80/20 split per seed), ``--epochs`` epochs of:

* ``PyG eager``: PyG's layers on PyG's ``DataLoader`` batches;
* ``pyg_tc eager``: pyg_tc's layers on the same batches;
* ``pyg_tc padded + captured``: :class:`pyg_tc.loader.GraphLoader` batches
  assembled on the GPU (``device=``: the dataset stored there once) and
  padded to two buckets (:class:`~pyg_tc.transforms.PadGraphs`), the model made
  :func:`~pyg_tc.capture.padding_aware`, the step captured per bucket
  (:class:`~pyg_tc.capture.CapturedStep`).

Rows: the epoch time (the median epoch after the first; the runs' epochs
interleaved, one epoch of each in turn, so the host's drift falls on all
alike; loading, collating and the copy to the GPU included), the ratio to
PyG's, and the test accuracy (mean and standard deviation over ``--seeds``).
``pyg-tc bench graph_classification --out DIR`` (or ``python -m
benchmarks.suites.graph_classification``; a GPU: on a CPU the captured run
is eager).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch
import torch.nn.functional as Fn
import torch_geometric.nn as pyg_nn

import pyg_tc.nn
from pyg_tc.bench.graphs import DATA_ENV, pyg_dataset
from pyg_tc.bench.models import GraphNet
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment, log
from pyg_tc.capture import CapturedStep, padding_aware
from pyg_tc.datasets import synthetic
from pyg_tc.loader import GraphLoader
from pyg_tc.transforms import PadGraphs, graph_buckets

from .common import read_records, rerender

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
RUNS = ('PyG eager', 'pyg_tc eager', 'pyg_tc padded + captured')


def dataset(name: str):
    """The real TU dataset when ``$PYG_TC_DATA`` has it, else the synthetic one."""
    if name != 'Molecules' and os.environ.get(DATA_ENV):
        try:
            return pyg_dataset('TUDataset', 'tu', name, name), True
        except FileNotFoundError as e:
            log(f'[graphcls] {name}: {e}; synthetic data of its shape')
    return list(synthetic(name)), False


def make_model(lib, kind: str, cin: int, classes: int, hidden: int = 64) -> GraphNet:
    """3 layers of ``kind`` from ``lib``, hidden ``hidden``, sum pooling, a
    linear head: GIN on PyG's ``MLP`` (batch norm), GCN, GAT with 4 heads."""
    return GraphNet(lib, 'gin-bn' if kind == 'gin' else kind, [cin] + [hidden] * 3, classes, heads=4)


class Run:
    """One of ``RUNS``: its model, optimizer and loader; one epoch per call."""

    def __init__(self, run: str, model, train, batch_size: int, seed: int):
        from torch_geometric.loader import DataLoader

        shuffled = dict(batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
        self.run, self.model, self.losses, self.times = run, model, [], []
        if run == 'pyg_tc padded + captured':
            buckets = graph_buckets(DataLoader(train, batch_size=batch_size, shuffle=True), levels=2)
            self.loader = GraphLoader(train, pad=PadGraphs(buckets), device=DEV, **shuffled)
            padding_aware(model)
            opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=DEV.type == 'cuda')
            self.step = CapturedStep(model, opt, forward=lambda m, b: m(b.x, b.edge_index, b.batch, b.num_graphs))
        else:
            self.loader = DataLoader(train, **shuffled)
            opt = torch.optim.Adam(model.parameters(), lr=0.01)

            def step(b):
                opt.zero_grad(set_to_none=True)
                loss = Fn.cross_entropy(model(b.x, b.edge_index, b.batch), b.y)
                loss.backward()
                opt.step()
                return loss.detach()

            self.step = step

    def epoch(self) -> None:
        self.model.train()
        sync = torch.cuda.synchronize if DEV.type == 'cuda' else (lambda: None)
        sync()
        t0 = time.perf_counter()
        losses = [self.step(b.to(DEV, non_blocking=True)) for b in self.loader]
        sync()
        self.times.append(time.perf_counter() - t0)
        self.losses.append(float(torch.stack(losses).mean()))

    def accuracy(self, test) -> float:
        from torch_geometric.loader import DataLoader

        self.model.eval()
        correct = 0
        with torch.no_grad():
            for b in DataLoader(test, batch_size=256):
                b = b.to(DEV)
                correct += int((self.model(b.x, b.edge_index, b.batch).argmax(1) == b.y).sum())
        return correct / len(test)


def step_records(name: str, a):
    data, real = dataset(name)
    cin, classes = data[0].num_features, int(torch.cat([d.y for d in data]).max()) + 1
    for kind in a.models:
        for bs in a.batch_sizes:
            per = {run: [] for run in RUNS}  # run -> [(accuracy, ms / epoch)] per seed
            for seed in range(a.seeds):
                perm = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed)).tolist()
                cut = int(0.8 * len(perm))
                train, test = [data[i] for i in perm[:cut]], [data[i] for i in perm[cut:]]
                torch.manual_seed(seed)
                base = make_model(pyg_nn, kind, cin, classes).to(DEV)
                runs = []
                for run in RUNS:
                    model = make_model(pyg_tc.nn if 'pyg_tc' in run else pyg_nn, kind, cin, classes).to(DEV)
                    model.load_state_dict(copy.deepcopy(base.state_dict()))
                    runs.append(Run(run, model, train, bs, seed))
                log(f'[graphcls] {name} {kind} batch {bs} seed {seed}: {a.epochs} epochs')
                for _ in range(a.epochs):
                    for r in runs:  # interleaved: one epoch of each in turn
                        r.epoch()
                for r in runs:
                    steady = r.times[1:] or r.times
                    per[r.run].append((r.accuracy(test), 1e3 * statistics.median(steady)))
            ref = statistics.mean(ms for _, ms in per['PyG eager'])
            for run, rows in per.items():
                accs, mss = zip(*rows)
                ms = statistics.mean(mss)
                yield dict(
                    kind='epoch',
                    dataset=name,
                    real=real,
                    model=kind,
                    batch_size=bs,
                    run=run,
                    epoch_ms=ms,
                    x_pyg=ref / ms,
                    accuracy=statistics.mean(accs),
                    accuracy_std=statistics.stdev(accs) if len(accs) > 1 else 0.0,
                    seeds=len(accs),
                    epochs=a.epochs,
                    graphs=len(data),
                )


def main(argv=None, prog=None):
    """Command line: see the module docstring; returns the exit code."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n')[0])
    p.add_argument('--out', default='graph_classification_out')
    p.add_argument('--datasets', default='PROTEINS_full,ENZYMES,Molecules')
    p.add_argument('--models', default='gin,gcn,gat')
    p.add_argument('--batch-sizes', default='32,128')
    p.add_argument('--seeds', type=int, default=5)
    p.add_argument('--epochs', type=int, default=50)
    p.add_argument(
        '--render',
        metavar='JSONL',
        nargs='+',
        help='only rewrite the markdown and PNG from these '
        "records (the run block from the first file's 'env' record)",
    )
    a = p.parse_args(argv)
    a.models, a.batch_sizes = a.models.split(','), [int(b) for b in a.batch_sizes.split(',')]
    if DEV.type != 'cuda':
        log('[graphcls] no CUDA GPU: the CPU path (the captured run is eager)')
    env = environment(DEV, seeds=a.seeds, epochs=a.epochs)
    if a.render:
        records, env = read_records(a.render)
    rep = Reporter(
        a.out,
        'graph_classification.jsonl',
        'graph_classification.md',
        'Graph classification on DataLoader batches',
        env=env,
        env_mode='first',
        sections=[
            Table(
                '## Per epoch',
                'epoch',
                [
                    Col('dataset', 'dataset'),
                    Col('model', 'model'),
                    Col('batch', 'batch_size'),
                    Col('run', 'run'),
                    Col('ms / epoch', 'epoch_ms', '.1f'),
                    Col('x PyG eager', 'x_pyg', '.2f', bold=True),
                    Col('test accuracy', 'accuracy', '.3f'),
                    Col('std', 'accuracy_std', '.3f'),
                    Col('seeds', 'seeds'),
                ],
            )
        ],
        figures=[
            Figure(
                'graph_classification.png',
                [
                    Panel(
                        lambda rs: [
                            dict(r, case=f"{r['dataset']} {r['model']} {r['batch_size']}")
                            for r in rs
                            if r.get('kind') == 'epoch'
                        ],
                        'case',
                        'x_pyg',
                        series='run',
                        title="graph-classification epoch, speed-up over PyG's (higher is better)",
                    )
                ],
            )
        ],
    )
    if a.render:
        rerender(rep, records, 'epoch')
        return 0
    rep.run([('epochs', d, lambda d=d: step_records(d, a)) for d in a.datasets.split(',')], device=DEV)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
