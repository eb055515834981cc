"""HalfGNN suite: half-precision training with pyg_tc, against
pyg_tc in fp32 and PyG under the same ``torch.autocast``.

Parts (``--part``, a comma list, or ``all``):

1. ``kernels``: SpMM per dtype (fp32 / fp16 / bf16) against cuSPARSE in the
   same dtype and against pyg_tc fp32, achieved bandwidth against the
   measured copy bandwidth (``benchmarks.suites.spmm.bench_graph``, the suite's
   SpMM records), and the SDDMM per dtype against pyg_tc's fp32 SDDMM
   (kernel-only times).
2. ``train``: a 2-layer GCN, SAGE (mean), GIN (sum, PyG's default), GIN with
   mean aggregation (HalfGNN's GIN variant: the sum normalised, no overflow)
   and GAT (PyG's ``examples/gat.py``) training step (forward + backward +
   Adam) on the arxiv-, Reddit- and products-shaped graphs, in fp32 and under
   ``torch.autocast('cuda', float16 / bfloat16)``, pyg_tc and PyG from the same
   weights; peak memory beside every time; whether every loss is finite.
3. ``accuracy``: full-batch training of GCN, SAGE, GIN, GAT on Cora, CiteSeer,
   Tolokers, Minesweeper and Actor in fp32, fp16 and bf16 (autocast; fp16
   with ``torch.amp.GradScaler``), pyg_tc, the same initial weights and
   dropout seed per seed: test metric at the first best-validation epoch,
   mean over seeds, the difference to fp32 (target: within 0.3 points).

``python -m benchmarks.suites.half --out DIR [--part kernels,train,accuracy|all]
[--train-graphs ...] [--datasets ...] [--seeds 5] [--epochs 200] [--budget S]``
writes ``DIR/half.jsonl`` (first record: the environment), ``half.md`` and
``half.png``. On the CPU (no kernels: pyg_tc runs its PyTorch references
under PyTorch's CPU autocast) ``--quick`` is the default: a code-path check
on the 'tiny' graph and Cora, not a measurement.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Iterator, List, Optional, Sequence

import torch
import torch_geometric.nn as pyg_nn

from pyg_tc.bench import graphs as G
from pyg_tc.bench.models import Net
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, Text, environment, fmt, log
from pyg_tc.bench.timing import copy_bandwidth, free, kernel_time, warm_up

from .common import train_case

PARTS = ('kernels', 'train', 'accuracy')
PRECISIONS = {'fp32': None, 'fp16': torch.float16, 'bf16': torch.bfloat16}
MODELS = ('gcn', 'sage', 'gin', 'gin-mean', 'gat')
ACC_MODELS = ('gcn', 'sage', 'gin', 'gat')
TRAIN_GRAPHS = ['arxiv', 'reddit', 'products']
ACC_DATASETS = ['cora', 'citeseer', 'tolokers', 'minesweeper', 'actor']
WIDTHS = [32, 64, 128, 256]
ACC_TARGET = 0.3  # points of the test metric
TARGETS = dict(
    spmm_vs_fp32=1.6, spmm_vs_cusparse=3.5, sddmm_vs_fp32=1.7, train_vs_fp32=1.4, train_vs_pyg=40.0, memory_vs_fp32=0.6
)
BIG_EDGES = 5_000_000
HIDDEN, DROPOUT, LR, WD = 64, 0.5, 0.01, 5e-4


class Autocast(torch.nn.Module):
    """``model`` run under ``torch.autocast(device, dtype)`` (None: as it is),
    returning fp32 logits (the loss is computed in fp32, as autocast does)."""

    def __init__(self, model: torch.nn.Module, dtype: Optional[torch.dtype]):
        super().__init__()
        self.model, self.dtype = model, dtype

    def forward(self, x, edge_index):
        """The wrapped model's output, as fp32."""
        if self.dtype is None:
            return self.model(x, edge_index)
        with torch.autocast(x.device.type, dtype=self.dtype):
            return self.model(x, edge_index).float()


