"""Tutorial 4: mini-batch training with NeighborLoader.

Graphs too large for one forward pass are trained on sampled subgraphs: PyG's
``NeighborLoader`` picks a batch of seed nodes, samples up to 10 neighbours of each and 5 of
each of those (``num_neighbors=[10, 5]``, one hop per layer) and returns the subgraph as a
``Data``. Its nodes are ordered seeds first: only the first ``batch.batch_size`` rows are the
seeds, so the loss is taken on those (the rest are there to feed them messages).

Every batch is a new graph, so pyg_tc's per-graph format (the CSR and its degree-bucket
schedule) is built once per batch. Let the loader build it, as its ``transform``::

    loader = NeighborLoader(data, num_neighbors=[10, 5], batch_size=32, input_nodes=data.train_mask,
                            shuffle=True, transform=pyg_tc.transforms.DegreeBucketTransform())

The transform runs on each sampled subgraph, where the sampling runs: on the CPU, in the
loader's worker processes when ``num_workers > 0`` (overlapped with training). The format
travels with ``batch.edge_index`` through ``pin_memory=True`` and ``batch.to(device,
non_blocking=True)``. The other way, on a GPU, is to move the batch first and then build
(vectorised torch, fast for large batches): ``batch = DegreeBucketTransform()(batch.to(device))``.
A layer given a batch without the format also builds it, on first use.

The script trains a 2-layer GraphSAGE on Cora twice, with PyG's ``SAGEConv`` and with
``pyg_tc.nn.SAGEConv``, from the same initial weights and on the same batches (each epoch is
sampled once, with a seeded generator, and both models train on it), then tests both on the
full graph. How to read the table:

* max loss diff vs PyG: the largest per-batch loss difference to PyG, float rounding only (the
  sums run in another order), and the test accuracies match;
* ms / epoch: training steps over one epoch's batches (the first epoch is a warm-up and not
  timed; sampling is the same for both and left out); pyg_tc's includes its format build.
  On a CPU-only machine pyg_tc runs its pure-PyTorch reference, which is not faster: the speed
  comes from the CUDA kernels, and shows on graphs larger than Cora (``pyg-tc bench``);
* format-build share: the part of pyg_tc's epoch spent building formats. In this loop the
  build sits on the critical path; with ``num_workers > 0`` it runs beside training instead.

NeighborLoader needs a sampler backend, ``pyg-lib`` or ``torch_sparse``. Without one (or with
``--no-sampler``) the script says so and falls back to full 2-hop subgraphs of each seed batch
(``k_hop_subgraph``, no sampling: bigger batches, same seeds-first layout), labelled so in the
table.

Data: ``--root DIR`` (default: ``$PYG_TC_DATA``) is where the real Cora lives, as
``DIR/planetoid/Cora`` (PyG downloads it there if it is missing). Without a root the script runs
on synthetic data of Cora's shape (``pyg_tc.datasets.synthetic('Cora')``), so it also runs
offline; the accuracies are then those of the synthetic graph.
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F
import torch_geometric.nn
import torch_geometric.typing
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import k_hop_subgraph
from tqdm import tqdm

import pyg_tc
import pyg_tc.nn
from pyg_tc.datasets import DatasetUnavailableError, load
from pyg_tc.formats import plain_tensor
from pyg_tc.transforms import DegreeBucketTransform


class SAGE(torch.nn.Module):
    """A 2-layer GraphSAGE; ``layers`` is the module the convolutions come from."""

    def __init__(self, layers, cin: int, hidden: int, cout: int):
        super().__init__()
        self.conv1 = layers.SAGEConv(cin, hidden)
        self.conv2 = layers.SAGEConv(hidden, cout)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class Timed(BaseTransform):
    """Runs ``transform`` and adds up the seconds it takes (for the build share)."""

    def __init__(self, transform):
        self.transform, self.seconds = transform, 0.0

    def forward(self, data):
        t0 = time.perf_counter()
        data = self.transform(data)
        self.seconds += time.perf_counter() - t0
        return data


class KHopLoader:
    """The fallback without a sampler backend: shuffled batches of training nodes, each with
    its full 2-hop subgraph, seeds first (the first ``batch.batch_size`` rows, as NeighborLoader)."""

    def __init__(self, data, batch_size: int, transform, generator):
        self.data, self.batch_size, self.transform, self.generator = data, batch_size, transform, generator

    def __iter__(self):
        d = self.data
        train = d.train_mask.nonzero().view(-1)
        for seeds in train[torch.randperm(train.numel(), generator=self.generator)].split(self.batch_size):
            subset = k_hop_subgraph(seeds, 2, d.edge_index, num_nodes=d.num_nodes)[0]
            batch = d.subgraph(torch.cat([seeds, subset[~torch.isin(subset, seeds)]]))
            batch.batch_size = seeds.numel()
            yield self.transform(batch)


def step(model, opt, batch, device) -> float:
    """One Adam step on a batch, the loss on its seed nodes. PyG gets the plain edges."""
    edge_index = batch.edge_index if isinstance(model.conv1, pyg_tc.nn.SAGEConv) else plain_tensor(batch.edge_index)
    x, y, edge_index = batch.x.to(device), batch.y.to(device), edge_index.to(device)
    n = batch.batch_size
    opt.zero_grad()
    loss = F.cross_entropy(model(x, edge_index)[:n], y[:n])
    loss.backward()
    opt.step()
    return float(loss.detach())


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root', default=os.environ.get('PYG_TC_DATA'),
                   help='folder of the real Cora (DIR/planetoid/Cora, downloaded there if missing); '
                        'default $PYG_TC_DATA, else synthetic data of the same shape')
    p.add_argument('--small', action='store_true', help='a few epochs (CI)')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--no-sampler', action='store_true', help='use the k-hop fallback even with a sampler')
    a = p.parse_args()
    epochs, batch_size = (4 if a.small else 40), 32
    if a.root is None:
        print('No --root: synthetic data shaped like Cora; --root DIR runs on the real Cora '
              '(downloaded there if missing).')
    try:
        data = load('Cora', a.root)[0]  # stays on the CPU, where sampling runs
    except DatasetUnavailableError as e:
        raise SystemExit(f'error: {e}; check --root, or run without it (and $PYG_TC_DATA) on synthetic data')

    build = Timed(DegreeBucketTransform())   # the loader's transform, timed
    gen = torch.Generator().manual_seed(0)   # the same shuffles on every run
    sampler = torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE
    if sampler and not a.no_sampler:
        from torch_geometric.loader import NeighborLoader
        loader = NeighborLoader(data, num_neighbors=[10, 5], batch_size=batch_size, input_nodes=data.train_mask,
                                shuffle=True, transform=build, generator=gen)
        batches_kind = 'NeighborLoader [10, 5]'
    else:
        print('--no-sampler given.' if sampler else
              'NeighborLoader needs a sampler backend, pyg-lib or torch_sparse, and neither is installed.\n'
              'Install one (e.g. `pip install torch_sparse`; PyG\'s installation guide lists the wheels).')
        print('Falling back to full 2-hop subgraphs of each seed batch (no sampling).')
        loader = KHopLoader(data, batch_size, build, gen)
        batches_kind = 'k-hop subgraphs (no sampler backend)'

    torch.manual_seed(0)
    models = {'PyG': SAGE(torch_geometric.nn, data.num_features, 64, 7).to(a.device),
              'pyg_tc': SAGE(pyg_tc.nn, data.num_features, 64, 7).to(a.device)}
    models['pyg_tc'].load_state_dict(models['PyG'].state_dict())  # the same initial weights
    opts = {k: torch.optim.Adam(m.parameters(), lr=0.01, weight_decay=5e-4) for k, m in models.items()}
    losses = {k: [] for k in models}
    seconds = {k: 0.0 for k in models}
    sync = torch.cuda.synchronize if a.device.startswith('cuda') else (lambda: None)
    build_s = 0.0
    for epoch in tqdm(range(epochs), 'epochs', leave=False):
        build.seconds = 0.0
        batches = list(loader)  # one epoch, sampled once: both models train on these batches
        for name, model in models.items():
            model.train()
            sync()
            t0 = time.perf_counter()
            losses[name] += [step(model, opts[name], b, a.device) for b in batches]
            sync()
            seconds[name] += (time.perf_counter() - t0) if epoch else 0.0  # epoch 0: warm-up
        build_s += build.seconds if epoch else 0.0
    seconds['pyg_tc'] += build_s  # pyg_tc's epoch includes building its formats

    full = data.to(a.device)
    graph = 'Cora' if a.root else 'Synthetic Cora'
    print(f'\n{graph}, 2-layer GraphSAGE, batches of {batch_size} seeds: {batches_kind}, on {a.device} '
          f'(pyg_tc backend: {pyg_tc.info()["backend"]})\n')
    print('| layers | batches | epochs | test accuracy | ms / epoch | format-build share | max loss diff vs PyG |')
    print('|---|---|---|---|---|---|---|')
    for name, model in models.items():
        model.eval()
        with torch.no_grad():  # full-graph inference
            pred = model(full.x, full.edge_index).argmax(1)
        acc = float((pred[full.test_mask] == full.y[full.test_mask]).float().mean())
        ms = 1e3 * seconds[name] / (epochs - 1)
        share = f'{build_s / seconds[name]:.1%}' if name == 'pyg_tc' else '-'
        diff = max(abs(u - v) for u, v in zip(losses[name], losses['PyG']))
        print(f'| {name} | {batches_kind} | {epochs} | {100 * acc:.1f}% | {ms:.1f} | {share} | '
              + ('-' if name == 'PyG' else f'{diff:.1e}') + ' |')


if __name__ == '__main__':
    main()
