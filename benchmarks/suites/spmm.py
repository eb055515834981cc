"""The ``pyg-tc bench`` suite: pyg_tc's SpMM against ``torch.sparse.mm``
(cuSPARSE on a GPU) and torch_sparse, and a 2-layer training step against
PyG's own layers. Writes ``results.jsonl`` (every line with the environment;
the last one the summary), ``report.md`` and ``speedup.png``; the method is in
``benchmarks/README.md``. On a GPU the full suite, without CUDA a smoke run on
the tiny R-MAT graph. Arguments win over the environment
(``PYG_TC_BENCH_GRAPHS`` / ``_WIDTHS`` / ``_DTYPES`` / ``_TRAIN_GRAPHS``).

Where pyg_tc runs its pure-PyTorch reference path instead of the CUDA kernels
(on the CPU, or a GPU without the kernels), a speed ratio against
``torch.sparse`` or PyG says nothing about the kernels: the suite then
reports times only (no speed-ups, no bandwidth), each repeated until its
median is stable (:func:`~pyg_tc.bench.timing.bench`'s ``target``) or marked
noisy, and plots the times (``spmm_times.png``) instead of ``speedup.png``.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence

import torch

from pyg_tc.bench import graphs as G
from pyg_tc.bench.cli_args import DTYPE_NAMES, ENVIRONMENT, MODELS, CommaList, add_arguments, choice, read_environment
from pyg_tc.bench.graphs import BenchGraph
from pyg_tc.bench.models import Net
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment, fmt, log, ms_col
from pyg_tc.bench.timing import Skip, bench, copy_bandwidth, free, measure, speedups, warm_up

from .common import sparse_baseline, sparse_csr, train_case

DTYPES: Dict[str, torch.dtype] = dict(zip(DTYPE_NAMES, (torch.float32, torch.float16, torch.bfloat16)))
WIDTHS = (32, 64, 128, 256)
IMPLS = {'pyg': 'torch_geometric.nn', 'pyg_tc': 'pyg_tc.nn'}


# -- SpMM cases ------------------------------------------------------------------


def bytes_moved(E: int, N: int, F: int, elem: int) -> Dict[str, int]:
    """``gather``: every edge gathers its source row (an upper bound: ignores
    cache hits) plus col, rowptr and the output write. ``compulsory``: each
    input read once and the output written once (a lower bound)."""
    meta = 4 * E + 4 * (N + 1)
    return {'gather_bytes': meta + E * F * elem + N * F * elem, 'compulsory_bytes': meta + 2 * N * F * elem}


def _rotation_copies(x) -> int:
    """Copies of ``x`` to cycle through so repeated runs do not just hit L2."""
    if not x.is_cuda:
        return 1
    l2 = getattr(torch.cuda.get_device_properties(x.device), 'L2_cache_size', 50 * 2**20)
    return max(1, min(4, math.ceil(4 * l2 / max(x.nbytes, 1))))


@torch.no_grad()
def bench_graph(
    bg: BenchGraph,
    widths: Iterable[int] = WIDTHS,
    dtypes: Iterable[str] = tuple(DTYPES),
    copy_gbps: Optional[float] = None,
    warmup: int = 10,
    rep: int = 50,
    max_time_s: float = 1.0,
    log: Callable[[str], None] = log,
    backend: str = '',
    reference: bool = False,
    target: Optional[float] = None,
    max_total_s: float = 2.0,
) -> Iterator[dict]:
    """One 'build' record, then one 'spmm' record per (width, dtype): pyg_tc,
    ``torch.sparse.mm`` and torch_sparse on the same rotating inputs, per call
    and (GPU) kernel-only, checked against the fp32 baseline. ``reference``
    (pyg_tc runs its reference path): times and errors only, no speed-ups
    or bandwidths; ``target``: time each until stable (:func:`bench`)."""
    from pyg_tc.formats import CSRGraph
    from pyg_tc.ops import spmm_graph, spmm_reference

    dev, N, E = bg.edge_index.device, bg.num_nodes, bg.num_edges
    base = {'graph': bg.name, 'nodes': N, 'edges': E, 'large': bg.large, 'synthetic': bg.synthetic}
    tb = bench(lambda: CSRGraph.from_coo(bg.edge_index[0], bg.edge_index[1], N, N), warmup=1, rep=3, device=dev)
    g = bg.csr()
    st = g.stats()
    yield dict(
        base,
        kind='build',
        **tb.as_dict('build'),
        max_degree=st['max_degree'],
        units=st['units'],
        heavy_rows=st['heavy_rows'],
    )
    bkey = sparse_baseline(dev)[0]
    try:
        import torch_sparse

        adj = torch_sparse.SparseTensor(row=bg.edge_index[1], col=bg.edge_index[0], sparse_sizes=(N, N))
        tsp = lambda x: torch_sparse.matmul(adj, x, reduce='sum')  # noqa: E731
    except ImportError:
        tsp = Skip('torch_sparse is not installed')
    A32 = sparse_csr(g, torch.ones(E, device=dev))

    def reference(x):
        """fp32 baseline on the (rounded) inputs; the pure-PyTorch reference if that fails."""
        try:
            return torch.sparse.mm(A32, x.float())
        except Exception:
            return spmm_reference(g.rowptr, g.col, None, x.float())

    for F in widths:
        x32 = torch.randn(N, F, generator=torch.Generator(device=dev).manual_seed(1000 + F), device=dev)
        fp32_ms = None
        for dname in sorted(dtypes, key=lambda d: d != 'fp32'):  # fp32 first: the half speedups need it
            x = x32.to(DTYPES[dname])
            A = sparse_csr(g, torch.ones(E, dtype=x.dtype, device=dev))
            xs = [x] + [x.clone() for _ in range(_rotation_copies(x) - 1)]
            rec = measure(
                dict(base, kind='spmm', F=F, dtype=dname, backend=backend),
                {'pyg_tc': lambda x: spmm_graph(g, x), bkey: lambda x: torch.sparse.mm(A, x), 'torch_sparse': tsp},
                dev,
                rep=rep,
                warmup=warmup,
                per_call=True,
                kernel_rep=30,
                ref=reference(x),
                inputs=xs,
                max_time_s=max_time_s,
                log=log,
                target=target,
                max_total_s=max_total_s,
            )
            t = rec.get('pyg_tc_ms')
            if t and not reference:
                speedups(rec, 'pyg_tc', (bkey, 'torch_sparse'), 'speedup_vs_{other}')
                speedups(rec, 'pyg_tc', (bkey, 'torch_sparse'), 'kernel_speedup_vs_{other}', '_graph_ms')
                if dname == 'fp32':
                    fp32_ms = t
                elif fp32_ms:
                    rec['speedup_vs_pyg_tc_fp32'] = fp32_ms / t
                rec.update(bytes_moved(E, N, F, x.element_size()))
                for k in ('gather', 'compulsory'):
                    rec[f'gbps_{k}'] = rec[f'{k}_bytes'] / (t * 1e-3) / 1e9
                    if copy_gbps:
                        rec[f'frac_copy_{k}'] = rec[f'gbps_{k}'] / copy_gbps
            yield rec
            xs = x = A = None
        free(dev)


def _geomean(v: List[float]) -> Optional[float]:
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def summarize(records: List[dict], base: str = 'cusparse', ratios: bool = True) -> Dict[str, dict]:
    """Per graph group ('large': synthetic + larger real graphs, the speed
    targets; 'all') and dtype, over F in {32, 64, 128, 256}: geometric mean and
    minimum speedup vs the ``base`` baseline (same dtype; per call and
    kernel-only), geometric mean vs pyg_tc fp32, worst relative error.
    Without ``ratios`` (the reference path): the cases, the worst relative
    error and the number of noisy timings only."""
    cases = [r for r in records if r.get('kind') == 'spmm' and r['F'] in WIDTHS]
    out: Dict[str, dict] = {}
    for group, keep in (('large', lambda r: r['large']), ('all', lambda r: True)):
        for dname in DTYPES:
            rs = [r for r in cases if keep(r) and r['dtype'] == dname]
            get = lambda k: [r[k] for r in rs if k in r]  # noqa: E731
            vs, vk = get(f'speedup_vs_{base}'), get(f'kernel_speedup_vs_{base}')
            if rs and not ratios:
                out[f'{group}/{dname}'] = {
                    'group': group,
                    'dtype': dname,
                    'cases': len(rs),
                    'graphs': sorted({r['graph'] for r in rs}),
                    'max_rel_err': max(get('pyg_tc_rel_err'), default=None),
                    'noisy_timings': sum(v is True for r in rs for k, v in r.items() if k.endswith('_noisy')),
                }
            elif rs:
                out[f'{group}/{dname}'] = {
                    'group': group,
                    'dtype': dname,
                    'cases': len(rs),
                    'graphs': sorted({r['graph'] for r in rs}),
                    f'geomean_vs_{base}': _geomean(vs),
                    f'min_vs_{base}': min(vs, default=None),
                    f'{base}_cases': len(vs),
                    f'kernel_geomean_vs_{base}': _geomean(vk),
                    f'kernel_min_vs_{base}': min(vk, default=None),
                    'geomean_vs_pyg_tc_fp32': _geomean(get('speedup_vs_pyg_tc_fp32')),
                    'max_rel_err': max(get('pyg_tc_rel_err'), default=None),
                }
    return out


# -- training step ---------------------------------------------------------------


def bench_training(
    bg: BenchGraph,
    models=('gcn',),
    steps: int = 10,
    rep: int = 20,
    in_channels: int = 256,
    hidden: int = 64,
    out_channels: int = 41,
    lr: float = 0.01,
    seed: int = 0,
    reference: bool = False,
    target: Optional[float] = None,
    max_total_s: float = 2.0,
) -> List[dict]:
    """Records (kind 'train') for each model kind and implementation: PyG's
    layers and pyg_tc's from identical weights, features and labels; the first
    ``steps`` steps give the loss curve (and warm up), ``rep`` more are timed
    (until stable with ``target``: :func:`bench`). ``reference`` (pyg_tc runs
    its reference path): no speed-up over PyG."""
    dev, dims = bg.edge_index.device, (in_channels, hidden, out_channels)
    gen = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(bg.num_nodes, in_channels, generator=gen, device=dev)
    y = torch.randint(0, out_channels, (bg.num_nodes,), generator=gen, device=dev)
    records: List[dict] = []
    for kind in models:
        torch.manual_seed(seed)
        state = {
            k: v.clone()
            for k, v in Net(importlib.import_module(IMPLS['pyg']), kind, dims, cached=True).state_dict().items()
        }

        def build(lib: str) -> Net:
            net = Net(importlib.import_module(lib), kind, dims, cached=True).to(dev)
            net.load_state_dict(state)
            return net

        ref, tc = (
            train_case(
                dict(
                    kind='train',
                    graph=bg.name,
                    nodes=bg.num_nodes,
                    edges=bg.num_edges,
                    model=kind,
                    impl=impl,
                    dims=list(dims),
                    steps=steps,
                ),
                lambda lib=lib: build(lib),
                x,
                y,
                bg.edge_index,
                steps,
                rep,
                lr=lr,
                target=target,
                max_total_s=max_total_s,
            )
            for impl, lib in IMPLS.items()
        )
        records += [ref, tc]
        if ref['status'] == 'ok' and tc['status'] == 'ok':
            if not reference:
                tc['speedup_vs_pyg'] = ref['step_ms'] / tc['step_ms']
            tc['loss_max_abs_diff_vs_pyg'] = max(abs(a - b) for a, b in zip(ref['losses'], tc['losses']))
            if ref.get('peak_mb'):
                tc['memory_ratio_vs_pyg'] = tc['peak_mb'] / ref['peak_mb']
    return records


# -- report ------------------------------------------------------------------------


def reporter(out: str, env: dict, reference: bool = False) -> Reporter:
    """The suite's outputs: results.jsonl, report.md (summary, SpMM, build,
    training) and speedup.png; with ``reference`` (pyg_tc ran its reference
    path) times without speed-ups, and spmm_times.png instead."""
    bkey, blabel, _ = sparse_baseline(env['device'])
    k = lambda key, spec='', h=None: Col(h or key, key, spec)  # noqa: E731
    graph = [k('graph'), k('nodes', ',', 'N'), k('edges', ',', 'E')]

    def header(env: dict, records: List[dict]) -> List[str]:
        head = [
            f'- GPU: {env["gpu"] or "none"}; torch {env["torch"]} (CUDA {env["torch_cuda"]}), PyG '
            f'{env["torch_geometric"]}, pyg_tc {env["pyg_tc_version"]}; started {env["started"]}',
            f'- pyg_tc backend: {env["backend"]} (kernels {env["kernels"]}'
            + (f': {env["kernels_reason"]}' if env.get('kernels_reason') else '')
            + ')',
            f'- baseline: {env["baseline"]}',
            f'- measured device copy bandwidth (read + write): {env["copy_gbps"]:.0f} GB/s',
        ]
        clock = 'CUDA events' if env['gpu'] else 'time.perf_counter'
        if reference:
            return head + [
                f'- times: median over the repetitions after warm-up ({clock}), repeated until the 95% confidence '
                f'interval of the median is within ±{env["timing_target_ci"]:.0%} of it or '
                f'{env["timing_max_s"]:g} s have passed; "±" is that interval, "noisy" marks a time that did not '
                'get there. All implementations in the same run on the same inputs.',
                '- pyg_tc ran its pure-PyTorch reference path, not the CUDA kernels: these times say nothing about '
                'the kernels, so no speed-up is computed (the speed-ups are measured on a GPU with the kernels).',
            ]
        return head + [
            f'- times: median over the repetitions after warm-up ({clock}); all implementations in the same run on '
            'the same inputs. GB/s: compulsory bytes (col + rowptr + x read once + out written once) and gather '
            'bytes (every edge gathers its source row; an upper bound) over the median time.'
        ]

    if reference:
        summary = Table(
            '## Summary (reference path: accuracy; speed-ups need the CUDA kernels)',
            lambda rs: list(summarize(rs, bkey, ratios=False).values()),
            [
                k('group', h='graphs'),
                k('dtype'),
                k('cases'),
                k('max_rel_err', '.1e', 'max rel err'),
                k('noisy_timings', '', 'noisy timings'),
                Col('graph set', lambda r: ', '.join(r['graphs'])),
            ],
        )
        spmm = Table(
            '## SpMM cases (per call; pyg_tc: reference path)',
            'spmm',
            graph
            + [k('F'), k('dtype')]
            + [
                ms_col('pyg_tc', 'pyg_tc (reference) ms'),
                ms_col(bkey),
                ms_col('torch_sparse'),
                k('pyg_tc_rel_err', '.1e', 'rel err'),
            ],
        )
        train_cols = [k('graph'), k('model'), k('impl'), k('status'), ms_col('step', 'step ms', '.2f')]
    else:
        summary = Table(
            '## Summary (speedups over F in 32, 64, 128, 256)',
            lambda rs: list(summarize(rs, bkey).values()),
            [
                k('group', h='graphs'),
                k('dtype'),
                k('cases'),
                k(f'geomean_vs_{bkey}', '.2f', f'per call: geomean vs {blabel}'),
                k(f'min_vs_{bkey}', '.2f', f'min vs {blabel}'),
                k(f'kernel_geomean_vs_{bkey}', '.2f', 'kernel-only: geomean'),
                k(f'kernel_min_vs_{bkey}', '.2f', 'min'),
                k('geomean_vs_pyg_tc_fp32', '.2f', 'geomean vs pyg_tc fp32'),
                k('max_rel_err', '.1e', 'max rel err'),
                Col('graph set', lambda r: ', '.join(r['graphs'])),
            ],
            note='"large" = synthetic + larger real graphs (the speed targets). Per call: median time of one eager '
            'call from Python (what a user sees; includes host overhead). Kernel-only: the same calls captured '
            'in a CUDA graph and replayed (no host overhead), for both implementations.',
        )
        spmm = Table(
            '## SpMM cases',
            'spmm',
            graph
            + [k('F'), k('dtype')]
            + [ms_col(i) for i in ('pyg_tc', bkey, 'torch_sparse')]
            + [
                k(f'speedup_vs_{bkey}', '.2f', f'x {blabel}'),
                k(f'kernel_speedup_vs_{bkey}', '.2f', 'kernel-only x'),
                k('speedup_vs_pyg_tc_fp32', '.2f', 'x pyg_tc fp32'),
                k('gbps_compulsory', '.0f', 'GB/s compulsory'),
                k('gbps_gather', '.0f', 'GB/s gather'),
                k('frac_copy_gather', '.2f', 'gather / copy BW'),
                k('pyg_tc_rel_err', '.1e', 'rel err'),
                k('pyg_tc_spread', '.2f', 'spread'),
            ],
        )
        train_cols = [
            k('graph'),
            k('model'),
            k('impl'),
            k('status'),
            k('step_ms', '.2f', 'step ms'),
            k('speedup_vs_pyg', '.2f', 'x PyG'),
        ]
    build = Table(
        '## Graph build (CSRGraph.from_coo, both directions + schedules)',
        'build',
        graph + [k('max_degree', ',', 'max degree'), k('build_ms', '.2f', 'build ms')],
    )
    train = Table(
        '## Training step (forward + backward + Adam), 2 layers',
        'train',
        train_cols
        + [
            k('peak_mb', '.0f', 'peak MiB'),
            k('resident_mb', '.0f', 'resident MiB'),
            k('extra_mb', '.0f', 'peak - resident MiB'),
            k('loss_first', '.4f', 'loss[0]'),
            k('loss_last', '.4f', 'loss[-1]'),
            k('loss_max_abs_diff_vs_pyg', '.1e', 'max abs loss diff vs PyG'),
        ],
    )
    if reference:
        where = f'on {env["gpu"]}' if env['gpu'] else 'on the CPU'
        figure = Figure(
            'spmm_times.png',
            [
                Panel(
                    lambda rs, d=d: _time_rows(rs, d, bkey, blabel),
                    'case',
                    'ms',
                    'impl',
                    yerr='ci_ms',
                    flag='noisy',
                    logy=10,
                    ylabel=f'{d}: ms per call',
                )
                for d in DTYPES
            ],
            title=f'SpMM time per call {where}: pyg_tc runs its pure-PyTorch reference path, not the '
            'CUDA kernels (bars: median, whiskers: its 95% confidence interval, hatched: noisy)',
        )
    else:
        panels = [
            Panel(
                lambda rs, d=d: [r for r in rs if r.get('kind') == 'spmm' and r['dtype'] == d],
                'graph',
                f'speedup_vs_{bkey}',
                'F',
                label='F={}',
                hline=1.0,
                ylabel=f'{d}: x {blabel}',
            )
            for d in DTYPES
        ]
        figure = Figure(
            'speedup.png',
            panels,
            title=f'pyg_tc SpMM speedup over {blabel} (same dtype), {env["gpu"] or "CPU (reference path)"}',
        )
    return Reporter(
        out,
        'results.jsonl',
        'report.md',
        'pyg_tc benchmark',
        env,
        'inline',
        [summary, spmm, build, train],
        [figure],
        header,
        lambda recs: summarize(recs, bkey, ratios=not reference),
    )


def _time_rows(records: List[dict], dtype: str, bkey: str, blabel: str) -> List[dict]:
    """One plot row per (SpMM case of ``dtype``, implementation with a time)."""
    names = {'pyg_tc': 'pyg_tc (reference path)', bkey: blabel, 'torch_sparse': 'torch_sparse'}
    return [
        dict(
            case=f'{r["graph"]} F={r["F"]}',
            impl=label,
            ms=r[f'{i}_ms'],
            noisy=r.get(f'{i}_noisy', False),
            ci_ms=r[f'{i}_ms'] * r[f'{i}_ci'] if math.isfinite(r.get(f'{i}_ci', math.inf)) else None,
        )
        for r in records
        if r.get('kind') == 'spmm' and r['dtype'] == dtype
        for i, label in names.items()
        if r.get(f'{i}_ms') is not None
    ]


# -- configuration and run ------------------------------------------------------------


@dataclass
class Config:
    graphs: List[str]
    widths: List[int]
    dtypes: List[str]
    out: str = 'bench_out'
    training: bool = True
    train_graphs: List[str] = field(default_factory=list)
    train_models: List[str] = field(default_factory=lambda: ['gcn'])
    train_steps: int = 10
    train_rep: int = 20
    warmup: int = 10
    rep: int = 50
    max_time_s: float = 1.0
    budget_s: Optional[float] = None
    quick: bool = False
    device: Optional[str] = None  # None: the GPU when there is one
    #: On the reference path each timing repeats until the 95% CI of its median
    #: is within +-target_ci, for at most max_total_s seconds (else: noisy)
    target_ci: float = 0.05
    max_total_s: float = 2.0


def _listed(value, check: Callable[[str], list]) -> Optional[list]:
    """A comma string or a list through the command line's ``check``
    (:mod:`.cli_args`); None when empty; ValueError with one line when bad."""
    if value is None or not isinstance(value, str) and not list(value):
        return None
    try:
        return check(value if isinstance(value, str) else ','.join(str(v) for v in value)) or None
    except argparse.ArgumentTypeError as e:
        raise ValueError(str(e)) from None


def make_config(
    graphs=None,
    widths=None,
    dtypes=None,
    out: str = 'bench_out',
    training: bool = True,
    quick: bool = False,
    train_graphs=None,
    train_models=None,
    budget_s: Optional[float] = None,
    cuda: Optional[bool] = None,
) -> Config:
    """Arguments (comma strings or lists) win over the environment
    (``PYG_TC_BENCH_*``), the environment over the defaults for this machine
    (GPU or CPU, quick or full); ``cuda`` picks the device. A bad value:
    ValueError."""
    device = None if cuda is None else 'cuda' if cuda else 'cpu'
    opt = lambda v, dest: _listed(
        v if v is not None else os.environ.get(ENVIRONMENT[dest][0]),  # noqa: E731
        ENVIRONMENT[dest][1],
    )
    cuda = torch.cuda.is_available() if cuda is None else cuda
    fast = quick or not cuda
    dg = (G.QUICK_GPU_SUITE if quick else G.GPU_SUITE) if cuda else G.CPU_SUITE
    models = _listed(train_models, CommaList(choice(MODELS, 'model'), 'models')) or ['gcn']
    return Config(
        graphs=opt(graphs, 'graphs') or list(dg),
        widths=opt(widths, 'widths') or ([32, 128] if quick and cuda else [32, 64] if quick else list(WIDTHS)),
        dtypes=opt(dtypes, 'dtypes') or list(DTYPES),
        out=out,
        training=training,
        train_models=models,
        train_graphs=opt(train_graphs, 'train_graphs')
        or (['tiny'] if not cuda else ['arxiv'] if quick else ['reddit']),
        train_steps=5 if fast else 10,
        train_rep=5 if fast else 20,
        warmup=3 if fast else 10,
        rep=10 if fast else 50,
        max_time_s=0.5 if fast else 1.0,
        budget_s=budget_s,
        quick=quick,
        device=device,
        max_total_s=1.0 if quick else 2.0,
    )


def run(cfg: Config) -> Dict[str, str]:
    """Run the benchmarks of ``cfg``; returns the paths of the written outputs.
    Where pyg_tc runs its reference path (the CPU, or no kernels), times only,
    each repeated until stable or marked noisy (module docstring)."""
    import pyg_tc

    t0 = time.perf_counter()
    log('[info] loading pyg_tc (builds the CUDA kernels on first use on a GPU) ...')
    info = pyg_tc.info()
    log(
        f'[info] pyg_tc {info["pyg_tc"]}, torch {info["torch"]}, PyG {info["torch_geometric"]}, GPU: '
        f'{(info["gpu"] or {}).get("name", "none")}, backend: {info["backend"]}'
        + (f' (kernel build {info["build_seconds"]:.0f} s)' if info.get('build_seconds') else '')
    )
    dev = torch.device(cfg.device) if cfg.device else G.default_device()
    reference = info['kernels'] != 'loaded' or dev.type != 'cuda'
    backend = 'pure-PyTorch reference' if reference else info['backend']
    stable = dict(target=cfg.target_ci, max_total_s=cfg.max_total_s) if reference else {}
    warm_up(dev)
    copy = copy_bandwidth(dev)['copy_gbps']
    log(f'[info] copy bandwidth (read + write) on {dev}: {copy:.0f} GB/s')
    extra = dict(timing_target_ci=cfg.target_ci, timing_max_s=cfg.max_total_s) if reference else {}
    rep = reporter(
        cfg.out,
        environment(
            dev,
            kernels=info['kernels'],
            kernels_reason=info.get('kernels_reason'),
            backend=backend,
            baseline=sparse_baseline(dev)[2],
            copy_gbps=copy,
            **extra,
        ),
        reference,
    )
    if reference:
        rep.note(
            f'CUDA kernels not used ({info.get("kernels_reason") or "device " + dev.type}): pyg_tc runs the '
            'pure-PyTorch reference path, so its timings are NOT kernel timings and no speed-up is computed'
            + ('' if dev.type == 'cuda' else '; this is a CPU smoke run on small graphs')
        )
    log(
        f'[info] graphs {cfg.graphs}, widths {cfg.widths}, dtypes {cfg.dtypes}, '
        f'training {cfg.train_graphs if cfg.training else "off"} {cfg.train_models}, out {cfg.out}'
    )

    def spmm(name: str) -> Iterator[dict]:
        t = time.perf_counter()
        bg = G.load_graph(name, dev)
        log(
            f'[graph] {name}: {bg.num_nodes:,} nodes, {bg.num_edges:,} edges ({bg.source}), '
            f'loaded in {time.perf_counter() - t:.1f} s'
        )
        return bench_graph(
            bg, cfg.widths, cfg.dtypes, copy, cfg.warmup, cfg.rep, cfg.max_time_s, log, backend, reference, **stable
        )

    paths = rep.run(
        [('spmm', n, lambda n=n: spmm(n)) for n in cfg.graphs]
        + [
            (
                'training',
                n,
                lambda n=n: bench_training(
                    G.load_graph(n, dev),
                    cfg.train_models,
                    cfg.train_steps,
                    cfg.train_rep,
                    reference=reference,
                    **stable,
                ),
            )
            for n in (cfg.train_graphs if cfg.training else ())
        ],
        dev,
        cfg.budget_s,
        t0,
    )
    for key, v in summarize(rep.records, sparse_baseline(dev)[0], ratios=not reference).items():
        spec = lambda k, x: '.1e' if 'err' in k else '.2f' if isinstance(x, float) else ''  # noqa: E731
        log(
            f'[summary] {key:12s} '
            + ', '.join(f'{k} {fmt(x, spec(k, x))}' for k, x in v.items() if k not in ('group', 'dtype', 'graphs'))
        )
    return paths


def config_from_args(a) -> Config:
    """The Config of parsed :func:`~pyg_tc.bench.cli_args.add_arguments` options."""
    return make_config(
        a.graphs, a.widths, a.dtypes, a.out, a.training, a.quick, a.train_graphs, a.train_models, a.budget
    )


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """``python -m benchmarks.suites.spmm [options]``: the same as ``pyg-tc bench``."""
    p = argparse.ArgumentParser(prog=prog or 'pyg-tc bench', description='pyg_tc benchmark suite')
    add_arguments(p)
    run(config_from_args(read_environment(p.parse_args(argv), p)))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
