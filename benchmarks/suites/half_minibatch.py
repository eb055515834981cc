"""Half precision in mini-batch training: features stored and gathered in
bf16 / fp16 / fp8, the step under autocast with half weights, eager and
captured, against pyg_tc's fp32 (JSON + markdown + PNG).

Parts (``--parts``, a comma list):

* ``gather``: the loader's feature gather of ``--rows`` random rows,
  kernel-only, per feature width (products' 100, Reddit's 602), from the
  GPU's memory (``hbm``) and from pinned host memory over UVA (``uva``):
  fp32 as the loader gathers it (``data.x`` on the GPU; its pinned copy,
  rows padded to 64 bytes), bf16 as the user stores it (rows unpadded),
  bf16 / fp16 as :class:`~pyg_tc.loader.FeatureStorage` keeps it (rows
  padded to 16 bytes on the GPU, 64 in pinned memory), fp8 (e4m3,
  per-column scales) upcast to bf16 in the gather.
* ``epoch``: a training epoch (``--batches`` batches of ``--batch-size``
  seeds, fan-out ``--fanout``, the loader included) on the R-MAT products-
  and Reddit-shaped graphs (the real datasets' widths), 3-layer SAGE / GCN /
  GAT of ``--hidden`` channels trimmed per hop (``trim_to_layer``), per
  precision: ``fp32``; ``bf16`` (``feature_storage=torch.bfloat16``,
  ``CapturedStep(autocast=torch.bfloat16, half_weights=True)``); ``fp16``
  (the same in float16, with a ``GradScaler``); ``fp8`` (fp8 storage upcast
  to bf16, bf16 autocast and weights). ``eager``: the step uncaptured on the
  batches as sampled; ``captured``: on batches padded hop by hop
  (:class:`~pyg_tc.transforms.PadHops`), one CUDA graph per bucket. Each
  row: the best of ``--epochs`` epochs after a warm-up epoch, the bytes of
  features gathered per batch, the peak GPU memory from the row's start
  (the graph and the features on the GPU included; the previous rows'
  loaders, stored features and captured graphs freed before it). The fp32
  rows hold ``data.x`` on the GPU; the half / fp8 rows keep the fp32
  ``data.x`` in host memory and only the converted copy on the GPU
  (``FeatureStorage(..., memory='device')``), or with ``--half-features
  with-fp32`` also the fp32 ``data.x`` on the GPU. ``--prefetch``
  (a comma list, default ``0``) repeats the rows per ``NeighborLoader(...,
  prefetch=k)``: batches made ahead on the loader's thread; ``x fp32``
  compares rows of the same ``k``.
* ``gat``: full-graph ``GATConv(256, 8, heads=8)`` forward + backward on the
  Reddit-shaped graph (``x [N, 256]`` with ``requires_grad``, a fixed output
  gradient): PyG's layer in fp32 against pyg_tc's in fp32, under bf16
  autocast, and as a bf16 model (``.bfloat16()``, bf16 ``x``).
* ``accuracy``: Tolokers, Minesweeper and Actor (``$PYG_TC_DATA``), mini-
  batch training (``--acc-epochs`` epochs, fan-out ``[10, 10]``, 2 layers,
  full-graph evaluation) per model, precision and seed (``--seeds``): the
  test metric at the best validation epoch; mean +- std per precision and
  whether it lies within one standard deviation of fp32.

Run on a GPU: ``python -m benchmarks.suites.half_minibatch --out DIR``
(``--quick``: a short run of every part).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import threading
import time
from typing import Iterator, List, Optional, Sequence

import torch

import pyg_tc
from pyg_tc.bench.graphs import load_graph
from pyg_tc.bench.models import Net
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment, log
from pyg_tc.bench.timing import free, kernel_time, loop_time
from pyg_tc.capture import CapturedStep
from pyg_tc.loader import FeatureStorage, NeighborLoader, quantize_fp8
from pyg_tc.loader.features import as_storage, padded_rows
from pyg_tc.ops.neighbor import FP8, gather_rows, gather_rows_scaled
from pyg_tc.transforms import PadHops, buckets_from_batches

from .common import DATASETS, data_paths, evaluate, load_dataset, read_records, split_masks
from .sampling import SHAPES, make_data

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')  # the CPU: a dry run of the code
#: precision -> (feature storage, autocast dtype)
PRECISIONS = {
    'fp32': (None, None),
    'bf16': (torch.bfloat16, torch.bfloat16),
    'fp16': (torch.float16, torch.float16),
    'fp8': (FeatureStorage(FP8), torch.bfloat16),
}
ACC_DATASETS = ('tolokers', 'minesweeper', 'actor')


def _peak() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if DEV.type == 'cuda' else 0.0


def _reset_peak() -> None:
    if DEV.type == 'cuda':
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _quiesce() -> float:
    """Frees what earlier rows left (garbage, their prefetch threads, which
    finish the batch in hand after their loader is dropped), resets the
    peak and returns the GPU memory still allocated (GB)."""
    free(DEV)
    for t in threading.enumerate():
        if t.name == 'pyg_tc-prefetch':
            t.join(timeout=60)
    free(DEV)
    _reset_peak()
    return torch.cuda.memory_allocated() / 2**30 if DEV.type == 'cuda' else 0.0


def _hops(model, b):
    return model(b.x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)


def make_step(model, precision: str, captured: bool) -> CapturedStep:
    """The training step of ``precision`` (Adam, fused and capturable on a GPU: the same optimizer
    for every precision, eager and captured; fused, the GradScaler's step needs no host
    synchronisation)."""
    _, amp = PRECISIONS[precision]
    cuda = DEV.type == 'cuda'
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, capturable=cuda, fused=cuda)
    scaler = torch.amp.GradScaler('cuda') if precision == 'fp16' and DEV.type == 'cuda' else None
    return CapturedStep(model, opt, forward=_hops, autocast=amp, scaler=scaler, half_weights=amp is not None)


# -- gather -------------------------------------------------------------------------------


def gather_records(a) -> Iterator[dict]:
    for graph in a.graphs:
        F = SHAPES[graph][0]
        n = max(a.rows * 4, 1000)
        x = torch.randn(n, F)
        q, s = quantize_fp8(x)
        idx = torch.randint(0, n, (a.rows,), device=DEV)
        for where in ('hbm', 'uva') if DEV.type == 'cuda' else ('hbm',):
            base = None
            for name in ('fp32', 'bf16 as stored', 'bf16', 'fp16', 'fp8'):
                dt = {'fp32': torch.float32, 'bf16 as stored': torch.bfloat16, 'bf16': torch.bfloat16}.get(name)
                dt = dt or {'fp16': torch.float16}.get(name)
                pin = where == 'uva'
                if name == 'fp8':
                    src, scale = (q.pin_memory() if pin else q.to(DEV)), s.to(DEV)

                    def fn(src=src, scale=scale):
                        return gather_rows_scaled(src, scale, idx, torch.bfloat16)

                    read = a.rows * F
                else:  # fp32: what the loader gathers from (data.x on the GPU, else its pinned copy)
                    v = x.to(dt)
                    if name == 'bf16 as stored':
                        src = v.pin_memory() if pin else v.to(DEV)
                    elif name == 'fp32' and not pin:
                        src = v.to(DEV)
                    else:
                        src = padded_rows(v if pin else v.to(DEV), pin=pin)

                    def fn(src=src):
                        return gather_rows(src, idx)

                    read = a.rows * F * v.element_size()
                ms = kernel_time(fn, DEV, rep=a.rep, warmup=3).median_ms
                base = base or ms
                yield dict(
                    kind='gather',
                    graph=graph,
                    width=F,
                    where=where,
                    storage=name,
                    rows=a.rows,
                    ms=ms,
                    mb_read=read / 2**20,
                    x_fp32=base / ms,
                )


# -- epoch --------------------------------------------------------------------------------


def epoch_records(a) -> Iterator[dict]:
    for graph in a.graphs:
        F, C, _ = SHAPES[graph]
        data, seeds, _ = make_data(graph)
        data = data.to(DEV)
        x_host = data.x.cpu()  # (the half rows' fp32 features, their GPU copy dropped)
        plain = NeighborLoader(data, a.fanout, input_nodes=seeds, batch_size=a.batch_size, shuffle=True)
        torch.manual_seed(0)
        hop_buckets = buckets_from_batches(plain, num_batches=20, levels=2, per_hop=True)
        dims = [F] + [a.hidden] * (a.layers - 1) + [C]
        for kind in a.models:
            rows = []
            for precision, mode, prefetch in itertools.product(a.precisions, a.modes, a.prefetch):
                storage, _ = PRECISIONS[precision]
                on_gpu = storage is None or a.half_features == 'with-fp32'
                if storage is not None and not on_gpu:
                    storage = dataclasses.replace(as_storage(storage), memory='device')
                if not on_gpu:
                    data.x = x_host
                elif not data.x.is_cuda:
                    data.x = x_host.to(DEV)
                captured = mode == 'captured'
                base = _quiesce()  # (the previous row's loader, its thread, stored features and graphs gone)
                loader = NeighborLoader(
                    data,
                    a.fanout,
                    input_nodes=seeds,
                    batch_size=a.batch_size,
                    shuffle=True,
                    transform=PadHops(hop_buckets, a.batch_size) if captured else None,
                    feature_storage=storage,
                    prefetch=prefetch,
                )
                torch.manual_seed(0)
                model = Net(pyg_tc.nn, kind, dims, trim=True).to(DEV)
                step = make_step(model, precision, captured)
                run = step if captured else step.eager
                log(f'[half_minibatch] {graph} {kind} {precision} {mode} prefetch {prefetch}')
                times, n, xbytes = [], 0, []
                for ep in range(a.epochs + 1):  # epoch 0 warms up (the kernels, the captures)
                    t, n = loop_time(run, itertools.islice(loader, a.batches), DEV)
                    if ep:
                        times.append(t)
                for b in itertools.islice(loader, 5):
                    xbytes.append(b.x.numel() * b.x.element_size())
                rec = dict(
                    kind='epoch',
                    graph=graph,
                    model=kind,
                    precision=precision,
                    mode=mode,
                    prefetch=prefetch,
                    features_on_gpu='fp32' if storage is None else 'converted' if not on_gpu else 'fp32 + converted',
                    batches=n,
                    epoch_s=min(times),
                    ms_per_batch=1e3 * min(times) / max(n, 1),
                    x_mb_per_batch=statistics.mean(xbytes) / 2**20,
                    peak_gb=_peak(),
                    base_gb=base,
                    replays=step.replays,
                    eager_steps=step.eager_steps,
                )
                step.close()
                rows.append(rec)
                loader = model = step = run = b = None
            for r in rows:
                ref = next(
                    q
                    for q in rows
                    if q['precision'] == 'fp32' and q['mode'] == r['mode'] and q['prefetch'] == r['prefetch']
                )
                r['x_fp32'] = ref['epoch_s'] / r['epoch_s']
                r['peak_vs_fp32'] = r['peak_gb'] / ref['peak_gb'] if ref['peak_gb'] else None
                yield r


# -- full-graph GAT -------------------------------------------------------------------------


def gat_records(a) -> Iterator[dict]:
    import torch_geometric.nn as pyg_nn

    bg = load_graph('reddit' if 'reddit' in a.graphs or not a.quick else a.graphs[0], DEV)
    N, ei = bg.num_nodes, bg.edge_index
    g = torch.Generator(device=DEV).manual_seed(0)
    x = torch.randn(N, 256, device=DEV, generator=g)
    go = torch.randn(N, 64, device=DEV, generator=g)
    state = pyg_nn.GATConv(256, 8, heads=8).to(DEV).state_dict()
    rows = []
    for impl, precision in (('PyG', 'fp32'), ('pyg_tc', 'fp32'), ('pyg_tc', 'bf16 autocast'), ('pyg_tc', 'bf16 model')):
        lib = pyg_nn if impl == 'PyG' else pyg_tc.nn
        layer = lib.GATConv(256, 8, heads=8).to(DEV)
        layer.load_state_dict(state)
        xin = x
        if precision == 'bf16 model':
            layer, xin = layer.bfloat16(), x.bfloat16()
        xin = xin.detach().requires_grad_(True)
        amp = precision == 'bf16 autocast'

        def fwd_bwd(layer=layer, xin=xin, amp=amp):
            with torch.autocast(DEV.type, dtype=torch.bfloat16, enabled=amp):
                out = layer(xin, ei)
            out.backward(go.to(out.dtype))

        log(f'[half_minibatch] GAT full graph: {impl} {precision}')
        fwd_bwd()  # (pyg_tc builds its graph format on the first call)
        _reset_peak()
        ms = _event_ms(fwd_bwd, a.gat_rep)
        rows.append(dict(kind='gat', graph=bg.name, impl=impl, precision=precision, ms=ms, peak_gb=_peak()))
        layer = xin = fwd_bwd = None
        if DEV.type == 'cuda':
            torch.cuda.empty_cache()
    for r in rows:
        r['x_pyg_fp32'] = rows[0]['ms'] / r['ms']
        yield r


def _event_ms(fn, rep: int) -> float:
    """Median ms per call, each call timed alone (CUDA events; no CUDA graph:
    PyG's layer on the full graph needs most of the GPU's memory)."""
    times = []
    for _ in range(rep):
        if DEV.type == 'cuda':
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


# -- accuracy -------------------------------------------------------------------------------


def accuracy_records(a) -> Iterator[dict]:
    for ds in a.datasets:
        data = load_dataset(ds, a.data_root).to(DEV)
        metric = DATASETS[ds][4]
        cin, cout = data.num_features, int(data.y.max()) + 1
        for kind in a.models:
            for seed in range(a.seeds):
                train, val, test, split = split_masks(data, seed)
                torch.manual_seed(seed)
                init = Net(pyg_tc.nn, kind, [cin, 64, cout], dropout=0.5).state_dict()
                for precision in a.precisions:
                    torch.manual_seed(seed)
                    loader = NeighborLoader(
                        data,
                        [10, 10],
                        input_nodes=train,
                        batch_size=a.acc_batch_size,
                        shuffle=True,
                        feature_storage=PRECISIONS[precision][0],
                    )
                    model = Net(pyg_tc.nn, kind, [cin, 64, cout], dropout=0.5).to(DEV)
                    model.load_state_dict(init)
                    step = make_step(model, precision, captured=False)
                    step.forward = lambda m, b: m(b.x, b.edge_index)
                    xs = _stored_x(data, precision)
                    vals, tests = [], []
                    for _ in range(a.acc_epochs):
                        model.train()
                        for b in loader:
                            step.eager(b)
                        model.eval()
                        with torch.no_grad(), step._amp():
                            out = model(xs, data.edge_index).float()
                        vals.append(float(evaluate(out, data.y, val, metric)))
                        tests.append(float(evaluate(out, data.y, test, metric)))
                    best = max(range(len(vals)), key=vals.__getitem__)
                    yield dict(
                        kind='accuracy',
                        dataset=ds,
                        model=kind,
                        precision=precision,
                        seed=seed,
                        split=split,
                        metric=metric,
                        test=tests[best],
                        val=vals[best],
                        epochs=a.acc_epochs,
                    )
                    step.close()


def _stored_x(data, precision: str):
    """The full graph's features as the loader stores them (evaluation reads what training read)."""
    storage, _ = PRECISIONS[precision]
    if storage is None:
        return data.x
    if isinstance(storage, FeatureStorage) and storage.dtype == FP8:
        q, s = quantize_fp8(data.x, storage.scale)
        return (q.float() * s).to(storage.batch_dtype)
    return data.x.to(storage)


