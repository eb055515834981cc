"""fuseGNN suite: pyg_tc's fused graph attention (``pyg_tc.nn.GATConv`` /
``GATv2Conv`` on :mod:`pyg_tc.ops.attn`) against PyG's layers and against an
unfused composition of pyg_tc ops, with the peak GPU memory of every case.

Sections (``--part``, a comma list of section names or ``bench`` / ``all``):

1. ``layer``: one layer forward + backward (and forward alone, no grad):
   ``GATConv(256, 8, heads=8)``, ``GATConv(256, 64, heads=1)``,
   ``GATv2Conv(256, 8, heads=8)``; PyG vs pyg_tc vs "unfused" (below), the
   same weights, ``x [N, 256]`` with ``requires_grad`` (a hidden layer) and a
   fixed random output gradient. pyg_tc's first call on a fresh
   ``edge_index`` (it builds the graph format) is timed apart; the unfused
   graph (self loops added once, CSR built once) is built outside the timing
   and its build time reported. Per graph a ``build`` record: pyg_tc's
   ``CSRGraph`` build and the unfused graph's build.
2. ``fused``: the fused attention forward op alone (``gat_attention`` /
   ``gatv2_attention``, no grad) against ``spmm_graph(g, x2d)`` of width
   ``H * C`` on the same graph (self loops included), also with edge weights;
   the ratio fused / SpMM (kernel-only on a GPU; target within 2.5x).
3. ``train``: a 2-layer GAT training step (forward + backward + Adam) as
   PyG's ``examples/gat.py`` (dropout 0.6 on features and attention, ELU,
   8 heads x 8 hidden, then 1 head x classes, ``concat=False``; lr 0.005,
   weight decay 5e-4) on random features / labels of the dataset's shape.
4. ``table3``: fuseGNN's Table 3: a single GCN / GAT (1 head) layer, training
   step (forward + backward) with hidden 16, 64, 512 on Cora, PubMed (its
   topology from the incomplete Planetoid files; CiteSeer if those are
   missing) and the reddit-shaped graph, input width of the real dataset.
5. ``accuracy``: the ``examples/gat.py`` model and hyper-parameters (200
   epochs, test metric at the first best-validation epoch) on Cora and
   CiteSeer (public split, ``NormalizeFeatures``, 10 seeds) and Tolokers
   (ROC-AUC, its splits ``seed % 10``, 5 seeds), PyG vs pyg_tc from the same
   initial weights per seed: mean +- std, the difference (target within 0.5
   points) and the epoch time.

"Unfused" is what a user can write with pyg_tc's ops without the fused op:
``h = lin(x).view(N, H, C)``, ``a_src`` / ``a_dst`` as PyG,
``logits = leaky_relu(a_src[col] + a_dst[row])`` as ``[E, H]`` in the
graph's CSR order (``row`` / ``col`` cached on the graph; GATv2:
``(leaky_relu(x_l[col] + x_r[row]) * att).sum(-1)``, an ``E x H x C``
tensor), ``pyg_tc.ops.edge_softmax``, attention dropout, then one
``spmm_graph(g, h[:, k].contiguous(), alpha[:, k].contiguous())`` per head
(pyg_tc's SpMM takes one value per edge, so H heads are H SpMM calls).

``python -m benchmarks.suites.gat --out DIR [--part bench|accuracy|all|layer,fused,...]
[--graphs ...] [--budget SECONDS] [--quick | --full] [--device cpu]`` writes
``DIR/<name>.jsonl`` (the first record the environment), ``<name>.md`` and
``<name>.png``; ``<name>`` is ``gat`` (``gat_accuracy`` for ``--part
accuracy``). Graphs run smallest first (every section on one graph, then
the next), so ``--budget`` (default 360 s: no item starts later) cuts the
largest. On the CPU ``--quick`` is the default ('tiny' graph, a few
repetitions, 3 epochs on Cora; under a minute). Times: median of the
repetitions after warm-up (CUDA events;
``time.perf_counter`` on the CPU, where every pyg_tc op runs its PyTorch
reference: a code-path check, not a measurement). Memory:
``torch.cuda.max_memory_allocated`` after a reset, per case (absolute; and
the part above what was allocated when the case started). An out-of-memory
case is reported as OOM (then ``torch.cuda.empty_cache()``).
"""

from __future__ import annotations

import argparse
import importlib
import math
import pickle
import statistics
import time
from types import SimpleNamespace
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as Fn
import torch_geometric.nn as pyg_nn

from torch import Tensor

from pyg_tc.formats.carrier import format_bytes
from pyg_tc.bench.graphs import ALL_NAMES, BenchGraph, data_dir, load_graph
from pyg_tc.bench.models import Net
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, Text, environment, fmt, log
from pyg_tc.bench.timing import bench, free, is_cuda, kernel_time, short_error, track_memory, warm_up

SECTIONS = ('layer', 'fused', 'train', 'table3', 'accuracy')
BENCH = ('layer', 'fused', 'train', 'table3')
MIB = 2.0**20
IMPLS = ('pyg', 'unfused', 'pyg_tc')  # every time / memory column in this order
LAYER_GRAPHS = ['cora', 'citeseer', 'pubmed', 'tolokers', 'arxiv', 'reddit', 'products']
TRAIN_GRAPHS = ['cora', 'citeseer', 'tolokers', 'arxiv', 'reddit', 'products']
TABLE3_GRAPHS = ['cora', 'pubmed', 'reddit']
ACC_DATASETS = {'cora': 10, 'citeseer': 10, 'tolokers': 5}  # dataset -> default seeds
# (label, conv, heads, channels) of section 1; in_channels = LAYER_IN
LAYERS = [('GAT 8x8', 'gat', 8, 8), ('GAT 1x64', 'gat', 1, 64), ('GATv2 8x8', 'gatv2', 8, 8)]
LAYER_IN = 256
FUSED_SHAPES = [(8, 8), (1, 64)]
TABLE3_HIDDEN = [16, 64, 512]
# graph -> (input features, classes) of the real dataset it is (shaped like)
SHAPES: Dict[str, Tuple[int, int]] = {
    'arxiv': (128, 40),
    'reddit': (602, 41),
    'products': (100, 47),
    'cora': (1433, 7),
    'citeseer': (3703, 6),
    'pubmed': (500, 3),
    'tolokers': (10, 2),
    'proteins': (3, 2),
    'tiny': (64, 8),
}
# run order: small graphs first, so a spent budget cuts the big ones
SIZE_ORDER = [
    'tiny',
    'cora',
    'citeseer',
    'pubmed',
    'proteins',
    'tolokers',
    'arxiv',
    'blogcatalog',
    'cornell5',
    'reddit',
    'products',
]
BIG_EDGES = 5_000_000  # graphs above this get the --big-* repetitions
FUSED_TARGET = 2.5
ACC_TARGET = 0.5
GAT_LR, GAT_WD, GAT_DROPOUT, GAT_EPOCHS = 0.005, 5e-4, 0.6, 200


# -- graphs ----------------------------------------------------------------------


