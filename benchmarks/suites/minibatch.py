"""Mini-batch training suite: ``NeighborLoader`` batches through
pyg_tc's layers and PyG's, the same batches for both.

Per graph: node features (``--width`` Gaussian columns, seed 0) and random
labels (``--classes``) on the CPU, a ``NeighborLoader`` (fan-out
``--fanout``, ``--batch-size`` seeds, shuffled with a seeded generator) whose
first ``--batches`` batches are sampled once and timed (sampling). Then per
model (3-layer GraphSAGE / GCN / GAT, hidden ``--hidden``) and
implementation (PyG's layers on a plain ``edge_index``, pyg_tc's layers with
the format built per batch on the GPU by ``DegreeBucketTransform``), one
warm-up pass and one timed pass over those batches, split into transfer
(``batch.to(device)``), format build (pyg_tc only) and compute (forward,
backward, Adam step), each ended by a device synchronisation; the loss per
batch, and its largest difference to PyG's (same initial weights). A record
per (graph, model, implementation) with the per-batch means, the format
build's share and pyg_tc's compute speed-up over PyG's. Then (``--epoch``,
the default) an epoch the way PyG's recipes train: loader workers
(``--workers``) sampling ahead, pinned memory and ``PrefetchLoader``, against
the same work done one phase after the other.

``python -m benchmarks.suites.minibatch --out DIR [--graphs reddit,products,tolokers]
[--models sage,gcn,gat] [--batches 30]`` writes ``minibatch.jsonl``,
``minibatch.md``, ``minibatch.png``; needs a sampler backend (pyg-lib or
torch_sparse) and, for the real graphs (tolokers), ``$PYG_TC_DATA``.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import statistics
import time
from typing import Iterator, Optional, Sequence

import torch
import torch.nn.functional as Fn

from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment
from pyg_tc.bench.models import Net
from pyg_tc.bench.timing import PhaseTimer, loop_time

MODELS = ('sage', 'gcn', 'gat')
IMPLS = ('pyg', 'pyg_tc')


def hops(b) -> tuple:
    """A batch's ``(num_sampled_nodes, num_sampled_edges)`` for :class:`Net`
    (``(None, None)`` where it has none)."""
    return getattr(b, 'num_sampled_nodes', None), getattr(b, 'num_sampled_edges', None)


def train_step(model, opt, b) -> torch.Tensor:
    """One Adam step on a batch: cross-entropy over its seed nodes; the loss."""
    opt.zero_grad()
    loss = Fn.cross_entropy(model(b.x, b.edge_index, *hops(b))[: b.batch_size], b.y[: b.batch_size])
    loss.backward()
    opt.step()
    return loss


def sample(name: str, a) -> tuple:
    """The graph, its ``Data`` on the CPU, its first ``a.batches`` batches and the sampling ms per batch."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from pyg_tc.bench.graphs import load_graph

    bg = load_graph(name, 'cpu')
    g = torch.Generator().manual_seed(0)
    n = bg.num_nodes
    data = Data(
        x=torch.randn(n, a.width, generator=g),
        y=torch.randint(0, a.classes, (n,), generator=g),
        edge_index=bg.edge_index,
        num_nodes=n,
    )
    loader = NeighborLoader(
        data, num_neighbors=a.fanout, batch_size=a.batch_size, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    batches = []  # fewer on a small graph (Tolokers: 12)
    seconds, n = loop_time(batches.append, itertools.islice(loader, a.batches), 'cpu')
    return bg, data, batches, 1e3 * seconds / n


def run_impl(impl: str, kind: str, batches: list, a) -> dict:
    """One warm-up and one timed pass of ``impl`` over ``batches``: per-batch means and losses."""
    import torch_geometric.nn as pyg_nn
    import pyg_tc
    from pyg_tc.transforms import DegreeBucketTransform

    dev = a.device
    torch.manual_seed(0)
    model = Net(pyg_tc.nn if impl == 'pyg_tc' else pyg_nn, kind, [a.width, a.hidden, a.hidden, a.classes]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    build = DegreeBucketTransform() if impl == 'pyg_tc' else None
    losses = []
    for timed in (False, True):
        pt = PhaseTimer(dev)  # the timed pass's phases (the first pass warms up)
        for b in batches:
            pt.start()
            b = b.to(dev, non_blocking=True)
            pt.lap('transfer')
            if build is not None:  # (PyG's layers build nothing)
                b = build(b)
                pt.lap('build')
            loss = train_step(model, opt, b)
            pt.lap('compute')
            if timed:
                losses.append(float(loss))
    if a.profile:
        profile_impl(f'{a.graph} {kind} {impl}', model, opt, build, batches[:5], a)
    mean = {'build_ms': 0.0, **pt.mean_ms()}
    total = sum(mean.values())
    return dict(
        mean,
        total_ms=total,
        build_share=mean['build_ms'] / total,
        losses=losses,
        peak_mib=torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == 'cuda' else None,
    )


def run_epoch(impl: str, kind: str, data, a) -> dict:
    """A pass over ``a.batches`` batches the way PyG's recipes train: the
    loader's ``a.workers`` worker processes sample ahead, batches come in
    pinned memory and ``PrefetchLoader`` copies the next one to the GPU on a
    side stream while the current one trains; pyg_tc builds its format on
    the GPU in the loop. One warm-up pass (workers started, caches filled),
    then one timed pass; the batches are sampled afresh (not the ones the
    per-batch records used)."""
    import torch_geometric.nn as pyg_nn
    from torch_geometric.loader import NeighborLoader, PrefetchLoader
    import pyg_tc
    from pyg_tc.transforms import DegreeBucketTransform

    dev = a.device
    cuda = dev.type == 'cuda'
    torch.manual_seed(0)
    model = Net(pyg_tc.nn if impl == 'pyg_tc' else pyg_nn, kind, [a.width, a.hidden, a.hidden, a.classes]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    build = DegreeBucketTransform() if impl == 'pyg_tc' else None
    loader = NeighborLoader(
        data,
        num_neighbors=a.fanout,
        batch_size=a.batch_size,
        shuffle=True,
        num_workers=a.workers,
        persistent_workers=a.workers > 0,
        pin_memory=cuda,
        generator=torch.Generator().manual_seed(0),
    )
    source = PrefetchLoader(loader, dev) if cuda else loader
    last = []

    def one(b):
        b = b.to(dev)  # a no-op after PrefetchLoader
        if build is not None:
            b = build(b)
        last[:] = [train_step(model, opt, b)]

    for _ in range(2):  # a warm-up pass, then the timed one
        dt, n = loop_time(one, itertools.islice(source, a.batches), dev)
    loss = last[0]
    del source, loader  # stops the workers
    return dict(
        epoch_ms=1e3 * dt,
        epoch_batches=n,
        epoch_batch_ms=1e3 * dt / n,
        workers=a.workers,
        final_loss=float(loss.detach()),
    )


def profile_impl(title: str, model, opt, build, batches: list, a) -> None:
    """Appends to ``a.profile`` where the time of ``batches`` goes: device
    synchronisations per phase (``torch.cuda.set_sync_debug_mode``) and the
    profiler's top operators by CPU and by device time."""
    import warnings
    from torch.profiler import ProfilerActivity, profile, record_function

    dev = a.device

    def step(b):
        with record_function('transfer'):
            b = b.to(dev, non_blocking=True)
        if build is not None:
            with record_function('build'):
                b = build(b)
        with record_function('compute'):
            train_step(model, opt, b)
        return b

    lines = [f'==== {title}']
    if dev.type == 'cuda':

        def syncs(phase: str, fn):
            """Runs ``fn`` with synchronisation warnings on; one line: where they came from."""
            torch.cuda.synchronize()
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter('always')
                torch.cuda.set_sync_debug_mode('warn')
                try:
                    out = fn()
                finally:
                    torch.cuda.set_sync_debug_mode(0)
            where = collections.Counter(f'{m.filename}:{m.lineno}' for m in w if 'synchroniz' in str(m.message))
            lines.append(
                f'syncs in {phase}: {sum(where.values())} '
                + ', '.join(f'{k.split("site-packages/")[-1].split("pyg_tc/")[-1]} x{v}' for k, v in where.items())
            )
            return out

        b = syncs('transfer', lambda: batches[0].to(dev, non_blocking=True))
        b = syncs('build', lambda: build(b) if build is not None else b)
        syncs('compute', lambda: train_step(model, opt, b))
    import cProfile
    import io
    import pstats

    bs = [b.to(dev) for b in batches]
    bs = [build(b) if build is not None else b for b in bs]
    pr = cProfile.Profile()
    pr.enable()
    for b in bs:
        train_step(model, opt, b)
    pr.disable()
    if build is not None:
        bs = [b.to(dev) for b in batches]
        pr.enable()
        for b in bs:
            build(b)
        pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats('tottime').print_stats(45)
    lines.append(s.getvalue())
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == 'cuda' else [])
    with profile(activities=acts) as prof:
        for b in batches:
            step(b)
        if dev.type == 'cuda':
            torch.cuda.synchronize()
    ka = prof.key_averages()
    dkey = 'self_device_time_total' if dev.type == 'cuda' else 'self_cpu_time_total'
    lines.append(ka.table(sort_by='cpu_time_total', row_limit=40, max_name_column_width=60))
    lines.append(ka.table(sort_by=dkey, row_limit=40, max_name_column_width=60))
    with open(a.profile, 'a') as f:
        f.write('\n'.join(lines) + '\n')


def _past_budget(a) -> bool:
    """Whether ``--budget`` seconds have passed since the run started (checked
    before each model and each epoch part, not only before each graph)."""
    return a.budget is not None and time.perf_counter() - a.t0 > a.budget


def bench_graph(name: str, a) -> Iterator[dict]:
    """Records of one graph: its batches, then every (model, implementation)."""
    bg, data, batches, sample_ms = sample(name, a)
    a.graph = name
    nodes = statistics.mean(b.num_nodes for b in batches)
    edges = statistics.mean(b.edge_index.size(1) for b in batches)
    base = dict(
        graph=name, nodes=bg.num_nodes, edges=bg.num_edges, batch_nodes=nodes, batch_edges=edges, sample_ms=sample_ms
    )
    for kind in a.models:
        if _past_budget(a):
            print(f'[minibatch] time budget of {a.budget:.0f} s spent: {name} {kind} and later skipped', flush=True)
            break
        recs = {}
        for impl in IMPLS:
            if a.device.type == 'cuda':
                torch.cuda.reset_peak_memory_stats(a.device)
            recs[impl] = run_impl(impl, kind, batches, a)
        ref = recs['pyg']['losses']
        for impl, r in recs.items():
            diff = max(abs(x - y) for x, y in zip(r['losses'], ref))
            out = dict(
                base,
                kind='minibatch',
                model=kind,
                impl=impl,
                loss_first=r['losses'][0],
                loss_last=r['losses'][-1],
                loss_max_diff_vs_pyg=diff,
                **{k: v for k, v in r.items() if k != 'losses'},
            )
            if impl == 'pyg_tc':
                out.update(
                    compute_speedup=recs['pyg']['compute_ms'] / r['compute_ms'],
                    total_speedup=recs['pyg']['total_ms'] / r['total_ms'],
                )
            yield out
        if not a.epoch:
            continue
        if _past_budget(a):
            print(f'[minibatch] time budget of {a.budget:.0f} s spent: {name} {kind} epoch skipped', flush=True)
            continue
        ep = {impl: run_epoch(impl, kind, data, a) for impl in IMPLS}
        for impl, e in ep.items():
            # serial: the same work one phase after the other (the per-batch records)
            serial = sample_ms + recs[impl]['total_ms']
            out = dict(
                base,
                kind='epoch',
                model=kind,
                impl=impl,
                serial_batch_ms=serial,
                overlap_speedup=serial / e['epoch_batch_ms'],
                **e,
            )
            if impl == 'pyg_tc':
                out['epoch_speedup'] = ep['pyg']['epoch_batch_ms'] / e['epoch_batch_ms']
            yield out


def reporter(out: str, env: dict) -> Reporter:
    """``minibatch.jsonl``, ``minibatch.md``, ``minibatch.png``."""
    k = lambda key, spec='', h=None, bold=False: Col(h or key, key, spec, bold)  # noqa: E731
    table = Table(
        '## NeighborLoader training, per batch (ms, means over the timed pass)',
        'minibatch',
        [
            k('graph'),
            k('model'),
            k('impl'),
            k('batch_nodes', ',.0f', 'batch nodes'),
            k('batch_edges', ',.0f', 'batch edges'),
            k('sample_ms', '.1f', 'sampling (CPU)'),
            k('transfer_ms', '.2f', 'transfer'),
            k('build_ms', '.2f', 'format build'),
            k('compute_ms', '.2f', 'compute'),
            k('total_ms', '.2f', 'transfer + build + compute'),
            k('build_share', '.1%', 'build share'),
            k('compute_speedup', '.2f', 'compute x PyG', True),
            k('total_speedup', '.2f', 'total x PyG', True),
            k('peak_mib', ',.0f', 'peak MiB'),
            k('loss_last', '.4f', 'last loss'),
            k('loss_max_diff_vs_pyg', '.1e', 'max loss diff vs PyG'),
        ],
        note='The same sampled batches for both implementations; compute = forward + backward + Adam step. '
        'Sampling is done once per graph (CPU, the loader\'s own sampler) and shown per batch.',
    )

    epoch = Table(
        '## An epoch with sampling overlapped (ms per batch)',
        'epoch',
        [
            k('graph'),
            k('model'),
            k('impl'),
            k('workers', 'd', 'loader workers'),
            k('epoch_batches', 'd', 'batches'),
            k('serial_batch_ms', '.2f', 'serial: sampling + transfer + build + compute'),
            k('epoch_batch_ms', '.2f', 'overlapped epoch'),
            k('overlap_speedup', '.2f', 'overlap gain'),
            k('epoch_speedup', '.2f', 'epoch x PyG', True),
            k('final_loss', '.4f', 'last loss'),
        ],
        note='NeighborLoader with worker processes, pinned memory and PrefetchLoader (the next batch copied to '
        'the GPU on a side stream); freshly sampled batches, one warm-up pass then one timed pass. '
        'serial = the per-batch table\'s phases one after the other.',
    )

    def panels(records):
        rs = [r for r in records if r.get('kind') == 'minibatch']
        return [
            Panel(
                lambda _, g=g: [dict(r, series=r['impl'], label=r['model']) for r in rs if r['graph'] == g],
                'label',
                'compute_ms',
                'series',
                style='bar',
                title=f'{g}: compute per batch',
                ylabel='ms',
            )
            for g in dict.fromkeys(r['graph'] for r in rs)
        ]

    return Reporter(
        out,
        'minibatch.jsonl',
        'minibatch.md',
        'Mini-batch training (NeighborLoader)',
        env,
        'first',
        [table, epoch],
        [Figure('minibatch.png', panels, ncols=3, title='per-batch compute, PyG vs pyg_tc')],
        tag='minibatch',
    )


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Command line (module doc)."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n\n')[0])
    p.add_argument('--out', default='minibatch_out')
    p.add_argument('--graphs', default='reddit,products,tolokers')
    p.add_argument('--models', default=','.join(MODELS))
    p.add_argument('--batches', type=int, default=30)
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--fanout', default='15,10,5')
    p.add_argument('--width', type=int, default=128)
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument('--classes', type=int, default=41)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--budget', type=float, help='seconds: start no graph, model or epoch part after that')
    p.add_argument(
        '--epoch',
        action=argparse.BooleanOptionalAction,
        default=True,
        help='also time an epoch with sampling overlapped (workers, pinned memory, prefetch)',
    )
    p.add_argument('--workers', type=int, default=8, help='loader worker processes of the overlapped epoch')
    p.add_argument('--profile', help='append a profile of 5 batches per (graph, model, impl) to this file')
    a = p.parse_args(argv)
    split = lambda s: [t.strip() for t in s.split(',') if t.strip()]  # noqa: E731
    a.graphs, a.models, a.fanout = split(a.graphs), split(a.models), [int(f) for f in split(a.fanout)]
    bad = [m for m in a.models if m not in MODELS]
    if bad:
        p.error(f'unknown models {bad}')
    a.device = torch.device(a.device)
    a.t0 = time.perf_counter()  # --budget's clock, for the reporter (per graph) and _past_budget
    rep = reporter(a.out, environment(a.device, args={k: str(v) for k, v in vars(a).items() if k != 't0'}))
    items = [('graph', g, lambda g=g: bench_graph(g, a)) for g in a.graphs]
    paths = rep.run(items, a.device, budget_s=a.budget, t0=a.t0)
    print(open(paths['markdown']).read())
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
