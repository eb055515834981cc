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

pyg_tc also has its own loader, ``pyg_tc.loader.NeighborLoader``: PyG's signature and batches
(the same fields, seeds first, PyG's sampling semantics), sampled and gathered on the GPU (with
``device='cpu'``, the pure-PyTorch reference: the same batches), and each batch's ``edge_index``
arrives carrying pyg_tc's CSR, so pyg_tc's layers build nothing per batch. It needs no sampler
backend. Change one import::

    from pyg_tc.loader import NeighborLoader   # was: from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 5], batch_size=32, input_nodes=data.train_mask,
                            shuffle=True)       # device=: where batches are made (default: the GPU if any)

Its neighbour draws come from torch's default generator (``torch.manual_seed`` makes a run
reproducible), its shuffle from ``generator=`` as PyG's.

The script trains a 2-layer GraphSAGE on Cora three times from the same initial weights: with
PyG's ``SAGEConv`` and with ``pyg_tc.nn.SAGEConv`` on the same batches from PyG's loader (each
epoch is sampled once, with a seeded generator, and both models train on it), and with
``pyg_tc.nn.SAGEConv`` on the batches of pyg_tc's loader; then tests all three on the full graph.
The model is the benchmarks' (``pyg_tc.bench.models.Net(layers, 'sage', [in, 64, classes])``:
``SAGEConv``, ReLU, ``SAGEConv``, the layers from ``layers``, ``torch_geometric.nn`` or
``pyg_tc.nn``). How to read the table:

* max loss diff vs PyG: on PyG's batches, the largest per-batch loss difference to PyG, float
  rounding only (the sums run in another order), and the test accuracies match. pyg_tc's loader
  draws other neighbours than PyG's sampler, so its row trains on other batches: its accuracy is
  comparable to the others (same model, same seeds per epoch, same fan-outs), not equal;
* sampling ms / epoch: making one epoch's batches (PyG's loader on the CPU, without the format
  build; pyg_tc's loader on ``--device``, with the CSR);
* steps ms / epoch: the training steps over those batches, with the copy of PyG's CPU batches to
  the device (pyg_tc's loader makes them there); the pyg_tc row on PyG's batches includes the
  format build. The first epoch is a warm-up and not timed; epoch ms is the sum of the two.
  On a CPU-only machine pyg_tc runs its pure-PyTorch reference, layers and sampler alike, which
  is not faster (the reference sampler is slower than pyg-lib's C++ one): the speed comes from
  the CUDA kernels and the GPU sampler, and shows on graphs larger than Cora (``pyg-tc bench``,
  ``pyg-tc bench sampling``);
* format-build share: the part of the steps spent building formats. With PyG's loader the
  build sits on the critical path in this loop (with ``num_workers > 0`` it runs beside
  training instead); with pyg_tc's loader there is none: the CSR comes with the batch;
* the captured row: pyg_tc's loader's batches padded to two buckets of (nodes, edges)
  (``pyg_tc.transforms.PadToBuckets``; its sampling time includes the padding) and the whole
  training step captured in a CUDA graph per bucket (``pyg_tc.capture.CapturedStep``), replayed
  for every batch; the same batches as the row above, so its losses match that row's (max loss
  diff against it). On the CPU the step runs eagerly on the padded batches.

PyG's NeighborLoader needs a sampler backend, ``pyg-lib`` or ``torch_sparse``. Without one (or
with ``--no-sampler``) the script says so and the two rows on PyG's batches fall back to full
2-hop subgraphs of each seed batch (``k_hop_subgraph``, no sampling: bigger batches, same
seeds-first layout), labelled so in the table; the row of pyg_tc's loader samples as always.

