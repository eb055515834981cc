"""A/B of kernel speed between two checkouts of pyg_tc, in one device run.

    python benchmarks/probes/ab_kernels.py --base .ab_base --new . --out OUTDIR/ab [--rounds 3]

Each round runs one worker process per checkout (alternating, so clock and
thermal drift hit both alike); a worker builds its kernels in its own build
directory, generates the same graphs from the same seeds and times every case
kernel-only (a CUDA graph of ``CALLS`` calls, median of ``REPLAYS`` replays).
The report keeps, per case, the best median over the rounds of each side and
gives the ratio new / base (above 1: the new code is slower). Cases: the
SpMM, SDDMM, tensor-core (SGT) and CBSR rows of the benchmark suite, on
power-law (R-MAT) and banded graphs, and an odd width (33) for the SpMM and
SDDMM's one-element-per-lane path. Only public ops that both checkouts
have are called (``pyg_tc.ops``: spmm_graph, sddmm_graph, sgt_of,
sgt_spmm_cells, sgt_sddmm_cells, maxk, cbsr_spmm_graph; the
``cbsr_sspmm`` op).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

CALLS = 20
REPLAYS = 10
GRAPHS = {  # name: (kind, nodes, edges)
    'rmat-100k': ('rmat', 10_000, 100_000),
    'rmat-4m': ('rmat', 200_000, 4_000_000),
    'rmat-30m': ('rmat', 1_000_000, 30_000_000),
    'band-2m': ('band', 131_072, 2_097_152),
}


def _graph(kind: str, n: int, e: int, dev):
    import torch

    gen = torch.Generator(device=dev).manual_seed(7)
    if kind == 'rmat':  # R-MAT (a, b, c) = (0.57, 0.19, 0.19): power-law degrees, hubs
        bits = max(1, (n - 1).bit_length())
        src = torch.zeros(e, dtype=torch.long, device=dev)
        dst = torch.zeros(e, dtype=torch.long, device=dev)
        for _ in range(bits):
            r = torch.rand(e, generator=gen, device=dev)
            src = src * 2 + (r >= 0.76).long()
            dst = dst * 2 + (((r >= 0.57) & (r < 0.76)) | (r >= 0.95)).long()
        return src % n, dst % n
    deg = e // n  # banded: every node has `deg` sources within +-64 ids (TC-GNN's favourable case)
    dst = torch.arange(n, device=dev).repeat_interleave(deg)
    src = (dst + torch.randint(-64, 65, (n * deg,), generator=gen, device=dev)).clamp(0, n - 1)
    return src, dst


def _time(fn) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    times = []
    for _ in range(REPLAYS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / CALLS)
    return statistics.median(times)


def worker(out: str) -> None:
    import torch

    import pyg_tc
    from pyg_tc import ops
    from pyg_tc.formats import CSRGraph

    pyg_tc.ops.ensure()
    assert pyg_tc.info(build=False)['kernels'] == 'loaded', pyg_tc.info(build=False)
    dev = torch.device('cuda')
    res = {}
    only = os.environ.get('AB_ONLY', '')

    def timed(key, fn):
        if only in key:
            res[key] = _time(fn)

    with torch.no_grad():
        for gname, (kind, n, e) in GRAPHS.items():
            src, dst = _graph(kind, n, e, dev)
            g = CSRGraph.from_coo(src, dst, n, n)
            gen = torch.Generator(device=dev).manual_seed(1)
            w = torch.rand(g.num_edges, device=dev, generator=gen)
            for dt in (torch.float32, torch.float16):
                dn = str(dt).split('.')[-1]
                for F in (16, 33, 64, 256):  # 33: the one-element-per-lane path of odd widths
                    x = torch.randn(n, F, device=dev, dtype=dt, generator=gen)
                    timed(f'spmm/{gname}/{dn}/{F}', lambda: ops.spmm_graph(g, x, w))
                    if F <= 64:
                        timed(f'sddmm/{gname}/{dn}/{F}', lambda: ops.sddmm_graph(g, x, x))
                if gname in ('band-2m', 'rmat-100k'):
                    s = ops.sgt_of(g)
                    cells = s.cell_values(w)
                    for F in (16, 64):
                        x = torch.randn(n, F, device=dev, dtype=dt, generator=gen)
                        timed(f'sgt_spmm/{gname}/{dn}/{F}', lambda: ops.sgt_spmm_cells(g, x, cells))
                        timed(f'sgt_sddmm/{gname}/{dn}/{F}', lambda: ops.sgt_sddmm_cells(g, x, x))
                if gname != 'rmat-30m':
                    h = torch.randn(n, 256, device=dev, dtype=dt, generator=gen)
                    xk = ops.maxk(h, 32)
                    timed(f'maxk/{gname}/{dn}/256', lambda: ops.maxk(h, 32))
                    timed(f'cbsr_spmm/{gname}/{dn}/256', lambda: ops.cbsr_spmm_graph(g, xk, w))
                    G = torch.randn(n, 256, device=dev, dtype=dt, generator=gen)
                    sc = g.sched
                    timed(
                        f'cbsr_sspmm/{gname}/{dn}/256',
                        lambda: torch.ops.pyg_tc.cbsr_sspmm(
                            g.rowptr,
                            g.col,
                            w,
                            G,
                            xk.indices,
                            sc.units,
                            sc.heavy_rows,
                            sc.heavy_ptr,
                            sc.num_slots,
                            None,
                            'sum',
                        ),
                    )
            g = None
            torch.cuda.empty_cache()
            print(f'  {gname}: done', flush=True)
    with open(out, 'w') as f:
        json.dump(res, f)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--base', default='.ab_base')
    p.add_argument('--new', default='.')
    p.add_argument('--out', default='ab_out')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--only', default='', help='time only the cases whose name contains this')
    p.add_argument('--worker', help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a.worker)
    os.makedirs(a.out, exist_ok=True)
    sides = {'base': os.path.abspath(a.base), 'new': os.path.abspath(a.new)}
    runs = {side: [] for side in sides}
    for r in range(a.rounds):
        for side, root in sides.items():
            t0 = time.time()
            path = os.path.join(a.out, f'{side}_{r}.json')
            env = {**os.environ, 'PYTHONPATH': root, 'PYG_TC_BUILD_DIR': f'/tmp/pyg_tc_ab_{side}', 'AB_ONLY': a.only}
            subprocess.run([sys.executable, os.path.abspath(__file__), '--worker', path], check=True, env=env, cwd=root)
            with open(path) as f:
                runs[side].append(json.load(f))
            print(f'round {r} {side}: {time.time() - t0:.0f} s', flush=True)
    cases = sorted(set(runs['base'][0]) & set(runs['new'][0]))
    rows = []
    for c in cases:
        b = min(run[c] for run in runs['base'])
        n = min(run[c] for run in runs['new'])
        rows.append({'case': c, 'base_ms': b, 'new_ms': n, 'ratio': n / b})
    geo = math.exp(statistics.mean(math.log(r['ratio']) for r in rows))
    worst = max(rows, key=lambda r: r['ratio'])
    summary = {
        'cases': len(rows),
        'geomean_ratio': geo,
        'worst': worst,
        'over_3pct': [r['case'] for r in rows if r['ratio'] > 1.03],
    }
    with open(os.path.join(a.out, 'ab.json'), 'w') as f:
        json.dump({'summary': summary, 'rows': rows}, f, indent=1)
    lines = ['| case | base ms | new ms | new / base |', '|---|---:|---:|---:|']
    lines += [f"| {r['case']} | {r['base_ms']:.4f} | {r['new_ms']:.4f} | {r['ratio']:.3f} |" for r in rows]
    lines.append(
        f'\ngeomean new / base: {geo:.4f}; worst {worst["case"]} {worst["ratio"]:.3f}; '
        f'over 3%: {summary["over_3pct"] or "none"}'
    )
    with open(os.path.join(a.out, 'ab.md'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
