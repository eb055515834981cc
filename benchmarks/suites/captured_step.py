"""The mini-batch training step, eager and captured (JSON + markdown + PNG).

Per graph (R-MAT Reddit- and products-shaped) and model (3-layer SAGE, GCN,
GAT; hidden ``--hidden``), on the same ``--batches`` batches sampled by
pyg_tc's GPU loader (fan-out ``--fanout``, ``--batch-size`` seeds), the time
per training step (forward, cross-entropy over the seeds, backward, Adam)
of:

* ``PyG eager``: PyG's layers, the batch's ``edge_index`` as a plain tensor
  (what PyG's loader gives);
* ``pyg_tc eager``: pyg_tc's layers on the same batches (CSR attached);
* ``pyg_tc eager, padded``: the same on the batches padded to the buckets
  (:class:`pyg_tc.transforms.PadToBuckets`; what padding costs eagerly);
* ``pyg_tc captured``: :class:`pyg_tc.capture.CapturedStep` on the padded
  batches (one CUDA graph per bucket, the batch copied in, one replay);
* ``PyG compiled`` (``--pyg-compile``): ``torch.compile`` of PyG's model
  (``dynamic=True``: PyG's batches change shape every step);
* ``PyG eager, trim_to_layer`` and ``pyg_tc eager, trim_to_layer``
  (``--trim``): the eager steps with PyG's ``trim_to_layer`` (layer ``i``
  drops the last ``i`` hops' nodes and edges); and ``pyg_tc eager,
  per-hop padded, trim_to_layer`` and ``pyg_tc captured, trim_to_layer``:
  the trimmed step on the batches padded hop by hop
  (:class:`pyg_tc.transforms.PadHops`, buckets from
  ``buckets_from_batches(per_hop=True)``; GAT's with ``self_loops=True``,
  so its layers' self-loop graphs come with the batch), eager and captured
  (``forward=`` the model with the bucket's hop counts).

Each row gives the wall time per step (``--steps`` steps back to back,
synchronised at the ends: what the training loop sees, the host included)
and the GPU time per step (the sum of the kernels' times from
``torch.profiler`` over ``--profile-steps`` steps), their ratio, and the
ratio to PyG's eager step (and to PyG's compiled step), and the time of
the matrix-product kernels (cuBLAS / CUTLASS GEMMs: the layers' ``Linear``
work, the same in every run: what no sparse kernel can remove). The batches
are padded to ``--levels`` buckets measured on ``--bucket-batches`` batches;
the rows give the padded / real nodes and edges. ``--top-kernels N`` logs
the N kernels taking most time per run. Run on a GPU: ``python -m benchmarks.suites.captured_step --out DIR``.
"""

from __future__ import annotations

import argparse
import copy
import itertools

import torch
import torch.nn.functional as Fn

import pyg_tc
from pyg_tc.bench.graphs import load_graph
from pyg_tc.bench.models import Net
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment, log
from pyg_tc.bench.timing import kernel_profile, loop_ms
from pyg_tc.capture import CapturedStep, seed_loss
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import PadHops, PadToBuckets, buckets_from_batches

from .common import read_records, rerender
from .minibatch import hops

#: graph -> (feature width, classes, training seeds): the real datasets' shapes
SHAPES = {'products': (100, 47, 196_615), 'reddit': (602, 41, 153_431), 'tiny': (16, 4, 1_000)}
DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def batches(name: str, a) -> tuple:
    """The data's shape, ``a.batches`` batches from pyg_tc's GPU loader and
    the same batches padded to buckets measured on ``a.bucket_batches`` others
    (with ``a.trim``: also padded hop by hop, else None)."""
    from torch_geometric.data import Data

    F, C, S = SHAPES[name]
    bg = load_graph(name, DEV)
    n = bg.num_nodes
    g = torch.Generator(device=DEV).manual_seed(0)
    data = Data(
        x=torch.randn(n, F, device=DEV, generator=g),
        y=torch.randint(0, C, (n,), device=DEV, generator=g),
        edge_index=bg.edge_index,
        num_nodes=n,
    )
    seeds = torch.randperm(n, device='cpu', generator=torch.Generator().manual_seed(0))[:S]
    loader = NeighborLoader(data, a.fanout, batch_size=a.batch_size, input_nodes=seeds, shuffle=True, device=DEV)
    torch.manual_seed(0)
    buckets = buckets_from_batches(loader, num_batches=a.bucket_batches, levels=a.levels)
    pad = PadToBuckets(buckets, a.batch_size, self_loops=True)
    hop_pad = None
    if a.trim:
        torch.manual_seed(0)
        hop_buckets = buckets_from_batches(loader, num_batches=a.bucket_batches, levels=a.levels, per_hop=True)
        log(f'[captured] {name}: per-hop buckets {[tuple(b) for b in hop_buckets]}')
        hop_pad = PadHops(hop_buckets, a.batch_size)
    raw = list(itertools.islice(loader, a.batches))
    padded = [pad(copy.copy(b)) for b in raw]
    per_hop = None
    if hop_pad is not None:  # GAT's: with the trimmed graphs' self-loop graphs (PadHops(self_loops=True))
        per_hop = {False: [hop_pad(copy.copy(b)) for b in raw]}
        if 'gat' in a.models:
            loops = PadHops(hop_pad.buckets, a.batch_size, self_loops=True)
            per_hop[True] = [loops(copy.copy(b)) for b in raw]
    return (F, C), raw, padded, buckets, per_hop


