"""SpMM kernel benchmark: pyg_tc vs cuSPARSE (and torch_sparse when present).

Per graph: the CSRGraph is built once (and its build timed); per feature
width and dtype, every implementation runs on the same random features in the
same process, is checked against the fp32 cuSPARSE result, and is timed with
:func:`~pyg_tc.bench.timing.bench`. See ``benchmarks/README.md`` for the
byte counts.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable, Dict, Iterable, Iterator, List, Optional

import torch
from torch import Tensor

from .graphs import BenchGraph
from .timing import bench, bench_graph_replay

DTYPES: Dict[str, torch.dtype] = {'fp32': torch.float32, 'fp16': torch.float16,
                                  'bf16': torch.bfloat16}
WIDTHS = (32, 64, 128, 256)

warnings.filterwarnings('ignore', message='.*[Ss]parse CSR tensor support is in beta.*')
warnings.filterwarnings('ignore', message='.*[Ss]parse invariant checks.*')


def _short(e: BaseException) -> str:
    if isinstance(e, torch.OutOfMemoryError):
        return 'oom'
    return f'{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ""}'


def _free() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def torch_csr(g, dtype: torch.dtype) -> Tensor:
    """torch.sparse CSR of the same adjacency (rows = targets, int32 indices
    shared with ``g``, values = ones in ``dtype``)."""
    return torch.sparse_csr_tensor(g.rowptr, g.col, torch.ones(g.num_edges, dtype=dtype, device=g.device),
                                   size=(g.num_rows, g.num_cols), check_invariants=False)


def bytes_moved(E: int, N: int, F: int, elem: int) -> Dict[str, int]:
    """``gather``: every edge gathers its source row (an upper bound: ignores
    cache hits) plus col, rowptr and the output write. ``compulsory``: each
    input read once and the output written once (a lower bound)."""
    meta = 4 * E + 4 * (N + 1)
    return {'gather_bytes': meta + E * F * elem + N * F * elem,
            'compulsory_bytes': meta + 2 * N * F * elem}


def _errors(out: Tensor, ref: Tensor) -> Dict[str, float]:
    d = out.float() - ref
    if not bool(torch.isfinite(d).all()):
        return {'rel_err': math.inf, 'rel_err_fro': math.inf}
    return {'rel_err': float(d.abs().max() / ref.abs().max().clamp(min=1e-30)),
            'rel_err_fro': float(d.norm() / ref.norm().clamp(min=1e-30))}


def _rotating(fn: Callable[[Tensor], Tensor], xs: List[Tensor]) -> Callable[[], Tensor]:
    state = [0]

    def call():
        state[0] = (state[0] + 1) % len(xs)
        return fn(xs[state[0]])
    return call


def _rotation_copies(x: Tensor) -> int:
    """Copies of ``x`` to cycle through so repeated runs do not just hit L2."""
    if not x.is_cuda:
        return 1
    l2 = getattr(torch.cuda.get_device_properties(x.device), 'L2_cache_size', 50 * 2**20)
    return max(1, min(4, math.ceil(4 * l2 / max(x.nbytes, 1))))


def bench_graph(bg: BenchGraph, widths: Iterable[int] = WIDTHS, dtypes: Iterable[str] = tuple(DTYPES),
                copy_gbps: Optional[float] = None, warmup: int = 10, rep: int = 50,
                max_time_s: float = 1.0, log: Callable[[str], None] = print,
                backend: str = '') -> Iterator[dict]:
    """All (width, dtype) cases of one graph, as a generator of records (so
    each can be saved as soon as it is measured): one 'build' record, then one
    'spmm' record per case."""
    from ..formats import CSRGraph
    from ..ops import spmm_graph, spmm_reference

    dev = bg.edge_index.device
    N, E = bg.num_nodes, bg.num_edges
    src, dst = bg.edge_index[0], bg.edge_index[1]
    base = {'graph': bg.name, 'nodes': N, 'edges': E, 'large': bg.large, 'synthetic': bg.synthetic}
    tb = bench(lambda: CSRGraph.from_coo(src, dst, N, N), warmup=1, rep=3, device=dev)
    g = CSRGraph.from_coo(src, dst, N, N)
    st = g.stats()
    log(f'[build] {bg.name}: N={N:,} E={E:,} max_deg={st["max_degree"]:,} '
        f'CSRGraph.from_coo {tb.median_ms:.2f} ms')
    yield dict(base, kind='build', **tb.as_dict('build'), max_degree=st['max_degree'],
               units=st['units'], heavy_rows=st['heavy_rows'])

    csr: Dict[torch.dtype, Tensor] = {}  # torch CSR per dtype, built on first use
    try:
        import torch_sparse
        adj = torch_sparse.SparseTensor(row=dst, col=src, sparse_sizes=(N, N))
    except ImportError:
        adj = None
    names = ['pyg_tc', 'cusparse'] + (['torch_sparse'] if adj is not None else [])

    def impl(name: str, dt: torch.dtype) -> Callable[[Tensor], Tensor]:
        if name == 'pyg_tc':
            return lambda x: spmm_graph(g, x)
        if name == 'cusparse':
            A = csr[dt] = csr[dt] if dt in csr else torch_csr(g, dt)
            return lambda x: torch.sparse.mm(A, x)
        return lambda x: torch_sparse.matmul(adj, x, reduce='sum')

    def reference(x: Tensor) -> Tensor:
        """fp32 cuSPARSE on the (rounded) inputs; the pure-PyTorch reference if that fails."""
        try:
            return impl('cusparse', torch.float32)(x.float())
        except Exception:
            return spmm_reference(g.rowptr, g.col, None, x.float())

    dnames = sorted(dtypes, key=lambda d: d != 'fp32')  # fp32 first: the half speedups need it
    with torch.no_grad():
        for F in widths:
            gen = torch.Generator(device=dev)
            gen.manual_seed(1000 + F)
            x32 = torch.randn(N, F, generator=gen, device=dev)
            pyg_tc_fp32 = None
            for dname in dnames:
                x = x32.to(DTYPES[dname])
                ref = reference(x)
                xs = [x] + [x.clone() for _ in range(_rotation_copies(x) - 1)]
                rec = dict(base, kind='spmm', F=F, dtype=dname, backend=backend)
                for name in names:
                    try:
                        fn = impl(name, x.dtype)
                        out = fn(x)
                        err = _errors(out, ref)
                        del out
                        rec[f'{name}_rel_err'] = err['rel_err']
                        rec[f'{name}_rel_err_fro'] = err['rel_err_fro']
                        t = bench(_rotating(fn, xs), warmup, rep, device=dev, max_time_s=max_time_s)
                        rec.update(t.as_dict(name))
                    except Exception as e:  # unsupported dtype, OOM, ...
                        rec[f'{name}_error'] = _short(e)
                        _free()
                        continue
                    if dev.type == 'cuda':  # kernel-only time, same inputs
                        try:
                            tg = bench_graph_replay([lambda x=x_: fn(x) for x_ in xs], device=dev)
                            rec[f'{name}_graph_ms'] = tg.median_ms
                        except Exception as e:
                            rec[f'{name}_graph_error'] = _short(e)
                            _free()
                t = rec.get('pyg_tc_ms')
                if t:
                    for other in ('cusparse', 'torch_sparse'):
                        if rec.get(f'{other}_ms'):
                            rec[f'speedup_vs_{other}'] = rec[f'{other}_ms'] / t
                        if rec.get(f'{other}_graph_ms') and rec.get('pyg_tc_graph_ms'):
                            rec[f'kernel_speedup_vs_{other}'] = (rec[f'{other}_graph_ms']
                                                                 / rec['pyg_tc_graph_ms'])
                    if dname == 'fp32':
                        pyg_tc_fp32 = t
                    elif pyg_tc_fp32:
                        rec['speedup_vs_pyg_tc_fp32'] = pyg_tc_fp32 / t
                    nb = bytes_moved(E, N, F, x.element_size())
                    rec.update(nb)
                    for k in ('gather', 'compulsory'):
                        gbps = nb[f'{k}_bytes'] / (t * 1e-3) / 1e9
                        rec[f'gbps_{k}'] = gbps
                        if copy_gbps:
                            rec[f'frac_copy_{k}'] = gbps / copy_gbps
                log(_line(rec))
                yield rec
                del xs, x, ref
            del x32
            _free()
    del csr, adj, g
    _free()


def _fmt(v, spec: str = '.3f') -> str:
    return '-' if v is None else format(v, spec)


def _line(r: dict) -> str:
    parts = []
    for name in ('pyg_tc', 'cusparse', 'torch_sparse'):
        if f'{name}_ms' in r:
            parts.append(f'{name} {r[name + "_ms"]:.4f} ms')
        elif f'{name}_error' in r:
            parts.append(f'{name} [{r[name + "_error"]}]')
    if 'speedup_vs_cusparse' in r:
        parts.append(f'x{r["speedup_vs_cusparse"]:.2f} vs baseline')
    if 'kernel_speedup_vs_cusparse' in r:
        parts.append(f'kernel-only {r["pyg_tc_graph_ms"]:.4f}/{r["cusparse_graph_ms"]:.4f} ms '
                     f'x{r["kernel_speedup_vs_cusparse"]:.2f}')
    if 'speedup_vs_pyg_tc_fp32' in r:
        parts.append(f'x{r["speedup_vs_pyg_tc_fp32"]:.2f} vs fp32')
    if 'pyg_tc_rel_err' in r:
        parts.append(f'err {r["pyg_tc_rel_err"]:.1e}')
    if 'gbps_compulsory' in r:
        parts.append(f'{r["gbps_compulsory"]:.0f}/{r["gbps_gather"]:.0f} GB/s (compulsory/gather)')
    return f'[spmm] {r["graph"]} F={r["F"]} {r["dtype"]}: ' + ' | '.join(parts)


def _geomean(v: List[float]) -> Optional[float]:
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def summarize(records: List[dict]) -> Dict[str, dict]:
    """Per graph group ('large': synthetic + larger real graphs, the speed
    targets; 'all') and dtype, over F in {32, 64, 128, 256}: geometric mean and
    minimum speedup vs cuSPARSE (same dtype), geometric mean vs pyg_tc fp32,
    worst relative error."""
    cases = [r for r in records if r.get('kind') == 'spmm' and r['F'] in WIDTHS]
    out: Dict[str, dict] = {}
    for group, keep in (('large', lambda r: r['large']), ('all', lambda r: True)):
        for dname in DTYPES:
            rs = [r for r in cases if keep(r) and r['dtype'] == dname]
            if not rs:
                continue
            vs = [r['speedup_vs_cusparse'] for r in rs if 'speedup_vs_cusparse' in r]
            vk = [r['kernel_speedup_vs_cusparse'] for r in rs if 'kernel_speedup_vs_cusparse' in r]
            vf = [r['speedup_vs_pyg_tc_fp32'] for r in rs if 'speedup_vs_pyg_tc_fp32' in r]
            errs = [r['pyg_tc_rel_err'] for r in rs if 'pyg_tc_rel_err' in r]
            out[f'{group}/{dname}'] = {
                'group': group, 'dtype': dname, 'cases': len(rs),
                'graphs': sorted({r['graph'] for r in rs}),
                'geomean_vs_cusparse': _geomean(vs), 'min_vs_cusparse': min(vs) if vs else None,
                'cusparse_cases': len(vs),
                'kernel_geomean_vs_cusparse': _geomean(vk),
                'kernel_min_vs_cusparse': min(vk) if vk else None,
                'geomean_vs_pyg_tc_fp32': _geomean(vf),
                'max_rel_err': max(errs) if errs else None,
            }
    return out