Data: ``--root DIR`` (default: ``$PYG_TC_DATA``) is where the real Cora lives, as
``DIR/planetoid/Cora`` (PyG downloads it there if it is missing). Without a root the script runs
on synthetic data of Cora's shape (``pyg_tc.datasets.synthetic('Cora')``), so it also runs
offline; the accuracies are then those of the synthetic graph.
"""

import argparse
import copy
import os
import time

import torch
import torch.nn.functional as F
import torch_geometric.nn
import torch_geometric.typing
from torch.utils.data import DataLoader
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import k_hop_subgraph
from tqdm import tqdm

import pyg_tc
import pyg_tc.loader
import pyg_tc.nn
from pyg_tc.bench.models import Net
from pyg_tc.datasets import load_or_exit
from pyg_tc.formats import plain_tensor
from pyg_tc.capture import CapturedStep
from pyg_tc.transforms import PadToBuckets, buckets_from_batches
from pyg_tc.transforms import DegreeBucketTransform


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
    """The fallback without a sampler backend: shuffled batches of training nodes (drawn as
    NeighborLoader draws them: a DataLoader over the nodes), each with its full 2-hop subgraph,
    seeds first (the first ``batch.batch_size`` rows, as NeighborLoader)."""

    def __init__(self, data, batch_size: int, transform, generator):
        self.data, self.transform = data, transform
        self.seeds = DataLoader(data.train_mask.nonzero().view(-1), batch_size, shuffle=True, generator=generator)

    def __iter__(self):
        d = self.data
        for seeds in self.seeds:
            subset = k_hop_subgraph(seeds, 2, d.edge_index, num_nodes=d.num_nodes)[0]
            batch = d.subgraph(torch.cat([seeds, subset[~torch.isin(subset, seeds)]]))
            batch.batch_size = seeds.numel()
            yield self.transform(batch)


def captured(model, opt):
    """``pyg_tc.capture.CapturedStep`` as ``step``: the loss read back per step, as the other rows."""
    run = CapturedStep(model, opt)
    return lambda batch: float(run(batch))


def step(model, opt, batch, device) -> float:
    """One Adam step on a batch, the loss on its seed nodes. PyG gets the plain edges."""
    edge_index = batch.edge_index if isinstance(model.convs[0], pyg_tc.nn.SAGEConv) else plain_tensor(batch.edge_index)
    x, y, edge_index = batch.x.to(device), batch.y.to(device), edge_index.to(device)
    n = batch.batch_size
    opt.zero_grad()
    loss = F.cross_entropy(model(x, edge_index)[:n], y[:n])
    loss.backward()
    opt.step()
    return float(loss.detach())


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument(
        '--root',
        default=os.environ.get('PYG_TC_DATA'),
        help='folder of the real Cora (DIR/planetoid/Cora, downloaded there if missing); '
        'default $PYG_TC_DATA, else synthetic data of the same shape',
    )
    p.add_argument('--small', action='store_true', help='a few epochs (CI)')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--no-sampler', action='store_true', help="PyG's rows: the k-hop fallback even with a sampler")
    a = p.parse_args()
    epochs, batch_size = (4 if a.small else 40), 32
    data = load_or_exit('Cora', a.root)[0]  # stays on the CPU, where PyG's loader samples
    full = data.to(a.device)  # on the device: pyg_tc's loader samples and gathers there; full-graph tests

    build = Timed(DegreeBucketTransform())  # the loader's transform, timed
    gen = torch.Generator().manual_seed(0)  # the same shuffles on every run
    sampler = torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE
    if sampler and not a.no_sampler:
        from torch_geometric.loader import NeighborLoader

        loader = NeighborLoader(
            data,
            num_neighbors=[10, 5],
            batch_size=batch_size,
            input_nodes=data.train_mask,
            shuffle=True,
            transform=build,
            generator=gen,
        )
        batches_kind = "PyG's NeighborLoader [10, 5]"
    else:
        print(
            '--no-sampler given.'
            if sampler
            else "PyG's NeighborLoader needs a sampler backend, pyg-lib or torch_sparse, and neither is installed.\n"
            'Install one (e.g. `pip install torch_sparse`; PyG\'s installation guide lists the wheels).'
        )
        print(
            "Falling back to full 2-hop subgraphs of each seed batch (no sampling) for PyG's loader; "
            "pyg_tc's loader needs no backend."
        )
        loader = KHopLoader(data, batch_size, build, gen)
        batches_kind = 'k-hop subgraphs (no sampler backend)'
    # pyg_tc's loader: the graph and features on the device, the batches made there with their CSR;
    # the same seed batches per epoch as PyG's loader (its own generator, seeded alike), other neighbours
    own = pyg_tc.loader.NeighborLoader(
        full,
        num_neighbors=[10, 5],
        batch_size=batch_size,
        input_nodes=data.train_mask,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        device=a.device,
    )
    own_kind = 'pyg_tc.loader.NeighborLoader [10, 5]'
    # the captured row: the same batches padded to two buckets measured on a few of them
    pad = PadToBuckets(
        buckets_from_batches(own, num_batches=10, levels=2, node_multiple=64, edge_multiple=256), batch_size
    )
    padded_kind = own_kind + ', padded'

    torch.manual_seed(0)  # the initial weights, then pyg_tc's loader's neighbour draws
    rows = {
        'PyG': (torch_geometric.nn, batches_kind),
        'pyg_tc': (pyg_tc.nn, batches_kind),
        'pyg_tc, own loader': (pyg_tc.nn, own_kind),
        'pyg_tc, captured': (pyg_tc.nn, padded_kind),
    }
    models = {k: Net(layers, 'sage', [data.num_features, 64, 7]).to(a.device) for k, (layers, _) in rows.items()}
    for m in models.values():
        m.load_state_dict(models['PyG'].state_dict())  # the same initial weights
    cuda = a.device.startswith('cuda')  # (Adam's step is captured with capturable=True)
    opts = {
        k: torch.optim.Adam(m.parameters(), lr=0.01, weight_decay=5e-4, capturable=cuda and k.endswith('captured'))
        for k, m in models.items()
    }
    steps = {
        k: (captured(m, opts[k]) if k.endswith('captured') else lambda b, m=m, o=opts[k]: step(m, o, b, a.device))
        for k, m in models.items()
    }
    losses = {k: [] for k in models}
    seconds = {k: 0.0 for k in models}  # training steps
    sampling = {batches_kind: 0.0, own_kind: 0.0, padded_kind: 0.0}  # making the batches
    sync = torch.cuda.synchronize if a.device.startswith('cuda') else (lambda: None)
    build_s = 0.0
    for epoch in tqdm(range(epochs), 'epochs', leave=False):
        epoch_batches = {}
        for kind, source in ((batches_kind, loader), (own_kind, own)):
            build.seconds = 0.0
            sync()
            t0 = time.perf_counter()
            epoch_batches[kind] = list(source)  # one epoch, sampled once: the models on it train on these
            sync()
            if epoch:  # epoch 0: warm-up
                sampling[kind] += time.perf_counter() - t0 - build.seconds
                build_s += build.seconds
        sync()
        t0 = time.perf_counter()
        epoch_batches[padded_kind] = [pad(copy.copy(b)) for b in epoch_batches[own_kind]]
        sync()
        if epoch:
            sampling[padded_kind] += time.perf_counter() - t0  # the padding (its batches: own_kind's)
        for name, model in models.items():
            model.train()
            sync()
            t0 = time.perf_counter()
            losses[name] += [steps[name](b) for b in epoch_batches[rows[name][1]]]
            sync()
            seconds[name] += (time.perf_counter() - t0) if epoch else 0.0
    seconds['pyg_tc'] += build_s  # pyg_tc's steps on PyG's batches include building its formats

    graph = 'Cora' if a.root else 'Synthetic Cora'
    print(
        f'\n{graph}, 2-layer GraphSAGE, batches of {batch_size} seeds, {epochs} epochs, on {a.device} '
        f'(pyg_tc backend: {pyg_tc.info()["backend"]})\n'
    )
    print(
        '| layers | batches | test accuracy | sampling ms / epoch | steps ms / epoch | epoch ms '
        '| format-build share | max loss diff vs PyG |'
    )
    print('|---|---|---|---|---|---|---|---|')
    for name, model in models.items():
        model.eval()
        with torch.no_grad():  # full-graph inference
            pred = model(full.x, full.edge_index).argmax(1)
        acc = float((pred[full.test_mask] == full.y[full.test_mask]).float().mean())
        kind = rows[name][1]
        sample_s = sampling[kind] + (sampling[own_kind] if kind == padded_kind else 0.0)
        ms, sample_ms = 1e3 * seconds[name] / (epochs - 1), 1e3 * sample_s / (epochs - 1)
        if kind == own_kind:
            share, diff = 'none (the CSR comes with the batch)', '- (its own batches)'
        elif kind == padded_kind:
            share = 'none (the CSR comes with the batch)'
            ref = losses['pyg_tc, own loader']
            diff = f'{max(abs(u - v) for u, v in zip(losses[name], ref)):.1e} (vs own loader)'
        else:
            share = f'{build_s / seconds[name]:.1%}' if name == 'pyg_tc' else '-'
            diff = '-' if name == 'PyG' else f'{max(abs(u - v) for u, v in zip(losses[name], losses["PyG"])):.1e}'
        layers = 'pyg_tc captured' if name.endswith('captured') else name.split(',')[0]
        print(
            f'| {layers} | {kind} | {100 * acc:.1f}% | {sample_ms:.1f} | {ms:.1f} | {sample_ms + ms:.1f} '
            f'| {share} | {diff} |'
        )


if __name__ == '__main__':
    main()
