"""GPU neighbour sampling against PyG's samplers, and the mini-batch epoch it
enables (JSON + markdown + PNG).

Per graph (R-MAT Reddit- and products-shaped by default; node features of the
real datasets' widths, random labels; the training seeds as many as the real
split's):

* ``sampler``: per-batch sampling time and sampled edges per second of
  pyg_tc's GPU sampler (the op alone, and with the batch's CSR built), PyG's
  ``NeighborSampler`` on pyg-lib in one process, torch_sparse's sampler, and
  PyG's ``NeighborLoader`` on pyg-lib with 1 .. ``--max-workers`` worker
  processes (sampling only: a graph without features);
* ``epoch``: a full training epoch (all training seeds, ``--batch-size``
  seeds per batch) per model: PyG's layers with PyG's loader at its best
  worker count (features on the CPU, pinned, copied per batch, the standard
  recipe), pyg_tc's layers with that same loader, and pyg_tc's layers with
  pyg_tc's GPU loader; for the latter also the epoch split into sampling,
  gathering and the step (each phase synchronised, over ``--split-batches``
  batches); and pyg_tc's GPU loader with its batches padded to two buckets
  measured on 20 batches (:class:`pyg_tc.transforms.PadToBuckets` as the loader's
  ``transform``: padded on the side stream) and the step captured
  (:class:`pyg_tc.capture.CapturedStep`, one CUDA graph per bucket); with
  ``--trim`` also the eager runs with PyG's ``trim_to_layer`` (layer ``i``
  drops the last ``i`` hops), and the trimmed step captured on batches
  padded hop by hop (:class:`pyg_tc.transforms.PadHops`; GAT derives its
  layers' self-loop graphs inside the captured step);
* the sampler's GPU memory: the graph (CSC, edge permutation, state) and the
  peak of one batch's workspace.

Run on a GPU (pyg-lib and torch_sparse optional; the rows without them are
skipped): ``python -m benchmarks.suites.sampling --out DIR [--graphs products,reddit]
[--models sage,gcn,gat]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

import torch

from pyg_tc.bench.graphs import load_graph
from pyg_tc.bench.models import Net
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment, log
from pyg_tc.bench.timing import PhaseTimer, loop_ms, loop_time

from .minibatch import train_step as step

#: graph -> (feature width, classes, training seeds): the real datasets' shapes
SHAPES = {
    'products': (100, 47, 196_615),
    'reddit': (602, 41, 153_431),
    'arxiv': (128, 40, 90_941),
    'tiny': (16, 4, 1_000),
}


DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')  # the CPU runs a dry run of the code
#: the epoch run with the batches padded to buckets and the step captured (CapturedStep)
CAPTURED = 'pyg_tc GPU loader, padded + captured step'
#: the same with the batches padded hop by hop (PadHops) and a trimmed model (--trim)
CAPTURED_HOPS = 'pyg_tc GPU loader, per-hop padded + captured step'
#: a run's loader name with its batches made ahead on the loader's thread (--prefetch K)
PREFETCH = ', prefetch {}'


def allocated(peak: bool = False) -> float:
    if DEV.type != 'cuda':
        return 0.0
    return torch.cuda.max_memory_allocated() if peak else torch.cuda.memory_allocated()


def reset_peak():
    if DEV.type == 'cuda':
        torch.cuda.reset_peak_memory_stats()


def make_data(name: str, seed: int = 0):
    from torch_geometric.data import Data

    width, classes, train = SHAPES[name]
    bg = load_graph(name, DEV, seed)
    n = bg.num_nodes
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, width, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    seeds = torch.randperm(n, generator=g)[:train]
    return Data(edge_index=bg.edge_index.cpu(), x=x, y=y, num_nodes=n), seeds, bg


def timed(fn, reps: int) -> float:
    """ms per call over ``reps`` calls after one warm-up call."""
    return loop_ms(lambda _: fn(), range(reps + 1), DEV, warmup=1)


def sampler_records(name, data, seeds, a):
    from torch_geometric.data import Data
    import torch_geometric.typing as tgt
    from pyg_tc.loader import NeighborSampler
    from pyg_tc.ops import neighbor as ops

    B, fan = a.batch_size, a.fanout
    batches = [seeds[i * B : (i + 1) * B] for i in range(a.batches)]
    it = itertools.cycle(batches)
    base = dict(kind='sampler', graph=name, fanout=str(fan), batch_size=B)
    reset_peak()
    before = allocated()
    s = NeighborSampler(
        Data(edge_index=data.edge_index, num_nodes=data.num_nodes),
        fan,
        device=DEV,
        cpu_sampler='auto' if DEV.type == 'cuda' else 'reference',
    )  # (pyg_tc's sampler on the CPU)
    graph_mb = (allocated() - before) / 2**20
    out = s._sample(batches[0])
    edges = sum(len(s._sample(b).edge) for b in batches) / len(batches)
    reset_peak()
    held = allocated()
    del out
    ms_op = timed(
        lambda: ops.neighbor_sample(
            s.colptr,
            s.row,
            next(it).to(DEV),
            s.num_neighbors,
            False,
            int(torch.randint(0, 2**62, ())),
            s._node_map,
            s._first,
        ),
        a.batches,
    )
    ms = timed(lambda: s._sample(next(it)), a.batches)
    work_mb = (allocated(True) - held) / 2**20
    yield dict(
        base,
        sampler='pyg_tc GPU',
        ms=ms,
        ms_op=ms_op,
        edges=edges,
        edges_per_s=edges / ms * 1e3,
        graph_mb=graph_mb,
        workspace_mb=work_mb,
    )
    s = None
    if tgt.WITH_PYG_LIB:
        from torch_geometric.sampler import NeighborSampler as PyGSampler, NodeSamplerInput

        t0 = time.perf_counter()
        ps = PyGSampler(Data(edge_index=data.edge_index, num_nodes=data.num_nodes), fan)
        setup = time.perf_counter() - t0
        ms = timed(lambda: ps.sample_from_nodes(NodeSamplerInput(None, next(it))), min(a.batches, 20))
        yield dict(base, sampler='pyg-lib, 1 process', ms=ms, edges=edges, edges_per_s=edges / ms * 1e3, setup_s=setup)
    if tgt.WITH_TORCH_SPARSE:
        from torch_geometric.sampler.utils import to_csc

        colptr, row, _ = to_csc(Data(edge_index=data.edge_index, num_nodes=data.num_nodes), device='cpu')
        ms = timed(
            lambda: torch.ops.torch_sparse.neighbor_sample(colptr, row, next(it), fan, False, True), min(a.batches, 10)
        )
        yield dict(base, sampler='torch_sparse, 1 process', ms=ms, edges=edges, edges_per_s=edges / ms * 1e3)
    if tgt.WITH_PYG_LIB:
        from torch_geometric.loader import NeighborLoader

        bare = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
        for w in a.workers:
            loader = NeighborLoader(
                bare, fan, input_nodes=seeds, batch_size=B, shuffle=True, num_workers=w, persistent_workers=True
            )
            n = min(len(loader), a.batches * 4)
            # the loader's batches one after the other (the first untimed: the workers start)
            ms = loop_ms(lambda b: None, itertools.islice(loader, n), 'cpu', warmup=1)
            loader = None
            yield dict(
                base,
                sampler=f'pyg-lib loader, {w} workers',
                workers=w,
                ms=ms,
                edges=edges,
                edges_per_s=edges / ms * 1e3,
            )


def epoch_records(name, data, seeds, a, best_workers):
    import torch_geometric.nn as pyg_nn
    import torch_geometric.typing as tgt
    from torch_geometric.loader import NeighborLoader as PyGLoader
    import pyg_tc.nn
    from pyg_tc.capture import CapturedStep
    from pyg_tc.loader import NeighborLoader
    from pyg_tc.transforms import PadHops, PadToBuckets, buckets_from_batches

    width, classes, _ = SHAPES[name]
    dims = [width, a.hidden, a.hidden, classes]
    dev = DEV
    gpu_data = data.to(dev)
    ours = NeighborLoader(gpu_data, a.fanout, input_nodes=seeds, batch_size=a.batch_size, shuffle=True)
    pyg = None
    if tgt.WITH_PYG_LIB or tgt.WITH_TORCH_SPARSE:
        pyg = PyGLoader(
            data,
            a.fanout,
            input_nodes=seeds,
            batch_size=a.batch_size,
            shuffle=True,
            num_workers=best_workers,
            persistent_workers=best_workers > 0,
            pin_memory=True,
        )
    buckets = buckets_from_batches(ours, num_batches=20, levels=2)
    hop_buckets = buckets_from_batches(ours, num_batches=20, levels=2, per_hop=True) if a.trim else None
    for kind in a.models:
        rows = []
        runs = [
            ('PyG', 'PyG loader', False),
            ('pyg_tc', 'PyG loader', False),
            ('pyg_tc', 'pyg_tc GPU loader', False),
            ('pyg_tc', CAPTURED, False),
        ]
        if a.trim:  # the eager runs again with trim_to_layer (CapturedStep's padded batches do not trim)
            runs += [(lib, name, True) for lib, name, _ in runs if name != CAPTURED]
            runs.append(('pyg_tc', CAPTURED_HOPS, True))  # the trimmed step captured on per-hop padded batches
        if a.prefetch:  # pyg_tc's loader runs again with its batches made ahead on its thread
            runs += [
                (lib, name + PREFETCH.format(a.prefetch), trim) for lib, name, trim in runs if name != 'PyG loader'
            ]
        for lib, loader_name, trim in runs:
            base = loader_name.split(', prefetch')[0]
            prefetch = a.prefetch if base != loader_name else 0
            loader = {'PyG loader': pyg, 'pyg_tc GPU loader': ours}.get(loader_name)
            transform = {
                CAPTURED: lambda: PadToBuckets(buckets, a.batch_size, self_loops=kind == 'gat'),
                CAPTURED_HOPS: lambda: PadHops(hop_buckets, a.batch_size),
            }.get(base, lambda: None)()
            if loader is None and base != 'PyG loader':  # padded on the loader's stream, as they are made
                loader = NeighborLoader(
                    gpu_data,
                    a.fanout,
                    input_nodes=seeds,
                    batch_size=a.batch_size,
                    shuffle=True,
                    transform=transform,
                    prefetch=prefetch,
                )
            if loader is None:
                continue
            torch.manual_seed(0)
            model = Net(pyg_tc.nn if lib == 'pyg_tc' else pyg_nn, kind, dims, trim=trim).to(dev)
            captured = base in (CAPTURED, CAPTURED_HOPS)
            opt = torch.optim.Adam(model.parameters(), lr=0.003, capturable=captured and DEV.type == 'cuda')
            if base == CAPTURED_HOPS:  # the bucket's hop counts: trim_to_layer at static boundaries
                run = CapturedStep(
                    model, opt, forward=lambda m, b: m(b.x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)
                )
            else:
                run = CapturedStep(model, opt) if captured else (lambda b: step(model, opt, b))
            times, n = [], 0
            for ep in range(a.epochs + 1):  # epoch 0 warms up (kernels, workers, allocator, graphs)
                t, n = loop_time(
                    lambda b: run(b.to(dev, non_blocking=True)), itertools.islice(loader, a.max_batches), DEV
                )
                if ep:
                    times.append(t)
            rec = dict(
                kind='epoch',
                graph=name,
                model=kind,
                layers=lib,
                loader=loader_name,
                trim=trim,
                batches=n,
                workers=best_workers if loader_name == 'PyG loader' else 0,
                epoch_s=min(times),
                epoch_ms_per_batch=1e3 * min(times) / n,
                peak_gb=allocated(True) / 2**30,
            )
            if loader_name == 'pyg_tc GPU loader':
                rec.update(split(ours, model, opt, a))
            if isinstance(run, CapturedStep):
                rec.update(replays=run.replays, eager_steps=run.eager_steps, graphs=len(run.graphs))
            rows.append(rec)
            model = opt = None
            reset_peak()
        ref = next((r['epoch_s'] for r in rows if r['layers'] == 'PyG' and not r['trim']), None)
        for r in rows:
            r['x_pyg'] = ref / r['epoch_s'] if ref else None
            yield r


def uva_records(name, data, seeds, a):
    """The epoch of the first model with the graph and the features in pinned
    host memory, read over UVA, while another allocation holds all but
    ``--uva-free-gb`` of the GPU's memory (a feature matrix that does not fit)."""
    import pyg_tc.nn
    from pyg_tc.loader import NeighborLoader

    width, classes, _ = SHAPES[name]
    kind = a.models[0]
    free, _ = torch.cuda.mem_get_info()
    hog = torch.empty(max(0, free - int(a.uva_free_gb * 2**30)), dtype=torch.uint8, device=DEV)
    loader = NeighborLoader(
        data, a.fanout, input_nodes=seeds, batch_size=a.batch_size, shuffle=True, graph_memory='pinned'
    )
    torch.manual_seed(0)
    model = Net(pyg_tc.nn, kind, [width, a.hidden, a.hidden, classes]).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    times = []
    for ep in range(a.epochs + 1):
        t, n = loop_time(lambda b: step(model, opt, b), itertools.islice(loader, a.max_batches), DEV)
        if ep:
            times.append(t)
    x_gb = data.x.numel() * data.x.element_size() / 2**30
    rec = dict(
        kind='epoch',
        graph=name,
        model=kind,
        layers='pyg_tc',
        loader='pyg_tc GPU loader, host memory (UVA)',
        batches=n,
        workers=0,
        epoch_s=min(times),
        epoch_ms_per_batch=1e3 * min(times) / n,
        gpu_free_gb=a.uva_free_gb,
        x_gb=x_gb,
    )
    rec.update(split(loader, model, opt, a))
    del hog
    yield rec


