"""GPU loader host-time probe: where a mini-batch's host time goes in
:class:`pyg_tc.loader.NeighborLoader` (products-shaped graph, [15, 10, 5],
1,024 seeds), plain and per-hop padded (``PadHops``), bf16 features stored
or not.

Per variant: the loader alone (ms per batch, synchronised at the ends only),
its stages' host time (each synchronised),
the host synchronisations per batch (``torch.cuda.set_sync_debug_mode``),
the torch operations per batch (``torch.profiler``, CPU; the most frequent) and the Python
functions with the most own time (``cProfile``).

    python benchmarks/probes/loader_host_probe.py [--graph products] [--batches 60] [--out F]
"""

import argparse
import cProfile
import io
import itertools
import json
import pstats
import time
import warnings

import torch

from pyg_tc.bench.timing import loop_ms
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import PadHops, buckets_from_batches
from benchmarks.suites.sampling import make_data

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')  # the CPU: a dry run


def _cycle(loader):
    """The loader's batches, epoch after epoch."""
    while True:
        yield from loader


def syncs_per_batch(loader, n: int) -> float:
    """Host synchronisations per batch (CUDA only)."""
    if DEV.type != 'cuda':
        return float('nan')
    it = _cycle(loader)
    next(it)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode('warn')
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            for _ in range(n):
                next(it)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return len(w) / n


def ops_per_batch(loader, n: int, top: int) -> tuple:
    """``(torch operations per batch, the most frequent ones as (name, per batch, self us per batch))``."""
    from torch.profiler import ProfilerActivity, profile

    it = _cycle(loader)
    next(it)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            next(it)
    ka = prof.key_averages()
    most = sorted(ka, key=lambda e: -e.count)[:top]
    return sum(e.count for e in ka) / n, [(e.key, e.count / n, e.self_cpu_time_total / n) for e in most]


def stage_ms(loader, n: int) -> dict:
    """Host ms per batch of the loader's stages (each ended by a synchronisation, so the
    sampler's wait for its kernels is in ``sample``): seed indices, sampling, the batch's
    attributes, the transform, the graph's completion and the stream records."""
    from pyg_tc.loader.loader import _complete, _record_on

    sync = torch.cuda.synchronize if DEV.type == 'cuda' else (lambda: None)
    stream = torch.cuda.current_stream() if DEV.type == 'cuda' else None
    idx = torch.utils.data.DataLoader._get_iterator(loader)
    t = dict(index=0.0, sample=0.0, attributes=0.0, transform=0.0, complete=0.0, record=0.0)
    for i in range(n + 1):
        sync()
        marks = [time.perf_counter()]
        try:
            index = idx._next_index()
        except StopIteration:
            idx = torch.utils.data.DataLoader._get_iterator(loader)
            index = idx._next_index()
        marks.append(time.perf_counter())
        out = loader._sample_batch(index, None)
        sync()
        marks.append(time.perf_counter())
        out, data = loader._filter(out, None)
        data.input_id = out.metadata[0]
        data.seed_time = out.metadata[1]
        data.batch_size = out.metadata[0].size(0)
        sync()
        marks.append(time.perf_counter())
        if loader.transform is not None:
            data = loader.transform(data)
        sync()
        marks.append(time.perf_counter())
        data = _complete(data)
        sync()
        marks.append(time.perf_counter())
        if stream is not None:
            _record_on(data, stream)
        marks.append(time.perf_counter())
        if i:
            for k, a, b in zip(t, marks, marks[1:]):
                t[k] += 1e3 * (b - a) / n
    return t


def python_top(loader, n: int, top: int) -> str:
    it = _cycle(loader)
    next(it)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        next(it)
    if DEV.type == 'cuda':
        torch.cuda.synchronize()
    pr.disable()
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    s.write(f'python calls per batch: {st.total_calls / n:.0f}\n')
    st.sort_stats('tottime').print_stats(top)
    st.sort_stats('cumulative').print_stats(top)
    return s.getvalue()


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--graph', default='products')
    p.add_argument('--batches', type=int, default=60)
    p.add_argument('--top', type=int, default=30)
    p.add_argument('--variants', default='plain,padded,padded-bf16')
    p.add_argument('--out', default='loader_host_probe.jsonl')
    a = p.parse_args()
    data, seeds, _ = make_data(a.graph)
    data = data.to(DEV)
    kw = dict(input_nodes=seeds, batch_size=min(1024, seeds.numel() // 4), shuffle=True)
    torch.manual_seed(0)
    hb = buckets_from_batches(NeighborLoader(data, [15, 10, 5], **kw), num_batches=20, levels=2, per_hop=True)
    out = open(a.out, 'w')
    for v in a.variants.split(','):
        loader = NeighborLoader(
            data,
            [15, 10, 5],
            **kw,
            transform=PadHops(hb, kw['batch_size']) if v.startswith('padded') else None,
            feature_storage=torch.bfloat16 if v.endswith('bf16') else None,
        )
        ms = min(
            loop_ms(lambda b: None, itertools.islice(_cycle(loader), a.batches + 3), DEV, warmup=3) for _ in range(2)
        )
        rec = dict(
            graph=a.graph,
            variant=v,
            ms_per_batch=ms,
            syncs=syncs_per_batch(loader, 20),
        )
        rec['ops'], most = ops_per_batch(loader, 20, a.top)
        rec['stages_ms'] = stage_ms(loader, a.batches)
        print(f'{v}: {ms:.3f} ms/batch, {rec["syncs"]:.1f} syncs, {rec["ops"]:.0f} torch ops per batch', flush=True)
        print('  stages (ms, synchronised):', {k: round(x, 3) for k, x in rec['stages_ms'].items()})
        for name, count, us in most:
            print(f'  {name[:60]:60s} {count:6.1f} per batch {us:8.1f} us self')
        print(python_top(loader, a.batches, a.top), flush=True)
        out.write(json.dumps(rec) + '\n')
        out.flush()


if __name__ == '__main__':
    main()