def make(impl: str, kind: str, cin: int, cout: int, dropout: Optional[float] = None) -> torch.nn.Module:
    """The model ``kind`` on ``impl``'s layers ('pyg' or 'pyg_tc')."""
    if kind == 'gat':
        from .gat import GAT, GAT_DROPOUT

        return GAT(impl, cin, cout, dropout=GAT_DROPOUT if dropout is None else dropout)
    import pyg_tc.nn

    lib = pyg_nn if impl == 'pyg' else pyg_tc.nn
    return Net(lib, kind, [cin, HIDDEN, cout], dropout=DROPOUT if dropout is None else dropout, cached=True)


def _lr_wd(kind: str):
    if kind == 'gat':
        from .gat import GAT_LR, GAT_WD

        return GAT_LR, GAT_WD
    return LR, WD


# -- 1. kernels ------------------------------------------------------------------------


def bench_kernels(name: str, a) -> Iterator[dict]:
    """The suite's SpMM records (cuSPARSE same dtype, pyg_tc fp32, GB/s), then SDDMM per dtype."""
    from pyg_tc.ops import sddmm_graph
    from .spmm import bench_graph

    bg = G.load_graph(name, a.device)
    yield from bench_graph(bg, a.widths, list(PRECISIONS), a.copy_gbps, warmup=5, rep=20, max_time_s=1.0)
    g = bg.csr()
    for F in a.widths:
        rec = dict(kind='sddmm', graph=name, nodes=bg.num_nodes, edges=bg.num_edges, F=F)
        x32 = torch.randn(bg.num_nodes, F, device=a.device)
        for p, dt in PRECISIONS.items():
            x = x32 if dt is None else x32.to(dt)
            rec[f'{p}_ms'] = kernel_time(lambda x=x: sddmm_graph(g, x, x), a.device, rep=20, warmup=3).median_ms
        for p in ('fp16', 'bf16'):
            rec[f'{p}_vs_fp32'] = rec['fp32_ms'] / rec[f'{p}_ms']
        yield rec
        free(a.device)


# -- 2. training steps -----------------------------------------------------------------


def bench_train(name: str, a) -> Iterator[dict]:
    """Per model: pyg_tc then PyG, each in every precision, from the same weights."""
    dev = a.device
    bg = G.load_graph(name, dev)
    N, cin, cout = bg.num_nodes, 256, 41
    big = bg.num_edges > BIG_EDGES
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(N, cin, generator=gen, device=dev)
    y = torch.randint(0, cout, (N,), generator=gen, device=dev)
    from pyg_tc.formats.carrier import clear_graph, get_graph

    ei = bg.edge_index  # one copy: pyg_tc attaches its format (first step, untimed), dropped before PyG runs
    for kind in a.models:
        torch.manual_seed(0)
        state = {k: v.clone() for k, v in make('pyg', kind, cin, cout).state_dict().items()}
        recs = []
        for impl in ('pyg_tc', 'pyg'):
            if impl == 'pyg':
                clear_graph(ei)  # PyG's cases hold no pyg_tc format
            else:  # built before the cases: resident (not a peak of the first) in every precision
                get_graph(ei, size=(N, N))
            steps, rep = (a.steps, a.rep) if impl == 'pyg_tc' or not big else (2, 3)
            for prec, dt in PRECISIONS.items():
                if prec not in a.precisions:
                    continue
                rec = dict(
                    kind='train',
                    graph=name,
                    nodes=N,
                    edges=bg.num_edges,
                    model=kind,
                    impl=impl,
                    precision=prec,
                    dims=[cin, HIDDEN, cout],
                )

                def build(impl=impl, dt=dt):
                    m = make(impl, kind, cin, cout)
                    m.load_state_dict(state)
                    torch.manual_seed(0)
                    return Autocast(m, dt).to(dev)

                train_case(rec, build, x, y, ei, steps, rep, lr=_lr_wd(kind)[0])
                if rec['status'] == 'ok':
                    rec['finite'] = all(v == v and abs(v) != float('inf') for v in rec['losses'])
                recs.append(rec)
                free(dev)
        _train_ratios(recs)
        yield from recs


