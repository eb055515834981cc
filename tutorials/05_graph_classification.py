"""Tutorial 5: graph classification with DataLoader batches.

Graph classification predicts one label per graph: here whether a protein is an enzyme
(PROTEINS_full, 1113 graphs, 2 classes) and which of six enzyme classes an enzyme belongs to
(ENZYMES, 600 graphs); nodes are secondary-structure elements (3 one-hot features). The model is
a GIN: three ``GINConv`` layers (each with a 2-layer MLP, hidden 64), a sum over each graph's
nodes (``global_add_pool``) and a linear head.

``torch_geometric.loader.DataLoader`` makes a mini-batch of graphs into one big graph: node
features stacked, edge lists concatenated with shifted node ids, and ``batch.batch`` saying which
graph each node came from. The graphs stay disconnected, so one message-passing call over the
batch processes all of them at once, and ``global_add_pool(x, batch.batch)`` gives one row per
graph. For pyg_tc a batch is simply another graph.

Where does pyg_tc's sparse format come from? Collation concatenates the edge lists into a new
tensor, so a format built per graph (``pyg_tc.transforms.DegreeBucketTransform()`` as the
dataset's transform) does not survive it: the batch's ``edge_index`` is a plain ``EdgeIndex``
(the script checks this). Building a batch's CSR costs more than a few layer calls on a graph this
small save, so pyg_tc's layers, given a small ``edge_index`` without a format, run PyG's own path
for their first calls on it (``pyg_tc.ops.dispatch.FRESH_GRAPH_CALLS``); the second row is
therefore the drop-in: PyG's ``DataLoader`` and pyg_tc's layers, nothing else changed. The third
row is where the kernels pay: batches that come with their CSR, assembled on the device.

The check: PyG's ``GINConv`` and pyg_tc's start from the same weights and see the same batches
(a seeded generator shuffles both loaders alike) of a fixed random 80/20 split per seed. Their
loss curves must agree step for step and their test accuracies match. The loss difference (relative,
at the first step, over the first epoch, over all epochs) comes out 0
on a CPU, where the reference sums like PyG; on a GPU the kernels sum in another order (and PyG's
scatter-add with atomics in no fixed order), so expect float round-off at the first step and drift
after it: two trainings that differ in round-off move apart step by step, fast where the loss
spikes (PROTEINS_full's raw features give first-epoch losses up to 10), and then the accuracy
over 5 seeds is the comparison that matters. Accuracy is averaged over 5 seeds (``--small``: 1 seed, 5 epochs,
a random 300 graphs per dataset, so lower scores). ``ms / epoch`` includes loading and collating
the batches. On a CPU pyg_tc runs its pure-PyTorch reference (``pyg_tc.info()['backend']``,
printed above the table), which is not faster than PyG: the speed comes from the GPU kernels.

The third row pads every batch to one of two buckets of (graphs, nodes, edges)
(``pyg_tc.transforms.PadGraphs`` with ``graph_buckets``: padded nodes isolated with zero features in
a padding graph slot, so ``global_add_pool(x, batch, num_graphs)`` gives the real graphs' sums),
assembles every batch on the device with its CSR (``pyg_tc.loader.GraphLoader(...,
device=device)``: the dataset is stored there once; no collate per batch) and captures the
training step once per bucket
(``pyg_tc.capture.CapturedStep``; the loss is the cross-entropy over the real graphs).
``padding_aware(model)`` makes the MLPs' batch norms take their statistics over the real nodes
only. The batches and their order are the eager rows'. On a CPU nothing is captured and the row
runs the padded batches eagerly.

Data: ``--root DIR`` (default: ``$PYG_TC_DATA``) is where the real datasets live, as
``DIR/tu/PROTEINS_full`` and ``DIR/tu/ENZYMES`` (PyG downloads them there if they are missing).
Without a root the script runs on synthetic graph sets of their shape
(``pyg_tc.datasets.synthetic('PROTEINS_full')``: 1,113 protein-like graphs, 3 one-hot node types,
2 classes; ``'ENZYMES'``: 600 graphs, 6 classes), so it also runs offline; the accuracies are then
those of the synthetic graphs.
"""

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
import torch_geometric.nn
from torch_geometric.loader import DataLoader
from torch_geometric.nn import MLP, global_add_pool
from tqdm import tqdm

