"""TC-GNN suite (the SGT family): tensor-core (TCU) SpMM / SDDMM over SGT blocks against
``torch.sparse.mm`` (cuSPARSE on a GPU), pyg_tc's CSR kernels and PyG-style
gather/scatter; SGT statistics in native, RCM and random node order; the warps
and ``backend='auto'`` rules; SGT build cost; TC-GNN's Table 6; GCN / AGNN
training epochs and accuracy against PyG's own layers.

``python -m benchmarks.suites.sgt --out DIR [--sections kernels,auto,build,table6,train,accuracy]
[--graphs ...] [--widths 16,32,64,128] [--dtypes float32,float16] [--quick] [--device cpu]``
writes ``DIR/sgt.jsonl`` (the first record the environment), ``sgt.md`` and
``sgt.png``. The method and the results of record are in ``docs/sgt.md``;
on the CPU every op runs its reference implementation (code-path check only).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
from typing import Dict, Iterator, List, Optional, Sequence

import torch

from pyg_tc.bench.graphs import load_graph, resolve_names
from pyg_tc.bench.models import Net
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment, fmt, log, ms_col
from pyg_tc.bench.timing import (
    Impl,
    Skip,
    bench,
    free,
    kernel_time_note,
    measure,
    precision,
    rel_errors,
    short_error,
    speedups,
    warm_up,
)

from .common import sparse_baseline, sparse_csr, train_case

GRAPHS = ['cora', 'citeseer', 'proteins', 'tolokers', 'arxiv', 'reddit', 'products', 'blogcatalog', 'cornell5']
TRAIN_GRAPHS = ['cora', 'citeseer', 'proteins', 'arxiv', 'reddit']
SECTIONS = ('kernels', 'auto', 'build', 'table6', 'train', 'accuracy')
ORDERS = ('native', 'rcm', 'random')  # random: SGT statistics only
WARPS = (1, 2, 4, 8)
DBW = (1, 2, 4, 8, 16, 32)
PYG_MAX_BYTES = 8e9  # PyG-style gather/scatter skipped above E * F * elem bytes
CPU_BUILD_MAX_EDGES = 2_000_000
ACC_IMPLS = ('pyg', 'auto', 'sgt')
TRAIN_IMPLS = ('pyg', 'csr', 'sgt', 'auto')
NAMES = {'csr': 'CSR', 'tcu': 'TCU', 'tcu_tf32': 'TCU-TF32', 'pyg': 'PyG g/s'}
_DT = {'fp32': 'float32', 'fp16': 'float16', 'bf16': 'bfloat16'}


def _err(out, ref) -> Dict[str, float]:
    return {'err': rel_errors(out, ref)['rel_err']}


def _ops_attr(name: str, default=None):
    """A tuning constant of the ops layer (``pyg_tc.ops.dispatch``, else ``pyg_tc.ops.sgt``), or ``default``."""
    for mod in ('pyg_tc.ops.dispatch', 'pyg_tc.ops.sgt'):
        try:
            return getattr(importlib.import_module(mod), name)
        except (ImportError, AttributeError):
            pass
    return default


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
    from pyg_tc.formats import CSRGraph

    return CSRGraph.from_coo(ei[0], ei[1], N, N)


def _relabel(ei, N: int, order: str):
    """``edge_index`` with nodes renumbered: ``inv[old] = new`` for perm new -> old."""
    if order == 'native':
        return ei
    if order == 'rcm':
        from pyg_tc.transforms.reorder import rcm_order

        perm = rcm_order(ei, N)
    else:
        perm = torch.randperm(N, generator=torch.Generator().manual_seed(0)).to(ei.device)
    return torch.argsort(perm)[ei]


def _auto(rec: dict, tcu: Optional[float], csr: Optional[float]) -> None:
    if tcu and csr:
        rec['auto_ms'] = tcu if rec['auto'] == 'sgt' else csr
        rec['auto_vs_best'] = rec['auto_ms'] / min(tcu, csr)


# -- 1. kernels -----------------------------------------------------------------


def bench_kernels(name: str, a, log=log) -> Iterator[dict]:
    """SGT statistics per node order, then SpMM / SDDMM records per order, width and dtype."""
    from pyg_tc.ops import sgt_of

    dev = a.device
    bg = load_graph(name, dev)
    N = bg.num_nodes
    for order in ORDERS:
        ei = _relabel(bg.edge_index, N, order)
        g = _graph(ei, N)
        ei = None
        st = sgt_of(g).stats(g)
        st = {
            **st,
            'kind': 'sgt_stats',
            'graph': name,
            'order': order,
            'nodes': N,
            'block_reduction': st['blocks_without_sgt'] / max(st['blocks'], 1),
            'tile16_reduction': st['tiles16_without_sgt'] / max(st['tiles16'], 1),
        }
        yield st
        if order != 'random':
            yield from _kernels_order(name, order, g, st, a, log)
        g = None
        free(dev)
    bg = None
    free(dev)


@torch.no_grad()
def _kernels_order(name, order, g, st, a, log) -> Iterator[dict]:
    from torch_geometric.utils import scatter

    from pyg_tc.ops import choose_backend, sddmm_graph, sgt_of, sgt_sddmm_cells, sgt_spmm_cells, spmm_graph

    dev, N, E = g.device, g.num_rows, g.num_edges
    bkey = sparse_baseline(dev)[0]
    s = sgt_of(g)
    B, C = s.fwd.num_blocks, s.num_cells
    gen = torch.Generator(device=dev).manual_seed(0)
    w = torch.rand(E, generator=gen, device=dev) + 0.5  # edge weights, CSR order
    cells = s.cell_values(w)
    row, col = g.row(), g.col
    row_l = row.long() if E * min(a.widths) * 2 <= PYG_MAX_BYTES else None
    base = dict(
        graph=name, order=order, nodes=N, edges=E, blocks=B, cells=C, nnz_per_block=st['nnz_per_block'], device=dev.type
    )
    for F in a.widths:
        x32 = torch.randn(N, F, generator=gen, device=dev)
        b32 = torch.randn(N, F, generator=gen, device=dev)
        for dname in a.dtypes:
            dt = getattr(torch, dname)
            x, b = x32.to(dt), b32.to(dt)
            el = x.element_size()
            wd = w.to(dt)
            A = sparse_csr(g, wd)
            no_pyg = (
                None
                if row_l is not None and E * F * el <= PYG_MAX_BYTES
                else Skip(f'PyG-style gather/scatter above {PYG_MAX_BYTES / 1e9:g} GB of gathered rows')
            )
            tf32 = dt == torch.float32
            spmm = {
                bkey: lambda: torch.sparse.mm(A, x),
                'csr': lambda: spmm_graph(g, x, w),
                'tcu': lambda: sgt_spmm_cells(g, x, cells),
            }
            sddmm = {
                'csr': lambda: sddmm_graph(g, x, b),
                'tcu': Impl(lambda: sgt_sddmm_cells(g, x, b), post=s.edge_values),
            }
            if tf32:
                spmm['tcu_tf32'] = Impl(spmm['tcu'], precision='high')
                sddmm['tcu_tf32'] = Impl(sddmm['tcu'].fn, post=s.edge_values, precision='high')
            spmm['pyg'] = no_pyg or (
                lambda: scatter(x.index_select(0, col) * wd[:, None], row_l, 0, dim_size=N, reduce='sum')
            )
            sddmm['pyg'] = no_pyg or (lambda: (x.index_select(0, row_l) * b.index_select(0, col)).sum(-1))
            for op, impls, ref in (
                ('spmm', spmm, lambda: _ref_spmm(row, col, w, x, N)),
                ('sddmm', sddmm, lambda: _ref_sddmm(row, col, x, b)),
            ):
                try:
                    r64 = ref()
                except torch.OutOfMemoryError:
                    r64 = None
                    free(dev)
                with precision('highest'):
                    rec = measure(
                        dict(base, kind=op, F=F, dtype=dname), impls, dev, rep=a.rep, ref=r64, errors=_err, log=log
                    )
                r64 = None
                speedups(rec, 'tcu', (bkey, 'csr', 'pyg'))
                speedups(rec, 'tcu_tf32', (bkey, 'csr'))
                speedups(rec, 'csr', (bkey, 'pyg'))
                rec['auto'] = choose_backend(g, F, dt, op)  # tuned on first use, memoised on g
                _auto(rec, rec.get('tcu_ms'), rec.get('csr_ms'))
                if op == 'spmm':  # bytes each kernel moves at least once (no cache reuse)
                    rec['csr_bytes'] = E * 8 + E * F * el + N * F * el
                    rec['tcu_bytes'] = B * 8 * F * el + B * (16 + 4 + 32) + C * 4 + N * F * el
                    for i in ('csr', 'tcu'):
                        if rec.get(f'{i}_ms'):
                            rec[f'{i}_gbps'] = rec[f'{i}_bytes'] / rec[f'{i}_ms'] / 1e6
                yield rec
                free(dev)


# -- 2. warps and auto rules -------------------------------------------------------


@torch.no_grad()
def bench_auto(name: str, a, log=log) -> Iterator[dict]:
    """The CSR kernel and the TCU SpMM with 1-8 warps against the warps rule and backend='auto'."""
    from pyg_tc.ops import choose_backend, sgt_of, sgt_spmm_cells, spmm_graph
    from pyg_tc.ops.sgt import warps_for

    dev = a.device
    bg = load_graph(name, dev)
    N = bg.num_nodes
    g = _graph(bg.edge_index, N)
    bg = None
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
            rule = warps_for(s, F, dt)
            rec = dict(
                kind='auto',
                graph=name,
                nodes=N,
                edges=g.num_edges,
                F=F,
                dtype=dname,
                nnz_per_block=npb,
                rule_warps=rule,
                auto=choose_backend(g, F, dt, 'spmm'),
                auto_margin=_ops_attr('AUTO_MARGIN'),
            )
            impls = {'csr': lambda: spmm_graph(g, x, w)}
            impls.update({f'tcu_w{W}': lambda W=W: sgt_spmm_cells(g, x, cells, warps=W) for W in WARPS})
            measure(rec, impls, dev, rep=a.rep, log=log)
            ts = {W: rec[f'tcu_w{W}_ms'] for W in WARPS if f'tcu_w{W}_ms' in rec}
            if ts:
                rec['best_warps'] = min(ts, key=ts.get)
                if rule in ts:
                    rec['rule_vs_best_warps'] = ts[rule] / ts[rec['best_warps']]
            tcu, csr = ts.get(rule), rec.get('csr_ms')
            if tcu and csr:
                rec['best_backend'] = 'sgt' if tcu < csr else 'csr'
            _auto(rec, tcu, csr)
            yield rec


# -- 3. SGT build cost ---------------------------------------------------------------


@torch.no_grad()
def bench_build(name: str, a, log=log) -> Iterator[dict]:
    """CSRGraph and SGT build times against one F=32 SpMM."""
    from pyg_tc.formats import CSRGraph
    from pyg_tc.formats.sgt import SGT
    from pyg_tc.ops import sgt_spmm_cells, spmm_graph

    dev = a.device
    bg = load_graph(name, dev)
    N, E, ei = bg.num_nodes, bg.num_edges, bg.edge_index
    rec = dict(kind='build', graph=name, nodes=N, edges=E, device=dev.type)
    wall = lambda fn, d=dev, n=3: bench(fn, warmup=1, rep=n, device=d, wall=True).median_ms  # noqa: E731
    rec['csr_build_ms'] = wall(lambda: CSRGraph.from_coo(ei[0], ei[1], N, N))
    g = _graph(ei, N)
    rec['sgt_build_ms'] = wall(lambda: SGT.build(g), n=5)
    g.cache.sgt = SGT.build(g)
    x = torch.randn(N, 32, device=dev)
    w = torch.rand(E, device=dev) + 0.5
    cells = g.cache.sgt.cell_values(w)
    measure(
        rec,
        {'tcu_spmm': lambda: sgt_spmm_cells(g, x, cells), 'csr_spmm': lambda: spmm_graph(g, x, w)},
        dev,
        rep=a.rep,
        log=log,
    )
    for k in ('tcu_spmm', 'csr_spmm'):
        if rec.get(f'{k}_ms'):
            rec[f'build_over_{k}'] = rec['sgt_build_ms'] / rec[f'{k}_ms']
    if dev.type == 'cuda' and E <= CPU_BUILD_MAX_EDGES:
        gc_ = _graph(ei.cpu(), N)
        rec['sgt_build_cpu_ms'] = wall(lambda: SGT.build(gc_), torch.device('cpu'))
    yield rec


# -- 4. Table 6 -------------------------------------------------------------------------


@torch.no_grad()
def bench_table6(a, log=log) -> Iterator[dict]:
    """n x n matrix, ``dbw`` dense 16 x 16 blocks in distinct random block
    columns of every 16-row window (seed 0), width 16, fp32, unit values."""
    from pyg_tc.ops import sgt_of, sgt_spmm_cells, spmm_graph

    dev, n, F = a.device, a.table6_n, 16
    bkey = sparse_baseline(dev)[0]
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
        A = sparse_csr(g, ones)
        rec = dict(
            kind='table6',
            n=n,
            F=F,
            dbw=dbw,
            nnz=E,
            sparsity_pct=100 * (1 - E / n / n),
            blocks=s.fwd.num_blocks,
            nnz_per_block=s.stats()['nnz_per_block'],
            device=dev.type,
        )
        impls = {
            'tcu': lambda: sgt_spmm_cells(g, x, cells),
            'tcu_tf32': Impl(lambda: sgt_spmm_cells(g, x, cells), precision='high'),
            'csr': lambda: spmm_graph(g, x),
            bkey: lambda: torch.sparse.mm(A, x),
        }
        with precision('highest'):
            measure(rec, impls, dev, rep=a.rep, ref=_ref_spmm(g.row(), g.col, ones, x, n), errors=_err, log=log)
        for i in impls:
            if rec.get(f'{i}_ms'):
                rec[f'{i}_gflops'] = 2 * E * F / rec[f'{i}_ms'] / 1e6
        speedups(rec, 'tcu', (bkey, 'csr'))
        speedups(rec, 'tcu_tf32', (bkey, 'csr'))
        yield rec


# -- 5. training epoch and accuracy ---------------------------------------------------------


#: the trained models: PyG's examples/gcn.py (2 x GCNConv, cached, hidden 16) and
#: examples/agnn.py at TC-GNN's size (4 AGNN propagations of width 32, every temperature learnt)
MODELS = {'gcn': 16, 'agnn': 32}


def make_model(model: str, impl: str, cin: int, cout: int) -> torch.nn.Module:
    """``impl`` 'pyg' (torch_geometric.nn layers) or a pyg_tc backend."""
    lib = importlib.import_module('torch_geometric.nn' if impl == 'pyg' else 'pyg_tc.nn')
    kw = {} if impl == 'pyg' else {'backend': impl}
    hidden = MODELS[model]
    if model == 'agnn':
        return Net(lib, 'agnn', [cin] + [hidden] * 5 + [cout], dropout=0.5, layer_kwargs={'requires_grad': True, **kw})
    return Net(lib, 'gcn', [cin, hidden, cout], dropout=0.5, cached=True, layer_kwargs=kw)


def _init_state(model: str, cin: int, cout: int, seed: int) -> dict:
    torch.manual_seed(seed)
    return {k: v.clone() for k, v in make_model(model, 'pyg', cin, cout).state_dict().items()}


def bench_train(name: str, a, log=log) -> Iterator[dict]:
    """GCN and AGNN training epochs: PyG against the pyg_tc backends, same weights and dropout."""
    from pyg_tc.formats.carrier import get_graph
    from pyg_tc.ops import sgt_of

    dev, cin, cout = a.device, a.train_in, a.classes
    bg = load_graph(name, dev)
    N = bg.num_nodes
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(N, cin, generator=gen, device=dev)
    y = torch.randint(0, cout, (N,), generator=gen, device=dev)
    tc: dict = {}  # pyg_tc's copy of edge_index, carrying the CSRGraph and its SGT (made on first use)

    def tc_edges():
        if not tc:
            tc['ei'] = bg.edge_index.clone()
            sgt_of(get_graph(tc['ei'], size=(N, N))[0])
        return tc['ei']

    def build(model: str, impl: str, state: dict):
        m = make_model(model, impl, cin, cout).to(dev)
        m.load_state_dict(state)
        torch.manual_seed(0)  # the same dropout masks for every implementation
        return m

    for model in MODELS:
        state = _init_state(model, cin, cout, 0)
        ref: dict = {}
        for impl in TRAIN_IMPLS:
            rec = train_case(
                dict(
                    kind='train',
                    graph=name,
                    nodes=N,
                    edges=bg.num_edges,
                    model=model,
                    impl=impl,
                    in_channels=cin,
                    hidden=MODELS[model],
                    classes=cout,
                    precision=torch.get_float32_matmul_precision(),
                ),
                lambda: build(model, impl, state),
                x,
                y,
                bg.edge_index if impl == 'pyg' else tc_edges,
                a.train_warmup,
                a.train_rep,
                'epoch',
            )
            if impl == 'pyg':
                ref = rec
            elif rec['status'] == 'ok' and ref.get('status') == 'ok':
                rec['speedup_vs_pyg'] = ref['epoch_ms'] / rec['epoch_ms']
                rec['loss_diff_vs_pyg'] = abs(rec['loss_first'] - ref['loss_first'])
                if ref.get('peak_mb'):
                    rec['memory_vs_pyg'] = rec['peak_mb'] / ref['peak_mb']
            yield rec
    x = y = tc = bg = None
    free(dev)


def bench_accuracy(ds: str, a, log=log) -> Iterator[dict]:
    """GCN and AGNN test accuracy per seed and implementation, from the same initial weights."""
    from pyg_tc.formats.carrier import get_graph
    from pyg_tc.ops import sgt_of
    from .common import fit, load_dataset

    data = load_dataset(ds, a.data_root, a.cache_dir).to(a.device)
    cin, cout, N = data.num_features, int(data.y.max()) + 1, data.num_nodes
    sgt_of(get_graph(data.edge_index, size=(N, N))[0])  # attached up front, as SGTTransform does
    for model in MODELS:
        for seed in range(a.seeds):
            state = _init_state(model, cin, cout, seed)
            for impl in ACC_IMPLS:
                rec = dict(
                    kind='accuracy',
                    dataset=ds,
                    model=model,
                    impl=impl,
                    seed=seed,
                    epochs=a.epochs,
                    precision=torch.get_float32_matmul_precision(),
                )
                try:
                    m = make_model(model, impl, cin, cout).to(a.device)
                    m.load_state_dict(state)
                    torch.manual_seed(seed)
                    rec.update(
                        status='ok',
                        **fit(
                            m,
                            data,
                            (data.train_mask, data.val_mask, data.test_mask),
                            'accuracy',
                            a.epochs,
                            lr=0.01,
                            weight_decay=5e-4,
                        ),
                    )
                except Exception as e:
                    rec['status'] = 'oom' if isinstance(e, torch.OutOfMemoryError) else f'error: {short_error(e)}'
                m = None
                yield rec


# -- report ------------------------------------------------------------------------


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
    s = [
        '### Where tensor cores lose and why\n',
        f'The TCU SpMM is slower than the CSR kernel in {len(lose)} of {len(both)} cases. A 16x8 '
        'SGT block gathers 8 feature rows whatever its fill and multiplies all 128 cells, while the '
        'CSR kernel gathers one row per edge: the TCU reads fewer feature bytes only when a block '
        'holds more than 8 nonzeros (8 B/edge of CSR metadata vs 52 B/block + 4 B/cell), and below '
        'that it moves more bytes and wastes MMA work on empty cells.\n',
    ]
    F, dt = _focus(sp)
    for label, group in (('slower', lose), ('faster', win)):
        keys = list(dict.fromkeys((r['graph'], r['order']) for r in group))
        if not keys:
            continue
        s.append(f'TCU {label} than CSR:')
        for gname, order in keys:
            rs = [r for r in group if (r['graph'], r['order']) == (gname, order)]
            f = next((r for r in rs if r['F'] == F and r['dtype'] == dt), rs[0])
            s.append(
                f'- {gname} ({order}): {f["nnz_per_block"]:.1f} nnz/block, TCU/CSR bytes '
                f'{f["tcu_bytes"] / f["csr_bytes"]:.2f} at F={f["F"]} {f["dtype"]}; TCU time '
                f'x{min(r["tcu_ms"] / r["csr_ms"] for r in rs):.2f}..'
                f'x{max(r["tcu_ms"] / r["csr_ms"] for r in rs):.2f} of CSR over {len(rs)} case(s)'
            )
        s.append('')
    if lose and win:
        s.append(
            f'Observed: TCU wins down to {min(r["nnz_per_block"] for r in win):.1f} nnz/block and '
            f'loses up to {max(r["nnz_per_block"] for r in lose):.1f} nnz/block.\n'
        )
    return s


def _acc_rows(records: List[dict]) -> List[dict]:
    """Mean test accuracy per (model, dataset, impl) and its difference to PyG, in points."""
    ac = [r for r in records if r['kind'] == 'accuracy']
    out = []
    for key in dict.fromkeys((r['model'], r['dataset'], r['impl']) for r in ac):
        runs = lambda k: [
            100 * r['test']
            for r in ac  # noqa: E731
            if (r['model'], r['dataset'], r['impl']) == k and r['status'] == 'ok'
        ]
        v, ref = runs(key), runs((*key[:2], 'pyg'))
        d = statistics.mean(v) - statistics.mean(ref) if v and ref and key[2] != 'pyg' else None
        out.append(
            dict(
                model=key[0],
                dataset=key[1],
                impl=key[2],
                runs=len(v),
                diff=d,
                acc=f'{statistics.mean(v):.2f} ± {statistics.stdev(v) if len(v) > 1 else 0:.2f}' if v else '-',
                within='-' if d is None else 'yes' if abs(d) <= 0.5 else 'no',
            )
        )
    return out


def _auto_note(au: List[dict]) -> str:
    ok = [r for r in au if 'best_backend' in r]
    return (
        f'auto = pyg_tc.ops.choose_backend (measured on first use per graph, width and dtype; sgt when its '
        f'time < {au[0].get("auto_margin")} x CSR); it picked the faster backend of this run in '
        f'**{sum(r["auto"] == r["best_backend"] for r in ok)} of {len(ok)}** cases'
        + (f', worst auto/best **{max(r["auto_vs_best"] for r in ok):.2f}**.' if ok else '.')
    )


def _train_note(tr: List[dict]) -> str:
    by_pyg = {r['graph']: r['status'] for r in tr if r['impl'] == 'pyg'}
    head = [r for r in tr if r['graph'].partition('@')[0] == 'reddit' and r['model'] == 'agnn' and r['impl'] != 'pyg']
    return (
        head
        and 'AGNN on the reddit-shaped graph (target >= 3x PyG; reddit@f = the same nodes with a fraction '
        'f of the edges, where PyG runs out of memory on the whole graph): '
        + ', '.join(
            f'{r["graph"]} {r["impl"]} '
            + (f'**x{r["speedup_vs_pyg"]:.2f}**' if 'speedup_vs_pyg' in r else 'PyG ' + by_pyg.get(r['graph'], '?'))
            for r in head
        )
    )


def reporter(out: str, env: dict) -> Reporter:
    """The suite's outputs: sgt.jsonl, sgt.md (one table per section), sgt.png."""
    bkey, blabel, _ = sparse_baseline(env['device'])
    names = dict(NAMES, **{bkey: blabel})
    k = lambda key, spec='', bold=False, h=None: Col(h or key, key, spec, bold)  # noqa: E731
    ms = lambda i, h=None: ms_col(i, h or names.get(i, i))  # noqa: E731
    errs = lambda *impls: Col(
        'err ' + ' / '.join(names[i] for i in impls),
        lambda r: ' / '.join(  # noqa: E731
            fmt(r.get(f'{i}_err'), '.0e') for i in impls
        ),
    )
    g = [k('graph'), k('order'), k('F'), k('dtype'), k('nnz_per_block', '.1f', h='nnz/blk')]
    sections = [
        Table(
            '## SGT statistics (TC-GNN Figure 7) per node order',
            'sgt_stats',
            [
                k('graph'),
                k('order'),
                k('windows', ','),
                k('blocks', ','),
                k('blocks_without_sgt', ',', h='blocks w/o SGT'),
                k('block_reduction', '.2f', True, 'reduction'),
                k('nnz_per_block', '.2f', True, 'nnz/block'),
                k('tiles16', ',', h='16x16 tiles'),
                k('tiles16_without_sgt', ',', h='tiles w/o SGT'),
            ],
        ),
        Table(
            '## SpMM',
            'spmm',
            g
            + [ms(i) for i in (bkey, 'csr', 'tcu', 'tcu_tf32', 'pyg')]
            + [
                k(f'tcu_vs_{bkey}', '.2f', True, f'TCU vs {blabel}'),
                k('tcu_vs_csr', '.2f', True, 'TCU vs CSR'),
                k(f'tcu_tf32_vs_{bkey}', '.2f', h=f'TF32 vs {blabel}'),
                k('auto'),
                k('auto_vs_best', '.2f', h='auto/best'),
                Col('TCU/CSR bytes', lambda r: fmt(r['tcu_bytes'] / r['csr_bytes'], '.2f')),
                errs('tcu', 'tcu_tf32', 'csr', bkey),
            ],
            after=_lose_paragraph,
        ),
        Table(
            '## SDDMM',
            'sddmm',
            g
            + [ms(i) for i in ('csr', 'tcu', 'tcu_tf32', 'pyg')]
            + [
                k('tcu_vs_csr', '.2f', True, 'TCU vs CSR'),
                k('tcu_vs_pyg', '.2f', True, 'TCU vs PyG'),
                k('auto'),
                errs('tcu', 'tcu_tf32', 'csr'),
            ],
        ),
        Table(
            "## Warps per CTA and backend='auto'",
            'auto',
            g[:1]
            + g[2:]
            + [ms('csr')]
            + [ms(f'tcu_w{W}', f'TCU w={W}') for W in WARPS]
            + [
                k('rule_warps', 'd', h='rule warps'),
                k('best_warps', 'd', h='best warps'),
                k('rule_vs_best_warps', '.2f', True, 'rule/best'),
                k('auto'),
                k('best_backend', h='best'),
                k('auto_vs_best', '.2f', True, 'auto/best'),
            ],
            note=_auto_note,
        ),
        Table(
            '## SGT build cost (SGT.build, median of 5 after a warm-up)',
            'build',
            [
                k('graph'),
                k('nodes', ',', h='N'),
                k('edges', ',', h='E'),
                k('csr_build_ms', '.2f', h='CSRGraph ms'),
                k('sgt_build_ms', '.2f', h='SGT build ms'),
                ms('tcu_spmm', 'TCU SpMM F=32 ms'),
                ms('csr_spmm', 'CSR SpMM ms'),
                k('build_over_tcu_spmm', '.0f', True, 'build / TCU SpMM'),
                k('build_over_csr_spmm', '.0f', h='build / CSR SpMM'),
                k('sgt_build_cpu_ms', '.1f', h='SGT build on CPU ms'),
            ],
        ),
        Table(
            '## TC-GNN Table 6 (F=16, fp32): GFLOP/s',
            'table6',
            [
                k('n', ',', h='n'),
                k('dbw', 'd', h='DB/W'),
                k('nnz', ','),
                k('sparsity_pct', '.2f', h='sparsity %'),
                k('nnz_per_block', '.1f', h='nnz/blk'),
            ]
            + [k(f'{i}_gflops', '.1f', h=names[i]) for i in ('tcu', 'tcu_tf32', 'csr', bkey)]
            + [
                k(f'tcu_vs_{bkey}', '.2f', True, f'TCU vs {blabel}'),
                k(f'tcu_tf32_vs_{bkey}', '.2f', True, f'TF32 vs {blabel}'),
                k('tcu_err', '.0e', h='TCU err'),
            ],
        ),
        Table(
            '## Training epoch (forward + backward + Adam, full batch; random features / labels)',
            'train',
            [
                k('graph'),
                k('model'),
                k('impl'),
                k('status'),
                k('epoch_ms', '.2f', h='epoch ms'),
                k('speedup_vs_pyg', '.2f', True, 'x PyG'),
                k('peak_mb', '.0f', h='peak MiB'),
                k('memory_vs_pyg', '.2f', h='memory / PyG'),
                k('loss_first', '.4f', h='loss[0]'),
                k('loss_diff_vs_pyg', '.1e', h='|dloss[0]| vs PyG'),
            ],
            note=_train_note,
        ),
        Table(
            '## Test accuracy at the best validation epoch (public split)',
            _acc_rows,
            [
                k('model'),
                k('dataset'),
                k('impl'),
                k('runs'),
                k('acc', h='test acc %'),
                k('diff', '+.2f', True, 'diff vs PyG (points)'),
                k('within'),
            ],
            note='target: within 0.5 points of PyG',
        ),
    ]

    def panels(recs: List[dict]) -> List[Panel]:
        sp = [r for r in recs if r['kind'] == 'spmm']
        if not sp:
            return []
        F, dt = _focus(sp)
        sp = [r for r in sp if r['F'] == F and r['dtype'] == dt]
        return [
            Panel(
                lambda _: sp,
                'graph',
                f'tcu_vs_{bkey}',
                'order',
                hline=1.0,
                logy=2,
                title=f'TCU speedup vs {blabel} (F={F} {dt})',
            ),
            Panel(lambda _: sp, 'graph', 'tcu_vs_csr', 'order', hline=1.0, logy=2, title='TCU speedup vs pyg_tc CSR'),
            Panel('sgt_stats', 'graph', 'nnz_per_block', 'order', hline=8.0, logy=2, title='nnz per 16x8 SGT block'),
        ]

    def header(env: dict, recs: List[dict]) -> List[str]:
        gpu = env.get('gpu') or 'no GPU: reference implementations, code-path check only'
        return [
            f'- device {env.get("device")} ({gpu}); torch {env.get("torch")}, PyG {env.get("torch_geometric")}',
            f'- kernels: {kernel_time_note(env["device"])}, in ms; speedups = other time / TCU time (> 1: TCU '
            'faster). TCU = 3xTF32 for fp32 (fp32-accurate), TCU-TF32 = plain TF32, values pre-translated to '
            f'SGT cell order; {blabel} gets edge values in the feature dtype. Errors: max |out - ref| / max '
            '|ref| vs float64.',
        ]

    return Reporter(
        out,
        'sgt.jsonl',
        'sgt.md',
        'TC-GNN benchmarks',
        env,
        'first',
        sections,
        [Figure('sgt.png', panels)],
        header,
        tag='sgt',
    )