def _train_ratios(recs: List[dict]) -> None:
    ok = {(r['impl'], r['precision']): r for r in recs if r['status'] == 'ok'}
    for r in ok.values():
        base = ok.get(('pyg_tc', 'fp32'))
        if r['impl'] == 'pyg_tc' and r['precision'] != 'fp32' and base:
            r['speedup_vs_tc_fp32'] = base['step_ms'] / r['step_ms']
            r['peak_vs_tc_fp32'] = r['peak_mb'] / base['peak_mb'] if base.get('peak_mb') else None
            r['extra_vs_tc_fp32'] = r['extra_mb'] / base['extra_mb'] if base.get('extra_mb') else None
        pyg = ok.get(('pyg', r['precision']))
        if r['impl'] == 'pyg_tc' and pyg:
            r['speedup_vs_pyg'] = pyg['step_ms'] / r['step_ms']
            if pyg.get('peak_mb'):
                r['peak_vs_pyg'] = r['peak_mb'] / pyg['peak_mb']


# -- 3. accuracy -------------------------------------------------------------------------


def bench_accuracy(ds: str, a) -> Iterator[dict]:
    """Per model and seed: fp32, fp16 and bf16 from the same weights and seed."""
    from .common import DATASETS, fit, load_dataset, split_masks

    dev = a.device
    data = load_dataset(ds, a.data_root, a.cache_dir).to(dev)
    metric = DATASETS[ds][4]
    cin, cout = data.num_features, int(data.y.max()) + 1
    log(
        f'[half] {ds}: {data.num_nodes} nodes, {data.num_edges} edges, {cin} features, {cout} classes, '
        f'{metric}, {a.seeds} seeds x {a.epochs} epochs'
    )
    for kind in a.acc_models:
        lr, wd = _lr_wd(kind)
        for seed in range(a.seeds):
            masks = split_masks(data, seed)
            torch.manual_seed(seed)
            state = {k: v.clone() for k, v in make('pyg_tc', kind, cin, cout).state_dict().items()}
            for prec, dt in PRECISIONS.items():
                if prec not in a.precisions:
                    continue
                rec = dict(
                    kind='accuracy',
                    dataset=ds,
                    model=kind,
                    precision=prec,
                    seed=seed,
                    split=masks[3],
                    metric=metric,
                    epochs=a.epochs,
                    lr=lr,
                    weight_decay=wd,
                )
                try:
                    m = make('pyg_tc', kind, cin, cout)
                    m.load_state_dict(state)
                    m = Autocast(m, dt).to(dev)
                    torch.manual_seed(seed)
                    scaler = torch.amp.GradScaler(dev.type) if dt == torch.float16 and dev.type == 'cuda' else None
                    rec.update(status='ok', **fit(m, data, masks[:3], metric, a.epochs, lr, wd, scaler))
                    rec['finite'] = rec['last_loss'] == rec['last_loss']
                except Exception as e:  # noqa: BLE001 (recorded, the run goes on)
                    rec['status'] = 'oom' if isinstance(e, torch.OutOfMemoryError) else f'error: {e}'[:200]
                m = None
                yield rec


# -- report ------------------------------------------------------------------------------


