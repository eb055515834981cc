"""Kernel probe for the device: correctness of every dtype/width/reduce against
the reference on GPU, then a sweep of (lanes, vectors-per-lane) configs and
schedule chunk sizes against cuSPARSE on power-law graphs. Used to choose the
rules in kernels/csr/csr_host.cpp (choose_config) and formats/csr.py (DEFAULT_CHUNK).

    python benchmarks/probes/kernel_probe.py [--graphs tolokers,arxiv] [--chunks 32,64,128]
"""

import argparse
import itertools
import os
import sys
import time

import torch

import pyg_tc
from pyg_tc.bench.graphs import load_graph, rmat
from pyg_tc.bench.timing import kernel_time
from pyg_tc.formats import CSRGraph, build_schedule
from pyg_tc.ops import sddmm_graph, sddmm_reference, spmm_graph, spmm_reference
from pyg_tc.testing import kernel_overrides


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp(min=1e-30)).item()


def timeit(fn):
    """Kernel-only time (CUDA-graph replay): small graphs are otherwise
    dominated by the host's per-call overhead."""
    return kernel_time(fn, 'cuda', rep=20, warmup=3).median_ms


def correctness():
    dev = 'cuda'
    torch.manual_seed(0)
    graphs = {}
    N = 1000
    ei = torch.randint(0, N, (2, 20000), device=dev)
    hub = torch.stack([torch.randint(0, N, (9000,), device=dev), torch.full((9000,), 5, device=dev)])
    graphs['hub'] = (torch.cat([ei, hub], 1), N + 7)  # +7 isolated rows
    graphs['rmat'] = (rmat(5000, 200000, seed=1, device=dev), 5000)
    graphs['empty'] = (torch.zeros(2, 0, dtype=torch.long, device=dev), 13)
    worst = {}
    fails = 0
    for (gname, (ei, n)), dt, F in itertools.product(
        graphs.items(), [torch.float32, torch.float16, torch.bfloat16], [1, 3, 16, 32, 33, 64, 128, 256, 300]
    ):
        g = CSRGraph.from_coo(ei[0], ei[1], n, n)
        x = torch.randn(n, F, device=dev).to(dt)
        w = torch.rand(g.num_edges, device=dev)
        for red, usew, diag in [
            ('sum', False, None),
            ('sum', True, None),
            ('mean', False, None),
            ('max', True, None),
            ('sum', True, 'd'),
        ]:
            d = torch.rand(n, device=dev) if diag else None
            out = spmm_graph(g, x, w if usew else None, red, d)
            ref = spmm_reference(g.rowptr, g.col, w if usew else None, x, d, red)
            r = rel(out, ref)
            tol = 1e-5 if dt == torch.float32 else 1e-2
            key = (str(dt), red)
            worst[key] = max(worst.get(key, 0), r)
            if not (r < tol) or not torch.isfinite(out).all():
                fails += 1
                print(f'FAIL spmm {gname} {dt} F={F} {red} w={usew} diag={bool(diag)} rel={r:.3g}', flush=True)
        a = torch.randn(n, F, device=dev).to(dt)
        s = sddmm_graph(g, a, x)
        r = rel(s, sddmm_reference(g.rowptr, g.col, a, x)) if g.num_edges else 0.0
        worst[(str(dt), 'sddmm')] = max(worst.get((str(dt), 'sddmm'), 0), r)
        if not r < (1e-5 if dt == torch.float32 else 1e-2):
            fails += 1
            print(f'FAIL sddmm {gname} {dt} F={F} rel={r:.3g}', flush=True)
    # determinism
    g = CSRGraph.from_coo(graphs['hub'][0][0], graphs['hub'][0][1], N + 7, N + 7)
    x = torch.randn(N + 7, 64, device=dev)
    same = torch.equal(spmm_graph(g, x), spmm_graph(g, x))
    print('deterministic:', same)
    for k, v in sorted(worst.items()):
        print(f'  worst rel err {k}: {v:.2e}')
    print(f'correctness: {fails} failures', flush=True)
    return fails == 0 and same


