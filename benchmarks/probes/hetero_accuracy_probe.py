"""Heterogeneous node classification, PyG's stack against pyg_tc's: a
``to_hetero`` model trained on mini-batches (PyG's layers on PyG's
``NeighborLoader``, pyg-lib where installed; pyg_tc's layers on
``pyg_tc.loader.NeighborLoader``), the same initial weights per seed; the
test accuracy at the best validation epoch, mean +- std over seeds, and
whether pyg_tc's mean lies within one standard deviation of PyG's.
``--impls`` adds ``mixed``: PyG's layers on pyg_tc's loader (which of the
two a difference comes from). ``--precisions`` trains pyg_tc's model also under
autocast in bf16 / fp16 with the node features stored in that precision
(fp16 with a ``GradScaler``; the loss in fp32), or with the features stored
in fp8 (``FeatureStorage(FP8)``) under bf16 autocast, against its fp32 run.

Datasets (``--root``, e.g. ``$PYG_TC_DATA/hetero``, copied to a temporary
folder first): IMDB (movies, 3 genres) and DBLP (authors, 4 areas; the
conferences, which have no features, get a constant one, as PyG's example).
Models: two ``SAGEConv((-1, -1), H)`` or ``GATConv((-1, -1), H,
add_self_loops=False)`` layers and a linear head, ``to_hetero(aggr='sum')``.
Training: fan-out ``--fanout`` for every edge type, ``--batch-size`` training
seeds, Adam, ``--epochs`` epochs; evaluation on the whole graph. On the CPU
pyg_tc's loader samples with its reference, which gives the GPU kernel's
batches bit for bit.

    python benchmarks/probes/hetero_accuracy_probe.py --root $PYG_TC_DATA/hetero [--seeds 5] [--out F]
"""

import argparse
import copy
import json
import shutil
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
import torch_geometric.transforms as T
from torch_geometric.datasets import DBLP, IMDB
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader

import pyg_tc.nn
from pyg_tc.loader import FeatureStorage, NeighborLoader, quantize_fp8
from pyg_tc.ops.neighbor import FP8

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
#: dataset -> (class, folder, target node type)
DATASETS = {'imdb': (IMDB, 'imdb', 'movie'), 'dblp': (DBLP, 'dblp_hencex', 'author')}


class Net(torch.nn.Module):
    def __init__(self, lib, kind: str, hidden: int, classes: int):
        super().__init__()
        if kind == 'sage':
            self.conv1, self.conv2 = lib.SAGEConv((-1, -1), hidden), lib.SAGEConv((-1, -1), hidden)
        else:
            self.conv1 = lib.GATConv((-1, -1), hidden, add_self_loops=False)
            self.conv2 = lib.GATConv((-1, -1), hidden, add_self_loops=False)
        self.drop = torch.nn.Dropout(0.5)  # (a module: to_hetero's tracing keeps its training flag)
        self.lin = torch.nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        x = self.drop(self.conv1(x, edge_index).relu())
        return self.lin(self.conv2(x, edge_index).relu())


def load(root: str, name: str):
    cls, folder, target = DATASETS[name]
    tmp = tempfile.mkdtemp()
    shutil.copytree(f'{root}/{folder}', f'{tmp}/{folder}', ignore=shutil.ignore_patterns('processed'))
    data = cls(f'{tmp}/{folder}', transform=T.Constant(node_types='conference') if name == 'dblp' else None)[0]
    shutil.rmtree(tmp)
    return data, target


#: precision -> autocast dtype (None: fp32); fp8: features stored in e4m3
#: (``FeatureStorage(FP8)``, per-column scales per node type) upcast to bf16
PRECISIONS = {'fp32': None, 'bf16': torch.bfloat16, 'fp16': torch.float16, 'fp8': torch.bfloat16}


def stored(data, precision):
    """``data`` with its node features as the loader of ``precision`` gives
    them (a copy; itself for fp32): rounded to the half dtype, or fp8's
    stored values upcast to bf16."""
    if precision == 'fp32':
        return data
    data = copy.copy(data)
    for store in data.node_stores:
        if 'x' in store and store.x.is_floating_point():
            if precision == 'fp8':
                q, s = quantize_fp8(store.x)
                store.x = (q.float() * s).bfloat16()
            else:
                store.x = store.x.to(PRECISIONS[precision])
    return data