def acc_rows(records: List[dict]) -> List[dict]:
    """Per (dataset, model, precision): mean ± std (points) over seeds, difference to fp32."""
    ac = [r for r in records if r.get('kind') == 'accuracy']
    out = []
    for key in dict.fromkeys((r['dataset'], r['model'], r['precision']) for r in ac):
        mine = [r for r in ac if (r['dataset'], r['model'], r['precision']) == key]
        ok = [r for r in mine if r['status'] == 'ok']
        v = [100 * r['test'] for r in ok]
        row = dict(
            dataset=key[0],
            model=key[1],
            precision=key[2],
            metric=mine[0]['metric'],
            runs=len(v),
            acc=next((r['status'] for r in mine if r['status'] != 'ok'), '-'),
            within='-',
        )
        if v:
            row.update(
                mean=statistics.mean(v),
                std=statistics.stdev(v) if len(v) > 1 else 0.0,
                epoch_ms=statistics.median(r['epoch_ms'] for r in ok),
                nan_runs=sum(not r.get('finite', True) for r in ok),
            )
            row['acc'] = f'{row["mean"]:.2f} ± {row["std"]:.2f}'
            ref = [
                100 * r['test']
                for r in ac
                if (r['dataset'], r['model'], r['precision']) == (key[0], key[1], 'fp32') and r['status'] == 'ok'
            ]
            if key[2] != 'fp32' and ref:
                row['diff'] = row['mean'] - statistics.mean(ref)
                row['within'] = 'yes' if abs(row['diff']) <= ACC_TARGET else 'no'
                # the same seeds paired: the spread of the per-seed differences
                pairs = {r['seed']: 100 * r['test'] for r in ok}
                d = [
                    pairs[r['seed']] - 100 * r['test']
                    for r in ac
                    if (r['dataset'], r['model'], r['precision']) == (key[0], key[1], 'fp32')
                    and r['status'] == 'ok'
                    and r['seed'] in pairs
                ]
                row['diff_std'] = statistics.stdev(d) if len(d) > 1 else 0.0
                row['fp32_std'] = statistics.stdev(ref) if len(ref) > 1 else 0.0
        out.append(row)
    return out


def _geo(v: Sequence[float]) -> Optional[float]:
    v = [x for x in v if x]
    return statistics.geometric_mean(v) if v else None


def targets(records: List[dict]) -> List[str]:
    """The issue's targets against this run, one line each."""
    lines = []
    sp = [r for r in records if r.get('kind') == 'spmm' and r.get('dtype') in ('fp16', 'bf16')]
    for d in ('fp16', 'bf16'):
        rs = [r for r in sp if r['dtype'] == d]
        if rs:
            g32, gcu = (
                _geo([r.get('speedup_vs_pyg_tc_fp32') for r in rs]),
                _geo([r.get('kernel_speedup_vs_cusparse') for r in rs]),
            )
            lines.append(
                f'- SpMM {d}: geomean {fmt(g32, ".2f")}x pyg_tc fp32 (target {TARGETS["spmm_vs_fp32"]}), '
                f'{fmt(gcu, ".2f")}x cuSPARSE {d} kernel-only (target {TARGETS["spmm_vs_cusparse"]}); '
                f'{len(rs)} cases'
            )
    sd = [r for r in records if r.get('kind') == 'sddmm']
    for d in ('fp16', 'bf16'):
        g = _geo([r.get(f'{d}_vs_fp32') for r in sd])
        if g:
            lines.append(f'- SDDMM {d}: geomean {g:.2f}x pyg_tc fp32 (target {TARGETS["sddmm_vs_fp32"]})')
    tr = [
        r
        for r in records
        if r.get('kind') == 'train'
        and r['impl'] == 'pyg_tc'
        and r['precision'] != 'fp32'
        and r['graph'] == 'reddit'
        and r.get('speedup_vs_tc_fp32')
    ]
    for r in tr:
        pyg = next(
            (
                p
                for p in records
                if p.get('kind') == 'train'
                and p['impl'] == 'pyg'
                and all(p[k] == r[k] for k in ('graph', 'model', 'precision'))
            ),
            {},
        )
        vs_pyg = (
            f'{r["speedup_vs_pyg"]:.1f}x PyG + autocast'
            if r.get('speedup_vs_pyg')
            else f'PyG + autocast: {pyg.get("status", "not run")}'
        )
        lines.append(
            f'- Reddit-shaped {r["model"]} {r["precision"]}: {r["speedup_vs_tc_fp32"]:.2f}x pyg_tc fp32 (target '
            f'{TARGETS["train_vs_fp32"]}), {vs_pyg} (target {TARGETS["train_vs_pyg"]:.0f}x), peak memory {fmt(r.get("peak_vs_tc_fp32"), ".2f")}x pyg_tc fp32 '
            f'(extra above resident {fmt(r.get("extra_vs_tc_fp32"), ".2f")}x; target {TARGETS["memory_vs_fp32"]}); '
            f'losses finite: {r.get("finite")}'
        )
    nan = [r for r in records if r.get('kind') == 'train' and r.get('status') == 'ok' and not r.get('finite')]
    if nan:
        lines.append(
            '- non-finite losses: '
            + ', '.join(f'{r["impl"]} {r["model"]} {r["precision"]} on {r["graph"]}' for r in nan)
        )
    rows = [r for r in acc_rows(records) if r.get('diff') is not None]
    if rows:
        bad = [r for r in rows if r['within'] != 'yes']
        lines.append(
            f'- accuracy within {ACC_TARGET} points of fp32: **{len(rows) - len(bad)} of {len(rows)}** '
            '(dataset x model x half dtype)'
            + (
                '; not within: '
                + ', '.join(
                    f'{r["dataset"]} {r["model"]} {r["precision"]} {r["diff"]:+.2f} (paired spread {r["diff_std"]:.2f})'
                    for r in bad
                )
                if bad
                else ''
            )
        )
        nan = [r for r in acc_rows(records) if r.get('nan_runs')]
        if nan:
            lines.append(
                '- runs ending with a NaN loss: '
                + ', '.join(
                    f'{r["dataset"]} {r["model"]} {r["precision"]} ({r["nan_runs"]} of {r["runs"]})' for r in nan
                )
            )
    return lines