def acc_rows(records: List[dict]) -> List[dict]:
    """Per (dataset, model, precision): mean +- std over seeds and whether
    the mean lies within one standard deviation of fp32's over the same
    seeds."""
    ac = [r for r in records if r.get('kind') == 'accuracy']
    test = {(r['dataset'], r['model'], r['precision'], r['seed']): 100 * r['test'] for r in ac}
    out = []
    for key in dict.fromkeys((r['dataset'], r['model'], r['precision']) for r in ac):
        seeds = [k[3] for k in test if k[:3] == key and (*key[:2], 'fp32', k[3]) in test]
        if not seeds:
            continue
        v = [test[(*key, s)] for s in seeds]
        base = [test[(*key[:2], 'fp32', s)] for s in seeds]
        mean, sd = statistics.mean(v), statistics.pstdev(v)
        bm, bsd = statistics.mean(base), statistics.pstdev(base)
        within = ('yes' if abs(mean - bm) <= bsd else 'no') if key[2] != 'fp32' else '-'
        out.append(
            dict(
                dataset=key[0],
                model=key[1],
                precision=key[2],
                runs=len(v),
                mean=mean,
                std=sd,
                diff=mean - bm,
                within=within,
            )
        )
    return out


# -- report ---------------------------------------------------------------------------------