def pubmed_graph(device) -> BenchGraph:
    """PubMed's topology (19,717 nodes, 88,648 directed edges, as PyG's
    Planetoid) from the incomplete Planetoid files (``ind.pubmed.graph``;
    their features are incomplete, so benchmarks use random ones)."""
    from torch_geometric.utils import remove_self_loops, to_undirected

    p = data_dir() / 'planetoid_incomplete' / 'PubMed' / 'raw' / 'ind.pubmed.graph'
    if not p.is_file():
        raise FileNotFoundError(f'{p} not found (PubMed topology)')
    with open(p, 'rb') as f:
        adj = pickle.load(f, encoding='latin1')
    src = torch.tensor([u for u, vs in adj.items() for _ in vs], dtype=torch.long)
    dst = torch.tensor([v for vs in adj.values() for v in vs], dtype=torch.long)
    N = max(int(torch.maximum(src.max(), dst.max())) + 1, len(adj))
    ei = remove_self_loops(to_undirected(torch.stack([src, dst]), num_nodes=N))[0]
    return BenchGraph(
        'pubmed',
        ei.to(device).contiguous(),
        N,
        False,
        False,
        'Planetoid PubMed topology (ind.pubmed.graph, undirected, no self loops)',
    )


KNOWN = list(dict.fromkeys(ALL_NAMES + ['pubmed']))


def graph_names(spec: Optional[str], default: Sequence[str]) -> List[str]:
    """``'a,b'`` -> names (checked); None / empty -> ``default``."""
    if not spec:
        return list(default)
    names = [t.strip().lower() for t in spec.split(',') if t.strip()]
    bad = [n for n in names if n.partition('@')[0] not in KNOWN]
    if bad:
        raise ValueError(f'unknown graph(s) {bad}; known: {", ".join(KNOWN)}')
    return list(dict.fromkeys(names))


class GraphCase:
    """One loaded graph and what the sections share on it: the unfused
    graph (self loops added once, CSR built once, its build time)."""

    def __init__(self, name: str, device):
        self.name, self.device = name, torch.device(device)
        self.bg = pubmed_graph(self.device) if name == 'pubmed' else load_graph(name, self.device)
        self.N, self.E = self.bg.num_nodes, self.bg.num_edges
        self.features, self.classes = SHAPES.get(name.partition('@')[0], (128, 16))
        self._looped = None
        self.loops_build_ms: Optional[float] = None

    def looped(self):
        """The unfused graph: ``edge_index`` without its self loops plus one
        loop per node (as PyG's GATConv), as a ``CSRGraph`` (built once, timed)."""
        if self._looped is None:
            from torch_geometric.utils import add_self_loops, remove_self_loops

            from pyg_tc.formats import CSRGraph

            def build():
                ei = add_self_loops(remove_self_loops(self.bg.edge_index)[0], num_nodes=self.N)[0]
                return CSRGraph.from_coo(ei[0], ei[1], self.N, self.N)

            self.loops_build_ms, self._looped = wall(build, self.device)
        return self._looped

    def base(self) -> dict:
        """The record fields naming the graph."""
        return dict(graph=self.name, nodes=self.N, edges=self.E, synthetic=self.bg.synthetic)

    def fresh_edges(self):
        """A copy of ``edge_index`` without any attached format (pyg_tc builds its own on first use)."""
        return self.bg.edge_index.clone()


_CACHE: Dict[str, GraphCase] = {}


def graph_case(name: str, device) -> GraphCase:
    """The loaded graph ``name`` (one graph kept at a time)."""
    if name not in _CACHE:
        _CACHE.clear()
        free(device)
        _CACHE[name] = GraphCase(name, device)
    return _CACHE[name]


# -- the unfused composition ---------------------------------------------------------


def _row_col(g):
    """(target, source) of every CSR edge as int64, cached on the graph (part of the format)."""
    return g.cache.memo('bench_gat_row_col', lambda: (g.row().long(), g.col.long()))


def _per_head_spmm(g, h, alpha):
    """``out[i, k] = sum_e alpha[e, k] h[j, k]``: one pyg_tc SpMM per head."""
    from pyg_tc.ops import spmm_graph

    return torch.stack([spmm_graph(g, h[:, k].contiguous(), alpha[:, k].contiguous()) for k in range(h.size(1))], 1)


class UnfusedGATConv(pyg_nn.GATConv):
    """PyG's GATConv parameters, forward composed of pyg_tc ops (module doc);
    takes the looped ``CSRGraph`` as its adjacency."""

    def forward(self, x, g, *args, **kwargs):
        """Unfused GAT on the looped CSR graph ``g``: ``[N, heads * out]``."""
        from pyg_tc.ops import edge_softmax

        H, C = self.heads, self.out_channels
        h = self.lin(x).view(-1, H, C)
        a_src, a_dst = (h * self.att_src).sum(-1), (h * self.att_dst).sum(-1)
        row, col = _row_col(g)
        logits = Fn.leaky_relu(a_src.index_select(0, col) + a_dst.index_select(0, row), self.negative_slope)
        alpha = Fn.dropout(edge_softmax(g, logits), self.dropout, self.training)
        out = _per_head_spmm(g, h, alpha)
        out = out.reshape(-1, H * C) if self.concat else out.mean(1)
        return out + self.bias if self.bias is not None else out


class UnfusedGATv2Conv(pyg_nn.GATv2Conv):
    """PyG's GATv2Conv parameters (``share_weights=False``), forward composed
    of pyg_tc ops; the logits need an ``E x H x C`` tensor."""

    def forward(self, x, g, *args, **kwargs):
        """Unfused GATv2 on the looped CSR graph ``g``: ``[N, heads * out]``."""
        from pyg_tc.ops import edge_softmax

        H, C = self.heads, self.out_channels
        xl, xr = self.lin_l(x).view(-1, H, C), self.lin_r(x).view(-1, H, C)
        row, col = _row_col(g)
        z = Fn.leaky_relu(xl.index_select(0, col) + xr.index_select(0, row), self.negative_slope)
        alpha = Fn.dropout(edge_softmax(g, (z * self.att).sum(-1)), self.dropout, self.training)
        del z
        out = _per_head_spmm(g, xl, alpha)
        out = out.reshape(-1, H * C) if self.concat else out.mean(1)
        return out + self.bias if self.bias is not None else out


UNFUSED = {'GATConv': UnfusedGATConv, 'GATv2Conv': UnfusedGATv2Conv}


def layer_class(impl: str, cls: str):
    """``cls`` ('GATConv', 'GATv2Conv', 'GCNConv') of ``impl``; raises
    ImportError when pyg_tc does not have it (yet)."""
    if impl == 'pyg':
        return getattr(pyg_nn, cls)
    if impl == 'unfused':
        return UNFUSED[cls]
    mod = importlib.import_module('pyg_tc.nn')
    if not hasattr(mod, cls):
        raise ImportError(f'pyg_tc.nn.{cls} is not available')
    return getattr(mod, cls)


# -- timing helpers -------------------------------------------------------------------


def wall(fn: Callable, device) -> Tuple[float, object]:
    """(ms, result) of one call, the device synchronised before and after."""
    sync = torch.cuda.synchronize if is_cuda(device) else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return (time.perf_counter() - t0) * 1e3, out