def reporter(out: str, env: dict) -> Reporter:
    """``half.jsonl``, ``half.md``, ``half.png``."""
    k = lambda key, spec='', h=None, bold=False: Col(h or key, key, spec, bold)  # noqa: E731
    sections = [
        Text('## Design targets', targets),
        Table(
            '## 1a. SpMM per dtype (sum, no edge values)',
            'spmm',
            [
                k('graph'),
                k('F'),
                k('dtype'),
                k('pyg_tc_ms', '.4f', 'pyg_tc ms'),
                k('pyg_tc_graph_ms', '.4f', 'kernel-only ms'),
                k('cusparse_ms', '.4f', 'cuSPARSE ms'),
                k('kernel_speedup_vs_cusparse', '.2f', 'kernel-only x cuSPARSE', True),
                k('speedup_vs_pyg_tc_fp32', '.2f', 'x pyg_tc fp32', True),
                k('gbps_gather', '.0f', 'GB/s gather'),
                k('frac_copy_gather', '.2f', 'gather / copy BW'),
                k('pyg_tc_rel_err', '.1e', 'rel err'),
            ],
            note='The suite\'s SpMM cases (benchmarks.suites.spmm.bench_graph): cuSPARSE in the same dtype '
            '(torch.sparse.mm), per-call and kernel-only (CUDA-graph replay) times; GB/s gather: every edge '
            'gathers its source row (an upper bound of the bytes), against the measured copy bandwidth.',
        ),
        Table(
            '## 1b. SDDMM per dtype (kernel-only ms)',
            'sddmm',
            [
                k('graph'),
                k('F'),
                k('fp32_ms', '.4f', 'fp32'),
                k('fp16_ms', '.4f', 'fp16'),
                k('bf16_ms', '.4f', 'bf16'),
                k('fp16_vs_fp32', '.2f', 'fp16 x fp32', True),
                k('bf16_vs_fp32', '.2f', 'bf16 x fp32', True),
            ],
        ),
        Table(
            '## 2. Training step, 2 layers (forward + backward + Adam)',
            'train',
            [
                k('graph'),
                k('model'),
                k('impl'),
                k('precision'),
                k('status'),
                k('step_ms', '.2f', 'step ms'),
                k('speedup_vs_tc_fp32', '.2f', 'x pyg_tc fp32', True),
                k('speedup_vs_pyg', '.1f', 'x PyG same prec.', True),
                k('peak_mb', '.0f', 'peak MiB'),
                k('extra_mb', '.0f', 'peak - resident MiB'),
                k('peak_vs_tc_fp32', '.2f', 'peak / pyg_tc fp32'),
                k('extra_vs_tc_fp32', '.2f', 'extra / pyg_tc fp32'),
                k('loss_first', '.4f', 'loss[0]'),
                k('loss_last', '.4f', 'loss[-1]'),
                k('finite'),
            ],
            note='In 256, hidden 64 (GAT: 8 heads x 8), out 41; random features and labels; half = '
            "torch.autocast('cuda', dtype) around the model (logits in fp32). The first steps are untimed "
            '(pyg_tc builds its format in the first); resident = memory allocated when the case starts '
            '(features, one edge_index, pyg_tc\'s formats for its cases, parameters). PyG: '
            'torch_geometric.nn, the same weights.',
        ),
        Table(
            '## 3. Accuracy: fp16 / bf16 (autocast) against fp32, pyg_tc, same weights and seeds',
            acc_rows,
            [
                k('dataset'),
                k('metric'),
                k('model'),
                k('precision'),
                k('runs', 'd'),
                k('acc', h='test % mean ± std'),
                k('diff', '+.2f', 'diff vs fp32 (points)', True),
                k('diff_std', '.2f', 'paired diff std'),
                k('within'),
                k('nan_runs', 'd', 'NaN runs'),
                k('epoch_ms', '.2f', 'epoch ms'),
            ],
            note=f'Target: within {ACC_TARGET} points of fp32. GCN / SAGE / GIN: hidden {HIDDEN}, dropout {DROPOUT}, '
            f'Adam lr {LR}, weight decay {WD}; GAT: examples/gat.py. Test metric at the first best-validation '
            'epoch; Planetoid public split (NormalizeFeatures), the others split seed % 10; fp16 with '
            'torch.amp.GradScaler. Paired diff std: the spread of the per-seed differences (same seed, '
            'weights and dropout draws).',
        ),
    ]

    def panels(records):
        tr = [
            dict(r, case=f'{r["graph"]} {r["model"]}')
            for r in records
            if r.get('kind') == 'train' and r.get('speedup_vs_tc_fp32')
        ]
        sp = [r for r in records if r.get('kind') == 'spmm' and r.get('speedup_vs_pyg_tc_fp32')]
        return [
            Panel(
                lambda _: [dict(r, case=f'{r["graph"]} F={r["F"]}') for r in sp],
                'case',
                'speedup_vs_pyg_tc_fp32',
                'dtype',
                hline=TARGETS['spmm_vs_fp32'],
                hline_label='target',
                title='SpMM: x pyg_tc fp32',
            ),
            Panel(
                lambda _: tr,
                'case',
                'speedup_vs_tc_fp32',
                'precision',
                hline=TARGETS['train_vs_fp32'],
                hline_label='target',
                title='training step under autocast: x pyg_tc fp32',
            ),
            Panel(
                lambda _: [
                    dict(r, case=f'{r["dataset"]} {r["model"]}') for r in acc_rows(records) if r.get('diff') is not None
                ],
                'case',
                'diff',
                'precision',
                band=(-ACC_TARGET, ACC_TARGET),
                title='test metric: half - fp32 (points)',
            ),
        ]

    def header(env, recs):
        return [
            f'- device {env.get("device")} ({env.get("gpu") or "CPU: PyTorch references, autocast off"}); '
            f'torch {env.get("torch")}, PyG {env.get("torch_geometric")}, pyg_tc {env.get("pyg_tc_version")}; '
            f'started {env.get("started")}; copy bandwidth {fmt(env.get("copy_gbps"), ".0f")} GB/s'
        ]

    return Reporter(
        out,
        'half.jsonl',
        'half.md',
        'HalfGNN: half-precision pyg_tc',
        env,
        'first',
        sections,
        [Figure('half.png', panels, ncols=1, title='pyg_tc half precision')],
        header,
        tag='half',
    )