def _pyg_step(model, opt):
    def step(b):
        opt.zero_grad(set_to_none=True)
        B = b.batch_size
        loss = Fn.cross_entropy(model(b.x, b.plain_ei, *hops(b))[:B], b.y[:B])
        loss.backward()
        opt.step()
        return loss

    return step


def _tc_eager(model, opt):
    def step(b):
        opt.zero_grad(set_to_none=True)
        loss = seed_loss(model(b.x, b.edge_index, *hops(b)), b)
        loss.backward()
        opt.step()
        return loss

    return step


def wall_ms(step, data, steps: int) -> float:
    """Wall ms per step over ``steps`` steps cycling through ``data`` (three warm-up steps)."""
    return loop_ms(step, itertools.chain(data[:3], itertools.islice(itertools.cycle(data), steps)), DEV, warmup=3)


def step_records(name: str, a):
    (F, C), raw, padded, buckets, per_hop = batches(name, a)
    for b in raw:
        b.plain_ei = b.edge_index.as_tensor()
    real_n = sum(b.num_nodes for b in raw) / len(raw)
    real_e = sum(b.edge_index.size(1) for b in raw) / len(raw)
    pad_n = sum(p.num_nodes for p in padded) / len(padded)
    pad_e = sum(p.edge_index.size(1) for p in padded) / len(padded)
    fell_back = sum(p.get('bucket') is None for p in padded)
    log(f'[captured] {name}: buckets {[tuple(b) for b in buckets]}, {fell_back} of {len(padded)} batches fit none')
    hop_n = hop_e = None
    if per_hop is not None:
        plain = per_hop[False]
        hop_n = sum(p.num_nodes for p in plain) / len(plain)
        hop_e = sum(p.edge_index.size(1) for p in plain) / len(plain)
        log(
            f'[captured] {name}: per hop, {sum(p.get("bucket") is None for p in plain)} of {len(plain)} '
            'batches fit none'
        )
    dims = [F] + [a.hidden] * (a.layers - 1) + [C]
    for kind in a.models:
        torch.manual_seed(0)
        base = {'pyg': Net(torch_geometric_nn(), kind, dims).to(DEV), 'tc': Net(pyg_tc.nn, kind, dims).to(DEV)}
        runs = []
        m = base['pyg']
        runs.append(('PyG eager', raw, _pyg_step(m, torch.optim.Adam(m.parameters(), lr=1e-3))))
        if a.pyg_compile:
            mc = copy.deepcopy(base['pyg'])
            runs.append(
                (
                    'PyG compiled',
                    raw,
                    _pyg_step(torch.compile(mc, dynamic=True), torch.optim.Adam(mc.parameters(), lr=1e-3)),
                )
            )
        m = copy.deepcopy(base['tc'])
        runs.append(('pyg_tc eager', raw, _tc_eager(m, torch.optim.Adam(m.parameters(), lr=1e-3))))
        if a.trim:  # the eager steps with trim_to_layer (the same weights)
            m = copy.deepcopy(base['pyg'])
            m.trim = True
            runs.append(('PyG eager, trim_to_layer', raw, _pyg_step(m, torch.optim.Adam(m.parameters(), lr=1e-3))))
            m = copy.deepcopy(base['tc'])
            m.trim = True
            runs.append(('pyg_tc eager, trim_to_layer', raw, _tc_eager(m, torch.optim.Adam(m.parameters(), lr=1e-3))))
            hop_data = per_hop[kind == 'gat']  # GAT's batches carry their layers' self-loop graphs
            m = copy.deepcopy(base['tc'])
            m.trim = True
            runs.append(
                (
                    'pyg_tc eager, per-hop padded, trim_to_layer',
                    hop_data,
                    _tc_eager(m, torch.optim.Adam(m.parameters(), lr=1e-3)),
                )
            )
            m = copy.deepcopy(base['tc'])
            m.trim = True
            opt = torch.optim.Adam(m.parameters(), lr=1e-3, capturable=DEV.type == 'cuda')
            runs.append(
                (
                    'pyg_tc captured, trim_to_layer',
                    hop_data,
                    CapturedStep(m, opt, forward=lambda net, b: net(b.x, b.edge_index, *hops(b))),
                )
            )
        m = copy.deepcopy(base['tc'])
        runs.append(('pyg_tc eager, padded', padded, _tc_eager(m, torch.optim.Adam(m.parameters(), lr=1e-3))))
        m = copy.deepcopy(base['tc'])
        opt = torch.optim.Adam(m.parameters(), lr=1e-3, capturable=DEV.type == 'cuda')
        runs.append(('pyg_tc captured', padded, CapturedStep(m, opt)))
        recs = []
        for run, data, step in runs:
            log(f'[captured] {name} {kind}: {run}')
            w = wall_ms(step, data, a.steps)
            prof = kernel_profile(step, itertools.islice(itertools.cycle(data), a.profile_steps), DEV, a.top_kernels)
            gms, dense, kernels = prof['gpu_ms'], prof['dense_ms'], prof['kernels']
            if kernels:
                log(
                    f'[captured] {name} {kind} {run}: top kernels (name, launches / step, ms / step):\n  '
                    + '\n  '.join(f'{k:90s} {c:4d} {t:7.3f}' for k, c, t in kernels)
                )
            hop = per_hop is not None and any(data is v for v in per_hop.values())
            padded_run = 'padded' in run or 'captured' in run
            rec = dict(
                kind='step',
                graph=name,
                model=kind,
                run=run,
                wall_ms=w,
                gpu_ms=gms,
                wall_over_gpu=w / gms,
                dense_ms=dense,
                launches=prof['launches'],
                batches=len(data),
                nodes=hop_n if hop else pad_n if padded_run else real_n,
                edges=hop_e if hop else pad_e if padded_run else real_e,
            )
            if isinstance(step, CapturedStep):
                rec.update(replays=step.replays, eager_steps=step.eager_steps, graphs=len(step.graphs))
            recs.append(rec)
        ref = recs[0]['wall_ms']
        comp = next((r['wall_ms'] for r in recs if r['run'] == 'PyG compiled'), None)
        for r in recs:
            r['x_pyg_eager'] = ref / r['wall_ms']
            r['x_pyg_compiled'] = comp / r['wall_ms'] if comp else None
            r['padding_nodes'], r['padding_edges'] = pad_n / real_n, pad_e / real_e
            yield r