def _fail(rec: dict, name: str, e: BaseException) -> None:
    if isinstance(e, ImportError):
        rec[f'{name}_skipped'] = str(e)
    else:
        rec[f'{name}_error'] = short_error(e)


def time_case(rec: dict, name: str, fn: Callable, device, warmup: int, rep: int, max_s: float) -> bool:
    """Median time of ``fn()`` into ``rec[<name>_ms]`` (with ``_min_ms``,
    ``_max_ms``, ``_reps``) and its peak memory: ``<name>_peak_mb``
    (``torch.cuda.max_memory_allocated`` after a reset; absolute) and
    ``<name>_extra_mb`` (above what was allocated at the start); an error
    becomes ``<name>_error`` ('oom' for out of memory). Returns success."""
    free(device)
    ok = False
    try:
        with track_memory(device) as mem:
            t = bench(fn, warmup=warmup, rep=rep, device=device, max_time_s=max_s or None)
        rec.update(
            {
                f'{name}_ms': t.median_ms,
                f'{name}_min_ms': t.min_ms,
                f'{name}_max_ms': t.max_ms,
                f'{name}_reps': t.reps,
                f'{name}_peak_mb': mem['peak_mb'],
                f'{name}_extra_mb': mem['extra_mb'],
            }
        )
        ok = True
    except Exception as e:  # OOM, a missing layer, ...
        _fail(rec, name, e)
    free(device)  # (after the except block: the traceback no longer holds the case's tensors)
    return ok


def ratios(rec: dict, fast: str, others: Sequence[str], key: str = '_ms') -> None:
    """``<fast>_vs_<other>`` = other time / ``fast`` time (> 1: ``fast`` is faster)."""
    for o in others:
        a, b = rec.get(f'{fast}{key}'), rec.get(f'{o}{key}')
        if a and b:
            rec[f'{fast}_vs_{o}'] = b / a


def rel_err(out, ref) -> float:
    """max |out - ref| / max |ref| (in fp32: no large fp64 temporaries on big graphs)."""
    out, ref = out.detach().float(), ref.detach().float()
    return float((out - ref).abs().max() / ref.abs().max().clamp(min=1e-30))


def reps(a, case: GraphCase) -> Tuple[int, int]:
    """(warm-up, repetitions) for ``case``'s size."""
    return (a.big_warmup, a.big_rep) if case.E > BIG_EDGES else (a.warmup, a.rep)


# -- 1. layer forward + backward ------------------------------------------------------------


def bench_layer(name: str, a) -> Iterator[dict]:
    """The graph's build record, then per layer config one record with PyG,
    unfused and pyg_tc: forward + backward, forward alone, memory, first call."""
    from pyg_tc.formats.carrier import get_graph

    dev = a.device
    case = graph_case(name, dev)
    N = case.N
    rec = dict(case.base(), kind='build')
    times = []
    for _ in range(3):  # pyg_tc's format of a plain edge_index (what a layer's first call builds first)
        ei = case.fresh_edges()
        times.append(wall(lambda: get_graph(ei, size=(N, N)), dev)[0])
        ei = None
    rec['csr_build_ms'] = statistics.median(times)
    case.looped()
    rec.update(loops_build_ms=case.loops_build_ms, edges_with_loops=case.looped().num_edges)
    free(dev)
    yield rec
    warmup, rep = reps(a, case)
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(N, LAYER_IN, generator=gen, device=dev).requires_grad_()
    for label, conv, H, C in LAYERS:
        cls = 'GATConv' if conv == 'gat' else 'GATv2Conv'
        rec = dict(
            case.base(),
            kind='layer',
            layer=label,
            model=label,
            conv=conv,
            heads=H,
            channels=C,
            in_channels=LAYER_IN,
            edges_with_loops=case.looped().num_edges,
        )
        torch.manual_seed(0)
        state = getattr(pyg_nn, cls)(LAYER_IN, C, heads=H).to(dev).state_dict()
        dy = torch.randn(N, H * C, generator=gen, device=dev)
        ref = None  # the first output (PyG's, else the unfused one) checks the others
        for impl in IMPLS:
            try:
                layer = layer_class(impl, cls)(LAYER_IN, C, heads=H).to(dev)
                layer.load_state_dict(state)
            except Exception as e:
                _fail(rec, impl, e)
                continue
            params = [x] + list(layer.parameters())
            adj = case.looped() if impl == 'unfused' else case.fresh_edges() if impl == 'pyg_tc' else case.bg.edge_index

            def step(layer=layer, adj=adj, params=params):
                for p in params:
                    p.grad = None
                layer(x, adj).backward(dy)

            def fwd(layer=layer, adj=adj):
                with torch.no_grad():
                    return layer(x, adj)

            failed = False
            try:
                if impl == 'pyg_tc':  # builds the format on the fresh edge_index: timed apart
                    rec['pyg_tc_first_ms'] = wall(step, dev)[0]
                out = fwd()
                if ref is None:
                    ref, rec['err_ref'] = out, impl
                else:
                    rec[f'{impl}_err'] = rel_err(out, ref)
                out = None
            except Exception as e:
                _fail(rec, impl, e)
                failed = True
            if failed:
                out = layer = adj = step = fwd = params = None
                x.grad = None
                free(dev)
                continue
            if time_case(rec, impl, step, dev, warmup, rep, a.max_case_s):
                time_case(rec, f'{impl}_fwd', fwd, dev, warmup, rep, a.max_case_s)
            if impl != 'pyg':  # (PyG caches nothing on its edge_index)
                rec[f'{impl}_formats_mb'] = format_bytes(adj) / MIB
            layer = adj = step = fwd = params = None
            x.grad = None
            free(dev)
        ref = None
        ratios(rec, 'pyg_tc', ('pyg', 'unfused'))
        ratios(rec, 'unfused', ('pyg',))
        ratios(rec, 'pyg_tc_fwd', ('pyg_fwd', 'unfused_fwd'))
        if rec.get('pyg_tc_peak_mb') and rec.get('pyg_peak_mb'):
            rec['pyg_tc_mem_vs_pyg'] = rec['pyg_tc_peak_mb'] / rec['pyg_peak_mb']
        own_memory(rec, x, case.bg.edge_index, state)
        yield rec
    free(dev)


def own_memory(rec: dict, x: Tensor, edge_index: Tensor, state: dict) -> None:
    """Each implementation's own memory, free of what the harness holds for
    the others: ``<impl>_own_mb`` = the inputs (features, edge_index,
    parameters) + the formats it caches on its adjacency + its extra peak
    during forward + backward; ``pyg_tc_own_vs_pyg`` = pyg_tc's / PyG's."""
    nbytes = lambda t: t.numel() * t.element_size()  # noqa: E731
    rec['inputs_mb'] = (nbytes(x) + nbytes(edge_index) + sum(nbytes(t) for t in state.values())) / MIB
    for impl in IMPLS:
        if rec.get(f'{impl}_extra_mb') is not None:
            rec[f'{impl}_own_mb'] = rec['inputs_mb'] + rec.get(f'{impl}_formats_mb', 0.0) + rec[f'{impl}_extra_mb']
    if rec.get('pyg_tc_own_mb') and rec.get('pyg_own_mb'):
        rec['pyg_tc_own_vs_pyg'] = rec['pyg_tc_own_mb'] / rec['pyg_own_mb']