# -- CLI -----------------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> argparse.Namespace:
    """The command line (see the module doc)."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n\n')[0])
    p.add_argument('--out', default='half_out')
    p.add_argument('--part', default='all', help=f'comma list of {", ".join(PARTS)}, or all')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--quick', action='store_true', help='tiny graph, Cora, 1 seed, 5 epochs (the CPU default)')
    p.add_argument('--graphs', help=f'kernel and training graphs (default {",".join(TRAIN_GRAPHS)})')
    p.add_argument('--widths', default=','.join(map(str, WIDTHS)))
    p.add_argument('--models', default=','.join(MODELS), help='training models')
    p.add_argument('--acc-models', default=','.join(ACC_MODELS))
    p.add_argument('--precisions', default=','.join(PRECISIONS))
    p.add_argument('--datasets', default=','.join(ACC_DATASETS))
    p.add_argument('--seeds', type=int, default=5)
    p.add_argument('--epochs', type=int, default=200)
    p.add_argument('--steps', type=int, default=10, help='untimed training steps (losses recorded)')
    p.add_argument('--rep', type=int, default=10, help='timed training steps')
    p.add_argument('--budget', type=float, default=None, help='seconds: start no item after that')
    p.add_argument('--data-root', help='the real datasets\' folder (default: $PYG_TC_DATA)')
    p.add_argument('--cache-dir')
    a = p.parse_args(argv)
    a.device = torch.device(a.device)
    a.quick = a.quick or a.device.type == 'cpu'
    parts = [t.strip() for t in a.part.split(',') if t.strip()]
    a.parts = list(PARTS) if 'all' in parts else parts
    if set(a.parts) - set(PARTS):
        p.error(f'unknown --part {a.part}; choose from {", ".join(PARTS)}, all')
    split = lambda s: [t.strip() for t in s.split(',') if t.strip()]  # noqa: E731
    a.graphs = G.resolve_names(a.graphs, ['tiny'] if a.quick else TRAIN_GRAPHS)
    a.widths, a.models, a.acc_models = [int(w) for w in split(a.widths)], split(a.models), split(a.acc_models)
    a.precisions, a.datasets = split(a.precisions), split(a.datasets)
    for vals, known, what in (
        (a.models, MODELS, 'model'),
        (a.acc_models, MODELS, 'model'),
        (a.precisions, PRECISIONS, 'precision'),
        (a.datasets, None, 'dataset'),
    ):
        from .common import DATASETS

        bad = [v for v in vals if v not in (known if known is not None else DATASETS)]
        if bad:
            p.error(f'unknown {what}(s) {bad}')
    if a.quick:
        a.widths, a.datasets, a.seeds, a.epochs, a.steps, a.rep = a.widths[:1], a.datasets[:1], 1, 5, 2, 2
    from .common import data_paths

    data_paths(a)
    return a


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Command line: see the module doc; returns the exit code."""
    a = parse_args(argv, prog)
    t0 = time.perf_counter()
    warm_up(a.device)
    a.copy_gbps = copy_bandwidth(a.device)['copy_gbps']
    rep = reporter(
        a.out, environment(a.device, parts=a.parts, copy_gbps=a.copy_gbps, args={k: str(v) for k, v in vars(a).items()})
    )
    log(f'[half] parts {",".join(a.parts)} on {a.device}; out {a.out}/half.*')
    gens = {'kernels': bench_kernels, 'train': bench_train}
    items = [(p, n, lambda p=p, n=n: gens[p](n, a)) for p in ('kernels', 'train') if p in a.parts for n in a.graphs]
    if 'accuracy' in a.parts:
        items += [('accuracy', d, lambda d=d: bench_accuracy(d, a)) for d in a.datasets]
    paths = rep.run(items, a.device, budget_s=a.budget, t0=t0)
    print(open(paths['markdown']).read())
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