def reporter(out: str, env: dict) -> Reporter:
    return Reporter(
        out,
        'half_minibatch.jsonl',
        'half_minibatch.md',
        'Half precision in mini-batch training',
        env=env,
        env_mode='first',
        sections=[
            Table(
                '## Epochs',
                'epoch',
                note='The loader (sampling, gathering, padding) and the step; the best of the timed epochs. '
                '`x fp32`: the fp32 epoch of the same mode over this one (one run, one GPU). '
                '`at start`: GPU memory allocated when the row starts (the graph and, for fp32 rows, '
                'its fp32 features); `peak`: the most allocated during the row (that included).',
                cols=[
                    Col('graph', 'graph'),
                    Col('model', 'model'),
                    Col('precision', 'precision'),
                    Col('mode', 'mode'),
                    Col('prefetch', 'prefetch', 'd'),
                    Col('epoch s', 'epoch_s', '.3f'),
                    Col('ms / batch', 'ms_per_batch', '.3f'),
                    Col('x fp32', 'x_fp32', '.2f', bold=True),
                    Col('features MB / batch', 'x_mb_per_batch', '.1f'),
                    Col('features on the GPU', 'features_on_gpu'),
                    Col('at start GB', 'base_gb', '.2f'),
                    Col('peak GB', 'peak_gb', '.2f'),
                    Col('peak x fp32', 'peak_vs_fp32', '.2f'),
                ],
            ),
            Table(
                '## Feature gather (kernel only)',
                'gather',
                [
                    Col('width', 'width', 'd'),
                    Col('from', 'where'),
                    Col('storage', 'storage'),
                    Col('rows', 'rows', ',d'),
                    Col('ms', 'ms', '.4f'),
                    Col('MB read', 'mb_read', '.1f'),
                    Col('x fp32', 'x_fp32', '.2f', bold=True),
                ],
            ),
            Table(
                '## Full-graph GAT: GATConv(256, 8, heads=8), forward + backward',
                'gat',
                [
                    Col('graph', 'graph'),
                    Col('layer', 'impl'),
                    Col('precision', 'precision'),
                    Col('ms', 'ms', '.2f'),
                    Col('x PyG fp32', 'x_pyg_fp32', '.1f', bold=True),
                    Col('peak GB', 'peak_gb', '.2f'),
                ],
            ),
            Table(
                '## Accuracy: test metric (%), mean +- std over seeds',
                acc_rows,
                [
                    Col('dataset', 'dataset'),
                    Col('model', 'model'),
                    Col('precision', 'precision'),
                    Col('seeds', 'runs', 'd'),
                    Col('mean', 'mean', '.2f'),
                    Col('std', 'std', '.2f'),
                    Col('x fp32 (points)', 'diff', '+.2f'),
                    Col('within 1 std of fp32', 'within'),
                ],
            ),
        ],
        figures=[
            Figure(
                'half_minibatch.png',
                [
                    Panel(
                        lambda rs: [
                            dict(r, case=f"{r['graph']} {r['model']} {r['mode']}")
                            for r in rs
                            if r.get('kind') == 'epoch'
                        ],
                        'case',
                        'x_fp32',
                        series='precision',
                        title="epoch speed-up over pyg_tc's fp32 epoch (same mode; higher is better)",
                    )
                ],
            )
        ],
    )