def _sampler_rows(records):
    """Sampler records; pyg_tc's rows with their speed-up over pyg-lib in one
    process and over pyg-lib's loader at its best worker count (same graph)."""
    rows = [dict(r) for r in records if r.get('kind') == 'sampler']
    for r in rows:
        if r['sampler'] != 'pyg_tc GPU':
            continue
        same = [o for o in rows if o['graph'] == r['graph']]
        single = [o['ms'] for o in same if o['sampler'] == 'pyg-lib, 1 process']
        best = [o['ms'] for o in same if o.get('workers')]
        r['x_single'] = single[0] / r['ms'] if single else None
        r['x_best'] = min(best) / r['ms'] if best else None
    return rows


def _epoch_rows(records):
    """Epoch records with the plot's keys: the case (graph, model) and the run (layers + loader)."""
    return [
        dict(
            r,
            case=f"{r['graph']} {r['model']}",
            run=f"{r['layers']} layers, {r['loader']}" + (', trim_to_layer' if r.get('trim') else ''),
        )
        for r in records
        if r.get('kind') == 'epoch'
    ]


def _epoch_panels(records):
    """The epoch plot: one bar per run along x for a single (graph, model)
    case (many runs), else one group per case and a bar per run."""
    rows = _epoch_rows(records)
    title = 'training epoch, all training seeds (s; lower is better)'
    if len({r['case'] for r in rows}) == 1:
        return [Panel(_epoch_rows, 'run', 'epoch_s', title=f"{rows[0]['case']}: {title}")]
    return [Panel(_epoch_rows, 'case', 'epoch_s', series='run', title=title)]


