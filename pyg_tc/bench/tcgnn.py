"""TC-GNN benchmarks: tensor-core (TCU) SpMM / SDDMM over SGT blocks against
cuSPARSE, pyg_tc's CSR kernels and PyG-style gather/scatter; the SGT
statistics in native, RCM and random node order; the warps and
``backend='auto'`` rules; SGT build cost; TC-GNN's Table 6; GCN / AGNN
training epochs and accuracy against PyG's own layers.

``python -m pyg_tc.bench.tcgnn --out DIR [--sections kernels,auto,build,table6,train,accuracy]
[--graphs ...] [--widths 16,32,64,128] [--dtypes float32,float16] [--quick] [--device cpu]``
writes ``DIR/tcgnn.jsonl`` (one record per line, the first one the
environment), ``DIR/tcgnn.md`` and ``DIR/tcgnn.png`` (rewritten after every
section, so a run cut short still leaves a report).

Timing: kernel-only (every call captured in a CUDA graph and replayed, calls
under 0.5 ms ten times back to back per graph so the graph launch does not
set a floor; per-call CUDA events if a call cannot be captured), median over
``--rep`` replays, all
implementations on the same inputs in the same run. ``tcu`` is the tensor-core
kernel on cell-ordered values (``sgt_spmm_cells`` / ``sgt_sddmm_cells``: edge
values translated once, as cuSPARSE gets a prebuilt CSR tensor); for fp32
``tcu`` runs 3xTF32 (matmul precision 'highest', fp32-accurate) and
``tcu_tf32`` plain TF32 ('high', as the published TC-GNN). Errors: max
|out - ref| / max |ref| against a float64 reference on the same rounded inputs.
On the CPU every op runs its reference implementation (code-path check only).
"""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import os
import statistics
import time
import traceback
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import torch
import torch.nn.functional as Fn

from .graphs import load_graph, resolve_names
from .report import _jsonable
from .spmm import _short
from .timing import bench, bench_graph_replay

GRAPHS = ['cora', 'citeseer', 'proteins', 'tolokers', 'arxiv', 'reddit', 'products', 'blogcatalog',
          'cornell5']
TRAIN_GRAPHS = ['cora', 'citeseer', 'proteins', 'arxiv', 'reddit']
SECTIONS = ('kernels', 'auto', 'build', 'table6', 'train', 'accuracy')
ORDERS = ('native', 'rcm', 'random')  # random: SGT statistics only
WARPS = (1, 2, 4, 8)
DBW = (1, 2, 4, 8, 16, 32)
PYG_MAX_BYTES = 8e9  # PyG-style gather/scatter skipped above E * F * elem bytes
CPU_BUILD_MAX_EDGES = 2_000_000
ACC_IMPLS = ('pyg', 'auto', 'sgt')
TRAIN_IMPLS = ('pyg', 'csr', 'sgt', 'auto')
NAMES = {'cusparse': 'cuSPARSE', 'csr': 'CSR', 'tcu': 'TCU', 'tcu_tf32': 'TCU-TF32',
         'pyg': 'PyG g/s'}
_DT = {'fp32': 'float32', 'fp16': 'float16', 'bf16': 'bfloat16'}


def _free(dev: torch.device) -> None:
    gc.collect()
    if dev.type == 'cuda':
        torch.cuda.empty_cache()


@contextmanager
def _precision(p: str):
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(p)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


# Calls per CUDA graph for kernels under KERNEL_BATCH_MS: one replay of a
# single ~10 us kernel is dominated by the graph launch (the floor of about
# 10 us in earlier runs, where two kernels of different cost timed alike), so
# short kernels are captured CALLS times back to back and timed per call.
KERNEL_CALLS = 10
KERNEL_BATCH_MS = 0.5


def _kernel_ms(fn: Callable[[], object], dev: torch.device, rep: int) -> float:
    if dev.type != 'cuda':
        return bench(fn, warmup=1, rep=rep, device=dev).median_ms
    try:
        t = bench_graph_replay([fn], warmup=2, rep=min(rep, 5)).median_ms
        if t < KERNEL_BATCH_MS:
            t = bench_graph_replay([fn] * KERNEL_CALLS, warmup=2, rep=rep).median_ms
        return t
    except torch.OutOfMemoryError:
        raise
    except RuntimeError:  # not capturable: per-call CUDA events
        torch.cuda.synchronize()
        return bench(fn, warmup=3, rep=rep, device=dev).median_ms


def _wall_ms(fn: Callable[[], object], dev: torch.device, rep: int) -> float:
    """Median wall time with a device sync after every call, after one warm-up."""
    sync = torch.cuda.synchronize if dev.type == 'cuda' else (lambda: None)
    fn()
    sync()
    ts = []
    for _ in range(rep):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def _warm_up(dev: torch.device, seconds: float = 1.0) -> None:
    """Busy the GPU before the first timing, so it has left its idle clocks
    (without it the first ~10 us kernels of a run timed up to 1.6x slower)."""
    a = torch.randn(4096, 4096, device=dev)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize(dev)


def _rel_err(out, ref) -> float:
    d = (out.double() - ref).abs().max()
    return float(d / ref.abs().max().clamp(min=1e-300)) if out.numel() else 0.0


def _timed(rec: dict, name: str, fn, dev, rep: int, ref=None, post=None) -> None:
    """``rec[name_ms]`` and ``rec[name_err]`` (vs ``ref``), or ``rec[name_error]``."""
    try:
        if ref is not None:
            out = fn()
            rec[f'{name}_err'] = _rel_err(post(out) if post else out, ref)
            del out
        rec[f'{name}_ms'] = _kernel_ms(fn, dev, rep)
    except Exception as e:  # OOM, unsupported dtype, ...
        rec[f'{name}_error'] = _short(e)
        _free(dev)


