"""Tutorial 10: heterogeneous graphs (``HeteroData``) on the GPU.

Many large graphs have several node and edge types: papers, authors and the venues they publish
in; users, items and what they did with them. PyG models them as ``HeteroData`` and trains them
with ``to_hetero`` / ``HeteroConv`` models on mini-batches from its ``NeighborLoader``.
pyg_tc's ``NeighborLoader`` takes the same ``HeteroData`` and arguments. The only change is the
import::

    from pyg_tc.loader import NeighborLoader   # was: from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=('author', train_idx),
                            batch_size=128, shuffle=True)
    for batch in loader:                       # a HeteroData, on the GPU
        out = model(batch.x_dict, batch.edge_index_dict)['author'][:batch['author'].batch_size]

It samples every edge type on the GPU with PyG's (pyg-lib's) semantics, gathers each node and
edge type's attributes there, and attaches each edge type's CSR to its ``edge_index``, so pyg_tc's
layers build nothing per batch. The batch has PyG's fields per type: ``n_id``, ``e_id``,
``num_sampled_nodes`` / ``num_sampled_edges`` per hop (``trim_to_layer`` works), and
``input_id`` / ``batch_size`` on the seed type. ``feature_storage=torch.bfloat16`` (or fp8,
``FeatureStorage(torch.float8_e4m3fn)``) stores every node type's features narrower, and the
batches then carry half the feature bytes. On the CPU (``device='cpu'``) a pure-PyTorch
reference makes the same batches, bit for bit.

**Part 1: author classification on DBLP** (4 research areas; authors, papers, terms and
conferences; 6 edge types). Three runs of a two-layer ``to_hetero`` GraphSAGE start from the
same initial weights:

* PyG's layers on PyG's loader. Its sampler needs pyg-lib or torch_sparse; without either, the
  script gives PyG's loader pyg_tc's sampler on the CPU and says so;
* pyg_tc's layers on pyg_tc's loader;
* the same with the features stored in bf16 and the step under ``torch.autocast``.

The table gives each run's test accuracy (after the epoch with the best validation accuracy) and
its time per epoch. The two loaders draw different neighbours, so the accuracies are comparable
rather than equal (``docs/results/hetero_accuracy.md`` has them over ten seeds). On a CPU-only
machine pyg_tc runs its pure-PyTorch reference, which is not faster: the speed comes from the
CUDA kernels and the GPU sampler.

**Part 2: an MLPerf-shaped R-GAT step.** MLPerf Training's GNN benchmark trains R-GAT on IGBH,
547M nodes of 4 types and 8 edge types, with 1,024-wide fp16 features. Its model is
``HeteroConv({edge type: GATConv(in, hidden // heads, heads, add_self_loops=False)})`` in 3
layers, with fan-out [15, 10, 5] and 1,024 seeds per batch. Part 2 builds an IGBH-shaped
synthetic graph (``pyg_tc.bench.graphs.igbh_shaped``: power-law degrees, fp16 features) and
trains that model (``pyg_tc.bench.models.RGAT``) for a few batches, PyG's stack against
pyg_tc's, eagerly and as the fast path for this model:

* ``PadHops`` pads every batch hop by hop, per node and edge type, to a bucket measured on a
  few batches (``buckets_from_batches(loader, per_hop=True)``), so every step has the same
  shapes;
* the model runs trimmed by layer (PyG's ``trim_to_layer``: each layer computes only the nodes a
  later layer reads; ``trimmed_forward`` passes the batch's hop counts);
* ``CapturedStep`` replays forward, loss, backward and Adam from one CUDA graph, while the
  loader prepares the next batches on its thread (``prefetch=2``)::

      pad = PadHops(buckets_from_batches(loader, per_hop=True), batch_size)
      loader = NeighborLoader(data, fanout, input_nodes=('paper', train), batch_size=batch_size,
                              transform=pad, prefetch=2)
      opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
      step = CapturedStep(model, opt, autocast=torch.float16, forward=trimmed_forward)
      for batch in loader:
          loss = step(batch)

The table gives training seeds per second and, on a GPU, the peak memory.
``--papers`` sizes the graph: 200,000 papers by default, 2,000 with ``--small``. The
benchmark suite ``pyg-tc bench rgat`` runs the same model over whole epochs against PyG's loader
with worker processes.

Data: ``--root DIR`` (default: ``$PYG_TC_DATA``) is where the real DBLP lives, as
``DIR/hetero/dblp_hencex`` (PyG downloads it there if it is missing). Without a root the script
runs on synthetic data of DBLP's shape (``pyg_tc.datasets.synthetic('DBLP')``), so it also runs
offline; the accuracies are then those of the synthetic graph.
"""

import argparse
import copy
import os
import time

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
import torch_geometric.transforms as T
import torch_geometric.typing
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
from tqdm import tqdm

