"""Tutorial 7: half-precision training (HalfGNN) under ``torch.autocast``.

Every pyg_tc layer runs under ``torch.autocast``: the layer casts its input once, the neighbour
aggregation reads and writes half (fp16 or bf16) and accumulates in fp32 (on a GPU: half2
arithmetic over short batches of edges, merged into fp32), and the output has the dtype PyG's
layer returns (half where PyG's does; float32 where PyG adds an fp32 bias or computes its
attention in fp32, as GCN and GAT do), cast once at the end. Nothing in the model changes; the
training loop gets the usual autocast block,
and for float16 a ``GradScaler``::

    scaler = torch.amp.GradScaler('cuda')             # float16 only
    with torch.autocast('cuda', dtype=torch.float16):
        loss = F.cross_entropy(model(x, edge_index)[mask], y[mask])
    scaler.scale(loss).backward(); scaler.step(opt); scaler.update()

Overflow policy: a half sum never saturates silently. On a GPU PyG's fp16 scatter adds with
fp16 atomics, so a row of thousands of unit messages stops growing at 2048 (its CPU scatter
accumulates in fp32); pyg_tc adds in fp32 and rounds once, so the result is exact, or ``inf``
exactly where the fp32 sum exceeds float16's range (65504); the layers then warn once per graph
and say to use bfloat16 or a normalised aggregation (mean, GCN). The second table shows it on a
star graph.

The first table trains a 2-layer GCN and SAGE on Cora in fp32, fp16 and bf16 from the same
initial weights (the benchmarks' model, ``pyg_tc.bench.models.Net``: two ``pyg_tc.nn`` layers,
ReLU and dropout 0.5 between them). On a GPU it measures HalfGNN's speed-up (docs/half.md:
1.4x fp32 for the GCN step on the Reddit-shaped graph on an H100); on a CPU autocast runs in
bfloat16 only and pyg_tc runs its pure-PyTorch reference, so the times say nothing about the
kernels, only the accuracies do.

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
import torch_geometric.transforms as T
from torch_geometric.utils import scatter
from tqdm import tqdm

import pyg_tc
import pyg_tc.nn
from pyg_tc.bench.models import Net
from pyg_tc.datasets import load_or_exit


def train(model, data, dtype, epochs: int, desc=None):
    """Adam under autocast(dtype) (fp32: no autocast); (test accuracy, ms / epoch, peak MiB).
    ``desc``: show progress."""
    dev = data.x.device.type
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    scaler = torch.amp.GradScaler(dev, enabled=dtype == torch.float16)
    cast = torch.autocast(dev, dtype=dtype, enabled=dtype != torch.float32)
    if dev == 'cuda':
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    t0 = time.perf_counter()
    for _ in tqdm(range(epochs), desc, leave=False, disable=desc is None):
        model.train()
        opt.zero_grad()
        with cast:
            loss = F.cross_entropy(model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    if dev == 'cuda':
        torch.cuda.synchronize()
    ms = 1e3 * (time.perf_counter() - t0) / epochs
    model.eval()
    with torch.no_grad(), cast:
        pred = model(data.x, data.edge_index).argmax(1)
    acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
    return acc, ms, torch.cuda.max_memory_allocated() / 2**20 if dev == 'cuda' else None


def overflow_demo(device):
    """A star: one row with n unit messages, summed in fp16 by PyG's scatter and by pyg_tc."""
    rows = []
    for n in (3000, 70000):
        src, dst = torch.arange(n, device=device), torch.zeros(n, dtype=torch.long, device=device)
        x = torch.ones(n, 1, device=device, dtype=torch.float16)
        pyg = scatter(x, dst, 0, dim_size=1, reduce='sum')
        ours = pyg_tc.ops.spmm(x, torch.stack([src, dst]), size=(n, 1))
        rows.append((n, float(pyg), float(ours)))
    return rows


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
    a = p.parse_args()
    epochs = 20 if a.small else 200
    data = load_or_exit('Cora', a.root, transform=T.NormalizeFeatures())[0].to(a.device)
    dtypes = [torch.float32, torch.float16, torch.bfloat16] if a.device == 'cuda' else [torch.float32, torch.bfloat16]

    rows = []
    for name, kind in (('GCN', 'gcn'), ('SAGE', 'sage')):
        torch.manual_seed(0)
        init = Net(pyg_tc.nn, kind, [data.num_features, 64, 7], dropout=0.5, input_dropout=False).to(a.device)
        for dtype in dtypes:
            model = copy.deepcopy(init)
            train(model, data, dtype, 2)  # warm-up (kernel build, caches)
            model = copy.deepcopy(init)
            dt = str(dtype)[6:]
            rows.append((name, dt, *train(model, data, dtype, epochs, desc=f'{name} {dt}')))

    graph = 'Cora' if a.root else 'Synthetic Cora'
    print(f'\n{graph}, {epochs} epochs on {a.device} (pyg_tc backend: {pyg_tc.info()["backend"]})\n')
    print('| model | dtype | test accuracy | ms / epoch | peak MiB |')
    print('|---|---|---|---|---|')
    for name, dt, acc, ms, mib in rows:
        print(f'| {name} | {dt} | {100 * acc:.1f}% | {ms:.2f} | {"-" if mib is None else f"{mib:.0f}"} |')

    print('\nA float16 sum over one row of n unit messages (exact: n)\n')
    print('| n | PyG scatter (fp16) | pyg_tc spmm (fp16) |')
    print('|---|---|---|')
    for n, pyg, ours in overflow_demo(a.device):
        print(f'| {n:,} | {pyg:g} | {ours:g} |')


if __name__ == '__main__':
    main()