def torch_geometric_nn():
    import torch_geometric.nn as pnn

    return pnn


def main(argv=None, prog=None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n')[0])
    p.add_argument('--out', default='captured_step_out')
    p.add_argument('--graphs', default='reddit,products')
    p.add_argument('--models', default='sage,gcn,gat')
    p.add_argument('--fanout', default='15,10,5')
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument('--layers', type=int, default=3)
    p.add_argument('--batches', type=int, default=20, help='distinct batches the steps cycle through')
    p.add_argument('--bucket-batches', type=int, default=20, help='batches the buckets are measured on')
    p.add_argument('--levels', type=int, default=3, help='buckets (buckets_from_batches(levels=...))')
    p.add_argument('--top-kernels', type=int, default=0, help='log the N kernels taking most time per run')
    p.add_argument('--steps', type=int, default=50, help='timed steps per run')
    p.add_argument('--profile-steps', type=int, default=10)
    p.add_argument('--pyg-compile', action='store_true', help="also time torch.compile of PyG's model")
    p.add_argument(
        '--trim',
        action='store_true',
        help="also the steps with PyG's trim_to_layer: eager on the "
        'batches as sampled, eager and captured on batches padded hop by hop (PadHops)',
    )
    p.add_argument(
        '--render',
        metavar='JSONL',
        help='only rewrite the markdown and PNG from these records (the run block from their \'env\' record)',
    )
    a = p.parse_args(argv)
    a.fanout = [int(k) for k in a.fanout.split(',')]
    a.models = a.models.split(',')
    if DEV.type != 'cuda' and not a.render:
        log('[captured] no CUDA GPU: a dry run of the code on the CPU (the times mean nothing)')
    env = environment(DEV, fanout=a.fanout, batch_size=a.batch_size, hidden=a.hidden, layers=a.layers, trim=a.trim)
    if a.render:
        records, env = read_records(a.render)
    rep = Reporter(
        a.out,
        'captured_step.jsonl',
        'captured_step.md',
        'The mini-batch step, eager and captured',
        env=env,
        env_mode='first',
        sections=[
            Table(
                '## Per training step',
                'step',
                [
                    Col('graph', 'graph'),
                    Col('model', 'model'),
                    Col('run', 'run'),
                    Col('wall ms', 'wall_ms', '.3f'),
                    Col('GPU ms', 'gpu_ms', '.3f'),
                    Col('wall / GPU', 'wall_over_gpu', '.2f'),
                    Col('matrix products ms', 'dense_ms', '.3f'),
                    Col('kernels', 'launches', ',.0f'),
                    Col('x PyG eager', 'x_pyg_eager', '.2f', bold=True),
                    Col('x PyG compiled', 'x_pyg_compiled', '.2f', bold=True),
                    Col('nodes', 'nodes', ',.0f'),
                    Col('edges', 'edges', ',.0f'),
                ],
            )
        ],
        figures=[
            Figure(
                'captured_step.png',
                [
                    Panel(
                        _step_rows,
                        'case',
                        'x_pyg_eager',
                        series='run',
                        title="training step, speed-up over PyG's eager step (same batches; higher is better)",
                    )
                ],
            )
        ],
    )
    if a.render:
        rerender(rep, records, 'step')
        return
    rep.run([('steps', g, lambda g=g: step_records(g, a)) for g in a.graphs.split(',')], device=DEV)


def _step_rows(records):
    return [dict(r, case=f"{r['graph']} {r['model']}") for r in records if r.get('kind') == 'step']


if __name__ == '__main__':
    main()