import pyg_tc
import pyg_tc.nn
from pyg_tc.bench.graphs import igbh_shaped
from pyg_tc.bench.models import RGAT
from pyg_tc.capture import CapturedStep, trimmed_forward
from pyg_tc.datasets import load_or_exit
from pyg_tc.loader import NeighborLoader
from pyg_tc.loader.hetero import HeteroNeighborSampler
from pyg_tc.transforms import PadHops, buckets_from_batches


class SAGE(torch.nn.Module):
    """Two ``SAGEConv`` layers from ``lib`` (``torch_geometric.nn`` or ``pyg_tc.nn``) and a
    linear head; ``to_hetero`` makes one copy per edge type."""

    def __init__(self, lib, hidden: int, classes: int):
        super().__init__()
        self.conv1, self.conv2 = lib.SAGEConv((-1, -1), hidden), lib.SAGEConv((-1, -1), hidden)
        self.drop = torch.nn.Dropout(0.5)
        self.lin = torch.nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        x = self.drop(self.conv1(x, edge_index).relu())
        return self.lin(self.conv2(x, edge_index).relu())


def pyg_sampler_note(data, fanout):
    """PyG's loader's ``neighbor_sampler`` and a note: its own where pyg-lib or torch_sparse is
    installed, else pyg_tc's on the CPU."""
    if torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE:
        return None, ''
    note = "PyG's heterogeneous sampler needs pyg-lib or torch_sparse; its loader runs on pyg_tc's CPU sampler here."
    return HeteroNeighborSampler(data, fanout, device='cpu'), note


def dblp(a):
    """Part 1: rows of (run, test accuracy, s / epoch)."""
    data = load_or_exit('DBLP', a.root, transform=T.Constant(node_types='conference'))[0]
    epochs, fanout = (2, [5, 5]) if a.small else (20, [10, 10])
    train_idx = data['author'].train_mask.nonzero().view(-1)
    full = data.to(a.device) if a.device == 'cpu' else copy.copy(data).to(a.device)
    dev = torch.device(a.device)

    def make(lib):
        model = pyg_nn.to_hetero(SAGE(lib, 64, 4), data.metadata(), aggr='sum').to(dev)
        with torch.no_grad():  # (the lazy shapes)
            model(full.x_dict, full.edge_index_dict)
        return model

    torch.manual_seed(0)
    init = make(pyg_nn).state_dict()
    sampler, note = pyg_sampler_note(data, fanout)
    kw = dict(input_nodes=('author', train_idx), batch_size=128, shuffle=True)
    runs = [
        ('PyG (layers and loader)', pyg_nn, lambda: PyGNeighborLoader(data, fanout, neighbor_sampler=sampler, **kw)),
        ('pyg_tc', pyg_tc.nn, lambda: NeighborLoader(data, fanout, device=dev, **kw)),
        (
            'pyg_tc, bf16 features + autocast',
            pyg_tc.nn,
            lambda: NeighborLoader(data, fanout, device=dev, feature_storage=torch.bfloat16, **kw),
        ),
    ]
    rows = []
    for name, lib, loader_of in runs:
        model = make(lib)
        model.load_state_dict(init)
        amp = torch.bfloat16 if 'bf16' in name else None
        full_x = full.x_dict if amp is None else {t: x.to(amp) for t, x in full.x_dict.items()}
        opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
        torch.manual_seed(0)
        loader = loader_of()
        best_val, test, seconds = -1.0, 0.0, 0.0
        for _ in tqdm(range(epochs), desc=name, leave=False):
            t0 = time.perf_counter()
            model.train()
            for b in loader:
                b = b.to(dev)
                n = b['author'].batch_size
                opt.zero_grad()
                with torch.autocast(dev.type, dtype=amp or torch.bfloat16, enabled=amp is not None):
                    out = model(b.x_dict, b.edge_index_dict)['author'][:n]
                F.cross_entropy(out.float(), b['author'].y[:n]).backward()
                opt.step()
            if dev.type == 'cuda':
                torch.cuda.synchronize()
            seconds += time.perf_counter() - t0
            model.eval()
            with torch.no_grad(), torch.autocast(dev.type, dtype=amp or torch.bfloat16, enabled=amp is not None):
                pred = model(full_x, full.edge_index_dict)['author'].argmax(-1)
            y = full['author'].y
            val = float((pred == y)[full['author'].val_mask].float().mean())
            if val > best_val:
                best_val, test = val, float((pred == y)[full['author'].test_mask].float().mean())
        rows.append((name, test, seconds / epochs))
    return rows, note


