"""A/B of full-graph training steps (under ``torch.autocast``, or in fp32)
between two checkouts of pyg_tc, in one GPU run (for a layer-level change,
e.g. the output dtypes matching PyG's).

    python benchmarks/probes/ab_steps.py --base .ab_base --new . [--graph reddit] [--models gcn,sage,gat]

Each round runs one worker process per checkout, alternating; a worker
imports pyg_tc from its checkout (kernels built in its own build directory),
generates the same graph and features, and times a 2-layer model's step
(forward, loss, backward, Adam) under autocast (``--dtype fp32``: without), ``--steps`` steps after
warm-up, per model. Reported: the best per-step ms of each side over the
rounds and the ratio new / base (above 1: the new code is slower), with the
output dtype of each side's first layer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def worker(a) -> None:
    sys.path.insert(0, os.path.abspath(a.checkout))
    import time

    import torch
    import torch.nn.functional as F

    import pyg_tc
    import pyg_tc.nn as L
    from pyg_tc.bench.graphs import load_graph

    dt = {'fp16': torch.float16, 'bf16': torch.bfloat16, 'fp32': None}[a.dtype]
    g = load_graph(a.graph, 'cuda')
    n = g.num_nodes
    gen = torch.Generator(device='cuda').manual_seed(0)
    x = torch.randn(n, a.width, device='cuda', generator=gen)
    y = torch.randint(0, 41, (n,), device='cuda', generator=gen)
    ei = pyg_tc.transforms.DegreeBucketTransform()(
        __import__('torch_geometric').data.Data(edge_index=g.edge_index, num_nodes=n)
    ).edge_index
    make = {
        'gcn': lambda i, o: L.GCNConv(i, o),
        'sage': lambda i, o: L.SAGEConv(i, o),
        'gat': lambda i, o: L.GATConv(i, o, heads=1),
        'gat8': lambda i, o: L.GATConv(i, o // 8, heads=8) if o % 8 == 0 else L.GATConv(i, o, heads=1),
        'gatv2': lambda i, o: L.GATv2Conv(i, o // 8, heads=8) if o % 8 == 0 else L.GATv2Conv(i, o, heads=1),
    }
    out = {}
    for kind in a.models.split(','):
        torch.manual_seed(0)
        convs = torch.nn.ModuleList([make[kind](a.width, a.hidden), make[kind](a.hidden, 41)]).cuda()
        opt = torch.optim.Adam(convs.parameters(), lr=0.01)

        def step():
            opt.zero_grad()
            with torch.autocast('cuda', dt, enabled=dt is not None):
                h = convs[0](x, ei)
                loss = F.cross_entropy(convs[1](h.relu(), ei).float(), y)
            loss.backward()
            opt.step()
            return h.dtype

        for _ in range(3):
            dtype = step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
        out[kind] = {'ms': 1e3 * (time.perf_counter() - t0) / a.steps, 'dtype': str(dtype)}
        convs = opt = None
        torch.cuda.empty_cache()
    print('RESULT ' + json.dumps(out), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--base', required=True)
    p.add_argument('--new', default='.')
    p.add_argument('--graph', default='reddit')
    p.add_argument('--models', default='gcn,sage,gat')
    p.add_argument('--dtype', default='fp16', choices=['fp16', 'bf16', 'fp32'])
    p.add_argument('--width', type=int, default=256)
    p.add_argument('--hidden', type=int, default=64)
    p.add_argument('--steps', type=int, default=10)
    p.add_argument('--rounds', type=int, default=2)
    p.add_argument('--checkout', help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.checkout:
        return worker(a)
    best = {}
    for r in range(a.rounds):
        for side in ('base', 'new'):
            path = getattr(a, side)
            env = dict(os.environ, PYG_TC_BUILD_DIR=os.path.join(os.environ.get('TMPDIR', '/tmp'), f'ab_{side}'))
            cmd = [sys.executable, __file__, '--base', a.base, '--checkout', path] + [
                f'--{k}={getattr(a, k)}' for k in ('graph', 'models', 'dtype', 'width', 'hidden', 'steps')
            ]
            res = subprocess.run(cmd, env=env, capture_output=True, text=True)
            line = [ln for ln in res.stdout.splitlines() if ln.startswith('RESULT ')]
            if not line:
                sys.exit(f'{side} worker failed:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}')
            for kind, v in json.loads(line[0][7:]).items():
                b = best.setdefault((kind, side), v)
                if v['ms'] < b['ms']:
                    best[(kind, side)] = v
            print(f'round {r + 1} {side}: {line[0][7:]}', flush=True)
    print(f'| model | base ms | new ms | new / base | base dtype | new dtype |  ({a.graph}, autocast {a.dtype})')
    print('|---|---|---|---|---|---|')
    for kind in a.models.split(','):
        b, n = best[(kind, 'base')], best[(kind, 'new')]
        print(f"| {kind} | {b['ms']:.2f} | {n['ms']:.2f} | {n['ms'] / b['ms']:.3f} | {b['dtype']} | {n['dtype']} |")


if __name__ == '__main__':
    main()