import pyg_tc
import pyg_tc.nn
from pyg_tc.datasets import DatasetUnavailableError, load
from pyg_tc.formats import has_graph
from pyg_tc.capture import CapturedStep, padding_aware
from pyg_tc.loader import GraphLoader
from pyg_tc.transforms import PadGraphs, graph_buckets
from pyg_tc.transforms import DegreeBucketTransform


class GIN(torch.nn.Module):
    """3 GIN layers, sum pooling, a linear head; ``layers`` is where ``GINConv`` comes from."""

    def __init__(self, layers, cin: int, cout: int, hidden: int = 64, num_layers: int = 3):
        super().__init__()
        self.convs = torch.nn.ModuleList(
            layers.GINConv(MLP([cin if i == 0 else hidden, hidden, hidden])) for i in range(num_layers)
        )
        self.head = torch.nn.Linear(hidden, cout)

    def forward(self, x, edge_index, batch, num_graphs=None):
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        return self.head(global_add_pool(x, batch, num_graphs))  # (num_graphs given: no read from the GPU)


def check_collation(ds):
    """With the transform on the dataset, graphs carry a format and batches do not."""
    ds.transform = DegreeBucketTransform()
    batch = next(iter(DataLoader(ds, batch_size=8)))
    assert has_graph(ds[0].edge_index) and not has_graph(batch.edge_index)
    ds.transform = None


def train(model, prep, train_ds, test_ds, epochs: int, seed: int, device, desc: str = ''):
    """Adam on batches of 32; returns (test accuracy, ms per epoch, per-step losses)."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(train_ds, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(seed))
    sync = torch.cuda.synchronize if torch.device(device).type == 'cuda' else (lambda: None)
    losses, times = [], []
    model.train()
    for _ in tqdm(range(epochs), desc, leave=False):
        sync()
        t0 = time.perf_counter()
        for b in loader:
            b = prep(b.to(device))
            opt.zero_grad()
            loss = F.cross_entropy(model(b.x, b.edge_index, b.batch), b.y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        sync()
        times.append(time.perf_counter() - t0)
    return accuracy(model, prep, test_ds, device), epoch_ms(times), losses


def accuracy(model, prep, test_ds, device) -> float:
    """Test accuracy on unpadded batches of 128."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for b in DataLoader(test_ds, batch_size=128):
            b = prep(b.to(device))
            correct += int((model(b.x, b.edge_index, b.batch).argmax(1) == b.y).sum())
    return correct / len(test_ds)


def epoch_ms(times) -> float:
    """Mean ms per epoch after the first (which warms up: allocator, caches, captures)."""
    steady = times[1:] or times
    return 1e3 * sum(steady) / len(steady)