# -- 2. fused forward vs SpMM -----------------------------------------------------------------


@torch.no_grad()
def bench_fused(name: str, a) -> Iterator[dict]:
    """Per (op, H, C): the fused attention forward against the SpMM of width H*C."""
    from pyg_tc.ops import gat_attention, gatv2_attention, spmm_graph

    dev = a.device
    case = graph_case(name, dev)
    g = case.looped()
    N, E = case.N, g.num_edges
    gen = torch.Generator(device=dev).manual_seed(0)
    warmup, rep = reps(a, case)
    w = torch.rand(E, generator=gen, device=dev) + 0.5
    for op in ('gat', 'gatv2'):
        for H, C in a.fused_shapes:
            rec = dict(
                case.base(),
                kind='fused',
                model=f'{op} {H}x{C}',
                op=op,
                heads=H,
                channels=C,
                F=H * C,
                edges_with_loops=E,
            )
            x = torch.randn(N, H, C, generator=gen, device=dev)
            if op == 'gat':
                a_src = torch.randn(N, H, generator=gen, device=dev)
                a_dst = torch.randn(N, H, generator=gen, device=dev)
                fused = lambda: gat_attention(g, x, a_src, a_dst, None, 0.2, 0.0, None)[0]  # noqa: E731
            else:
                x_r = torch.randn(N, H, C, generator=gen, device=dev)
                att = torch.randn(H, C, generator=gen, device=dev) / math.sqrt(C)
                fused = lambda: gatv2_attention(g, x, x_r, att, None, 0.2, 0.0, None)[0]  # noqa: E731
            x2 = x.view(N, H * C)
            impls = {'fused': fused, 'spmm': lambda: spmm_graph(g, x2), 'spmm_w': lambda: spmm_graph(g, x2, w)}
            for impl, fn in impls.items():
                if time_case(rec, impl, fn, dev, warmup, rep, a.max_case_s) and is_cuda(dev):
                    try:  # kernel-only: CUDA-graph replay (no host overhead)
                        rec[f'{impl}_kernel_ms'] = kernel_time(fn, dev, rep=max(rep, 5), fallback=False).median_ms
                    except Exception as e:
                        rec[f'{impl}_kernel_error'] = short_error(e)
                        free(dev)
            k = '_kernel_ms' if rec.get('fused_kernel_ms') and rec.get('spmm_kernel_ms') else '_ms'
            if rec.get(f'fused{k}') and rec.get(f'spmm{k}'):
                rec['timing'] = 'kernel' if k == '_kernel_ms' else 'per call'
                rec['fused_over_spmm'] = rec[f'fused{k}'] / rec[f'spmm{k}']
                if rec.get(f'spmm_w{k}'):
                    rec['fused_over_spmm_w'] = rec[f'fused{k}'] / rec[f'spmm_w{k}']
                rec['within_target'] = rec['fused_over_spmm'] <= FUSED_TARGET
            if rec.get('fused_ms') and rec.get('spmm_ms'):
                rec['fused_over_spmm_call'] = rec['fused_ms'] / rec['spmm_ms']
            x = x2 = fused = impls = None
            yield rec
            free(dev)


# -- 3. 2-layer GAT training step -----------------------------------------------------------------


def GAT(impl: str, cin: int, cout: int, hidden: int = 8, heads: int = 8, dropout: float = GAT_DROPOUT):
    """PyG's ``examples/gat.py`` with ``impl``'s ``GATConv``: dropout,
    GATConv(in, hidden, heads), ELU, dropout, GATConv(hidden * heads, out, one
    head); attention dropout in both layers."""
    lib = SimpleNamespace(GATConv=layer_class(impl, 'GATConv'))
    dims = [cin, hidden * heads, cout]
    return Net(lib, 'gat', dims, dropout=dropout, heads=heads, last_heads=1, att_dropout=dropout, act='elu')


def _gat_state(cin: int, cout: int, seed: int, device) -> dict:
    torch.manual_seed(seed)
    return {k: v.clone() for k, v in GAT('pyg', cin, cout).to(device).state_dict().items()}


def bench_train(name: str, a) -> Iterator[dict]:
    """One training step (forward + backward + Adam) per implementation, same weights."""
    dev = a.device
    case = graph_case(name, dev)
    N, cin, cout = case.N, case.features, case.classes
    warmup, rep = reps(a, case)
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(N, cin, generator=gen, device=dev)
    y = torch.randint(0, cout, (N,), generator=gen, device=dev)
    state = _gat_state(cin, cout, 0, dev)
    recs = {}
    for impl in IMPLS:
        rec = dict(
            case.base(),
            kind='train',
            impl=impl,
            in_channels=cin,
            classes=cout,
            hidden='8x8',
            precision=torch.get_float32_matmul_precision(),
        )
        adj = case.looped() if impl == 'unfused' else case.fresh_edges() if impl == 'pyg_tc' else case.bg.edge_index

        def build(impl=impl):
            m = GAT(impl, cin, cout).to(dev)
            m.load_state_dict(state)
            torch.manual_seed(0)
            return m

        train_step(rec, build, x, y, adj, max(warmup, 1), rep, dev)
        adj = None
        recs[impl] = rec
        free(dev)
    ref = recs['pyg']
    for impl, rec in recs.items():
        for o in ('pyg', 'unfused'):
            if o != impl and rec.get('step_ms') and recs[o].get('step_ms'):
                rec[f'speedup_vs_{o}'] = recs[o]['step_ms'] / rec['step_ms']
        if impl != 'pyg' and rec.get('peak_mb') and ref.get('peak_mb'):
            rec['memory_vs_pyg'] = rec['peak_mb'] / ref['peak_mb']
        yield rec


def train_step(rec: dict, build: Callable, x, y, adj, steps: int, rep: int, dev) -> dict:
    """``steps`` untimed steps (the first builds pyg_tc's format), then ``rep``
    timed ones; status 'ok' / 'oom' / 'error: ...' / 'skipped: ...', peak memory."""
    free(dev)
    try:
        model = build()
        opt = torch.optim.Adam(model.parameters(), lr=GAT_LR, weight_decay=GAT_WD)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = Fn.cross_entropy(model(x, adj), y)
            loss.backward()
            opt.step()
            return loss

        model.train()
        with track_memory(dev) as mem:
            first, loss0 = wall(step, dev)
            for _ in range(steps - 1):
                step()
            t = bench(step, warmup=0, rep=rep, device=dev)
        rec.update(
            status='ok',
            step_ms=t.median_ms,
            step_min_ms=t.min_ms,
            step_max_ms=t.max_ms,
            step_reps=t.reps,
            first_step_ms=first,
            loss_first=float(loss0.detach()),
            **mem,
        )
    except Exception as e:
        rec['status'] = (
            'oom'
            if isinstance(e, torch.OutOfMemoryError)
            else (f'skipped: {e}' if isinstance(e, ImportError) else f'error: {short_error(e)}')
        )
    model = opt = step = None
    free(dev)
    return rec


# -- 4. fuseGNN Table 3 ---------------------------------------------------------------------------