def overhead():
    """Host time per call on a tiny graph (the GPU is never the bottleneck):
    where does a small-graph call spend its time?"""
    import time as _t

    ei = torch.randint(0, 2000, (2, 20000), device='cuda')
    g = CSRGraph.from_coo(ei[0], ei[1], 2000, 2000)
    x = torch.randn(2000, 32, device='cuda')
    A = torch.sparse_csr_tensor(g.rowptr.long(), g.col.long(), torch.ones(g.num_edges, device='cuda'), (2000, 2000))
    s, ts = g.sched, g.t_sched
    args = (
        g.rowptr,
        g.col,
        None,
        x,
        s.units,
        s.heavy_rows,
        s.heavy_ptr,
        None,
        s.num_slots,
        'sum',
        g.t_rowptr,
        g.t_col,
        g.t_perm,
        None,
        ts.units,
        ts.heavy_rows,
        ts.heavy_ptr,
        ts.num_slots,
    )
    op = torch.ops.pyg_tc.spmm_csr.default

    def raw():
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args)

    cases = {
        'spmm_graph': lambda: spmm_graph(g, x),
        'op (autograd wrapper)': lambda: op(*args),
        'op below autograd': raw,
        'torch.sparse.mm': lambda: torch.sparse.mm(A, x),
        'empty launch (x + 1)': lambda: x + 1,
    }
    for name, fn in cases.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t0 = _t.perf_counter()
        for _ in range(2000):
            fn()
        torch.cuda.synchronize()
        print(f'  overhead {name:24s} {(_t.perf_counter() - t0) / 2000 * 1e6:7.1f} us/call', flush=True)


def sweep(names, chunks, dtypes=(torch.float32, torch.float16)):
    configs = [(None, False), (None, True)] + [(c, None) for c in ((4, 1), (8, 1), (16, 1), (32, 1), (8, 2), (16, 2))]
    rows = []
    for name in names:
        bg = load_graph(name, device='cuda')
        n = bg.num_nodes
        base = CSRGraph.from_coo(bg.edge_index[0], bg.edge_index[1], n, n)
        print(f'[{name}] {base.stats()} auto chunk {base.chunk}', flush=True)
        A = torch.sparse_csr_tensor(
            base.rowptr.long(), base.col.long(), torch.ones(base.num_edges, device='cuda'), (n, n)
        )
        scheds = {ch: build_schedule(base.rowptr, ch) for ch in chunks}
        for dt, F in itertools.product(dtypes, [32, 64, 128, 256]):
            x = torch.randn(n, F, device='cuda', dtype=dt)
            Ad = A.to(dt) if dt != torch.float32 else A
            t_cus = timeit(lambda: torch.sparse.mm(Ad, x))
            ref = torch.sparse.mm(A, x.float())
            best = None
            for ch, sched in scheds.items():
                g = CSRGraph(
                    base.rowptr,
                    base.col,
                    base.perm,
                    base.t_rowptr,
                    base.t_col,
                    base.t_perm,
                    sched,
                    base.t_sched,
                    n,
                    n,
                    ch,
                )
                for cfg, coop in configs:
                    with kernel_overrides(spmm_config=cfg, spmm_coop=coop):
                        t = timeit(lambda: spmm_graph(g, x))
                        err = rel(spmm_graph(g, x).float(), ref)
                    tag = f'cfg={cfg or "rule"} coop={"rule" if coop is None else int(coop)}'
                    rows.append((name, str(dt)[6:], F, ch, tag, t, t_cus, err))
                    if best is None or t < best[1]:
                        best = (f'chunk={ch} {tag}', t)
            t_def = timeit(lambda: spmm_graph(base, x))
            print(
                f'  {name} {str(dt)[6:]:8s} F={F:3d} cuSPARSE {t_cus:7.4f} ms | default {t_def:7.4f} ms '
                f'({t_cus / t_def:5.2f}x) | best {best[0]} {best[1]:7.4f} ms ({t_cus / best[1]:5.2f}x)',
                flush=True,
            )
        A = base = bg = None
        torch.cuda.empty_cache()
    out = os.environ.get('OUT', '.')
    with open(os.path.join(out, 'sweep.tsv'), 'w') as f:
        f.write('graph\tdtype\tF\tchunk\tcfg\tms\tcusparse_ms\trel_err\n')
        for r in rows:
            f.write('\t'.join(str(v) for v in r) + '\n')


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--graphs', default='tolokers,blogcatalog,cornell5,arxiv')
    ap.add_argument('--chunks', default='32,64,128,256')
    ap.add_argument('--no-sweep', action='store_true')
    args = ap.parse_args()
    t0 = time.time()
    print(pyg_tc.info(), flush=True)
    print(f'build+load {time.time() - t0:.1f}s', flush=True)
    ok = correctness()
    overhead()
    if not args.no_sweep:
        sweep(args.graphs.split(','), [int(c) for c in args.chunks.split(',')])
    sys.exit(0 if ok else 1)