def train_captured(model, train_ds, test_ds, epochs: int, seed: int, device, desc: str = ''):
    """``train`` on batches assembled on ``device`` and padded to a few buckets (``GraphLoader``
    with ``PadGraphs``) with the step captured per bucket (``CapturedStep``; on a CPU it runs eagerly)."""
    shuffled = dict(batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(seed))
    buckets = graph_buckets(DataLoader(train_ds, batch_size=32, shuffle=True), levels=2)
    loader = GraphLoader(train_ds, pad=PadGraphs(buckets), device=device, **shuffled)
    padding_aware(model)  # its MLPs' batch norms: statistics over the real nodes only
    opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=torch.device(device).type == 'cuda')
    step = CapturedStep(model, opt, forward=lambda m, b: m(b.x, b.edge_index, b.batch, b.num_graphs))
    sync = torch.cuda.synchronize if torch.device(device).type == 'cuda' else (lambda: None)
    losses, times = [], []
    model.train()
    for _ in tqdm(range(epochs), desc, leave=False):
        sync()
        t0 = time.perf_counter()
        epoch = [step(b) for b in loader]  # loss tensors: no synchronisation
        sync()
        times.append(time.perf_counter() - t0)
        losses += [float(v) for v in epoch]
    return accuracy(model, lambda b: b, test_ds, device), epoch_ms(times), losses


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument(
        '--root',
        default=os.environ.get('PYG_TC_DATA'),
        help='folder of the real datasets (DIR/tu/PROTEINS_full, DIR/tu/ENZYMES, downloaded there if '
        'missing); default $PYG_TC_DATA, else synthetic data of the same shape',
    )
    p.add_argument('--small', action='store_true', help='1 seed, 5 epochs, 300 graphs (CI)')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--epochs', type=int, help='epochs per run (default: 100; --small: 5)')
    a = p.parse_args()
    seeds, epochs, size = ([0], 5, 300) if a.small else (range(5), 100, None)
    epochs = a.epochs or epochs
    backend = pyg_tc.info()['backend']  # (on a GPU this also builds the kernels, before any timing)
    impls = (
        ('PyG', torch_geometric.nn, lambda b: b),  # the batch as collated
        ('pyg_tc', pyg_tc.nn, lambda b: b),  # drop-in: the same batches
        ('pyg_tc, padded + captured', pyg_tc.nn, None),
    )  # padded in the loader, step captured

    if a.root is None:
        print(
            'No --root: synthetic graphs shaped like PROTEINS_full and ENZYMES; --root DIR runs on the real '
            'ones (downloaded there if missing).'
        )
    rows = []
    for name in ('PROTEINS_full', 'ENZYMES'):
        try:
            ds = load(name, a.root)
        except DatasetUnavailableError as e:
            raise SystemExit(f'error: {e}; check --root, or run without it (and $PYG_TC_DATA) on synthetic data')
        check_collation(ds)
        runs = {impl: [] for impl, _, _ in impls}  # per seed: (accuracy, ms / epoch, max loss diff)
        for seed in seeds:
            perm = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed))[:size]
            cut = int(0.8 * len(perm))
            train_ds, test_ds = ds[perm[:cut]], ds[perm[cut:]]
            torch.manual_seed(seed)
            init = GIN(torch_geometric.nn, ds.num_features, ds.num_classes).state_dict()
            curves = {}
            for impl, layers, prep in impls:
                model = GIN(layers, ds.num_features, ds.num_classes).to(a.device)
                model.load_state_dict(init)  # the same initial weights (and state_dict keys)
                fit = (
                    train_captured
                    if prep is None
                    else (lambda *args, prep=prep, **kw: train(args[0], prep, *args[1:], **kw))
                )
                acc, ms, curves[impl] = fit(
                    model, train_ds, test_ds, epochs, seed, a.device, desc=f'{name}, seed {seed}, {impl}'
                )
                d = [abs(x - y) / abs(y) for x, y in zip(curves[impl], curves['PyG'])]
                first = -(-len(train_ds) // 32)  # the steps of the first epoch
                runs[impl].append((acc, ms, d[0], max(d[:first]), max(d)))
        for impl, per_seed in runs.items():
            accs, mss, d0, d1, diffs = zip(*per_seed)
            std = statistics.stdev(accs) if len(accs) > 1 else 0.0
            label = name if a.root else f'{name} (synthetic)'
            rows.append(
                (label, impl, len(accs), statistics.mean(accs), std, statistics.mean(mss), max(d0), max(d1), max(diffs))
            )

    print(
        f'\nGIN (3 layers, hidden 64, sum pooling), {epochs} epochs, batches of 32, 80/20 split, '
        f'on {a.device} (pyg_tc backend: {backend})\n'
    )
    print(
        '| dataset | layers | seeds | test accuracy | ms / epoch | loss vs PyG: first step | first epoch | all epochs |'
    )
    print('|---|---|---|---|---|---|---|---|')
    for name, impl, n, acc, std, ms, d0, d1, diff in rows:
        d = ['-'] * 3 if impl == 'PyG' else [f'{v:.1e}' for v in (d0, d1, diff)]
        print(f'| {name} | {impl} | {n} | {100 * acc:.1f} ± {100 * std:.1f}% | {ms:.1f} | {" | ".join(d)} |')
    print('\n(loss vs PyG: the largest relative difference of the step losses, over the seeds)')


if __name__ == '__main__':
    main()
