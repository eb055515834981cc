"""Where a per-hop captured epoch's time goes, per batch (products-shaped
graph, 3-layer SAGE, [15, 10, 5], 1,024 seeds): the GPU loader alone and with
:class:`~pyg_tc.transforms.PadHops`, the captured trimmed step alone (replays of
padded batches), the whole loop, each with and without the loader's
``prefetch``; the GPU's kernel time and busy time (the union of the kernels'
intervals, torch.profiler) per batch.

``python benchmarks/probes/hops_profile.py [--out FILE.json]`` on a GPU (without
one, a dry run of the code on the CPU: the times mean nothing).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

import torch

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:  # run as a script from the checkout
    sys.path.insert(0, _ROOT)

from pyg_tc.bench.timing import loop_ms, synchronize  # noqa: E402


def wall_ms(it, fn=lambda b: None, n=60, warmup=5) -> float:
    """ms per batch of ``fn`` over ``n`` batches of ``it`` after ``warmup``."""
    return loop_ms(fn, itertools.islice(it, warmup + n), warmup=warmup)


def gpu_ms(fn, n: int) -> dict:
    """Kernel ms and busy ms (union of the kernels' intervals) per batch of ``fn()``."""
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        fn()
        return dict(kernel_ms=0.0, busy_ms=0.0)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy, end = 0.0, None
    for s, e in sorted((e.time_range.start, e.time_range.end) for e in ev):
        if end is None or s > end:
            busy, end = busy + (e - s), e
        elif e > end:
            busy, end = busy + (e - end), e
    return dict(kernel_ms=sum(e.device_time for e in ev) / 1e3 / n, busy_ms=busy / 1e3 / n)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--out', help='write the numbers to this JSON file')
    p.add_argument('--prefetch', type=int, default=2)
    p.add_argument('--graph', default='products', help='products, reddit, arxiv or tiny (a quick check)')
    p.add_argument('--batch-size', type=int, default=1024)
    a = p.parse_args(argv)
    from benchmarks.suites.sampling import DEV, SHAPES, make_data
    from pyg_tc.bench.models import Net
    import pyg_tc.nn
    from pyg_tc.capture import CapturedStep
    from pyg_tc.loader import NeighborLoader
    from pyg_tc.transforms import PadHops, buckets_from_batches

    data, seeds, _ = make_data(a.graph)
    gd = data.to(DEV)
    width, classes, _ = SHAPES[a.graph]
    B = a.batch_size

    def loader(transform=None, prefetch=0):
        return NeighborLoader(
            gd, [15, 10, 5], input_nodes=seeds, batch_size=B, shuffle=True, transform=transform, prefetch=prefetch
        )

    buckets = buckets_from_batches(loader(), num_batches=20, levels=2, per_hop=True)
    model = Net(pyg_tc.nn, 'sage', [width, 256, 256, classes], trim=True).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=0.003, capturable=DEV.type == 'cuda')
    step = CapturedStep(model, opt, forward=lambda m, b: m(b.x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges))
    out = {}
    for k in (0, a.prefetch):
        out[f'prefetch{k}_loader_ms'] = wall_ms(loader(None, k))
        out[f'prefetch{k}_loader_padhops_ms'] = wall_ms(loader(PadHops(buckets, B), k))
    pad = PadHops(buckets, B)
    padded = [pad(b) for b in itertools.islice(loader(), 20)]
    out['replay_ms'] = wall_ms(itertools.cycle(padded), step)
    out.update({f'replay_gpu_{k}': v for k, v in gpu_ms(lambda: [step(b) for b in padded], 20).items()})
    it = iter(loader(PadHops(buckets, B)))
    out.update({f'loader_padhops_gpu_{k}': v for k, v in gpu_ms(lambda: list(itertools.islice(it, 20)), 20).items()})
    it = None
    for k in (0, a.prefetch):
        out[f'prefetch{k}_loop_ms'] = wall_ms(loader(PadHops(buckets, B), k), step, n=80)
        it = iter(loader(PadHops(buckets, B), k))
        for b in itertools.islice(it, 5):
            step(b)
        out.update(
            {
                f'prefetch{k}_loop_gpu_{m}': v
                for m, v in gpu_ms(lambda: [step(b) for b in itertools.islice(it, 30)], 30).items()
            }
        )
        it = None
    out['replays'], out['eager_steps'] = step.replays, step.eager_steps
    print(json.dumps(out, indent=1))
    if a.out:
        with open(a.out, 'w') as f:
            json.dump(out, f, indent=1)


if __name__ == '__main__':
    main()
