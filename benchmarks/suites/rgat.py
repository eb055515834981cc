"""The MLPerf-shaped R-GAT epoch: MLPerf Training's GNN benchmark model
(:class:`pyg_tc.bench.models.RGAT`: 3 ``HeteroConv(GATConv)`` layers, hidden
512, 4 heads, a linear head on the papers) trained on an IGBH-shaped
synthetic graph (:func:`pyg_tc.bench.graphs.igbh_shaped`, 1,024-wide fp16
features), PyG's stack against pyg_tc's (JSON + markdown + PNG).

Rows, per ``--batches`` training batches of ``--batch-size`` paper seeds,
fan-out ``--fanout``, Adam (lr 0.001), autocast fp16 (bf16 on the CPU):

* ``PyG, N workers``: PyG's ``NeighborLoader`` (its sampler: pyg-lib where
  installed) with ``N`` worker processes (``--workers``, a comma list) and
  PyG's layers; the graph and features in host memory, each batch moved to
  the GPU;
* ``PyG trimmed, N workers``: the same, each layer first trimmed to the hops
  later layers read (PyG's ``trim_to_layer``, the ``with_trim`` option of
  MLPerf's reference model: the same scores for the seeds, less work);
* ``pyg_tc`` / ``pyg_tc trimmed``: ``pyg_tc.loader.NeighborLoader`` (sampled
  and gathered on the GPU, the graph and features in GPU memory) and
  pyg_tc's layers, the eager step, whole or trimmed;
* ``pyg_tc captured``: the same batches padded to one static shape
  (``PadToBuckets`` with a ``HeteroBucket`` from ``buckets_from_batches``:
  mean + 5 standard deviations per node and edge type, as NVIDIA's MLPerf
  code sizes its buckets), the loader two batches ahead on its thread
  (``prefetch=2``), and the whole step (forward, loss, backward, Adam)
  replayed from a CUDA graph (``CapturedStep``);
* ``pyg_tc trimmed, captured``: padded hop by hop (``PadHops`` with a
  ``HeteroHopBucket``), trimmed by layer (``trimmed_forward``), captured.

Each row: training seeds per second and ms per batch (the loader included;
after ``--warmup`` batches), the loader alone (ms per batch: sampling and
the feature gather, the same batches), peak GPU memory, and for the eager
rows the GPU time of one training step (kernels summed over
``--profile-batches`` profiled steps: all, matrix products, launches; a
captured row replays the kernels of its eager row); every model starts from
the same weights.

    python -m benchmarks.suites.rgat --out DIR [--papers 10000000] [--workers 0,8,16]
    python -m benchmarks.suites.rgat --quick --out DIR      # a check of the code (CPU)
"""

from __future__ import annotations

import argparse
import copy
import itertools
import time
from types import ModuleType
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
import torch_geometric.typing
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader

import pyg_tc.nn
from pyg_tc.bench.graphs import igbh_shaped
from pyg_tc.bench.models import RGAT
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment, log
from pyg_tc.bench.timing import free, kernel_profile
from pyg_tc.capture import CapturedStep, trimmed_forward
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import PadHops, PadToBuckets, buckets_from_batches
from pyg_tc.loader.hetero import HeteroNeighborSampler

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
CLASSES = 19


def _sync() -> None:
    if DEV.type == 'cuda':
        torch.cuda.synchronize()


def _pyg_sampler(data, fanout):
    """PyG's loader's sampler: its own where pyg-lib / torch_sparse is installed, else pyg_tc's
    on the CPU (said in the row's ``sampler``)."""
    if torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE:
        return None, 'pyg-lib' if torch_geometric.typing.WITH_PYG_LIB else 'torch_sparse'
    return HeteroNeighborSampler(data, fanout, device='cpu'), "pyg_tc's CPU reference (no pyg-lib)"


def _pyg_hop_counts(sampler_name: str) -> bool:
    """Whether PyG's heterogeneous batches carry the hop counts ``trim_to_layer`` needs: they do
    from pyg-lib (and pyg_tc's reference), not from torch_sparse's sampler."""
    return sampler_name != 'torch_sparse'