def _chunks(E: int, F: int, budget: int = 2**31):
    step = max(1, budget // (8 * max(F, 1)))
    return ((s, min(E, s + step)) for s in range(0, E, step))


def _ref_spmm(row, col, w, x, N):
    x64 = x.double()
    out = torch.zeros(N, x.size(1), dtype=torch.float64, device=x.device)
    for s, e in _chunks(col.numel(), x.size(1)):
        out.index_add_(0, row[s:e].long(), x64.index_select(0, col[s:e].long()) * w[s:e].double()[:, None])
    return out


def _ref_sddmm(row, col, a, b):
    a64, b64 = a.double(), b.double()
    out = torch.empty(col.numel(), dtype=torch.float64, device=a.device)
    for s, e in _chunks(col.numel(), a.size(1)):
        out[s:e] = (a64.index_select(0, row[s:e].long()) * b64.index_select(0, col[s:e].long())).sum(1)
    return out


def _graph(ei, N: int):
    from ..formats import CSRGraph
    return CSRGraph.from_coo(ei[0], ei[1], N, N)


def _relabel(ei, N: int, order: str):
    """``edge_index`` with nodes renumbered: ``inv[old] = new`` for perm new -> old."""
    if order == 'native':
        return ei
    if order == 'rcm':
        from ..transforms.reorder import rcm_order
        perm = rcm_order(ei, N)
    else:
        perm = torch.randperm(N, generator=torch.Generator().manual_seed(0)).to(ei.device)
    return torch.argsort(perm)[ei]


def _ratios(rec: dict, a: str, others: Sequence[str]) -> None:
    for o in others:
        if rec.get(f'{a}_ms') and rec.get(f'{o}_ms'):
            rec[f'{a}_vs_{o}'] = rec[f'{o}_ms'] / rec[f'{a}_ms']


def _line(rec: dict, impls) -> str:
    parts = [f'{NAMES.get(i, i)} {rec[i + "_ms"]:.4f}' if f'{i}_ms' in rec
             else f'{NAMES.get(i, i)} [{rec.get(i + "_error", "-")}]' for i in impls]
    return ' | '.join(parts) + ' ms'


# -- 1. kernels -----------------------------------------------------------------

def bench_kernels(name: str, a, log=print) -> Iterator[dict]:
    from ..ops import sgt_of
    dev = a.device
    bg = load_graph(name, dev)
    N = bg.num_nodes
    for order in ORDERS:
        ei = _relabel(bg.edge_index, N, order)
        g = _graph(ei, N)
        del ei
        st = sgt_of(g).stats(g)
        st = {**st, 'kind': 'sgt_stats', 'graph': name, 'order': order, 'nodes': N,
              'block_reduction': st['blocks_without_sgt'] / max(st['blocks'], 1),
              'tile16_reduction': st['tiles16_without_sgt'] / max(st['tiles16'], 1)}
        log(f'[tcgnn] {name} {order}: {st["blocks"]:,} blocks ({st["blocks_without_sgt"]:,} without '
            f'SGT), {st["nnz_per_block"]:.2f} nnz/block')
        yield st
        if order != 'random':
            yield from _kernels_order(name, order, g, st, a, log)
        del g
        _free(dev)
    del bg
    _free(dev)


@torch.no_grad()
def _kernels_order(name, order, g, st, a, log) -> Iterator[dict]:
    from torch_geometric.utils import scatter
    from ..ops import choose_backend, sddmm_graph, sgt_of, sgt_sddmm_cells, sgt_spmm_cells, spmm_graph
    dev, N, E = g.device, g.num_rows, g.num_edges
    s = sgt_of(g)
    B, C = s.fwd.num_blocks, s.num_cells
    gen = torch.Generator(device=dev).manual_seed(0)
    w = torch.rand(E, generator=gen, device=dev) + 0.5  # edge weights, CSR order
    cells = s.cell_values(w)
    row, col = g.row(), g.col
    row_l = row.long() if E * min(a.widths) * 2 <= PYG_MAX_BYTES else None
    base = dict(graph=name, order=order, nodes=N, edges=E, blocks=B, cells=C,
                nnz_per_block=st['nnz_per_block'], device=dev.type)
    for F in a.widths:
        x32 = torch.randn(N, F, generator=gen, device=dev)
        b32 = torch.randn(N, F, generator=gen, device=dev)
        for dname in a.dtypes:
            dt = getattr(torch, dname)
            x, b = x32.to(dt), b32.to(dt)
            el = x.element_size()
            pyg_ok = row_l is not None and E * F * el <= PYG_MAX_BYTES
            wd = w.to(dt)
            A = torch.sparse_csr_tensor(g.rowptr, g.col, wd, size=(N, N), check_invariants=False)
            spmm = {'cusparse': lambda: torch.sparse.mm(A, x), 'csr': lambda: spmm_graph(g, x, w),
                    'tcu': lambda: sgt_spmm_cells(g, x, cells)}
            sddmm = {'csr': lambda: sddmm_graph(g, x, b), 'tcu': lambda: sgt_sddmm_cells(g, x, b)}
            if dt == torch.float32:
                spmm['tcu_tf32'], sddmm['tcu_tf32'] = spmm['tcu'], sddmm['tcu']
            if pyg_ok:
                spmm['pyg'] = lambda: scatter(x.index_select(0, col) * wd[:, None], row_l, 0,
                                              dim_size=N, reduce='sum')
                sddmm['pyg'] = lambda: (x.index_select(0, row_l) * b.index_select(0, col)).sum(-1)
            for op, impls, ref in (('spmm', spmm, lambda: _ref_spmm(row, col, w, x, N)),
                                   ('sddmm', sddmm, lambda: _ref_sddmm(row, col, x, b))):
                rec = dict(base, kind=op, F=F, dtype=dname)
                try:
                    r64 = ref()
                except torch.OutOfMemoryError:
                    r64 = None
                    _free(dev)
                for impl, fn in impls.items():
                    post = s.edge_values if (op == 'sddmm' and impl.startswith('tcu')) else None
                    with _precision('high' if impl == 'tcu_tf32' else 'highest'):
                        _timed(rec, impl, fn, dev, a.rep, r64, post)
                del r64
                _ratios(rec, 'tcu', ('cusparse', 'csr', 'pyg'))
                _ratios(rec, 'tcu_tf32', ('cusparse', 'csr'))
                _ratios(rec, 'csr', ('cusparse', 'pyg'))
                rec['auto'] = choose_backend(g, F, dt, op)  # tuned on first use, memoised on g
                if rec.get('tcu_ms') and rec.get('csr_ms'):
                    rec['auto_ms'] = rec['tcu_ms'] if rec['auto'] == 'sgt' else rec['csr_ms']
                    rec['auto_vs_best'] = rec['auto_ms'] / min(rec['tcu_ms'], rec['csr_ms'])
                if op == 'spmm':  # bytes each kernel moves at least once (no cache reuse)
                    rec['csr_bytes'] = E * 8 + E * F * el + N * F * el
                    rec['tcu_bytes'] = B * 8 * F * el + B * (16 + 4 + 32) + C * 4 + N * F * el
                    for i in ('csr', 'tcu'):
                        if rec.get(f'{i}_ms'):
                            rec[f'{i}_gbps'] = rec[f'{i}_bytes'] / rec[f'{i}_ms'] / 1e6
                vs = ', '.join(f'x{rec[f"tcu_vs_{o}"]:.2f} {NAMES[o]}' for o in ('cusparse', 'csr', 'pyg')
                               if f'tcu_vs_{o}' in rec)
                log(f'[tcgnn] {name} {order} {op} F={F} {dname}: {_line(rec, impls)}; TCU {vs}; '
                    f'auto={rec["auto"]} (x{rec.get("auto_vs_best", math.nan):.2f} of best); '
                    f'TCU err {rec.get("tcu_err", math.nan):.1e}')
                yield rec
                _free(dev)


# -- 2. warps and auto rules -------------------------------------------------------

@torch.no_grad()
def bench_auto(name: str, a, log=print) -> Iterator[dict]:
    from ..ops import choose_backend, sgt_of, sgt_spmm_cells, spmm_graph
    from ..ops import sgt as sgt_ops
    dev = a.device
    bg = load_graph(name, dev)
    N = bg.num_nodes
    g = _graph(bg.edge_index, N)
    del bg
    s = sgt_of(g)
    gen = torch.Generator(device=dev).manual_seed(0)
    w = torch.rand(g.num_edges, generator=gen, device=dev) + 0.5
    cells = s.cell_values(w)
    npb = s.stats()['nnz_per_block']
    for F in a.widths:
        x32 = torch.randn(N, F, generator=gen, device=dev)
        for dname in a.dtypes:
            dt = getattr(torch, dname)
            x = x32.to(dt)
            rule = sgt_ops.warps_for(s, F, dt)
            rec = dict(kind='auto', graph=name, nodes=N, edges=g.num_edges, F=F, dtype=dname,
                       nnz_per_block=npb, rule_warps=rule, auto=choose_backend(g, F, dt, 'spmm'),
                       auto_margin=getattr(sgt_ops, 'AUTO_MARGIN', None))
            _timed(rec, 'csr', lambda: spmm_graph(g, x, w), dev, a.rep)
            for W in WARPS:
                _timed(rec, f'tcu_w{W}', lambda W=W: sgt_spmm_cells(g, x, cells, warps=W), dev, a.rep)
            ts = {W: rec[f'tcu_w{W}_ms'] for W in WARPS if f'tcu_w{W}_ms' in rec}
            if ts:
                rec['best_warps'] = min(ts, key=ts.get)
                if rule in ts:
                    rec['rule_vs_best_warps'] = ts[rule] / ts[rec['best_warps']]
            tcu, csr = ts.get(rule), rec.get('csr_ms')
            if tcu and csr:
                rec['best_backend'] = 'sgt' if tcu < csr else 'csr'
                rec['auto_ms'] = tcu if rec['auto'] == 'sgt' else csr
                rec['auto_vs_best'] = rec['auto_ms'] / min(tcu, csr)
            log(f'[tcgnn] auto {name} F={F} {dname}: CSR {csr or math.nan:.4f} ms, TCU by warps '
                + ', '.join(f'{W}: {t:.4f}' for W, t in ts.items())
                + f' ms; rule {rule} warps (best {rec.get("best_warps")}), auto={rec["auto"]} '
                  f'(best {rec.get("best_backend")})')
            yield rec


# -- 3. SGT build cost ---------------------------------------------------------------

@torch.no_grad()
def bench_build(name: str, a, log=print) -> Iterator[dict]:
    from ..formats import CSRGraph
    from ..formats.sgt import SGT
    from ..ops import sgt_spmm_cells, spmm_graph
    dev = a.device
    bg = load_graph(name, dev)
    N, E, ei = bg.num_nodes, bg.num_edges, bg.edge_index
    rec = dict(kind='build', graph=name, nodes=N, edges=E, device=dev.type)
    rec['csr_build_ms'] = _wall_ms(lambda: CSRGraph.from_coo(ei[0], ei[1], N, N), dev, 3)
    g = _graph(ei, N)
    rec['sgt_build_ms'] = _wall_ms(lambda: SGT.build(g), dev, 5)
    g.sgt = SGT.build(g)
    x = torch.randn(N, 32, device=dev)
    w = torch.rand(E, device=dev) + 0.5
    cells = g.sgt.cell_values(w)
    _timed(rec, 'tcu_spmm', lambda: sgt_spmm_cells(g, x, cells), dev, a.rep)
    _timed(rec, 'csr_spmm', lambda: spmm_graph(g, x, w), dev, a.rep)
    for k in ('tcu_spmm', 'csr_spmm'):
        if rec.get(f'{k}_ms'):
            rec[f'build_over_{k}'] = rec['sgt_build_ms'] / rec[f'{k}_ms']
    if dev.type == 'cuda' and E <= CPU_BUILD_MAX_EDGES:
        gc_ = _graph(ei.cpu(), N)
        rec['sgt_build_cpu_ms'] = _wall_ms(lambda: SGT.build(gc_), torch.device('cpu'), 3)
    log(f'[tcgnn] build {name}: SGT {rec["sgt_build_ms"]:.2f} ms on {dev.type} '
        f'(= {rec.get("build_over_tcu_spmm", math.nan):.0f} TCU SpMMs, '
        f'{rec.get("build_over_csr_spmm", math.nan):.0f} CSR SpMMs at F=32), CSRGraph '
        f'{rec["csr_build_ms"]:.2f} ms' + (f', SGT on the CPU {rec["sgt_build_cpu_ms"]:.1f} ms'
                                            if 'sgt_build_cpu_ms' in rec else ''))
    yield rec


# -- 4. Table 6 -------------------------------------------------------------------------

@torch.no_grad()
def bench_table6(a, log=print) -> Iterator[dict]:
    """n x n matrix, ``dbw`` dense 16 x 16 blocks in distinct random block
    columns of every 16-row window (seed 0), width 16, fp32, unit values."""
    from ..ops import sgt_of, sgt_spmm_cells, spmm_graph
    dev, n, F = a.device, a.table6_n, 16
    nw = n // 16
    r16 = torch.arange(16)
    for dbw in a.dbw:
        bc = torch.rand(nw, nw, generator=torch.Generator().manual_seed(0)).argsort(1)[:, :dbw]
        rows = (torch.arange(nw).view(-1, 1, 1, 1) * 16 + r16.view(1, 1, -1, 1)).expand(nw, dbw, 16, 16)
        cols = (bc.view(nw, dbw, 1, 1) * 16 + r16.view(1, 1, 1, -1)).expand(nw, dbw, 16, 16)
        g = _graph(torch.stack([cols.reshape(-1), rows.reshape(-1)]).to(dev), n)
        E = g.num_edges
        s = sgt_of(g)
        cells = s.cell_values(None)
        ones = torch.ones(E, device=dev)
        x = torch.randn(n, F, generator=torch.Generator(device=dev).manual_seed(0), device=dev)
        A = torch.sparse_csr_tensor(g.rowptr, g.col, ones, size=(n, n), check_invariants=False)
        ref = _ref_spmm(g.row(), g.col, ones, x, n)
        rec = dict(kind='table6', n=n, F=F, dbw=dbw, nnz=E, sparsity_pct=100 * (1 - E / n / n),
                   blocks=s.fwd.num_blocks, nnz_per_block=s.stats()['nnz_per_block'], device=dev.type)
        impls = {'tcu': lambda: sgt_spmm_cells(g, x, cells), 'tcu_tf32': lambda: sgt_spmm_cells(g, x, cells),
                 'csr': lambda: spmm_graph(g, x), 'cusparse': lambda: torch.sparse.mm(A, x)}
        for impl, fn in impls.items():
            with _precision('high' if impl == 'tcu_tf32' else 'highest'):
                _timed(rec, impl, fn, dev, a.rep, ref)
            if rec.get(f'{impl}_ms'):
                rec[f'{impl}_gflops'] = 2 * E * F / rec[f'{impl}_ms'] / 1e6
        _ratios(rec, 'tcu', ('cusparse', 'csr'))
        _ratios(rec, 'tcu_tf32', ('cusparse', 'csr'))
        log(f'[tcgnn] table6 DB/W={dbw} ({rec["sparsity_pct"]:.2f}% sparse): GFLOP/s '
            + ', '.join(f'{NAMES[i]} {rec[i + "_gflops"]:.0f}' for i in impls if i + '_gflops' in rec))
        yield rec


# -- 5. training epoch and accuracy ---------------------------------------------------------

class GCN(torch.nn.Module):
    """2 x GCNConv (cached), ReLU, dropout: PyG's examples/gcn.py."""

    def __init__(self, lib, cin: int, hidden: int, cout: int, dropout: float = 0.5, **kw):
        super().__init__()
        self.dropout = dropout
        self.conv1 = lib.GCNConv(cin, hidden, cached=True, **kw)
        self.conv2 = lib.GCNConv(hidden, cout, cached=True, **kw)

    def forward(self, x, edge_index):
        x = Fn.dropout(x, self.dropout, self.training)
        x = Fn.dropout(self.conv1(x, edge_index).relu(), self.dropout, self.training)
        return self.conv2(x, edge_index)


class AGNN(torch.nn.Module):
    """Linear -> ReLU -> ``layers`` x AGNNConv -> Linear, dropout on input and
    before the last Linear: PyG's examples/agnn.py with TC-GNN's 4 layers x 32."""

    def __init__(self, lib, cin: int, hidden: int, cout: int, dropout: float = 0.5,
                 layers: int = 4, **kw):
        super().__init__()
        self.dropout = dropout
        self.lin1 = torch.nn.Linear(cin, hidden)
        self.props = torch.nn.ModuleList(lib.AGNNConv(requires_grad=True, **kw) for _ in range(layers))
        self.lin2 = torch.nn.Linear(hidden, cout)

    def forward(self, x, edge_index):
        x = self.lin1(Fn.dropout(x, self.dropout, self.training)).relu()
        for p in self.props:
            x = p(x, edge_index)
        return self.lin2(Fn.dropout(x, self.dropout, self.training))


MODELS = {'gcn': (GCN, 16), 'agnn': (AGNN, 32)}


def make_model(model: str, impl: str, cin: int, cout: int) -> torch.nn.Module:
    """``impl`` 'pyg' (torch_geometric.nn layers) or a pyg_tc backend."""
    lib = importlib.import_module('torch_geometric.nn' if impl == 'pyg' else 'pyg_tc.nn')
    cls, hidden = MODELS[model]
    return cls(lib, cin, hidden, cout, **({} if impl == 'pyg' else {'backend': impl}))


def _init_state(model: str, cin: int, cout: int, seed: int) -> dict:
    torch.manual_seed(seed)
    return {k: v.clone() for k, v in make_model(model, 'pyg', cin, cout).state_dict().items()}


def bench_train(name: str, a, log=print) -> Iterator[dict]:
    from ..formats.carrier import get_graph
    from ..ops import sgt_of
    from .training import time_training
    dev, cin, cout = a.device, a.train_in, a.classes
    bg = load_graph(name, dev)
    N = bg.num_nodes
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(N, cin, generator=gen, device=dev)
    y = torch.randint(0, cout, (N,), generator=gen, device=dev)
    ei_tc = None  # pyg_tc's copy of edge_index, carrying the CSRGraph and its SGT
    for model in MODELS:
        state = _init_state(model, cin, cout, 0)
        by: Dict[str, dict] = {}
        for impl in TRAIN_IMPLS:
            rec = dict(kind='train', graph=name, nodes=N, edges=bg.num_edges, model=model, impl=impl,
                       in_channels=cin, hidden=MODELS[model][1], classes=cout,
                       precision=torch.get_float32_matmul_precision())
            m = None
            try:
                if impl != 'pyg' and ei_tc is None:
                    ei_tc = bg.edge_index.clone()
                    sgt_of(get_graph(ei_tc, size=(N, N))[0])
                m = make_model(model, impl, cin, cout).to(dev)
                m.load_state_dict(state)
                torch.manual_seed(0)  # the same dropout masks for every implementation
                losses, t, mem = time_training(m, x, y, bg.edge_index if impl == 'pyg' else ei_tc,
                                               steps=a.train_warmup, rep=a.train_rep)
                rec.update(status='ok', epoch_ms=t.median_ms, epoch_min_ms=t.min_ms,
                           loss_first=losses[0], **mem)
            except torch.OutOfMemoryError:
                rec['status'] = 'oom'
            except Exception as e:
                rec['status'] = f'error: {_short(e)}'
            m = None
            _free(dev)
            ref = by.get('pyg', {})
            if rec['status'] == 'ok' and ref.get('status') == 'ok' and impl != 'pyg':
                rec['speedup_vs_pyg'] = ref['epoch_ms'] / rec['epoch_ms']
                rec['loss_diff_vs_pyg'] = abs(rec['loss_first'] - ref['loss_first'])
                if ref.get('peak_mb'):
                    rec['memory_vs_pyg'] = rec['peak_mb'] / ref['peak_mb']
            by[impl] = rec
            log(f'[tcgnn] train {name} {model} {impl}: {rec["status"]} '
                + (f'{rec["epoch_ms"]:.2f} ms/epoch, peak {rec.get("peak_mb") or math.nan:.0f} MiB, '
                   f'x{rec.get("speedup_vs_pyg", math.nan):.2f} vs PyG' if rec['status'] == 'ok' else ''))
            yield rec
    del x, y, ei_tc, bg
    _free(dev)


def _fit(model, data, epochs: int, seed: int, lr: float = 0.01, wd: float = 5e-4) -> dict:
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)
    x, y, ei = data.x, data.y, data.edge_index
    vals, tests = [], []
    t0 = time.perf_counter()
    for _ in range(epochs):
        model.train()
        opt.zero_grad(set_to_none=True)
        Fn.cross_entropy(model(x, ei)[data.train_mask], y[data.train_mask]).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            hit = (model(x, ei).argmax(-1) == y).float()
        vals.append(hit[data.val_mask].mean())
        tests.append(hit[data.test_mask].mean())
    v, t = torch.stack(vals).cpu(), torch.stack(tests).cpu()
    best = int(v.argmax())  # first best-val epoch
    return dict(status='ok', val=float(v[best]), test=float(t[best]), best_epoch=best,
                run_s=time.perf_counter() - t0)