def parse_args(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n')[0])
    p.add_argument('--out', default='half_minibatch_out')
    p.add_argument('--parts', default='epoch,gat,gather,accuracy')
    p.add_argument('--graphs', default='products,reddit')
    p.add_argument('--models', default='sage,gcn,gat')
    p.add_argument('--precisions', default='fp32,bf16,fp16,fp8')
    p.add_argument('--modes', default='eager,captured')
    p.add_argument('--prefetch', default='0', help="the loaders' prefetch depths (a comma list)")
    p.add_argument(
        '--half-features',
        default='gpu-only',
        choices=['gpu-only', 'with-fp32'],
        help="the half rows' features on the GPU: the converted copy only, or also the fp32 data.x",
    )
    p.add_argument('--fanout', default='15,10,5')
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument('--layers', type=int, default=3)
    p.add_argument('--batches', type=int, default=100, help='batches per epoch')
    p.add_argument('--epochs', type=int, default=2, help='timed epochs (after one warm-up epoch)')
    p.add_argument('--rows', type=int, default=500_000, help='rows per gather')
    p.add_argument('--rep', type=int, default=20)
    p.add_argument('--gat-rep', type=int, default=5, help='timed calls per full-graph GAT case')
    p.add_argument('--datasets', default=','.join(ACC_DATASETS))
    p.add_argument('--data-root', default=None)
    p.add_argument('--seeds', type=int, default=5)
    p.add_argument('--acc-epochs', type=int, default=20)
    p.add_argument('--acc-batch-size', type=int, default=2048)
    p.add_argument('--quick', action='store_true', help='tiny graph, few batches: a check of the code')
    p.add_argument(
        '--render',
        metavar='JSONL',
        help="only rewrite the markdown and PNG from these records (the run block from their 'env' record)",
    )
    a = p.parse_args(argv)
    for k in ('parts', 'graphs', 'models', 'precisions', 'modes', 'datasets'):
        setattr(a, k, [v for v in getattr(a, k).split(',') if v])
    a.fanout = [int(k) for k in a.fanout.split(',')]
    a.prefetch = [int(k) for k in a.prefetch.split(',')]
    if a.quick:
        a.graphs, a.batches, a.epochs, a.rows, a.rep, a.gat_rep = ['tiny'], 4, 1, 2000, 2, 2
        a.batch_size, a.hidden, a.seeds, a.acc_epochs = 100, 16, 2, 2
    data_paths(a)
    return a


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    a = parse_args(argv, prog)
    if a.render:
        records, env = read_records(a.render)
        rep = reporter(a.out, env)
        for r in records:
            if r.get('kind') in ('epoch', 'gather', 'gat', 'accuracy'):
                rep.add(r, quiet=True)
        rep.write()
        return 0
    if DEV.type != 'cuda':
        log('[half_minibatch] no CUDA GPU: a dry run of the code on the CPU (the times mean nothing)')
    env = environment(DEV, fanout=a.fanout, batch_size=a.batch_size, hidden=a.hidden, layers=a.layers)
    rep = reporter(a.out, env)
    parts = {'gather': gather_records, 'epoch': epoch_records, 'gat': gat_records, 'accuracy': accuracy_records}
    rep.run([(name, name, lambda f=parts[name]: f(a)) for name in a.parts], device=DEV)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