# -- CLI ----------------------------------------------------------------------------

_FULL = dict(
    graphs=','.join(GRAPHS),
    train_graphs=','.join(TRAIN_GRAPHS),
    datasets='cora,citeseer',
    widths='16,32,64,128',
    dtypes='float32,float16',
    rep=20,
    train_warmup=3,
    train_rep=20,
    seeds=5,
    epochs=200,
    table6_n=4096,
    dbw=','.join(map(str, DBW)),
)
_QUICK = dict(
    graphs='tiny',
    train_graphs='tiny',
    datasets='cora',
    widths='16',
    dtypes='float32',
    rep=2,
    train_warmup=1,
    train_rep=2,
    seeds=1,
    epochs=3,
    table6_n=256,
    dbw='1,4',
)


def parse_args(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> argparse.Namespace:
    """The command line, with the --quick / full defaults filled in."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n\n')[0])
    p.add_argument('--out', default='sgt_out')
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
    p.add_argument(
        '--precision',
        default='highest',
        choices=('highest', 'high', 'medium'),
        help='fp32 matmul precision of the train / accuracy sections',
    )
    p.add_argument('--datasets', help='accuracy datasets (cora, citeseer)')
    p.add_argument('--seeds', type=int)
    p.add_argument('--epochs', type=int)
    p.add_argument('--data-root', help='folder holding planetoid/ (default: $PYG_TC_DATA)')
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
        from .common import default_data_root

        a.data_root = default_data_root()
    return a


def _with_precision(p: str, records: Iterator[dict]) -> Iterator[dict]:
    with precision(p):
        yield from records


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Command line: see the module docstring; returns the exit code."""
    a = parse_args(argv, prog)
    rep = reporter(a.out, environment(a.device, args={k: str(v) for k, v in vars(a).items()}))
    warm_up(a.device)
    gens = {
        'kernels': bench_kernels,
        'auto': bench_auto,
        'build': bench_build,
        'table6': lambda _, a: bench_table6(a),
        'train': bench_train,
        'accuracy': bench_accuracy,
    }
    items = {
        'table6': [f'n={a.table6_n}'],
        'train': resolve_names(a.train_graphs, TRAIN_GRAPHS),
        'accuracy': a.datasets.split(','),
    }
    paths = rep.run(
        [
            (
                sec,
                item,
                lambda sec=sec, item=item: _with_precision(
                    a.precision if sec in ('train', 'accuracy') else 'highest', gens[sec](item, a)
                ),
            )  # kernels: per impl
            for sec in a.sections
            for item in items.get(sec, resolve_names(a.graphs, GRAPHS))
        ],
        a.device,
    )
    print(open(paths['markdown']).read())
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