def run(data, target, model, loader, epochs: int, lr: float, dtype=None) -> tuple:
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=5e-4)
    scaler = torch.amp.GradScaler(DEV.type, enabled=dtype is torch.float16)
    full = copy.copy(data).to(DEV)

    def cast():
        return torch.autocast(DEV.type, dtype=dtype, enabled=dtype is not None)

    best_val, test_at_best = -1.0, 0.0
    t0 = time.perf_counter()
    for _ in range(epochs):
        model.train()
        for b in loader:
            b = b.to(DEV)
            opt.zero_grad()
            n = b[target].batch_size
            with cast():
                out = model(b.x_dict, b.edge_index_dict)[target][:n]
            scaler.scale(F.cross_entropy(out.float(), b[target].y[:n])).backward()
            scaler.step(opt)
            scaler.update()
        model.eval()
        with torch.no_grad(), cast():
            pred = model(full.x_dict, full.edge_index_dict)[target].argmax(-1)
        acc = {
            k: float((pred[m] == full[target].y[m]).float().mean())
            for k, m in (('val', full[target].val_mask), ('test', full[target].test_mask))
        }
        if acc['val'] > best_val:
            best_val, test_at_best = acc['val'], acc['test']
    return test_at_best, (time.perf_counter() - t0) / epochs


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--root', required=True, help='the folder holding imdb/ and dblp_hencex/ (their raw/ files)')
    p.add_argument('--datasets', default='imdb,dblp')
    p.add_argument('--models', default='sage,gat')
    p.add_argument('--seeds', type=int, default=5)
    p.add_argument('--first-seed', type=int, default=0)
    p.add_argument('--impls', default='PyG,pyg_tc', help="a comma list of PyG, pyg_tc and mixed")
    p.add_argument('--precisions', default='fp32', help='pyg_tc runs per precision: fp32, bf16, fp16, fp8')
    p.add_argument('--epochs', type=int, default=30)
    p.add_argument('--hidden', type=int, default=64)
    p.add_argument('--fanout', default='10,10')
    p.add_argument('--batch-size', type=int, default=128)
    p.add_argument('--lr', type=float, default=0.005)
    p.add_argument('--threads', type=int, default=0)
    p.add_argument('--out', default='hetero_accuracy_probe.jsonl')
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    fan = [int(k) for k in a.fanout.split(',')]
    out = open(a.out, 'w')
    for name in a.datasets.split(','):
        data, target = load(a.root, name)
        classes = int(data[target].y.max()) + 1
        train = data[target].train_mask.nonzero().view(-1)
        for kind in a.models.split(','):
            precisions = a.precisions.split(',')
            impls = a.impls.split(',')
            impls += [f'pyg_tc-{q}' for q in precisions if q != 'fp32' and 'pyg_tc' in impls]
            accs = {k: [] for k in impls}
            for seed in range(a.first_seed, a.first_seed + a.seeds):
                torch.manual_seed(seed)
                ref = pyg_nn.to_hetero(Net(pyg_nn, kind, a.hidden, classes), data.metadata(), aggr='sum').to(DEV)
                ours = pyg_nn.to_hetero(Net(pyg_tc.nn, kind, a.hidden, classes), data.metadata(), aggr='sum').to(DEV)
                with torch.no_grad():  # (lazy shapes), then the same initial weights
                    init = data.to(DEV) if DEV.type == 'cpu' else copy.copy(data).to(DEV)
                    ref(init.x_dict, init.edge_index_dict)
                    ours(init.x_dict, init.edge_index_dict)
                ours.load_state_dict(ref.state_dict())
                models = {'PyG': ref, 'pyg_tc': ours, 'mixed': copy.deepcopy(ref)}  # (before any training)
                models.update({k: copy.deepcopy(ours) for k in impls if k.startswith('pyg_tc-')})
                kw = dict(input_nodes=(target, train), batch_size=a.batch_size, shuffle=True)
                for impl in impls:
                    model = models[impl]
                    precision = impl.split('-')[1] if '-' in impl else 'fp32'
                    dtype = PRECISIONS[precision]
                    torch.manual_seed(seed)
                    if impl == 'PyG':
                        loader = PyGNeighborLoader(data, fan, **kw)
                    elif precision == 'fp8':  # (the loader's fp8 path: stored once, upcast in the gather)
                        loader = NeighborLoader(data, fan, device=DEV, feature_storage=FeatureStorage(FP8), **kw)
                    else:
                        loader = NeighborLoader(stored(data, precision), fan, device=DEV, **kw)
                    acc, sec = run(stored(data, precision), target, model, loader, a.epochs, a.lr, dtype)
                    accs[impl].append(acc)
                    rec = dict(
                        dataset=name,
                        model=kind,
                        impl=impl,
                        seed=seed,
                        test_acc=acc,
                        epoch_s=sec,
                        epochs=a.epochs,
                        device=str(DEV),
                    )
                    out.write(json.dumps(rec) + '\n')
                    out.flush()
                    print(f'{name} {kind} {impl} seed {seed}: test {100 * acc:.2f}%  {sec:.2f} s/epoch', flush=True)
            m = {k: statistics.mean(v) for k, v in accs.items()}
            s = {k: statistics.stdev(v) if len(v) > 1 else 0.0 for k, v in accs.items()}
            summary = ', '.join(f'{k} {100 * m[k]:.2f} +- {100 * s[k]:.2f}' for k in impls)
            if 'PyG' in m and 'pyg_tc' in m:
                summary += f"; within one std of PyG: {abs(m['pyg_tc'] - m['PyG']) <= s['PyG']}"
            for k in impls:
                if k.startswith('pyg_tc-'):
                    summary += f"; {k} within one std of pyg_tc fp32: {abs(m[k] - m['pyg_tc']) <= s['pyg_tc']}"
            print(f'{name} {kind}: {summary}', flush=True)


if __name__ == '__main__':
    main()