def bench_table3(name: str, a) -> Iterator[dict]:
    """Single GCN / GAT layer training step (forward + backward) per hidden width, PyG vs pyg_tc."""
    dev = a.device
    try:
        case = graph_case(name, dev)
    except FileNotFoundError as e:
        if name != 'pubmed':
            raise
        log(f'[gat] table3: {short_error(e)}; CiteSeer instead of PubMed')
        case = graph_case('citeseer', dev)
    N, cin = case.N, case.features
    warmup, rep = reps(a, case)
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(N, cin, generator=gen, device=dev)
    for model in ('gcn', 'gat'):
        cls = 'GCNConv' if model == 'gcn' else 'GATConv'
        kw = dict(cached=True) if model == 'gcn' else dict(heads=1)
        for hidden in a.table3_hidden:
            rec = dict(
                case.base(), kind='table3', requested=name, model=model, hidden=hidden, F=hidden, in_channels=cin
            )
            torch.manual_seed(0)
            state = getattr(pyg_nn, cls)(cin, hidden, **kw).to(dev).state_dict()
            dy = torch.randn(N, hidden, generator=gen, device=dev)
            for impl in ('pyg', 'pyg_tc'):
                try:
                    layer = layer_class(impl, cls)(cin, hidden, **kw).to(dev)
                    layer.load_state_dict(state)
                except Exception as e:
                    _fail(rec, impl, e)
                    continue
                adj = case.fresh_edges() if impl == 'pyg_tc' else case.bg.edge_index

                def step(layer=layer, adj=adj):
                    for p in layer.parameters():
                        p.grad = None
                    layer(x, adj).backward(dy)

                try:
                    if impl == 'pyg_tc':
                        rec['pyg_tc_first_ms'] = wall(step, dev)[0]
                    time_case(rec, impl, step, dev, warmup, rep, a.max_case_s)
                except Exception as e:
                    _fail(rec, impl, e)
                layer = adj = step = None
                free(dev)
            ratios(rec, 'pyg_tc', ('pyg',))
            if rec.get('pyg_tc_peak_mb') and rec.get('pyg_peak_mb'):
                rec['pyg_tc_mem_vs_pyg'] = rec['pyg_tc_peak_mb'] / rec['pyg_peak_mb']
            yield rec


# -- 5. accuracy ----------------------------------------------------------------------------------


def bench_accuracy(ds: str, a) -> Iterator[dict]:
    """Per seed, PyG then pyg_tc from the same initial weights: test metric at the best-val epoch, epoch ms."""
    from .common import DATASETS, fit, load_dataset, split_masks

    dev = a.device
    data = load_dataset(ds, a.data_root, a.cache_dir).to(dev)
    metric = DATASETS[ds][4]
    cin, cout = data.num_features, int(data.y.max()) + 1
    seeds = a.seeds if a.seeds is not None else ACC_DATASETS.get(ds, 5)
    log(
        f'[gat] {ds}: {data.num_nodes} nodes, {data.num_edges} edges, {cin} features, {cout} classes, '
        f'{metric}, {seeds} seeds x {a.epochs} epochs'
    )
    for seed in range(seeds):
        train, val, test, split = split_masks(data, seed)
        state = _gat_state(cin, cout, seed, dev)
        for impl in ('pyg', 'pyg_tc'):
            rec = dict(
                kind='accuracy',
                dataset=ds,
                impl=impl,
                seed=seed,
                split=split,
                metric=metric,
                epochs=a.epochs,
                lr=GAT_LR,
                weight_decay=GAT_WD,
                dropout=GAT_DROPOUT,
            )
            try:
                m = GAT(impl, cin, cout).to(dev)
                m.load_state_dict(state)
                ei = data.edge_index.clone() if impl == 'pyg_tc' else data.edge_index
                d = data.clone()
                d.edge_index = ei
                torch.manual_seed(seed)
                rec.update(status='ok', **fit(m, d, (train, val, test), metric, a.epochs, GAT_LR, GAT_WD))
            except Exception as e:
                rec['status'] = (
                    'oom'
                    if isinstance(e, torch.OutOfMemoryError)
                    else (f'skipped: {e}' if isinstance(e, ImportError) else f'error: {short_error(e)}')
                )
            m = d = None
            free(dev)
            yield rec


# -- report --------------------------------------------------------------------------------------


def cell(r: dict, key: str, owners: Sequence[str] = (), spec: str = '.2f') -> str:
    """``r[key]``, else why it is missing: OOM / error / skipped from the
    first of ``owners`` (record key prefixes) with an error, else '-'."""
    v = r.get(key)
    if v is not None:
        return fmt(v, spec)
    for o in owners:
        e = r.get(f'{o}_error')
        if e is not None:
            return 'OOM' if e == 'oom' else 'error'
        if f'{o}_skipped' in r:
            return 'skipped'
    return '-'


def triple(stem: str, measure: str, spec: str = '.2f', impls: Sequence[str] = IMPLS) -> Callable[[dict], str]:
    """'a / b / c': ``<impl><stem><measure>`` of each of ``impls`` (why
    missing: from ``<impl><stem>``, then ``<impl>``)."""
    return lambda r: ' / '.join(cell(r, f'{i}{stem}{measure}', (f'{i}{stem}', i), spec) for i in impls)


def _status(r: dict) -> str:
    s = r.get('status', '-')
    return 'OOM' if s == 'oom' else s


def _acc_rows(records: List[dict]) -> List[dict]:
    """Per (dataset, impl): runs, mean ± std (points), difference to PyG, median epoch ms."""
    ac = [r for r in records if r.get('kind') == 'accuracy']
    out = []
    for ds, impl in dict.fromkeys((r['dataset'], r['impl']) for r in ac):
        mine = [r for r in ac if (r['dataset'], r['impl']) == (ds, impl)]
        ok = [r for r in mine if r['status'] == 'ok']
        ref = [r for r in ac if (r['dataset'], r['impl']) == (ds, 'pyg') and r['status'] == 'ok']
        v = [100 * r['test'] for r in ok]
        row = dict(
            dataset=ds,
            impl=impl,
            metric=mine[0]['metric'],
            runs=len(v),
            diff=None,
            within='-',
            acc=next((r['status'] for r in mine if r['status'] != 'ok'), '-'),
        )
        if v:
            row.update(
                mean=statistics.mean(v),
                std=statistics.stdev(v) if len(v) > 1 else 0.0,
                epoch_ms=statistics.median(r['epoch_ms'] for r in ok),
            )
            row['acc'] = f'{row["mean"]:.2f} ± {row["std"]:.2f}'
        if v and ref and impl != 'pyg':
            row['diff'] = row['mean'] - statistics.mean(100 * r['test'] for r in ref)
            row['within'] = 'yes' if abs(row['diff']) <= ACC_TARGET else 'no'
            row['speedup'] = statistics.median(r['epoch_ms'] for r in ref) / row['epoch_ms']
        out.append(row)
    return out


def _range(rs: List[dict], key: str) -> str:
    return f'x{min(r[key] for r in rs):.2f} .. x{max(r[key] for r in rs):.2f} over {len(rs)} cases'