def mlperf_shaped(a):
    """Part 2: rows of (run, seeds / s, ms / batch, peak MiB or None) and the graph's description."""
    if a.small:
        papers, width, hidden, heads, fanout, bs, batches = a.papers or 2000, 64, 32, 2, [4, 3, 2], 64, 3
    else:
        papers, width, hidden, heads, fanout, bs, batches = a.papers or 200_000, 1024, 512, 4, [15, 10, 5], 1024, 20
    dev = torch.device(a.device)
    data = igbh_shaped(papers, width, torch.float16)
    on_dev = data.to(dev) if dev.type == 'cpu' else copy.copy(data).to(dev)
    amp = torch.float16 if dev.type == 'cuda' else torch.bfloat16  # (CPU autocast: bf16)
    seeds = torch.randperm(papers, generator=torch.Generator().manual_seed(0))[: bs * (batches + 1)]
    kw = dict(input_nodes=('paper', seeds), batch_size=bs)
    sampler, _ = pyg_sampler_note(data, fanout)
    torch.manual_seed(0)
    init = RGAT(pyg_nn, data.edge_types, width, hidden, heads, 19).state_dict()
    # static shapes: batches padded hop by hop to a bucket measured on a few batches (mean + 5 std)
    sizing = NeighborLoader(on_dev, fanout, device=dev, **kw)
    pad = PadHops(buckets_from_batches(sizing, num_batches=min(batches + 1, 20), per_hop=True), bs)
    runs = [
        ('PyG (layers and loader)', pyg_nn, lambda: PyGNeighborLoader(data, fanout, neighbor_sampler=sampler, **kw)),
        ('pyg_tc', pyg_tc.nn, lambda: NeighborLoader(on_dev, fanout, device=dev, **kw)),
        (
            'pyg_tc, trimmed + captured',
            pyg_tc.nn,
            lambda: NeighborLoader(on_dev, fanout, device=dev, transform=pad, prefetch=2, **kw),
        ),
    ]
    rows = []
    for name, lib, loader_of in runs:
        model = RGAT(lib, data.edge_types, width, hidden, heads, 19).to(dev)
        model.load_state_dict(init)
        captured = 'captured' in name
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=captured and dev.type == 'cuda')
        # the whole step (forward trimmed by layer, loss over the seeds, backward, Adam) in one CUDA graph
        step = CapturedStep(model, opt, autocast=amp, forward=trimmed_forward) if captured else None
        if dev.type == 'cuda':
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        it = iter(loader_of())
        t0 = None
        for i in tqdm(range(batches + 1), desc=name, leave=False):
            if i == 1:  # (the first batch warms up)
                if dev.type == 'cuda':
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            b = next(it).to(dev)
            if step is not None:
                step(b)
                continue
            opt.zero_grad()
            with torch.autocast(dev.type, dtype=amp):
                out = model(b.x_dict, b.edge_index_dict)[: b['paper'].batch_size]
            F.cross_entropy(out.float(), b['paper'].y[: b['paper'].batch_size]).backward()
            opt.step()
        if dev.type == 'cuda':
            torch.cuda.synchronize()
        sec = (time.perf_counter() - t0) / batches
        peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == 'cuda' else None
        rows.append((name, bs / sec, 1e3 * sec, peak))
    edges = sum(data[e].edge_index.size(1) for e in data.edge_types)
    what = (
        f'IGBH-shaped graph: {papers:,} papers, {sum(data[t].num_nodes for t in data.node_types):,} nodes, '
        f'{edges:,} edges, {len(data.edge_types)} edge types, {width}-wide fp16 features; 3 R-GAT layers of '
        f'{hidden} ({heads} heads), fan-out {fanout}, {bs} seeds per batch, {batches} timed batches'
    )
    return rows, what


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument(
        '--root',
        default=os.environ.get('PYG_TC_DATA'),
        help='folder of the real DBLP (DIR/hetero/dblp_hencex, downloaded there if missing); '
        'default $PYG_TC_DATA, else synthetic data of the same shape',
    )
    p.add_argument('--small', action='store_true', help='a few epochs and a small graph (CI)')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--papers', type=int, default=None, help="part 2's papers (default 200,000; 2,000 with --small)")
    a = p.parse_args()

    rows, note = dblp(a)
    graph = 'DBLP' if a.root else 'Synthetic DBLP'
    print(f'\n{graph}: to_hetero GraphSAGE on {a.device} (pyg_tc backend: {pyg_tc.info()["backend"]})')
    if note:
        print(note)
    print('\n| run | test accuracy | s / epoch |')
    print('|---|---|---|')
    for name, acc, sec in rows:
        print(f'| {name} | {100 * acc:.1f}% | {sec:.2f} |')

    rows, what = mlperf_shaped(a)
    print(f'\n{what}\n')
    print('| run | training seeds / s | ms / batch | peak MiB |')
    print('|---|---|---|---|')
    for name, rate, ms, mib in rows:
        print(f'| {name} | {rate:,.0f} | {ms:.1f} | {"-" if mib is None else f"{mib:,.0f}"} |')


if __name__ == '__main__':
    main()
