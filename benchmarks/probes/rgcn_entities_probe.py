"""R-GCN on the R-GCN paper's entity datasets (AIFB, MUTAG; PyG's
``Entities``), full batch, PyG's ``RGCNConv`` against pyg_tc's with the same
initial weights per seed: test accuracy (mean +- std over seeds, and whether
pyg_tc's lies within one standard deviation of PyG's) and time per epoch.

The model and training are PyG's example (``examples/rgcn.py``): two layers,
16 hidden channels, 30 bases, ReLU, Adam (lr 0.01, weight decay 5e-4), 50
epochs, the test accuracy after the last epoch. ``Entities`` needs ``pandas``
and ``rdflib`` to process the raw files (``--processed``: a copy of ``--root``
that holds ``processed/`` folders loads without them). pyg_tc's layer runs its
own path (``kernel_paths``: on the CPU, ``backend='auto'`` would run PyG's).
On a GPU (``--device cuda``, the default where there is one) each epoch's
time ends with a synchronisation.

    python benchmarks/probes/rgcn_entities_probe.py --root $PYG_TC_DATA/hetero/entities [--seeds 5] [--out F]
"""

import argparse
import json
import shutil
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch_geometric.datasets import Entities

import pyg_tc.nn
from pyg_tc.ops import dispatch


class Net(torch.nn.Module):
    def __init__(self, lib, num_nodes: int, num_relations: int, num_classes: int):
        super().__init__()
        self.conv1 = lib.RGCNConv(num_nodes, 16, num_relations, num_bases=30)
        self.conv2 = lib.RGCNConv(16, num_classes, num_relations, num_bases=30)

    def forward(self, edge_index, edge_type):
        x = F.relu(self.conv1(None, edge_index, edge_type))
        return F.log_softmax(self.conv2(x, edge_index, edge_type), dim=1)


def _sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def run(data, model, epochs: int):
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.0005)
    _sync(data.edge_index.device)
    t0 = time.perf_counter()
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        out = model(data.edge_index, data.edge_type)
        F.nll_loss(out[data.train_idx], data.train_y).backward()
        opt.step()
    _sync(data.edge_index.device)
    seconds = (time.perf_counter() - t0) / epochs
    model.eval()
    with torch.no_grad():
        pred = model(data.edge_index, data.edge_type).argmax(-1)
    return float((pred[data.test_idx] == data.test_y).float().mean()), seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--root', required=True, help='the folder holding aifb/ and mutag/ (their raw/ files)')
    p.add_argument('--datasets', default='AIFB,MUTAG')
    p.add_argument('--seeds', type=int, default=5)
    p.add_argument('--epochs', type=int, default=50)
    p.add_argument('--threads', type=int, default=0, help='torch CPU threads (0: torch\'s default)')
    p.add_argument('--out', default='rgcn_entities_probe.jsonl')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--processed', action='store_true', help="load --root's processed/ folders as they are")
    a = p.parse_args()
    dev = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    out = open(a.out, 'w')
    tmp = tempfile.mkdtemp()
    shutil.copytree(a.root, f'{tmp}/entities', ignore=None if a.processed else shutil.ignore_patterns('processed'))
    for name in a.datasets.split(','):
        ds = Entities(f'{tmp}/entities', name)
        data = ds[0].to(dev)
        accs = {'PyG': [], 'pyg_tc': []}
        for seed in range(a.seeds):
            torch.manual_seed(seed)
            ref = Net(pyg_nn, data.num_nodes, ds.num_relations, ds.num_classes)
            ours = Net(pyg_tc.nn, data.num_nodes, ds.num_relations, ds.num_classes)
            ours.load_state_dict(ref.state_dict())
            ref, ours = ref.to(dev), ours.to(dev)
            for impl, model in (('PyG', ref), ('pyg_tc', ours)):
                torch.manual_seed(seed)
                with dispatch.kernel_paths():
                    acc, sec = run(data, model, a.epochs)
                accs[impl].append(acc)
                rec = dict(
                    dataset=name, impl=impl, seed=seed, test_acc=acc, epoch_s=sec, epochs=a.epochs, device=str(dev)
                )
                out.write(json.dumps(rec) + '\n')
                out.flush()
                print(f'{name} {impl} seed {seed}: test {100 * acc:.2f}%  {1e3 * sec:.1f} ms/epoch', flush=True)
        m = {k: statistics.mean(v) for k, v in accs.items()}
        s = {k: statistics.stdev(v) if len(v) > 1 else 0.0 for k, v in accs.items()}
        within = abs(m['pyg_tc'] - m['PyG']) <= s['PyG']
        print(
            f'{name}: PyG {100 * m["PyG"]:.2f} +- {100 * s["PyG"]:.2f}, pyg_tc {100 * m["pyg_tc"]:.2f} +- '
            f'{100 * s["pyg_tc"]:.2f}; within one std of PyG: {within}',
            flush=True,
        )
    shutil.rmtree(tmp)


if __name__ == '__main__':
    main()