def _targets(records: List[dict]) -> List[str]:
    """The targets and headline ratios, one line each."""
    lines = []
    kind = lambda k: [r for r in records if r.get('kind') == k]  # noqa: E731
    fu = [r for r in kind('fused') if 'fused_over_spmm' in r]
    for op in dict.fromkeys(r['op'] for r in fu):
        rs = [r for r in fu if r['op'] == op]
        worst = max(rs, key=lambda r: r['fused_over_spmm'])
        lines.append(
            f'- fused {op.upper()} forward within {FUSED_TARGET}x of the SpMM of width H*C: '
            f'**{sum(r["within_target"] for r in rs)} of {len(rs)}** cases; worst '
            f'x{worst["fused_over_spmm"]:.2f} ({worst["graph"]}, H={worst["heads"]} C={worst["channels"]}, '
            f'{worst["timing"]} time)'
        )
    tr = [r for r in kind('train') if r['graph'].partition('@')[0] == 'products']
    if tr:
        st = {r['impl']: _status(r) for r in tr}
        lines.append(
            f'- products-shaped 2-layer GAT training in fp32: pyg_tc **{st.get("pyg_tc", "-")}**, '
            f'PyG {st.get("pyg", "-")}, unfused {st.get("unfused", "-")}'
        )
    ly = kind('layer')
    for r in ly:
        if r['graph'].partition('@')[0] == 'reddit' and r.get('pyg_tc_own_vs_pyg'):
            lines.append(
                f'- reddit {r["layer"]}: pyg_tc\'s own memory (inputs + formats + extra) '
                f'{r["pyg_tc_own_mb"]:,.0f} MiB = **{100 * r["pyg_tc_own_vs_pyg"]:.2f}%** of PyG\'s '
                f'{r["pyg_own_mb"]:,.0f} MiB (target <= 3%)'
            )
    for key, what in (('pyg_tc_vs_pyg', 'PyG'), ('pyg_tc_vs_unfused', 'unfused')):
        rs = [r for r in ly if r.get(key)]
        if rs:
            lines.append(
                f'- layer forward + backward, pyg_tc speedup vs {what}: {_range(rs, key)}'
                + (f'; PyG OOM in {sum(r.get("pyg_error") == "oom" for r in ly)} of {len(ly)}' if what == 'PyG' else '')
            )
    rs = [r for r in kind('train') if r.get('impl') == 'pyg_tc' and r.get('speedup_vs_pyg')]
    if rs:
        lines.append(f'- 2-layer GAT training step, pyg_tc speedup vs PyG: {_range(rs, "speedup_vs_pyg")}')
    rs = [r for r in kind('table3') if r.get('pyg_tc_vs_pyg')]
    if rs:
        lines.append(
            f'- Table 3 single layer, pyg_tc speedup vs PyG: {_range(rs, "pyg_tc_vs_pyg")}; PyG OOM in '
            f'{sum(r.get("pyg_error") == "oom" for r in kind("table3"))} of {len(kind("table3"))}'
        )
    for r in _acc_rows(records):
        if r['diff'] is not None:
            lines.append(
                f'- accuracy {r["dataset"]} ({r["metric"]}, {r["runs"]} seeds): pyg_tc {r["acc"]}, '
                f'difference to PyG {r["diff"]:+.2f} points (target within {ACC_TARGET}): '
                f'**{"met" if r["within"] == "yes" else "NOT met"}**'
            )
    return lines


def _panels(records: List[dict]) -> List[Panel]:
    ly = [r for r in records if r.get('kind') == 'layer']
    fu = [r for r in records if r.get('kind') == 'fused']
    t3 = [dict(r, case=f'{r["model"].upper()} {r["hidden"]}') for r in records if r.get('kind') == 'table3']
    return [
        Panel(
            lambda _: ly,
            'graph',
            'pyg_tc_vs_pyg',
            'layer',
            hline=1.0,
            logy=2,
            title='layer fwd+bwd: pyg_tc speedup vs PyG (n/a: PyG OOM)',
        ),
        Panel(
            lambda _: ly,
            'graph',
            'pyg_tc_vs_unfused',
            'layer',
            hline=1.0,
            logy=2,
            title='layer fwd+bwd: pyg_tc speedup vs unfused',
        ),
        Panel(
            lambda _: [dict(r, case=f'{r["op"]} {r["heads"]}x{r["channels"]}') for r in fu],
            'graph',
            'fused_over_spmm',
            'case',
            hline=FUSED_TARGET,
            hline_label=f'target {FUSED_TARGET}x',
            title='fused attention fwd / SpMM of width H*C',
        ),
        Panel(
            'train',
            'graph',
            'speedup_vs_pyg',
            'impl',
            hline=1.0,
            logy=2,
            title='2-layer GAT training step: speedup vs PyG',
        ),
        Panel(
            lambda _: t3,
            'graph',
            'pyg_tc_vs_pyg',
            'case',
            hline=1.0,
            logy=2,
            title='Table 3: single layer fwd+bwd, pyg_tc vs PyG',
        ),
        Panel(_acc_rows, 'dataset', 'mean', 'impl', yerr='std', title='test metric (%), mean ± std'),
    ]


