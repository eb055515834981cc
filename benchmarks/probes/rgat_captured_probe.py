"""Where the time of MLPerf's R-GAT epoch goes when it is trimmed by layer and
captured (the rgat suite's ``pyg_tc trimmed, captured`` row), per batch:

1. ``loader``: ``pyg_tc.loader.NeighborLoader`` with ``PadHops`` alone, no
   prefetch: wall ms, and its GPU ms (kernels summed, the longest listed);
2. ``replay``: the ``CapturedStep`` alone on batches loaded beforehand (its
   copy into the captured buffers included): wall ms;
3. ``epoch``: both, the loader two batches ahead on its thread (``prefetch=2``).

    python benchmarks/probes/rgat_captured_probe.py [--papers 1000000] [--batches 10] [--out F]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import torch

import pyg_tc.nn
from pyg_tc.bench.graphs import igbh_shaped
from pyg_tc.bench.models import RGAT
from pyg_tc.bench.timing import kernel_profile
from pyg_tc.capture import CapturedStep, trimmed_forward
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import PadHops, buckets_from_batches

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def _sync():
    if DEV.type == 'cuda':
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--papers', type=int, default=1_000_000)
    p.add_argument('--batches', type=int, default=10)
    p.add_argument('--width', type=int, default=1024)
    p.add_argument('--out', default='rgat_captured_probe.jsonl')
    a = p.parse_args()
    data = igbh_shaped(a.papers, a.width, torch.float16, 19)
    on_dev = data.to(DEV)
    kw = dict(input_nodes=('paper', torch.randperm(a.papers)), batch_size=1024, device=DEV)
    fan = [15, 10, 5]
    hops = buckets_from_batches(NeighborLoader(on_dev, fan, shuffle=True, **kw), per_hop=True)
    pad = PadHops(hops, 1024)
    rec = dict(papers=a.papers, batches=a.batches)

    def loader(prefetch=0):
        return NeighborLoader(on_dev, fan, transform=pad, prefetch=prefetch, **kw)

    it = iter(loader())
    items = list(itertools.islice(it, a.batches + 1))
    _sync()
    t0 = time.perf_counter()
    for _ in itertools.islice(it, a.batches):
        pass
    _sync()
    rec['loader_ms'] = 1e3 * (time.perf_counter() - t0) / a.batches
    it2 = iter(loader())
    next(it2)
    prof = kernel_profile(lambda _: next(it2), range(a.batches), DEV, top=15)
    rec['loader_gpu_ms'], rec['loader_launches'] = prof['gpu_ms'], prof['launches']
    rec['loader_kernels'] = prof['kernels']

    torch.manual_seed(0)
    model = RGAT(pyg_tc.nn, data.edge_types, a.width, 512, 4, 19).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=DEV.type == 'cuda')
    step = CapturedStep(model, opt, autocast=torch.float16, forward=trimmed_forward)
    for b in items[:2]:
        step(b)
    _sync()
    t0 = time.perf_counter()
    for b in items[1:]:
        step(b)
    _sync()
    rec['replay_ms'] = 1e3 * (time.perf_counter() - t0) / a.batches
    del items

    it = iter(loader(prefetch=2))
    for b in itertools.islice(it, 2):
        step(b)
    _sync()
    t0 = time.perf_counter()
    for b in itertools.islice(it, a.batches):
        step(b)
    _sync()
    rec['epoch_ms'] = 1e3 * (time.perf_counter() - t0) / a.batches
    rec['seeds_per_s'] = 1024 / rec['epoch_ms'] * 1e3
    print(json.dumps(rec), flush=True)
    with open(a.out, 'w') as f:
        f.write(json.dumps(rec) + '\n')


if __name__ == '__main__':
    main()