def split(loader, model, opt, a):
    """Per-batch ms of sampling (with the batch's CSR), gathering and the
    step, each phase synchronised, on the first ``--split-batches`` batches."""
    s = loader._sampler
    pt = PhaseTimer(DEV)
    for i in range(min(a.split_batches, len(loader))):
        index = torch.arange(i * a.batch_size, min((i + 1) * a.batch_size, loader.input_data.node.numel()))
        pt.start()
        out = s.sample_from_nodes(loader.input_data[index])
        pt.lap('sample')
        b = loader.filter_fn(out)
        pt.lap('gather')
        step(model, opt, b)
        pt.lap('step')
    return pt.mean_ms()


def main(argv=None, prog=None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n')[0])
    p.add_argument('--out', default='sampling_out')
    p.add_argument('--graphs', default='products,reddit')
    p.add_argument('--models', default='sage,gcn,gat')
    p.add_argument('--fanout', default='15,10,5')
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument('--batches', type=int, default=30, help='batches timed per sampler')
    p.add_argument('--split-batches', type=int, default=20)
    p.add_argument('--epochs', type=int, default=1, help='timed epochs (after one warm-up epoch)')
    p.add_argument('--max-batches', type=int, default=None, help='cap the batches of an epoch')
    p.add_argument(
        '--workers',
        default=','.join(str(w) for w in (1, 2, 4, 8, 16, 32) if w <= (os.cpu_count() or 1)),
        help="PyG loader worker counts to try (default: powers of two up to the machine's cores)",
    )
    p.add_argument('--parts', default='sampler,epoch', help='sampler, epoch, uva (graph and features in host memory)')
    p.add_argument('--uva-free-gb', type=float, default=2.0, help='GPU memory left free in the uva part')
    p.add_argument(
        '--trim',
        action='store_true',
        help="epoch: also the eager runs with PyG's trim_to_layer, and the trimmed step captured on "
        'per-hop padded batches (SAGE, GCN)',
    )
    p.add_argument(
        '--prefetch',
        type=int,
        default=0,
        metavar='K',
        help="epoch: also pyg_tc's loader runs with K batches made ahead on the loader's thread",
    )
    p.add_argument('--render', metavar='JSONL', help='only rewrite the markdown and PNG from these records')
    a = p.parse_args(argv)
    a.fanout = [int(k) for k in a.fanout.split(',')]
    a.models = a.models.split(',')
    a.workers = [int(w) for w in a.workers.split(',')]
    parts = a.parts.split(',')
    if DEV.type != 'cuda':
        log('[sampling] no CUDA GPU: a dry run of the code on the CPU (the times mean nothing)')
    rep = Reporter(
        a.out,
        'sampling.jsonl',
        'sampling.md',
        'GPU neighbour sampling and the mini-batch epoch',
        env=environment(DEV, fanout=a.fanout, batch_size=a.batch_size),
        env_mode='first',
        tag='sampling',
        sections=[
            Table(
                '## Sampling, per batch',
                _sampler_rows,
                [
                    Col('graph', 'graph'),
                    Col('sampler', 'sampler'),
                    Col('ms / batch', 'ms', '.2f'),
                    Col('op only ms', 'ms_op', '.2f'),
                    Col('edges / batch', 'edges', ',.0f'),
                    Col('M edges / s', lambda r: r['edges_per_s'] / 1e6, '.2f'),
                    Col('graph MB', 'graph_mb', '.0f'),
                    Col('workspace MB', 'workspace_mb', '.0f'),
                    Col('x pyg-lib, 1 process', 'x_single', '.1f', bold=True),
                    Col('x pyg-lib, best loader', 'x_best', '.1f', bold=True),
                ],
            ),
            Table(
                '## Epoch',
                'epoch',
                [
                    Col('graph', 'graph'),
                    Col('model', 'model'),
                    Col('layers', 'layers'),
                    Col('loader', 'loader'),
                    Col('trim_to_layer', lambda r: 'yes' if r.get('trim') else ''),
                    Col('workers', 'workers'),
                    Col('batches', 'batches'),
                    Col('epoch s', 'epoch_s', '.2f'),
                    Col('ms / batch', 'epoch_ms_per_batch', '.2f'),
                    Col('x PyG', 'x_pyg', '.2f', bold=True),
                    Col('sample ms', 'sample_ms', '.2f'),
                    Col('gather ms', 'gather_ms', '.2f'),
                    Col('step ms', 'step_ms', '.2f'),
                    Col('peak GB', 'peak_gb', '.2f'),
                ],
            ),
        ],
        figures=[
            Figure(
                'sampling_throughput.png',
                [
                    Panel(
                        'sampler',
                        'sampler',
                        'edges_per_s',
                        series='graph',
                        logy=10,
                        title='sampled edges per second (higher is better)',
                    )
                ],
            ),
            Figure('sampling_epoch.png', _epoch_panels),
        ],
    )

    def graph_items(name):
        state = {}

        def load():
            log(f'[sampling] {name}: generating the graph')
            state['data'], state['seeds'], _ = make_data(name)
            return []

        def samplers():
            best = None
            for r in sampler_records(name, state['data'], state['seeds'], a):
                if r.get('workers') and (best is None or r['ms'] < best[1]):
                    best = (r['workers'], r['ms'])
                yield r
            state['best'] = best[0] if best else 0

        def epochs():
            yield from epoch_records(name, state['data'], state['seeds'], a, state.get('best', max(a.workers)))

        items = [('graph', name, load)]
        if 'sampler' in parts:
            items.append(('sampler', name, samplers))
        if 'epoch' in parts:
            items.append(('epoch', name, epochs))
        if 'uva' in parts:
            items.append(('uva', name, lambda: uva_records(name, state['data'], state['seeds'], a)))
        return items

    if a.render:
        import json

        rep.records = [json.loads(line) for line in open(a.render) if line.strip()]
        rep.records = [r for r in rep.records if r.get('kind') != 'summary']
        rep.write()
        return
    rep.run([it for g in a.graphs.split(',') for it in graph_items(g)], device=DEV)


if __name__ == '__main__':
    main()