def reporter(out: str, name: str, env: dict, epochs: int = GAT_EPOCHS) -> Reporter:
    """The suite's outputs: ``<name>.jsonl``, ``<name>.md``, ``<name>.png``."""
    k = lambda key, spec='', h=None, bold=False: Col(h or key, key, spec, bold)  # noqa: E731
    both = ('pyg', 'pyg_tc')
    sections = [
        Text('## Targets', _targets),
        Table(
            '## Graph formats (built once, outside the timed steps)',
            'build',
            [
                k('graph'),
                k('nodes', ',', 'N'),
                k('edges', ',', 'E'),
                k('edges_with_loops', ',', 'E + loops'),
                k('csr_build_ms', '.2f', 'pyg_tc CSRGraph build ms'),
                k('loops_build_ms', '.2f', 'unfused: loops + CSR build ms'),
            ],
            note="pyg_tc builds its format on a layer's first call (below: '1st call', forward + backward "
            'including the build); the unfused composition gets its looped CSR graph built beforehand.',
        ),
        Table(
            '## 1. Layer forward + backward (fp32, in 256, x requires grad)',
            'layer',
            [
                k('graph'),
                k('layer'),
                k('edges_with_loops', ',', 'E + loops'),
                Col('fwd+bwd ms PyG / unfused / pyg_tc', triple('', '_ms')),
                k('pyg_tc_vs_pyg', '.2f', 'x PyG', True),
                k('pyg_tc_vs_unfused', '.2f', 'x unfused', True),
                k('pyg_tc_first_ms', '.1f', 'pyg_tc 1st call ms'),
                Col('fwd ms PyG / unfused / pyg_tc', triple('_fwd', '_ms')),
                k('pyg_tc_fwd_vs_pyg_fwd', '.2f', 'fwd x PyG'),
                Col('peak MiB fwd+bwd PyG / unfused / pyg_tc', triple('', '_peak_mb', '.0f')),
                Col('extra MiB', triple('', '_extra_mb', '.0f')),
                Col('peak MiB fwd', triple('_fwd', '_peak_mb', '.0f')),
                k('pyg_tc_mem_vs_pyg', '.2f', 'mem / PyG'),
                k('pyg_tc_formats_mb', '.0f', 'pyg_tc formats MiB'),
                Col('own MiB PyG / unfused / pyg_tc', triple('', '_own_mb', '.0f')),
                k('pyg_tc_own_vs_pyg', '.4f', 'own / PyG', True),
                Col(
                    'rel err unfused / pyg_tc',
                    lambda r: (
                        f'{fmt(r.get("unfused_err"), ".0e")} / '
                        f'{fmt(r.get("pyg_tc_err"), ".0e")} vs {r.get("err_ref", "-")}'
                    ),
                ),
            ],
            note='Median per-call times (CUDA events around eager calls; host overhead included). Peak MiB: '
            'torch.cuda.max_memory_allocated after a reset per case (absolute: inputs and graph formats '
            'included); extra: the part above what was allocated when the case started. Own: inputs (features, '
            'edge_index, parameters) + the formats the implementation caches on its adjacency + its extra '
            '(the unfused composition\'s looped graph is prebuilt and counted as its format). OOM: out of memory. '
            'Unfused: lin, a_src/a_dst, leaky_relu(a_src[col] + a_dst[row]) [E, H], pyg_tc.ops.edge_softmax, '
            'one pyg_tc.ops.spmm_graph per head.',
        ),
        Table(
            '## 2. Fused attention forward vs pyg_tc SpMM of width H*C (fp32, self loops included)',
            'fused',
            [
                k('graph'),
                k('op'),
                k('heads', 'd', 'H'),
                k('channels', 'd', 'C'),
                k('edges_with_loops', ',', 'E'),
                Col('fused ms', lambda r: cell(r, 'fused_kernel_ms', ('fused_kernel', 'fused'), '.4f')),
                Col('SpMM ms', lambda r: cell(r, 'spmm_kernel_ms', ('spmm_kernel', 'spmm'), '.4f')),
                Col('SpMM+w ms', lambda r: cell(r, 'spmm_w_kernel_ms', ('spmm_w_kernel', 'spmm_w'), '.4f')),
                k('fused_over_spmm', '.2f', 'fused / SpMM', True),
                k('fused_over_spmm_w', '.2f', 'fused / SpMM+w'),
                Col(
                    f'within {FUSED_TARGET}x',
                    lambda r: '-' if 'within_target' not in r else 'yes' if r['within_target'] else 'no',
                ),
                k('timing'),
                Col(
                    'per call ms fused / SpMM',
                    lambda r: f'{cell(r, "fused_ms", ("fused",), ".4f")} / {cell(r, "spmm_ms", ("spmm",), ".4f")}',
                ),
                Col('peak MiB fused / SpMM', triple('', '_peak_mb', '.0f', ('fused', 'spmm'))),
            ],
            note='Kernel-only times (CUDA-graph replay) on a GPU, per-call times on the CPU. SpMM: '
            'spmm_graph(g, x.view(N, H*C)) (no edge values); SpMM+w: with one value per edge. The fused op '
            'computes the logits, the online softmax and the H-head aggregation in one pass.',
        ),
        Table(
            '## 3. 2-layer GAT training step (forward + backward + Adam; examples/gat.py model, fp32)',
            'train',
            [
                k('graph'),
                k('nodes', ',', 'N'),
                k('edges', ',', 'E'),
                k('in_channels', 'd', 'in'),
                k('classes', 'd', 'out'),
                k('impl'),
                Col('status', _status),
                k('step_ms', '.2f', 'step ms'),
                k('speedup_vs_pyg', '.2f', 'x PyG', True),
                k('speedup_vs_unfused', '.2f', 'x unfused', True),
                k('first_step_ms', '.1f', '1st step ms'),
                k('peak_mb', '.0f', 'peak MiB'),
                k('extra_mb', '.0f', 'extra MiB'),
                k('memory_vs_pyg', '.2f', 'mem / PyG'),
                k('loss_first', '.4f', 'loss[0]'),
            ],
            note='Random features and labels of the dataset shape; dropout 0.6 on features and attention (each '
            "implementation draws its own masks); the first step (pyg_tc: format build) is not timed.",
        ),
        Table(
            '## 4. fuseGNN Table 3: single layer training step (forward + backward, fp32)',
            'table3',
            [
                k('graph'),
                k('requested'),
                k('model'),
                k('hidden', 'd'),
                k('in_channels', 'd', 'in'),
                Col('ms PyG / pyg_tc', triple('', '_ms', '.3f', both)),
                k('pyg_tc_vs_pyg', '.2f', 'x PyG', True),
                k('pyg_tc_first_ms', '.1f', 'pyg_tc 1st call ms'),
                Col('peak MiB PyG / pyg_tc', triple('', '_peak_mb', '.0f', both)),
                k('pyg_tc_mem_vs_pyg', '.2f', 'mem / PyG'),
            ],
            note='GCNConv(in, hidden, cached=True) and GATConv(in, hidden, heads=1), input features (random) of '
            'the real dataset width, no gradient for them; a fixed random output gradient.',
        ),
        Table(
            f'## 5. Accuracy: examples/gat.py ({epochs} epochs, test metric at the first best-val epoch)',
            _acc_rows,
            [
                k('dataset'),
                k('metric'),
                k('impl'),
                k('runs', 'd'),
                k('acc', h='test % mean ± std'),
                k('diff', '+.2f', 'diff vs PyG (points)', True),
                k('within'),
                k('epoch_ms', '.2f', 'epoch ms'),
                k('speedup', '.2f', 'epoch x PyG'),
            ],
            note=f'Target: within {ACC_TARGET} points of PyG. GAT 8 heads x 8 hidden, dropout 0.6 (features and '
            f'attention), Adam lr {GAT_LR}, weight decay {GAT_WD}, same initial weights per seed; Planetoid: '
            'public split, NormalizeFeatures; Tolokers: ROC-AUC, split seed % 10. Epoch ms: median '
            'training step (forward + backward + Adam), evaluation excluded.',
        ),
    ]

    def header(env: dict, recs: List[dict]) -> List[str]:
        gpu = env.get('gpu') or 'no GPU: pyg_tc runs its PyTorch references, a code-path check only'
        return [
            f'- device {env.get("device")} ({gpu}); torch {env.get("torch")}, PyG {env.get("torch_geometric")}, '
            f'pyg_tc {env.get("pyg_tc_version")}; started {env.get("started")}',
            f'- fp32 matmul precision {env.get("precision")}; impls: PyG = torch_geometric.nn, pyg_tc = '
            'pyg_tc.nn (fused attention), unfused = pyg_tc ops composed (see section 1)',
        ]

    return Reporter(
        out,
        f'{name}.jsonl',
        f'{name}.md',
        'fuseGNN: fused graph attention (GAT / GATv2)',
        env,
        'first',
        sections,
        [Figure(f'{name}.png', _panels, ncols=2, title='pyg_tc fused attention')],
        header,
        tag='gat',
    )


# -- CLI -----------------------------------------------------------------------------------------

