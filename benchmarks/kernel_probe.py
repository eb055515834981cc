"""Kernel probe for the device: correctness of every dtype/width/reduce against
the reference on GPU, then a sweep of (lanes, vectors-per-lane) configs and
schedule chunk sizes against cuSPARSE on power-law graphs. Used to choose the
rules in kernels/csr.cu (choose_config) and formats/csr.py (DEFAULT_CHUNK).

    python benchmarks/kernel_probe.py [--quick]
"""
import argparse
import itertools
import os
import sys
import time

import torch

import pyg_tc
from pyg_tc.formats import CSRGraph
from pyg_tc.ops import sddmm_graph, sddmm_reference, spmm_graph, spmm_reference


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp(min=1e-30)).item()


def timeit(fn, rep=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rep):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def rmat(n, e, seed=0, device='cuda', a=0.57, b=0.19, c=0.19):
    try:
        from pyg_tc.bench.graphs import rmat as suite_rmat
        return suite_rmat(n, e, seed=seed, device=device)
    except ImportError:  # the probe predates the suite
        gen = torch.Generator(device=device).manual_seed(seed)
        scale = max(1, (n - 1).bit_length())
        src = torch.zeros(e, dtype=torch.long, device=device)
        dst = torch.zeros(e, dtype=torch.long, device=device)
        for _ in range(scale):
            r = torch.rand(e, generator=gen, device=device)
            sb = (r >= a + b).long()
            db = (((r >= a) & (r < a + b)) | (r >= a + b + c)).long()
            src = src * 2 + sb
            dst = dst * 2 + db
        perm = torch.randperm(1 << scale, generator=gen, device=device)
        return torch.stack([perm[src] % n, perm[dst] % n])


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
    for (gname, (ei, n)), dt, F in itertools.product(graphs.items(), [torch.float32, torch.float16, torch.bfloat16],
                                                     [1, 3, 16, 32, 33, 64, 128, 256, 300]):
        g = CSRGraph.from_coo(ei[0], ei[1], n, n)
        x = torch.randn(n, F, device=dev).to(dt)
        w = torch.rand(g.num_edges, device=dev)
        for red, usew, diag in [('sum', False, None), ('sum', True, None), ('mean', False, None),
                                ('max', True, None), ('sum', True, 'd')]:
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


def sweep(quick):
    shapes = {'arxiv': (169_343, 2_100_000), 'reddit': (233_000, 96_700_000),
              'products': (2_449_029, 104_000_000)}
    if quick:
        shapes = {'arxiv': shapes['arxiv'], 'reddit': shapes['reddit']}
    configs = ['8,1', '16,1', '32,1', '8,2', '16,2', '32,2']
    chunks = [128, 256, 512, 1024]
    rows = []
    for gname, (n, e) in shapes.items():
        t0 = time.time()
        ei = rmat(n, e, seed=0, device='cuda')
        torch.cuda.synchronize()
        tg = time.time() - t0
        t0 = time.time()
        base = CSRGraph.from_coo(ei[0], ei[1], n, n)
        torch.cuda.synchronize()
        tb = time.time() - t0
        print(f'[{gname}] rmat {tg:.2f}s, build {tb:.3f}s, {base.stats()}', flush=True)
        A = torch.sparse_csr_tensor(base.rowptr.long(), base.col.long(),
                                    torch.ones(base.num_edges, device='cuda'), (n, n))
        del ei
        for dt, F in itertools.product([torch.float32, torch.float16], [32, 64, 128, 256]):
            x = torch.randn(n, F, device='cuda', dtype=dt)
            Ad = A.to(dt) if dt != torch.float32 else A
            t_cus = timeit(lambda: torch.sparse.mm(Ad, x))
            ref = torch.sparse.mm(A, x.float())
            best = None
            for ch in chunks:
                g = CSRGraph(base.rowptr, base.col, base.perm, base.t_rowptr, base.t_col, base.t_perm,
                             pyg_tc.formats.build_schedule(base.rowptr, ch), base.t_sched, n, n, ch)
                for cfg in configs:
                    os.environ['PYG_TC_SPMM_CONFIG'] = cfg
                    t = timeit(lambda: spmm_graph(g, x))
                    err = rel(spmm_graph(g, x).float(), ref)
                    rows.append((gname, str(dt)[6:], F, ch, cfg, t, t_cus, err))
                    if best is None or t < best[1]:
                        best = (f'chunk={ch} cfg={cfg}', t)
                os.environ.pop('PYG_TC_SPMM_CONFIG')
            t_def = timeit(lambda: spmm_graph(base, x))
            print(f'  {gname} {str(dt)[6:]:8s} F={F:3d} cuSPARSE {t_cus:7.3f} ms | default {t_def:7.3f} ms '
                  f'({t_cus / t_def:5.2f}x) | best {best[0]} {best[1]:7.3f} ms ({t_cus / best[1]:5.2f}x)',
                  flush=True)
        del A, base
        torch.cuda.empty_cache()
    out = os.environ.get('OUT', '.')
    with open(os.path.join(out, 'sweep.tsv'), 'w') as f:
        f.write('graph\tdtype\tF\tchunk\tcfg\tms\tcusparse_ms\trel_err\n')
        for r in rows:
            f.write('\t'.join(str(v) for v in r) + '\n')


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--quick', action='store_true')
    ap.add_argument('--no-sweep', action='store_true')
    args = ap.parse_args()
    t0 = time.time()
    print(pyg_tc.info(), flush=True)
    print(f'build+load {time.time() - t0:.1f}s', flush=True)
    ok = correctness()
    if not args.no_sweep:
        sweep(args.quick)
    sys.exit(0 if ok else 1)
