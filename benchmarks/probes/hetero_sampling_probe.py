"""Heterogeneous neighbour sampling on an IGBH-shaped synthetic graph:
pyg_tc's sampler (the ``hetero_neighbor_sample`` kernel) against pyg-lib's
hetero sampler (PyG's default), in one process and as PyG's
``NeighborLoader`` with worker processes.

The graph (``pyg_tc.bench.graphs.igbh_shaped``): papers, authors (1.2 per paper), institutes
(1 per 100 papers) and fields of study (1 per 10 papers); edge types
``cites``, ``written_by``, ``affiliated_to``, ``topic`` and their reverses
(8), sources drawn with power-law (Zipf) popularity, targets uniformly;
structure only (no features: the sampler is what is timed).

Rows (ms per batch of ``--batch-size`` paper seeds, fan-out ``--fanout``
for every edge type): ``pyg_tc kernel`` (the sampler's
``sample_from_nodes``, synchronised at the end of the batches), ``pyg-lib``
(PyG's ``NeighborSampler`` on the CPU, one process), ``PyG loader, N
workers`` (PyG's ``NeighborLoader`` on pyg-lib, batches per second of an
epoch slice) and ``pyg_tc kernel in PyG's loader`` (the same loader, this
sampler, the graph on the GPU, no workers).

    python benchmarks/probes/hetero_sampling_probe.py [--papers 500000] [--workers 0,8,16] [--out F]
    python benchmarks/probes/hetero_sampling_probe.py --render F.jsonl --png F.png   # the plot only
"""

import argparse
import itertools
import json
import time

import torch
from torch_geometric.sampler import NodeSamplerInput

from pyg_tc.bench.graphs import igbh_shaped
from pyg_tc.loader.hetero import HeteroNeighborSampler

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def ms_per_batch(fn, batches, sync) -> float:
    fn(batches[0])
    sync()
    t = time.perf_counter()
    for b in batches:
        fn(b)
    sync()
    return 1e3 * (time.perf_counter() - t) / len(batches)


def plot(records, path: str) -> None:
    """Seeds per second per sampler (log scale), one bar each."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 3.4))
    names = [r['sampler'] for r in records]
    ax.barh(names, [r['seeds_per_s'] for r in records], color=['C0' if 'pyg_tc' in n else 'C1' for n in names])
    ax.set_xscale('log')
    ax.invert_yaxis()
    r = records[0]
    ax.set_xlabel(
        f"seeds per second ({r['batch_size']} per batch, fan-out [{r['fanout']}]; higher is better)", fontsize=9
    )
    ax.set_title(f"IGBH-shaped graph: {r['papers']:,} papers, {r['edges']:,} edges", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--papers', type=int, default=500_000)
    p.add_argument('--fanout', default='15,10,5')
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--batches', type=int, default=30)
    p.add_argument('--workers', default='0,8,16', help="PyG loader worker counts (0: PyG's loader in this process)")
    p.add_argument('--out', default='hetero_sampling_probe.jsonl')
    p.add_argument('--png', default=None, help='also plot the records to this PNG')
    p.add_argument('--render', metavar='JSONL', help='only plot these records (needs --png)')
    a = p.parse_args()
    if a.render:
        plot([json.loads(line) for line in open(a.render)], a.png or a.render.replace('.jsonl', '.png'))
        return
    fan = [int(k) for k in a.fanout.split(',')]
    t0 = time.perf_counter()
    data = igbh_shaped(a.papers)
    E = sum(data[e].num_edges for e in data.edge_types)
    print(
        f'graph: {dict((t, data[t].num_nodes) for t in data.node_types)}, {E:,} edges '
        f'({time.perf_counter() - t0:.1f} s)',
        flush=True,
    )
    g = torch.Generator().manual_seed(1)
    seeds = torch.randperm(data['paper'].num_nodes, generator=g)[: a.batch_size * a.batches]
    batches = list(seeds.split(a.batch_size))
    out = open(a.out, 'w')
    base = dict(papers=a.papers, edges=E, fanout=a.fanout, batch_size=a.batch_size, device=str(DEV))

    def record(name, ms, **kw):
        rec = dict(base, sampler=name, ms_per_batch=ms, seeds_per_s=1e3 * a.batch_size / ms, **kw)
        out.write(json.dumps(rec) + '\n')
        out.flush()
        print(f'{name:40s} {ms:9.2f} ms / batch  {rec["seeds_per_s"]:12,.0f} seeds / s', flush=True)
        return ms

    sync = torch.cuda.synchronize if DEV.type == 'cuda' else (lambda: None)
    gpu = data.clone().to(DEV)  # (PyG's to() moves the stores in place)
    ours = HeteroNeighborSampler(gpu, fan)
    mine = record(
        f'pyg_tc ({"kernel" if DEV.type == "cuda" else "reference"})',
        ms_per_batch(lambda s: ours.sample_from_nodes(NodeSamplerInput(None, s, input_type='paper')), batches, sync),
    )
    import torch_geometric.typing as tgt
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.sampler import NeighborSampler

    if tgt.WITH_PYG_LIB:
        ref = NeighborSampler(data, fan)
        lib = record(
            'pyg-lib (one process)',
            ms_per_batch(
                lambda s: ref.sample_from_nodes(NodeSamplerInput(None, s, input_type='paper')), batches, lambda: None
            ),
        )
        print(f'  pyg_tc over pyg-lib, one process: {lib / mine:.1f}x', flush=True)
        best = None
        for w in [int(k) for k in a.workers.split(',') if k]:
            loader = NeighborLoader(
                data,
                fan,
                input_nodes=('paper', seeds),
                batch_size=a.batch_size,
                num_workers=w,
                persistent_workers=w > 0,
            )
            it = iter(loader)
            next(it)
            t = time.perf_counter()
            n = sum(1 for _ in itertools.islice(it, a.batches - 1))
            ms = record(f'PyG loader, {w} workers', 1e3 * (time.perf_counter() - t) / max(n, 1), workers=w)
            best = ms if best is None else min(best, ms)
            del it, loader
        if best is not None:
            print(f'  pyg_tc over PyG\'s loader at its best worker count: {best / mine:.1f}x', flush=True)
    else:
        print('pyg-lib is not installed: no baseline', flush=True)
    loader = NeighborLoader(gpu, fan, input_nodes=('paper', seeds), batch_size=a.batch_size, neighbor_sampler=ours)
    it = iter(loader)
    next(it)
    sync()
    t = time.perf_counter()
    n = sum(1 for _ in itertools.islice(it, a.batches - 1))
    sync()
    record(
        f"pyg_tc ({'kernel' if DEV.type == 'cuda' else 'reference'}) in PyG's loader",
        1e3 * (time.perf_counter() - t) / max(n, 1),
    )
    out.close()
    if a.png:
        plot([json.loads(line) for line in open(a.out)], a.png)


if __name__ == '__main__':
    main()