def bench_accuracy(ds: str, a, log=print) -> Iterator[dict]:
    from ..formats.carrier import get_graph
    from ..ops import sgt_of
    from .maxk_train import load_dataset
    data = load_dataset(ds, a.data_root, a.cache_dir).to(a.device)
    cin, cout, N = data.num_features, int(data.y.max()) + 1, data.num_nodes
    sgt_of(get_graph(data.edge_index, size=(N, N))[0])  # attached up front, as SGTTransform does
    for model in MODELS:
        for seed in range(a.seeds):
            state = _init_state(model, cin, cout, seed)
            for impl in ACC_IMPLS:
                rec = dict(kind='accuracy', dataset=ds, model=model, impl=impl, seed=seed, epochs=a.epochs,
                           precision=torch.get_float32_matmul_precision())
                try:
                    m = make_model(model, impl, cin, cout).to(a.device)
                    m.load_state_dict(state)
                    rec.update(_fit(m, data, a.epochs, seed))
                except torch.OutOfMemoryError:
                    rec['status'] = 'oom'
                except Exception as e:
                    rec['status'] = f'error: {_short(e)}'
                m = None
                log(f'[tcgnn] accuracy {ds} {model} {impl} seed {seed}: {rec["status"]} '
                    + (f'val {rec["val"]:.4f} test {rec["test"]:.4f}' if rec['status'] == 'ok' else ''))
                yield rec


