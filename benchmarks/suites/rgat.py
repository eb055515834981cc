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
* ``pyg_tc``: ``pyg_tc.loader.NeighborLoader`` (sampled and gathered on the
  GPU, the graph and features in GPU memory) and pyg_tc's layers.

Each row: training seeds per second and ms per batch (the loader included;
after ``--warmup`` batches), the loader alone (ms per batch: sampling and
the feature gather, the same batches), peak GPU memory; every model starts
from the same weights. A static-shape (captured) row is not there yet:
heterogeneous batches are not padded.

    python -m benchmarks.suites.rgat --out DIR [--papers 10000000] [--workers 0,8,16]
    python -m benchmarks.suites.rgat --quick --out DIR      # a check of the code (CPU)
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Iterator, Optional, Sequence

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
import torch_geometric.typing
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader

import pyg_tc.nn
from pyg_tc.bench.graphs import igbh_shaped
from pyg_tc.bench.models import RGAT
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment, log
from pyg_tc.bench.timing import free
from pyg_tc.loader import NeighborLoader
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


def _train(model, make_loader, batches: int, warmup: int, amp: torch.dtype) -> tuple:
    """(seconds per batch, last loss): Adam steps over the loader's batches, after ``warmup``."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    it = iter(make_loader())
    loss = None
    t0 = 0.0
    for i in range(warmup + batches):
        if i == warmup:
            _sync()
            t0 = time.perf_counter()
        b = next(it).to(DEV)
        n = b['paper'].batch_size
        opt.zero_grad()
        with torch.autocast(DEV.type, dtype=amp):
            out = model(b.x_dict, b.edge_index_dict)[:n]
        loss = F.cross_entropy(out.float(), b['paper'].y[:n])
        loss.backward()
        opt.step()
    _sync()
    _close(it)
    return (time.perf_counter() - t0) / batches, float(loss.detach())


def epoch_records(a) -> Iterator[dict]:
    log(f'[rgat] IGBH-shaped graph, {a.papers:,} papers, {a.width}-wide fp16 features')
    data = igbh_shaped(a.papers, a.width, torch.float16, CLASSES)
    on_dev = data.to(DEV) if DEV.type == 'cpu' else copy.copy(data).to(DEV)
    nodes = sum(data[t].num_nodes for t in data.node_types)
    edges = sum(data[e].edge_index.size(1) for e in data.edge_types)
    total = a.batch_size * (a.batches + a.warmup)
    seeds = torch.randperm(a.papers, generator=torch.Generator().manual_seed(0))[:total]
    kw = dict(input_nodes=('paper', seeds), batch_size=a.batch_size)
    amp = torch.float16 if DEV.type == 'cuda' else torch.bfloat16
    torch.manual_seed(0)
    init = RGAT(pyg_nn, data.edge_types, a.width, a.hidden, a.heads, CLASSES).state_dict()
    sampler, sampler_name = _pyg_sampler(data, a.fanout)
    runs = [
        (
            f'PyG, {w} workers',
            pyg_nn,
            sampler_name,
            lambda w=w: PyGNeighborLoader(
                data,
                a.fanout,
                neighbor_sampler=sampler,
                num_workers=w,
                persistent_workers=w > 0,
                pin_memory=DEV.type == 'cuda',
                **kw,
            ),
        )
        for w in a.workers
    ]
    runs.append(('pyg_tc', pyg_tc.nn, 'pyg_tc (GPU)', lambda: NeighborLoader(on_dev, a.fanout, device=DEV, **kw)))
    for name, lib, sampler_of_row, make_loader in runs:
        log(f'[rgat] {name}')
        free(DEV)
        if DEV.type == 'cuda':
            torch.cuda.reset_peak_memory_stats()
        loader_ms, batch_nodes, batch_edges = _loader_ms(make_loader, a.batches, a.warmup)
        model = RGAT(lib, data.edge_types, a.width, a.hidden, a.heads, CLASSES).to(DEV)
        model.load_state_dict(init)
        sec, loss = _train(model, make_loader, a.batches, a.warmup, amp)
        yield dict(
            kind='epoch',
            impl=name,
            sampler=sampler_of_row,
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
                'the feature gather, the copy to the GPU); one run, one GPU.',
                cols=[
                    Col('run', 'impl'),
                    Col('sampler', 'sampler'),
                    Col('seeds / s', 'seeds_per_s', ',.0f', bold=True),
                    Col('ms / batch', 'ms_per_batch', '.1f'),
                    Col('loader ms / batch', 'loader_ms', '.1f'),
                    Col('nodes / batch', 'batch_nodes', ',.0f'),
                    Col('edges / batch', 'batch_edges', ',.0f'),
                    Col('peak GB', 'peak_gb', '.2f'),
                    Col('last loss', 'loss', '.3f'),
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
    p.add_argument('--workers', default='16', help="PyG loader's worker counts (a comma list)")
    p.add_argument('--quick', action='store_true', help='a small graph, a few batches: a check of the code')
    a = p.parse_args(argv)
    a.fanout = [int(k) for k in a.fanout.split(',')]
    a.workers = [int(k) for k in a.workers.split(',')]
    if a.quick:
        a.papers, a.width, a.hidden, a.heads, a.fanout = 2000, 32, 16, 2, [4, 3, 2]
        a.batch_size, a.batches, a.warmup, a.workers = 64, 2, 1, [0]
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
