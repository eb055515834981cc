"""Tutorial 1: speed up an existing PyG model by changing imports, and check that nothing changed.

pyg_tc's layers subclass PyG's: same constructor, ``forward``, parameters and ``state_dict``
keys. So a PyG model becomes a pyg_tc model by changing where its layers come from::

    from torch_geometric.nn import GCNConv   # before
    from pyg_tc.nn import GCNConv            # after

Here the model takes the layer module as an argument, so both versions live side by side, and
the script checks what "nothing changed" means:

1. a PyG checkpoint loads into the pyg_tc model as is (same keys, same shapes);
2. with the same weights both give the same outputs and the same gradients;
3. trained from the same initial weights, both reach the same test accuracy;
4. the time of a training epoch. On a graph of Cora's size the host paces an eager epoch
   (Python and kernel launches, about 3 ms on a GPU against 0.2 ms of GPU work), so pyg_tc runs
   eagerly at PyG's speed: its layers take PyG's own path where that issues less host work (on a
   CPU, GCN always does). The third row captures the whole training step in a CUDA graph
   (``pyg_tc.capture.CapturedStep``: one line) and replays it: about 11x PyG's eager epoch on an
   H200 (docs/results/small_graphs.md). On a CPU nothing is captured and that row runs eagerly;
   there pyg_tc's GCN runs PyG's own path, at PyG's speed (``--small`` on 2 cores: 66.8 ms per
   epoch against PyG's 66.2; docs/results/small_graphs.md, CPU section, for six layers).
   The difference of pyg_tc's kernels grows with the graph (``pyg-tc bench``,
   docs/benchmarks.md).

Data: ``--root DIR`` (default: ``$PYG_TC_DATA``) is where the real Cora lives, as
``DIR/planetoid/Cora`` (PyG downloads it there if it is missing). Without a root the script runs
on synthetic data of Cora's shape (``pyg_tc.datasets.synthetic('Cora')``: 2,708 nodes, 10,556
edges, 1,433 features, 7 learnable classes), so it also runs offline; the accuracies are then
those of the synthetic graph.
"""

import argparse
import copy
import os
import time

import torch
import torch.nn.functional as F
import torch_geometric.nn
import torch_geometric.transforms as T
from tqdm import tqdm

import pyg_tc
import pyg_tc.loader
import pyg_tc.nn
from pyg_tc.datasets import load_or_exit


class GCN(torch.nn.Module):
    """A user's 2-layer GCN; ``layers`` is the module the convolutions come from."""

    def __init__(self, layers, cin: int, hidden: int, cout: int):
        super().__init__()
        self.conv1 = layers.GCNConv(cin, hidden, cached=True)
        self.conv2 = layers.GCNConv(hidden, cout, cached=True)

    def forward(self, x, edge_index):
        x = F.dropout(x, 0.5, self.training)
        x = F.dropout(self.conv1(x, edge_index).relu(), 0.5, self.training)
        return self.conv2(x, edge_index)


def train(model, data, epochs: int, seed: int, desc=None):
    """Adam, weight decay 5e-4; returns (test accuracy, ms per epoch). ``desc``: show progress."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    torch.manual_seed(seed)  # the same dropout masks for both models
    sync = torch.cuda.synchronize if data.x.is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in tqdm(range(epochs), desc, leave=False, disable=desc is None):
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
    sync()
    ms = 1e3 * (time.perf_counter() - t0) / epochs
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean()), ms


def train_captured(model, data, epochs: int, seed: int, desc=None):
    """``train`` with the step captured in a CUDA graph (on a CPU: eagerly, the same step)."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4, capturable=data.x.is_cuda)
    step = pyg_tc.capture.CapturedStep(model, opt)  # loss: cross-entropy over data.train_mask
    torch.manual_seed(seed)
    sync = torch.cuda.synchronize if data.x.is_cuda else (lambda: None)
    model.train()
    step(data), step(data)  # the first call runs eagerly, the second captures (both train)
    sync()
    t0 = time.perf_counter()
    for _ in tqdm(range(epochs - 2), desc, leave=False, disable=desc is None):
        step(data)
    sync()
    ms = 1e3 * (time.perf_counter() - t0) / (epochs - 2)
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean()), ms


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

    torch.manual_seed(0)
    ref = GCN(torch_geometric.nn, data.num_features, 16, 7).to(a.device)  # the PyG model
    ours = GCN(pyg_tc.nn, data.num_features, 16, 7).to(a.device)  # imports changed
    ours.load_state_dict(ref.state_dict())  # 1. a PyG checkpoint loads as is

    # 2. same weights -> same outputs and gradients (eval mode: no dropout)
    ref.eval(), ours.eval()
    out_ref, out = ref(data.x, data.edge_index), ours(data.x, data.edge_index)
    out_ref.square().sum().backward()
    out.square().sum().backward()
    out_diff = float((out - out_ref).detach().abs().max())
    grad_diff = max(float((q.grad - p.grad).abs().max()) for p, q in zip(ref.parameters(), ours.parameters()))
    assert out_diff < 1e-4 and grad_diff < 1e-3, (out_diff, grad_diff)

    # 3. + 4. train both from the same initial weights
    init = copy.deepcopy(ref.state_dict())
    rows = []
    for name, model in (('PyG', ref), ('pyg_tc', ours)):
        model.load_state_dict(init)
        model.zero_grad()
        train(model, data, 2, seed=1)  # warm-up: caches, kernel build
        model.load_state_dict(init)
        acc, ms = train(model, data, epochs, seed=0, desc=f'{name} training')
        rows.append((name, acc, ms))
    ours.load_state_dict(init)
    acc, ms = train_captured(ours, data, epochs, seed=0, desc='pyg_tc captured training')
    rows.append(('pyg_tc, step captured', acc, ms))

    backend = pyg_tc.info()['backend']
    graph = 'Cora' if a.root else 'Synthetic Cora'
    print(f'\n{graph}, 2-layer GCN, {epochs} epochs on {a.device} (pyg_tc backend: {backend})\n')
    print('| layers | test accuracy | ms / epoch | x PyG | max abs out diff | max abs grad diff |')
    print('|---|---|---|---|---|---|')
    for name, acc, ms in rows:
        d = ('-', '-') if name == 'PyG' else (f'{out_diff:.1e}', f'{grad_diff:.1e}')
        print(f'| {name} | {100 * acc:.1f}% | {ms:.2f} | {rows[0][2] / ms:.2f} | {d[0]} | {d[1]} |')


if __name__ == '__main__':
    main()