# -- report ------------------------------------------------------------------------

def _f(v, spec: str = '.3f', bold: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return '-'
    s = format(v, spec) if isinstance(v, (int, float)) else str(v)
    return f'**{s}**' if bold else s


def _ms(r: dict, i: str) -> str:
    return _f(r.get(f'{i}_ms'), '.4f') if f'{i}_ms' in r else ('oom' if r.get(f'{i}_error') == 'oom'
                                                             else '-' if f'{i}_error' not in r else 'err')


def _table(header: List[str], rows: List[List[str]]) -> List[str]:
    return (['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
            + ['| ' + ' | '.join(r) + ' |' for r in rows] + [''])


def _focus(rs: List[dict]):
    """The (F, dtype) of the summary plot / paragraph: F=32 fp32 when measured."""
    Fs = sorted({r['F'] for r in rs})
    dts = [r['dtype'] for r in rs]
    return (32 if 32 in Fs else Fs[0]), ('float32' if 'float32' in dts else dts[0])


def _lose_paragraph(sp: List[dict]) -> List[str]:
    both = [r for r in sp if r.get('tcu_ms') and r.get('csr_ms')]
    if not both:
        return []
    lose = [r for r in both if r['tcu_ms'] > r['csr_ms']]
    win = [r for r in both if r['tcu_ms'] <= r['csr_ms']]
    s = ['### Where tensor cores lose and why\n',
         f'The TCU SpMM is slower than the CSR kernel in {len(lose)} of {len(both)} cases. A 16x8 '
         'SGT block gathers 8 feature rows whatever its fill and multiplies all 128 cells, while the '
         'CSR kernel gathers one row per edge: the TCU reads fewer feature bytes only when a block '
         'holds more than 8 nonzeros (8 B/edge of CSR metadata vs 52 B/block + 4 B/cell), and below '
         'that it moves more bytes and wastes MMA work on empty cells.\n']
    F, dt = _focus(sp)
    for label, group in (('slower', lose), ('faster', win)):
        keys = list(dict.fromkeys((r['graph'], r['order']) for r in group))
        if not keys:
            continue
        s.append(f'TCU {label} than CSR:')
        for gname, order in keys:
            rs = [r for r in group if (r['graph'], r['order']) == (gname, order)]
            f = next((r for r in rs if r['F'] == F and r['dtype'] == dt), rs[0])
            s.append(f'- {gname} ({order}): {f["nnz_per_block"]:.1f} nnz/block, TCU/CSR bytes '
                     f'{f["tcu_bytes"] / f["csr_bytes"]:.2f} at F={f["F"]} {f["dtype"]}; TCU time '
                     f'x{min(r["tcu_ms"] / r["csr_ms"] for r in rs):.2f}..'
                     f'x{max(r["tcu_ms"] / r["csr_ms"] for r in rs):.2f} of CSR over {len(rs)} case(s)')
        s.append('')
    if lose and win:
        s.append(f'Observed: TCU wins down to {min(r["nnz_per_block"] for r in win):.1f} nnz/block and '
                 f'loses up to {max(r["nnz_per_block"] for r in lose):.1f} nnz/block.\n')
    return s


def _k(key: str, spec: str = '.2f', bold: bool = False):
    return lambda r: _f(r.get(key), spec, bold)


def _errs(*impls: str):
    return lambda r: ' / '.join(_f(r.get(f'{i}_err'), '.0e') for i in impls)


def _section(s: List[str], title: str, rs: List[dict], cols, note: str = '') -> None:
    """Append a markdown table: ``cols`` = [(header, record -> cell)]."""
    if rs:
        s += [title + '\n'] + ([note + '\n'] if note else [])
        s += _table([h for h, _ in cols], [[fn(r) for _, fn in cols] for r in rs])


def _acc_rows(ac: List[dict]) -> List[dict]:
    """Mean test accuracy per (model, dataset, impl) and its difference to PyG, in points."""
    out = []
    for key in dict.fromkeys((r['model'], r['dataset'], r['impl']) for r in ac):
        runs = lambda k: [100 * r['test'] for r in ac  # noqa: E731
                          if (r['model'], r['dataset'], r['impl']) == k and r['status'] == 'ok']
        v, ref = runs(key), runs((*key[:2], 'pyg'))
        d = statistics.mean(v) - statistics.mean(ref) if v and ref and key[2] != 'pyg' else None
        out.append(dict(model=key[0], dataset=key[1], impl=key[2], runs=len(v), diff=d,
                        acc=f'{statistics.mean(v):.2f} ± {statistics.stdev(v) if len(v) > 1 else 0:.2f}'
                        if v else '-', within='-' if d is None else 'yes' if abs(d) <= 0.5 else 'no'))
    return out


def _md(recs: List[dict]) -> str:
    env = next((r for r in recs if r['kind'] == 'env'), {})
    of = lambda k: [r for r in recs if r['kind'] == k]  # noqa: E731
    key = lambda k: (k, lambda r: str(r.get(k, '-')))  # noqa: E731
    ms = lambda i, h=None: (h or NAMES.get(i, i), lambda r: _ms(r, i))  # noqa: E731
    gpu = env.get('gpu') or 'no GPU: reference implementations, code-path check only'
    s = ['# TC-GNN benchmarks\n', f'- device {env.get("device")} ({gpu}); torch {env.get("torch")}, '
         f'PyG {env.get("torch_geometric")}',
         '- kernels: kernel-only times (CUDA-graph replay; calls under 0.5 ms captured 10x back to back) in '
         'ms, median; speedups = other time / TCU time (> 1: TCU faster). TCU = 3xTF32 for fp32 '
         '(fp32-accurate), TCU-TF32 = plain TF32, values pre-translated to SGT cell order; cuSPARSE '
         'gets edge values in the feature dtype. Errors: max |out - ref| / max |ref| vs float64.\n']
    _section(s, '## SGT statistics (TC-GNN Figure 7) per node order', of('sgt_stats'), [
        key('graph'), key('order'), ('windows', _k('windows', ',d')), ('blocks', _k('blocks', ',d')),
        ('blocks w/o SGT', _k('blocks_without_sgt', ',d')),
        ('reduction', _k('block_reduction', '.2f', True)), ('nnz/block', _k('nnz_per_block', '.2f', True)),
        ('16x16 tiles', _k('tiles16', ',d')), ('tiles w/o SGT', _k('tiles16_without_sgt', ',d'))])
    g = [key('graph'), key('order'), key('F'), key('dtype'), ('nnz/blk', _k('nnz_per_block', '.1f'))]
    sp = of('spmm')
    _section(s, '## SpMM', sp, g + [ms(i) for i in ('cusparse', 'csr', 'tcu', 'tcu_tf32', 'pyg')] + [
        ('TCU vs cuSPARSE', _k('tcu_vs_cusparse', bold=True)), ('TCU vs CSR', _k('tcu_vs_csr', bold=True)),
        ('TF32 vs cuSPARSE', _k('tcu_tf32_vs_cusparse')), key('auto'), ('auto/best', _k('auto_vs_best')),
        ('TCU/CSR bytes', lambda r: _f(r['tcu_bytes'] / r['csr_bytes'], '.2f')),
        ('err TCU / TF32 / CSR / cuSPARSE', _errs('tcu', 'tcu_tf32', 'csr', 'cusparse'))])
    s += _lose_paragraph(sp)
    _section(s, '## SDDMM', of('sddmm'), g + [ms(i) for i in ('csr', 'tcu', 'tcu_tf32', 'pyg')] + [
        ('TCU vs CSR', _k('tcu_vs_csr', bold=True)), ('TCU vs PyG', _k('tcu_vs_pyg', bold=True)),
        key('auto'), ('err TCU / TF32 / CSR', _errs('tcu', 'tcu_tf32', 'csr'))])
    au = of('auto')
    ok = [r for r in au if 'best_backend' in r]
    note = au and (f'auto = pyg_tc.ops.choose_backend (measured on first use per graph, width and '
                   f'dtype; sgt when its time < {au[0].get("auto_margin")} x CSR); it picked '
                   f'the faster backend of this run in '
                   f'**{sum(r["auto"] == r["best_backend"] for r in ok)} of {len(ok)}** cases'
                   + (f', worst auto/best **{max(r["auto_vs_best"] for r in ok):.2f}**.' if ok else '.'))
    _section(s, "## Warps per CTA and backend='auto'", au, g[:1] + g[2:] + [ms('csr')]
             + [ms(f'tcu_w{W}', f'TCU w={W}') for W in WARPS]
             + [('rule warps', _k('rule_warps', 'd')), ('best warps', _k('best_warps', 'd')),
                ('rule/best', _k('rule_vs_best_warps', bold=True)), key('auto'),
                ('best', lambda r: r.get('best_backend', '-')), ('auto/best', _k('auto_vs_best', bold=True))],
             note=note)
    _section(s, '## SGT build cost (SGT.build, median of 5 after a warm-up)', of('build'), [
        key('graph'), ('N', _k('nodes', ',d')), ('E', _k('edges', ',d')), ('CSRGraph ms', _k('csr_build_ms')),
        ('SGT build ms', _k('sgt_build_ms')), ms('tcu_spmm', 'TCU SpMM F=32 ms'),
        ms('csr_spmm', 'CSR SpMM ms'), ('build / TCU SpMM', _k('build_over_tcu_spmm', '.0f', True)),
        ('build / CSR SpMM', _k('build_over_csr_spmm', '.0f')),
        ('SGT build on CPU ms', _k('sgt_build_cpu_ms', '.1f'))])
    t6 = of('table6')
    _section(s, f'## TC-GNN Table 6 ({t6[0]["n"] if t6 else 0}^2, F=16, fp32): GFLOP/s', t6, [
        ('DB/W', _k('dbw', 'd')), ('nnz', _k('nnz', ',d')), ('sparsity %', _k('sparsity_pct')),
        ('nnz/blk', _k('nnz_per_block', '.1f'))] + [(NAMES[i], _k(f'{i}_gflops', '.1f')) for i in (
            'tcu', 'tcu_tf32', 'csr', 'cusparse')] + [('TCU vs cuSPARSE', _k('tcu_vs_cusparse', bold=True)),
        ('TF32 vs cuSPARSE', _k('tcu_tf32_vs_cusparse', bold=True)), ('TCU err', _k('tcu_err', '.0e'))])
    tr = of('train')
    by_pyg = {r['graph']: r['status'] for r in tr if r['impl'] == 'pyg'}
    head = [r for r in tr if r['graph'].partition('@')[0] == 'reddit' and r['model'] == 'agnn'
            and r['impl'] != 'pyg']
    _section(s, '## Training epoch (forward + backward + Adam, full batch; random features / labels)', tr, [
        key('graph'), key('model'), key('impl'), key('status'), ('epoch ms', _k('epoch_ms')),
        ('x PyG', _k('speedup_vs_pyg', bold=True)), ('peak MiB', _k('peak_mb', '.0f')),
        ('memory / PyG', _k('memory_vs_pyg')), ('loss[0]', _k('loss_first', '.4f')),
        ('|dloss[0]| vs PyG', _k('loss_diff_vs_pyg', '.1e'))],
        note=head and 'AGNN on the reddit-shaped graph (target >= 3x PyG; reddit@f = the same nodes with '
        'a fraction f of the edges, where PyG runs out of memory on the whole graph): ' + ', '.join(
            f'{r["graph"]} {r["impl"]} ' + (f'**x{r["speedup_vs_pyg"]:.2f}**' if 'speedup_vs_pyg' in r
                                             else 'PyG ' + by_pyg.get(r['graph'], '?'))
            for r in head))
    _section(s, '## Test accuracy at the best validation epoch (public split)', _acc_rows(of('accuracy')), [
        key('model'), key('dataset'), key('impl'), key('runs'), ('test acc %', lambda r: r['acc']),
        ('diff vs PyG (points)', _k('diff', '+.2f', True)), key('within')],
        note='target: within 0.5 points of PyG')
    return '\n'.join(s) + '\n'


def _plot(recs: List[dict], path: str) -> Optional[str]:
    sp = [r for r in recs if r['kind'] == 'spmm']
    st = [r for r in recs if r['kind'] == 'sgt_stats']
    if not sp:
        return None
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    F, dt = _focus(sp)
    sp = [r for r in sp if r['F'] == F and r['dtype'] == dt]
    graphs = list(dict.fromkeys(r['graph'] for r in sp))
    fig, axes = plt.subplots(3, 1, figsize=(max(7.0, 1.0 * len(graphs) + 2), 9), sharex=True)
    panels = ((axes[0], sp, 'tcu_vs_cusparse', ('native', 'rcm'), f'TCU speedup vs cuSPARSE (F={F} {dt})'),
              (axes[1], sp, 'tcu_vs_csr', ('native', 'rcm'), 'TCU speedup vs pyg_tc CSR'),
              (axes[2], st, 'nnz_per_block', ORDERS, 'nnz per 16x8 SGT block'))
    for ax, rs, key, orders, title in panels:
        wdt = 0.8 / len(orders)
        for i, o in enumerate(orders):
            val = {r['graph']: r.get(key, math.nan) for r in rs if r['order'] == o}
            ax.bar([j + (i - (len(orders) - 1) / 2) * wdt for j in range(len(graphs))],
                   [val.get(gn, math.nan) for gn in graphs], wdt, label=o)
        ax.axhline(8.0 if key == 'nnz_per_block' else 1.0, color='k', lw=0.8, ls='--')
        ax.set_yscale('log', base=2)
        ax.set_title(title, fontsize=10)
        ax.grid(axis='y', alpha=0.3)
        ax.legend(fontsize=8)
    axes[-1].set_xticks(range(len(graphs)))
    axes[-1].set_xticklabels(graphs, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- CLI ----------------------------------------------------------------------------

_FULL = dict(graphs=','.join(GRAPHS), train_graphs=','.join(TRAIN_GRAPHS), datasets='cora,citeseer',
             widths='16,32,64,128', dtypes='float32,float16', rep=20, train_warmup=3, train_rep=20,
             seeds=5, epochs=200, table6_n=4096, dbw=','.join(map(str, DBW)))
_QUICK = dict(graphs='tiny', train_graphs='tiny', datasets='cora', widths='16', dtypes='float32',
              rep=2, train_warmup=1, train_rep=2, seeds=1, epochs=3, table6_n=256, dbw='1,4')


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--out', default='tcgnn_out')
    p.add_argument('--sections', default=','.join(SECTIONS), help=f'comma list of {", ".join(SECTIONS)}')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--quick', action='store_true', help='small settings (smoke test)')
    p.add_argument('--graphs', help='kernels / auto / build graphs')
    p.add_argument('--widths')
    p.add_argument('--dtypes', help='float32, float16, bfloat16')
    p.add_argument('--rep', type=int, help='timed replays per kernel')
    p.add_argument('--dbw', help='Table 6 dense blocks per window')
    p.add_argument('--table6-n', type=int)
    p.add_argument('--train-graphs')
    p.add_argument('--train-in', type=int, default=128)
    p.add_argument('--classes', type=int, default=41)
    p.add_argument('--train-warmup', type=int)
    p.add_argument('--train-rep', type=int)
    p.add_argument('--precision', default='highest', choices=('highest', 'high', 'medium'),
                   help='fp32 matmul precision of the train / accuracy sections')
    p.add_argument('--datasets', help='accuracy datasets (cora, citeseer)')
    p.add_argument('--seeds', type=int)
    p.add_argument('--epochs', type=int)
    p.add_argument('--data-root', help='folder holding planetoid/ (default: the shared datasets)')
    p.add_argument('--cache-dir', help='writable copy of the datasets (default: a temporary folder)')
    a = p.parse_args(argv)
    for k, v in (_QUICK if a.quick else _FULL).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.sections = [t for t in a.sections.split(',') if t]
    bad = set(a.sections) - set(SECTIONS)
    if bad:
        p.error(f'unknown sections {sorted(bad)}; choose from {SECTIONS}')
    a.widths = [int(v) for v in a.widths.split(',')]
    a.dbw = [int(v) for v in a.dbw.split(',')]
    a.dtypes = [_DT.get(d, d) for d in a.dtypes.split(',')]
    a.device = torch.device(a.device)
    if a.data_root is None:
        from .maxk_train import default_data_root
        a.data_root = default_data_root()
    return a


def main(argv: Optional[Sequence[str]] = None) -> int:
    import torch_geometric
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    recs: List[dict] = []
    cuda = a.device.type == 'cuda'
    env = dict(kind='env', device=str(a.device), gpu=torch.cuda.get_device_name() if cuda else None,
               torch=torch.__version__, torch_geometric=torch_geometric.__version__,
               args={k: str(v) for k, v in vars(a).items()})
    gens = {'kernels': bench_kernels, 'auto': bench_auto, 'build': bench_build,
            'table6': lambda _, a: bench_table6(a), 'train': bench_train, 'accuracy': bench_accuracy}
    items = {'table6': [None], 'train': resolve_names(a.train_graphs, TRAIN_GRAPHS),
             'accuracy': a.datasets.split(',')}
    with open(os.path.join(a.out, 'tcgnn.jsonl'), 'w') as f:
        def add(r: dict) -> None:
            recs.append(r)
            f.write(json.dumps({k: _jsonable(v) for k, v in r.items()}) + '\n')
            f.flush()
        add(env)
        if cuda:
            _warm_up(a.device)
        for sec in a.sections:
            for item in items.get(sec, resolve_names(a.graphs, GRAPHS)):
                try:  # the kernel sections set the precision per implementation
                    with _precision(a.precision if sec in ('train', 'accuracy') else 'highest'):
                        for r in gens[sec](item, a):
                            add(r)
                except Exception as e:  # missing dataset, OOM outside a timed item, ...
                    print(f'[tcgnn] {sec} {item}: skipped ({_short(e)})', flush=True)
                    if not isinstance(e, (FileNotFoundError, torch.OutOfMemoryError)):
                        traceback.print_exc()
                    add(dict(kind='skipped', section=sec, item=item, status=_short(e)))
                _free(a.device)
            with open(os.path.join(a.out, 'tcgnn.md'), 'w') as fm:
                fm.write(_md(recs))
            try:
                _plot(recs, os.path.join(a.out, 'tcgnn.png'))
            except Exception as e:  # a plot problem must not cost the measurements
                print(f'[tcgnn] plot failed: {_short(e)}', flush=True)
    print(_md(recs))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