def _close(it) -> None:
    """Ends a loader iterator's worker processes now (not in a later fork's garbage collection)."""
    shutdown = getattr(it, '_shutdown_workers', None)
    if shutdown is not None:
        shutdown()


def _loader_ms(make_loader, batches: int, warmup: int) -> tuple:
    """(ms per batch, mean sampled nodes, mean sampled edges) of a loader
    alone (batches moved to the GPU)."""
    it = iter(make_loader())
    for _ in range(warmup):
        next(it).to(DEV)
    _sync()
    nodes = edges = 0
    t0 = time.perf_counter()
    for _ in range(batches):
        b = next(it).to(DEV)
        nodes += sum(b[t].num_nodes for t in b.node_types)
        edges += sum(b[e].num_edges for e in b.edge_types)
    _sync()
    _close(it)
    return 1e3 * (time.perf_counter() - t0) / batches, nodes / batches, edges / batches


def _train(model, make_loader, batches: int, warmup: int, amp: torch.dtype, trim: bool, captured: bool) -> tuple:
    """(seconds per batch, last loss, replays): Adam steps over the loader's batches, after
    ``warmup``; ``trim``: each layer trimmed to the hops later layers read (PyG's
    ``trim_to_layer``); ``captured``: by a ``CapturedStep`` (the batches padded)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=captured and DEV.type == 'cuda')
    forward = trimmed_forward if trim else (lambda m, b: m(b.x_dict, b.edge_index_dict))
    step = CapturedStep(model, opt, autocast=amp, forward=forward) if captured else None
    it = iter(make_loader())
    loss = None
    t0 = 0.0
    for i in range(warmup + batches):
        if i == warmup:
            _sync()
            t0 = time.perf_counter()
        b = next(it).to(DEV)
        if step is not None:
            loss = step(b)
            continue
        n = b['paper'].batch_size
        opt.zero_grad()
        with torch.autocast(DEV.type, dtype=amp):
            out = forward(model, b)[:n]
        loss = F.cross_entropy(out.float(), b['paper'].y[:n])
        loss.backward()
        opt.step()
    _sync()
    _close(it)
    return (time.perf_counter() - t0) / batches, float(loss.detach()), step.replays if step is not None else None


def _gpu_profile(model, make_loader, amp: torch.dtype, trim: bool, batches: int) -> dict:
    """GPU time per eager training step (``kernel_profile``: kernels summed, of which matrix
    products, launches, the 8 longest kernels) over ``batches`` batches of the loader."""
    if batches < 1:
        return {}
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    forward = trimmed_forward if trim else (lambda m, b: m(b.x_dict, b.edge_index_dict))
    it = iter(make_loader())
    items = [b.to(DEV) for b in itertools.islice(it, batches + 1)]  # (the first warms up)
    _close(it)
    if len(items) < 2:
        return {}

    def step(b):
        n = b['paper'].batch_size
        opt.zero_grad()
        with torch.autocast(DEV.type, dtype=amp):
            out = forward(model, b)[:n]
        F.cross_entropy(out.float(), b['paper'].y[:n]).backward()
        opt.step()

    step(items[0])
    prof = kernel_profile(step, items[1:], DEV, top=8)
    return dict(gpu_ms=prof['gpu_ms'], dense_ms=prof['dense_ms'], launches=prof['launches'], kernels=prof['kernels'])


class _Run(NamedTuple):
    name: str
    lib: ModuleType
    sampler: str
    make_loader: Callable[[], Any]
    trim: bool = False
    captured: bool = False


def _runs(a, data, on_dev, seeds) -> List[_Run]:
    """The rows: PyG's loader (each worker count) with PyG's layers, whole and trimmed; pyg_tc's
    loader and layers, eager and captured, whole and trimmed."""
    kw = dict(input_nodes=('paper', seeds), batch_size=a.batch_size)
    sampler, sampler_name = _pyg_sampler(data, a.fanout)
    runs = []
    for w in a.workers:

        def pyg_loader(w=w):
            return PyGNeighborLoader(
                data,
                a.fanout,
                neighbor_sampler=sampler,
                num_workers=w,
                persistent_workers=w > 0,
                pin_memory=DEV.type == 'cuda',
                **kw,
            )

        runs.append(_Run(f'PyG, {w} workers', pyg_nn, sampler_name, pyg_loader))
        if a.pyg_trim and _pyg_hop_counts(sampler_name):
            runs.append(_Run(f'PyG trimmed, {w} workers', pyg_nn, sampler_name, pyg_loader, trim=True))
    if a.pyg_trim and not _pyg_hop_counts(sampler_name):
        log(f"[rgat] no 'PyG trimmed' rows: PyG's batches from {sampler_name} carry no hop counts")

    def ours(transform=None, prefetch=0):
        return lambda: NeighborLoader(on_dev, a.fanout, device=DEV, transform=transform, prefetch=prefetch, **kw)

    torch.manual_seed(1)
    sizing = NeighborLoader(on_dev, a.fanout, device=DEV, shuffle=True, **kw)
    whole = buckets_from_batches(sizing, num_batches=a.bucket_batches)
    hops = buckets_from_batches(sizing, num_batches=a.bucket_batches, per_hop=True)
    log(f'[rgat] buckets (mean + 5 sigma of {a.bucket_batches} batches): {whole[0]}; per hop: {hops[0]}')
    runs += [
        _Run('pyg_tc', pyg_tc.nn, 'pyg_tc (GPU)', ours()),
        _Run('pyg_tc trimmed', pyg_tc.nn, 'pyg_tc (GPU)', ours(), trim=True),
        _Run('pyg_tc captured', pyg_tc.nn, 'pyg_tc (GPU)', ours(PadToBuckets(whole, a.batch_size), 2), captured=True),
        _Run(
            'pyg_tc trimmed, captured',
            pyg_tc.nn,
            'pyg_tc (GPU)',
            ours(PadHops(hops, a.batch_size), 2),
            trim=True,
            captured=True,
        ),
    ]
    return runs


def epoch_records(a) -> Iterator[dict]:
    log(f'[rgat] IGBH-shaped graph, {a.papers:,} papers, {a.width}-wide fp16 features')
    data = igbh_shaped(a.papers, a.width, torch.float16, CLASSES)
    on_dev = data.to(DEV) if DEV.type == 'cpu' else copy.copy(data).to(DEV)
    nodes = sum(data[t].num_nodes for t in data.node_types)
    edges = sum(data[e].edge_index.size(1) for e in data.edge_types)
    total = a.batch_size * (a.batches + a.warmup)
    seeds = torch.randperm(a.papers, generator=torch.Generator().manual_seed(0))[:total]
    amp = torch.float16 if DEV.type == 'cuda' else torch.bfloat16
    torch.manual_seed(0)
    init = RGAT(pyg_nn, data.edge_types, a.width, a.hidden, a.heads, CLASSES).state_dict()
    for run in _runs(a, data, on_dev, seeds):
        log(f'[rgat] {run.name}')
        free(DEV)
        if DEV.type == 'cuda':
            torch.cuda.reset_peak_memory_stats()
        loader_ms, batch_nodes, batch_edges = _loader_ms(run.make_loader, a.batches, a.warmup)
        model = RGAT(run.lib, data.edge_types, a.width, a.hidden, a.heads, CLASSES).to(DEV)
        model.load_state_dict(init)
        sec, loss, replays = _train(model, run.make_loader, a.batches, a.warmup, amp, run.trim, run.captured)
        prof = {} if run.captured else _gpu_profile(model, run.make_loader, amp, run.trim, a.profile_batches)
        yield dict(
            kind='epoch',
            impl=run.name,
            sampler=run.sampler,
            trimmed=run.trim,
            captured=run.captured,
            papers=a.papers,
            nodes=nodes,
            edges=edges,
            seeds_per_s=a.batch_size / sec,
            ms_per_batch=1e3 * sec,
            loader_ms=loader_ms,
            batch_nodes=batch_nodes,
            batch_edges=batch_edges,
            peak_gb=torch.cuda.max_memory_allocated() / 2**30 if DEV.type == 'cuda' else None,
            loss=loss,
            replays=replays,
            **prof,
        )
        model = None


def reporter(out: str, env: dict) -> Reporter:
    return Reporter(
        out,
        'rgat.jsonl',
        'rgat.md',
        'The MLPerf-shaped R-GAT epoch',
        env=env,
        env_mode='first',
        sections=[
            Table(
                '## Training: PyG against pyg_tc',
                'epoch',
                note='Training seeds per second and ms per batch over the timed batches, the loader '
                'included; `loader ms`: the loader alone over the same number of batches (sampling, '
                'the feature gather, the copy to the GPU); `GPU ms / step`: the kernels of one eager '
                'training step summed (torch.profiler; `matmul ms` the matrix products among them); '
                'one run, one GPU.',
                cols=[
                    Col('run', 'impl'),
                    Col('sampler', 'sampler'),
                    Col('seeds / s', 'seeds_per_s', ',.0f', bold=True),
                    Col('ms / batch', 'ms_per_batch', '.1f'),
                    Col('loader ms / batch', 'loader_ms', '.1f'),
                    Col('nodes / batch', 'batch_nodes', ',.0f'),
                    Col('edges / batch', 'batch_edges', ',.0f'),
                    Col('peak GB', 'peak_gb', '.2f'),
                    Col('GPU ms / step', 'gpu_ms', '.1f'),
                    Col('matmul ms', 'dense_ms', '.1f'),
                    Col('launches', 'launches', ',.0f'),
                    Col('last loss', 'loss', '.3f'),
                    Col('replays', 'replays', 'd'),
                ],
            ),
        ],
        figures=[
            Figure(
                'rgat.png',
                [
                    Panel(
                        'epoch',
                        'impl',
                        'seeds_per_s',
                        title='training seeds per second (higher is better)',
                        ylabel='seeds / s',
                    )
                ],
            )
        ],
    )


def parse_args(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n')[0])
    p.add_argument('--out', default='rgat_out')
    p.add_argument('--papers', type=int, default=1_000_000)
    p.add_argument('--width', type=int, default=1024)
    p.add_argument('--hidden', type=int, default=512)
    p.add_argument('--heads', type=int, default=4)
    p.add_argument('--fanout', default='15,10,5')
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--batches', type=int, default=30, help='timed batches per row')
    p.add_argument('--warmup', type=int, default=3)
    p.add_argument(
        '--profile-batches', type=int, default=3, help='batches whose eager step is profiled (kernel times; 0: none)'
    )
    p.add_argument('--bucket-batches', type=int, default=20, help="batches measured for the captured rows' buckets")
    p.add_argument(
        '--no-pyg-trim', dest='pyg_trim', action='store_false', help="no row of PyG's layers trimmed by layer"
    )
    p.add_argument('--workers', default='16', help="PyG loader's worker counts (a comma list)")
    p.add_argument('--quick', action='store_true', help='a small graph, a few batches: a check of the code')
    a = p.parse_args(argv)
    a.fanout = [int(k) for k in a.fanout.split(',')]
    a.workers = [int(k) for k in a.workers.split(',')]
    if a.quick:
        a.papers, a.width, a.hidden, a.heads, a.fanout = 2000, 32, 16, 2, [4, 3, 2]
        a.batch_size, a.batches, a.warmup, a.workers, a.bucket_batches = 64, 2, 1, [0], 3
        a.profile_batches = 1
    return a


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    a = parse_args(argv, prog)
    if DEV.type != 'cuda':
        log('[rgat] no CUDA GPU: a dry run of the code on the CPU (the times mean nothing)')
    env = environment(DEV, papers=a.papers, width=a.width, fanout=a.fanout, batch_size=a.batch_size)
    rep = reporter(a.out, env)
    rep.run([('epoch', 'epoch', lambda: epoch_records(a))], device=DEV)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