_FULL = dict(
    warmup=2,
    rep=10,
    big_warmup=1,
    big_rep=3,
    epochs=GAT_EPOCHS,
    max_case_s=2.0,
    budget=360.0,
    fused_shapes=','.join(f'{h}x{c}' for h, c in FUSED_SHAPES),
    table3_hidden='16,64,512',
    datasets=','.join(ACC_DATASETS),
)
_QUICK = dict(
    warmup=1,
    rep=2,
    big_warmup=1,
    big_rep=2,
    epochs=3,
    max_case_s=0.0,
    budget=120.0,
    fused_shapes='8x8',
    table3_hidden='16,64',
    datasets='cora',
    seeds=1,
    graphs='tiny',
)


def parse_args(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> argparse.Namespace:
    """The command line, with the --quick / full defaults filled in."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n\n')[0])
    p.add_argument('--out', default='gat_out')
    p.add_argument(
        '--part', default='bench', help=f'comma list of {", ".join(SECTIONS)}, or bench (= {",".join(BENCH)}) or all'
    )
    p.add_argument('--name', help='output file stem (default gat; gat_accuracy for --part accuracy)')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument(
        '--quick', action='store_true', help="small settings on the 'tiny' graph (smoke test; the default on the CPU)"
    )
    p.add_argument('--full', action='store_true', help='full settings even on the CPU')
    p.add_argument('--budget', type=float, help='seconds: start no item after that (default 360; quick 120)')
    p.add_argument('--graphs', help='graphs of every bench section (default: per section, see --*-graphs)')
    p.add_argument('--layer-graphs', help=f'sections 1 and 2 (default {",".join(LAYER_GRAPHS)})')
    p.add_argument('--train-graphs', help=f'section 3 (default {",".join(TRAIN_GRAPHS)})')
    p.add_argument(
        '--table3-graphs',
        help=f'section 4 (default {",".join(TABLE3_GRAPHS)}; pubmed -> citeseer when its files are missing)',
    )
    p.add_argument('--fused-shapes', help='HxC list of section 2 (default 8x8,1x64)')
    p.add_argument('--table3-hidden', help='hidden widths of section 4 (default 16,64,512)')
    p.add_argument('--warmup', type=int)
    p.add_argument('--rep', type=int, help='timed repetitions per case')
    p.add_argument('--big-warmup', type=int, help=f'warm-up on graphs above {BIG_EDGES:,} edges')
    p.add_argument('--big-rep', type=int, help=f'repetitions on graphs above {BIG_EDGES:,} edges')
    p.add_argument(
        '--max-case-s',
        type=float,
        help='seconds: fewer repetitions (at least 3) when a case would take longer (0: no cap)',
    )
    p.add_argument(
        '--precision',
        default='highest',
        choices=('highest', 'high', 'medium'),
        help='fp32 matmul precision (default highest: fp32)',
    )
    p.add_argument('--datasets', help='accuracy datasets (cora, citeseer, tolokers)')
    p.add_argument('--seeds', type=int, help='accuracy seeds per dataset (default cora/citeseer 10, tolokers 5)')
    p.add_argument('--epochs', type=int)
    p.add_argument('--data-root', help='folder holding planetoid/, heterophilous/ (default: $PYG_TC_DATA)')
    p.add_argument('--cache-dir', help='writable copy of the datasets (default: a temporary folder)')
    a = p.parse_args(argv)
    a.quick = a.quick or (torch.device(a.device).type == 'cpu' and not a.full)
    for key, v in (_QUICK if a.quick else _FULL).items():
        if getattr(a, key, None) is None:
            setattr(a, key, v)
    for key in _FULL:
        if getattr(a, key, None) is None:
            setattr(a, key, _FULL[key])
    parts = [t.strip() for t in a.part.split(',') if t.strip()]
    a.sections = [s for s in SECTIONS if s in parts or (s in BENCH and 'bench' in parts) or 'all' in parts]
    bad = set(parts) - set(SECTIONS) - {'bench', 'all'}
    if bad or not a.sections:
        p.error(f'unknown --part {sorted(bad)}; choose from {", ".join(SECTIONS)}, bench, all')
    a.name = a.name or ('gat_accuracy' if a.sections == ['accuracy'] else 'gat')
    try:
        a.fused_shapes = [tuple(int(v) for v in s.lower().split('x')) for s in a.fused_shapes.split(',')]
        a.table3_hidden = [int(v) for v in a.table3_hidden.split(',')]
        a.section_graphs = {
            'layer': graph_names(a.layer_graphs or a.graphs, LAYER_GRAPHS),
            'train': graph_names(a.train_graphs or a.graphs, TRAIN_GRAPHS),
            'table3': graph_names(a.table3_graphs or a.graphs, TABLE3_GRAPHS),
        }
    except ValueError as e:
        p.error(str(e))
    a.section_graphs['fused'] = a.section_graphs['layer']
    a.datasets = [d.strip().lower() for d in a.datasets.split(',') if d.strip()]
    bad = [d for d in a.datasets if d not in ('cora', 'citeseer', 'tolokers', 'minesweeper')]
    if bad:
        p.error(f'unknown accuracy dataset(s) {bad}')
    a.device = torch.device(a.device)
    from .common import data_paths

    data_paths(a)
    return a


def _order(name: str) -> Tuple[int, str]:
    base = name.partition('@')[0]
    return (SIZE_ORDER.index(base) if base in SIZE_ORDER else len(SIZE_ORDER), name)


def items(a) -> List[tuple]:
    """(section, item, records()) in run order: graph by graph (small first), then the accuracy datasets."""
    gens = {'layer': bench_layer, 'fused': bench_fused, 'train': bench_train, 'table3': bench_table3}
    names = sorted({n for s in a.sections if s in BENCH for n in a.section_graphs[s]}, key=_order)
    out = [
        (s, n, lambda s=s, n=n: gens[s](n, a))
        for n in names
        for s in BENCH
        if s in a.sections and n in a.section_graphs[s]
    ]
    if 'accuracy' in a.sections:
        out += [('accuracy', d, lambda d=d: bench_accuracy(d, a)) for d in a.datasets]
    return out


def _with_precision(p: str, fn: Callable[[], Iterator[dict]]) -> Callable[[], Iterator[dict]]:
    def run() -> Iterator[dict]:
        old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(p)
        try:
            yield from fn()
        finally:
            torch.set_float32_matmul_precision(old)

    return run


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Command line: see the module docstring; returns the exit code."""
    a = parse_args(argv, prog)
    t0 = time.perf_counter()
    env = environment(
        a.device, precision=a.precision, sections=a.sections, args={k: str(v) for k, v in vars(a).items()}
    )
    rep = reporter(a.out, a.name, env, a.epochs)
    log(f'[gat] sections {",".join(a.sections)} on {a.device}; budget {a.budget:.0f} s; out {a.out}/{a.name}.*')
    try:
        import pyg_tc.nn as tnn

        missing = [c for c in ('GATConv', 'GATv2Conv') if not hasattr(tnn, c)]
    except ImportError:
        missing = ['pyg_tc.nn']
    if missing:
        rep.note(f'pyg_tc.nn lacks {", ".join(missing)}: its cases are skipped')
    warm_up(a.device)
    its = [(s, n, _with_precision(a.precision, fn)) for s, n, fn in items(a)]
    paths = rep.run(its, a.device, budget_s=a.budget, t0=t0)
    _CACHE.clear()
    free(a.device)
    print(open(paths['markdown']).read())
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
