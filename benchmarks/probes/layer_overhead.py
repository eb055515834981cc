"""Host cost of one layer on a NeighborLoader-sized batch (what paces a
mini-batch step): per layer and implementation, the wall time of the
forward, of forward + backward (each ended by a synchronisation), the time
the host needs to issue them (no synchronisation), and the kernel launches;
and the same for the format build. A synthetic batch shaped like the Reddit
one (``--nodes`` nodes, fan-out ``--fanout`` per target, edges in target
order as NeighborLoader gives them), no sampler needed.

``python benchmarks/probes/layer_overhead.py [--nodes 43000] [--fanout 4]`` (GPU).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch_geometric.nn as pyg_nn
from torch.profiler import ProfilerActivity, profile

import pyg_tc
from pyg_tc.formats import CSRGraph, attach


def timed(fn, reps: int, sync: bool) -> float:
    """Mean ms of ``fn`` over ``reps`` runs after 3 warm-ups; with ``sync``
    each run ends with a device synchronisation, otherwise only the host
    time to issue it is counted (synchronised between runs)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return 1e3 * statistics.median(ts)


def launches(fn) -> int:
    """Kernel launches (and memsets / copies) of one ``fn()``."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(
        e.count
        for e in prof.key_averages()
        if e.key in ('cudaLaunchKernel', 'cudaLaunchKernelExC', 'cudaMemsetAsync', 'cudaMemcpyAsync')
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--nodes', type=int, default=43000)
    p.add_argument('--fanout', type=int, default=4)
    p.add_argument('--width', type=int, default=128)
    p.add_argument('--out', type=int, default=256)
    p.add_argument('--reps', type=int, default=30)
    a = p.parse_args()
    dev = torch.device('cuda')
    g = torch.Generator().manual_seed(0)
    N, f = a.nodes, a.fanout
    dst = torch.arange(N).repeat_interleave(f)
    src = torch.randint(0, N, (N * f,), generator=g)
    ei = torch.stack([src, dst]).to(dev)
    x = torch.randn(N, a.width, device=dev, requires_grad=True)
    print(
        f'batch: {N:,} nodes, {ei.size(1):,} edges (target order), width {a.width} -> {a.out}; '
        f'{torch.cuda.get_device_name()}'
    )

    def build():
        return CSRGraph.from_coo(ei[0], ei[1], N, N)

    row = dict(
        what='format build',
        impl='pyg_tc',
        wall=timed(build, a.reps, True),
        issue=timed(build, a.reps, False),
        launches=launches(build),
    )
    rows = [row]
    tc_ei = attach(ei.clone(), N, build())
    layers = {
        'sage': lambda lib: lib.SAGEConv(a.width, a.out),
        'gcn': lambda lib: lib.GCNConv(a.width, a.out),
        'gat': lambda lib: lib.GATConv(a.width, a.out, heads=1),
    }
    for name, make in layers.items():
        for impl, lib in (('pyg', pyg_nn), ('pyg_tc', pyg_tc.nn)):
            torch.manual_seed(0)
            conv = make(lib).to(dev)
            adj = tc_ei if impl == 'pyg_tc' else ei
            gout = torch.randn(N, a.out, device=dev)

            def fwd():
                return conv(x, adj)

            def fwd_bwd():
                conv(x, adj).backward(gout)

            for what, fn in (('forward', fwd), ('forward+backward', fwd_bwd)):
                rows.append(
                    dict(
                        what=f'{name} {what}',
                        impl=impl,
                        wall=timed(fn, a.reps, True),
                        issue=timed(fn, a.reps, False),
                        launches=launches(fn),
                    )
                )
    # the op alone
    gr = build()
    xs = x.detach().requires_grad_()
    for label, inp in (('spmm op (x needs grad)', xs), ('spmm op (no grad)', x.detach())):
        fn = lambda inp=inp: pyg_tc.ops.spmm_graph(gr, inp, None, 'mean')  # noqa: E731
        rows.append(
            dict(
                what=label,
                impl='pyg_tc',
                wall=timed(fn, a.reps, True),
                issue=timed(fn, a.reps, False),
                launches=launches(fn),
            )
        )
    ls = lambda: pyg_nn.aggr.MeanAggregation()(x.detach()[ei[0]], ei[1], dim_size=N)  # noqa: E731
    rows.append(
        dict(
            what='PyG gather + mean scatter',
            impl='pyg',
            wall=timed(ls, a.reps, True),
            issue=timed(ls, a.reps, False),
            launches=launches(ls),
        )
    )
    print(f'| {"what":<34} | {"impl":<6} | wall ms | host issue ms | launches |')
    print('|---|---|---|---|---|')
    for r in rows:
        print(f'| {r["what"]:<34} | {r["impl"]:<6} | {r["wall"]:7.3f} | {r["issue"]:13.3f} | {r["launches"]:8d} |')


if __name__ == '__main__':
    main()
