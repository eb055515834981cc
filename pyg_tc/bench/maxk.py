"""MaxK-GNN benchmarks: the paper's Figure 8 (SpGEMM forward and SSpMM
backward at width 256 over k, against cuSPARSE SpMM and pyg_tc's CSR SpMM at
width 256), the selection kernel against ``torch.topk``, and the full-batch
MaxK-SAGE training epoch against the ReLU model (pyg_tc CSR kernels and
PyG's own SAGEConv).

``python -m pyg_tc.bench.maxk --out DIR [--graphs reddit,products,...]
[--ks 2,4,...] [--no-train]`` writes ``DIR/maxk.jsonl``, ``DIR/maxk.md`` and
``DIR/maxk.png``.

Timing: every kernel time is the kernel-only time (the call captured in a
CUDA graph and replayed: no host overhead), all implementations on the same
inputs in the same run; fp32 features. GB/s counts the bytes each kernel
must move at least once per edge (no cache reuse): SpGEMM k values + k
indices per edge + col + the dense output; SSpMM the dense gradient once,
k indices and k fp32 atomic updates per edge + col; SpMM the full row per
edge + col + output.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn.functional as Fn

from .graphs import load_graph, resolve_names
from .timing import bench_graph_replay
from .training import time_training

KS = (2, 4, 8, 16, 32, 64, 96, 128, 192)
WIDTH = 256
GRAPHS = ['reddit', 'products', 'arxiv', 'tolokers', 'proteins', 'blogcatalog', 'cornell5']


def _kernel_ms(fn: Callable[[], object], rep: int = 20) -> float:
    return bench_graph_replay([fn], warmup=2, rep=rep).median_ms


def _free() -> None:
    gc.collect()
    torch.cuda.empty_cache()


def bench_kernels(name: str, ks: Sequence[int], log=print) -> List[dict]:
    from ..formats import CSRGraph
    from ..ops import cbsr_spmm_graph, maxk, spmm_graph
    bg = load_graph(name, 'cuda')
    N, E = bg.num_nodes, bg.num_edges
    g = CSRGraph.from_coo(bg.edge_index[0], bg.edge_index[1], N, N)
    del bg
    _free()
    torch.manual_seed(0)
    x = torch.randn(N, WIDTH, device='cuda')
    G = torch.randn(N, WIDTH, device='cuda')
    A = torch.sparse_csr_tensor(g.rowptr, g.col, torch.ones(E, device='cuda'), size=(N, N),
                                check_invariants=False)
    base = dict(kind='maxk_kernel', graph=name, nodes=N, edges=E, F=WIDTH)
    cus = _kernel_ms(lambda: torch.sparse.mm(A, x))
    csr = _kernel_ms(lambda: spmm_graph(g, x))
    spmm_bytes = E * (WIDTH * 4 + 4) + N * WIDTH * 4
    log(f'[maxk] {name}: N={N:,} E={E:,} cuSPARSE F=256 {cus:.3f} ms, pyg_tc CSR {csr:.3f} ms')
    out = []
    s = g.sched
    for k in ks:
        c = maxk(x, k)
        ib = c.indices.element_size()
        sel = _kernel_ms(lambda: maxk(x, k))
        topk = _kernel_ms(lambda: torch.topk(x, k, dim=1))
        spg = _kernel_ms(lambda: cbsr_spmm_graph(g, c))
        ssp = _kernel_ms(lambda: torch.ops.pyg_tc.cbsr_sspmm(
            g.rowptr, g.col, None, G, c.indices, s.units, s.heavy_rows, s.heavy_ptr, s.num_slots,
            None, 'sum'))
        # exactness against the dense SpMM of the same (sparsified) features
        dense = c.to_dense()
        ref = spmm_graph(g, dense)
        err = float((cbsr_spmm_graph(g, c) - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
        del dense, ref
        spg_bytes = E * (k * (4 + ib) + 4) + N * WIDTH * 4
        ssp_bytes = N * WIDTH * 4 + E * (k * (ib + 4) + 4)
        rec = dict(base, k=k, cusparse_ms=cus, csr_ms=csr, spgemm_ms=spg, sspmm_ms=ssp,
                   select_ms=sel, topk_ms=topk,
                   spgemm_vs_cusparse=cus / spg, sspmm_vs_cusparse=cus / ssp,
                   spgemm_vs_csr=csr / spg, sspmm_vs_csr=csr / ssp,
                   select_vs_topk=topk / sel, select_share_of_spgemm=sel / spg,
                   spgemm_gbps=spg_bytes / spg / 1e6, sspmm_gbps=ssp_bytes / ssp / 1e6,
                   spmm_gbps=spmm_bytes / csr / 1e6, spgemm_rel_err=err)
        log(f'[maxk] {name} k={k}: SpGEMM {spg:.3f} ms (x{rec["spgemm_vs_cusparse"]:.2f} cuSPARSE, '
            f'x{rec["spgemm_vs_csr"]:.2f} CSR, {rec["spgemm_gbps"]:.0f} GB/s), SSpMM {ssp:.3f} ms '
            f'(x{rec["sspmm_vs_cusparse"]:.2f}, x{rec["sspmm_vs_csr"]:.2f}, {rec["sspmm_gbps"]:.0f} GB/s), '
            f'select {sel:.3f} ms vs topk {topk:.3f} ms ({100 * rec["select_share_of_spgemm"]:.1f}% '
            f'of SpGEMM), rel err {err:.1e}')
        out.append(rec)
        del c
    del x, G, A, g
    _free()
    return out


def _epoch_ms(model, x, y, edge_index, epochs: int) -> dict:
    losses, t, mem = time_training(model, x, y, edge_index, steps=3, rep=epochs)
    return dict(status='ok', epoch_ms=t.median_ms, epoch_min_ms=t.min_ms, loss_first=losses[0],
                **mem)


def _profile(model, x, y, edge_index, log) -> None:
    """Top CUDA kernels of one training step (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        opt.zero_grad(set_to_none=True)
        Fn.cross_entropy(model(x, edge_index), y).backward()
        opt.step()
        torch.cuda.synchronize()
    log(prof.key_averages().table(sort_by='cuda_time_total', row_limit=18, max_name_column_width=70))


def bench_training(name: str = 'reddit', k: int = 16, hidden: int = 256, layers: int = 3,
                   in_channels: int = 256, classes: int = 41, epochs: int = 10, log=print,
                   profile: bool = False, tf32: bool = False) -> List[dict]:
    """Full-batch training epoch (forward + backward + Adam step, dropout 0.5)
    of MaxKGNN('sage') with MaxK(k), the same model with ReLU on pyg_tc's CSR
    kernels, and the ReLU model with PyG's own SAGEConv layers: on the
    ``edge_index`` first (PyG's default gather/scatter path); if that runs out
    of memory, on PyG's sparse ``adj_t`` path (torch.sparse CSR, cuSPARSE),
    PyG's documented memory-efficient input for full-batch training.
    ``tf32=True`` runs every model's dense layers with TF32 matmuls (all
    variants alike; the default is PyTorch's fp32)."""
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        return _bench_training(name, k, hidden, layers, in_channels, classes, epochs, log, profile, tf32)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32


def _bench_training(name, k, hidden, layers, in_channels, classes, epochs, log, profile, tf32):
    import torch_geometric.nn as pyg_nn
    from ..nn import MaxKGNN
    bg = load_graph(name, 'cuda')
    N = bg.num_nodes
    torch.manual_seed(0)
    x = torch.randn(N, in_channels, device='cuda')
    y = torch.randint(0, classes, (N,), device='cuda')
    ei = bg.edge_index
    recs = []
    variants = [('pyg_tc', 'maxk'), ('pyg_tc', 'relu'), ('pyg', 'relu'), ('pyg_adj_t', 'relu')]
    for impl, nl in variants:
        if impl == 'pyg_adj_t':
            if any(r['impl'] == 'pyg' and r.get('status') == 'ok' for r in recs):
                continue
            from torch_geometric.utils import to_torch_csr_tensor
            ei = to_torch_csr_tensor(bg.edge_index.flip(0), size=(N, N))
        torch.manual_seed(0)
        model = MaxKGNN('sage', in_channels, hidden, classes, layers, k, dropout=0.5,
                        nonlinear=nl).cuda()
        if impl.startswith('pyg') and impl != 'pyg_tc':  # the same model, PyG's own layers
            convs = [pyg_nn.SAGEConv(hidden, hidden, aggr='mean').cuda() for _ in model.convs]
            for a, b in zip(convs, model.convs):
                a.load_state_dict(b.state_dict())
            model.convs = torch.nn.ModuleList(convs)
        rec = dict(kind='maxk_train', graph=name, nodes=N, edges=bg.num_edges, impl=impl,
                   nonlinear=nl, k=k if nl == 'maxk' else None, hidden=hidden, layers=layers,
                   matmul='tf32' if tf32 else 'fp32')
        try:
            rec.update(_epoch_ms(model, x, y, ei, epochs))
            if profile and impl == 'pyg_tc':
                _profile(model, x, y, ei, log)
        except torch.OutOfMemoryError:
            rec['status'] = 'oom'
        except RuntimeError as e:
            rec['status'] = f'error: {str(e).splitlines()[0][:200]}'
        del model
        _free()
        log(f'[maxk-train] {name} {impl} {nl} ({rec["matmul"]} matmuls): {rec.get("status")} '
            + (f'{rec["epoch_ms"]:.2f} ms/epoch, peak {rec.get("peak_mb") or 0:.0f} MiB'
               if rec.get('status') == 'ok' else ''))
        recs.append(rec)
    ok = {(r['impl'], r['nonlinear']): r for r in recs if r.get('status') == 'ok'}
    mk = ok.get(('pyg_tc', 'maxk'))
    if mk:
        pyg = ('pyg', 'relu') if ('pyg', 'relu') in ok else ('pyg_adj_t', 'relu')
        for key, field in ((('pyg_tc', 'relu'), 'speedup_vs_relu_csr'), (pyg, 'speedup_vs_relu_pyg')):
            if key in ok:
                mk[field] = ok[key]['epoch_ms'] / mk['epoch_ms']
        log(f'[maxk-train] MaxK k={k}: x{mk.get("speedup_vs_relu_csr", math.nan):.2f} vs ReLU on '
            f'pyg_tc CSR, x{mk.get("speedup_vs_relu_pyg", math.nan):.2f} vs ReLU with PyG SAGEConv')
    del x, y, ei, bg
    _free()
    return recs


def _md(recs: List[dict]) -> str:
    s = ['# MaxK-GNN kernels (Figure 8) and training\n',
         f'- GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else "none"}; '
         f'torch {torch.__version__}; width {WIDTH}, fp32; kernel-only times (CUDA-graph replay), '
         'all implementations in the same run.\n']
    kr = [r for r in recs if r['kind'] == 'maxk_kernel']
    if kr:
        s.append('| graph | k | SpGEMM ms | SSpMM ms | cuSPARSE F=256 ms | pyg_tc CSR F=256 ms | '
                 'SpGEMM vs cuSPARSE | SSpMM vs cuSPARSE | SpGEMM vs CSR | SSpMM vs CSR | '
                 'SpGEMM GB/s | SSpMM GB/s | select ms | topk ms | select / SpGEMM |')
        s.append('|' + '---|' * 15)
        for r in kr:
            s.append(f'| {r["graph"]} | {r["k"]} | {r["spgemm_ms"]:.3f} | {r["sspmm_ms"]:.3f} | '
                     f'{r["cusparse_ms"]:.3f} | {r["csr_ms"]:.3f} | {r["spgemm_vs_cusparse"]:.2f} | '
                     f'{r["sspmm_vs_cusparse"]:.2f} | {r["spgemm_vs_csr"]:.2f} | {r["sspmm_vs_csr"]:.2f} | '
                     f'{r["spgemm_gbps"]:.0f} | {r["sspmm_gbps"]:.0f} | {r["select_ms"]:.3f} | '
                     f'{r["topk_ms"]:.3f} | {100 * r["select_share_of_spgemm"]:.1f}% |')
    tr = [r for r in recs if r['kind'] == 'maxk_train']
    if tr:
        s.append('\n## Training epoch (3-layer SAGE, hidden 256, full batch, forward + backward + Adam)\n')
        s.append('| graph | model | dense matmuls | status | epoch ms | peak MiB | MaxK speedup |')
        s.append('|---|---|---|---|---|---|---|')
        for r in tr:
            name = ('MaxK k=%d' % r['k'] if r['nonlinear'] == 'maxk' else 'ReLU') + {
                'pyg': ' (PyG SAGEConv, edge_index)', 'pyg_adj_t': ' (PyG SAGEConv, sparse adj_t)',
                'pyg_tc': ' (pyg_tc)'}[r['impl']]
            sp = ''
            if 'speedup_vs_relu_csr' in r or 'speedup_vs_relu_pyg' in r:
                sp = (f'x{r.get("speedup_vs_relu_csr", math.nan):.2f} vs ReLU pyg_tc, '
                      f'x{r.get("speedup_vs_relu_pyg", math.nan):.2f} vs ReLU PyG')
            s.append(f'| {r["graph"]} | {name} | {r.get("matmul")} | {r.get("status")} | '
                     f'{r.get("epoch_ms", math.nan):.2f} | {r.get("peak_mb") or math.nan:.0f} | {sp} |')
    return '\n'.join(s) + '\n'


def _plot(recs: List[dict], path: str) -> Optional[str]:
    kr = [r for r in recs if r['kind'] == 'maxk_kernel']
    if not kr:
        return None
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    graphs = list(dict.fromkeys(r['graph'] for r in kr))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, what in zip(axes, ('spgemm', 'sspmm')):
        for gname in graphs:
            rs = [r for r in kr if r['graph'] == gname]
            ax.plot([r['k'] for r in rs], [r[f'{what}_vs_cusparse'] for r in rs], marker='o', label=gname)
        ax.axhline(1.0, color='gray', lw=0.8)
        ax.set_xscale('log', base=2)
        ax.set_yscale('log', base=2)
        ax.set_xlabel('k (of width 256)')
        ax.set_title(f'{"SpGEMM (forward)" if what == "spgemm" else "SSpMM (backward)"} vs cuSPARSE SpMM F=256')
        ax.grid(alpha=0.3)
    axes[0].set_ylabel('speedup (kernel-only)')
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--out', default='bench_out')
    p.add_argument('--graphs', default=','.join(GRAPHS))
    p.add_argument('--ks', default=','.join(map(str, KS)))
    p.add_argument('--no-train', action='store_true')
    p.add_argument('--train-graph', default='reddit')
    p.add_argument('--profile', action='store_true', help='print a kernel breakdown of the training steps')
    p.add_argument('--tf32', action='store_true', help='also run the training with TF32 matmuls')
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print('pyg_tc.bench.maxk: needs a CUDA GPU (kernel benchmark)')
        return 0
    os.makedirs(a.out, exist_ok=True)
    recs: List[dict] = []
    path = os.path.join(a.out, 'maxk.jsonl')
    with open(path, 'w') as f:
        def add(rs):
            for r in rs:
                recs.append(r)
                f.write(json.dumps(r) + '\n')
                f.flush()
        if not a.no_train:
            add(bench_training(a.train_graph, profile=a.profile))
            if a.tf32:
                add(bench_training(a.train_graph, tf32=True))
        ks = [int(v) for v in a.ks.split(',')]
        for name in resolve_names(a.graphs, GRAPHS):
            try:
                add(bench_kernels(name, ks))
            except (FileNotFoundError, ValueError) as e:
                print(f'[maxk] {name}: skipped ({e})')
    with open(os.path.join(a.out, 'maxk.md'), 'w') as f:
        f.write(_md(recs))
    _plot(recs, os.path.join(a.out, 'maxk.png'))
    print(_md(recs))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
