"""The one dispatch point: which implementation runs a sparse op, per call.

Vocabulary (``backend=`` of every op front-end and layer):

* ``'auto'``: the faster of the CSR and tensor-core kernels for the graph,
  width, dtype and op, measured once per graph (see :func:`~pyg_tc.ops.choose_backend`);
  CSR where only that applies.
* ``'csr'``: the CSR engine (any graph, sum / mean / max).
* ``'sgt'``: TC-GNN's tensor-core kernels over the graph's SGT (sum, mean).
* ``'reference'``: the pure-PyTorch oracle (what the CPU runs anyway).

The implementations (``'csr'``, ``'sgt'``, ``'cbsr'`` for MaxK's sparse
features, ``'reference'`` and ``'cbsr_reference'``) are registered here by the op modules with
:func:`register`; each op family registers its argument checks with
:func:`family`. A call goes ``check -> choose -> implementation``:
:func:`choose` is the only code that picks. On a CUDA tensor that no kernel
takes (float64, kernels not built, a row wider than the kernel's limit) the
choice falls back to ``'reference'``; on the CPU the kernel backends run
their registered op, whose CPU implementation is the reference (so the
op's autograd formulas are what the CPU tests check).

Layers pass their ``backend`` down (:func:`~pyg_tc.ops.aggregate`, :func:`~pyg_tc.ops.edge_scores`)
and never choose. This module imports only :mod:`pyg_tc.formats` and the op
framework; the op modules import it.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import _library
from .._library import _use_kernel
from .._cuda_graph import capture_graph
from ..formats.carrier import TCEdgeIndex, resolve
from ..formats.cbsr import CBSR
from ..formats.csr import CSRGraph

#: the user-facing backends (layers add 'pyg': PyG's own message passing)
BACKENDS = ('auto', 'csr', 'sgt', 'reference')
#: reduction names as PyG spells them -> the kernels' names
REDUCE = {'sum': 'sum', 'add': 'sum', 'mean': 'mean', 'max': 'max'}


@dataclass
class Impl:
    """One implementation of an op family, with the limits :func:`choose`
    reads (nothing else decides whether it runs).

    Attributes:
        fn: ``fn(g, **checked_args)`` (in a routed family also ``backend=`` and
            ``strict=``: its implementations run other families' ops).
        reduces: the reductions it computes.
        max_width: the widest row its CUDA kernel takes (None: any).
        fits: ``fits(features) -> bool``: whether it takes these features
            (beyond ``max_width``; e.g. the attention kernels' head width).
        applies: ``applies(g, checked_args) -> bool`` (routed families):
            whether it serves this call at all.
        needs_kernel: it runs a CUDA kernel, so its limits (the kernels
            loaded, not float64, ``max_width``, ``fits``) hold only where that
            kernel runs: on CUDA tensors (the CPU runs the op's reference,
            which takes anything). False: its limits hold on every device.
        deterministic: False for a kernel with atomics: under
            ``torch.use_deterministic_algorithms(True)`` a CUDA call runs the
            reference instead.
    """

    fn: Callable
    reduces: Tuple[str, ...] = ('sum', 'mean', 'max')
    max_width: Optional[int] = None
    fits: Optional[Callable[[Any], bool]] = None
    applies: Optional[Callable[[Optional[CSRGraph], dict], bool]] = None
    needs_kernel: bool = True
    deterministic: bool = True


@dataclass
class Family:
    """An op family: its argument check, implementations and (optionally)
    the candidates ``'auto'`` times.

    ``auto`` names the implementation ``'auto'`` runs unless it tunes.
    ``routes`` (a routed family) maps every backend to implementations in
    order of preference: :func:`choose` takes the first whose limits hold.
    """

    check: Callable
    features: str = 'x'
    impls: Dict[str, Impl] = field(default_factory=dict)
    candidates: Optional[Callable] = None
    auto: str = 'csr'
    routes: Optional[Dict[str, Tuple[str, ...]]] = None


FAMILIES: Dict[str, Family] = {}


def family(
    op: str, check: Callable, features: str = 'x', auto: str = 'csr', routes: Optional[Dict[str, Sequence[str]]] = None
) -> None:
    """Declare op family ``op``: ``check(g, *args, **kwargs)`` validates a
    call and returns its arguments normalised, as the keyword arguments of
    the implementations: the features that decide the backend under
    ``features``, the reduction (if any) under ``'reduce'``. ``auto``: what
    ``'auto'`` runs (before any tuning). ``routes``: for a family whose
    implementations are tried in order (``{backend: (name, ...)}``, every
    backend of ``BACKENDS``), see :func:`choose`."""
    FAMILIES[op] = Family(
        check, features, auto=auto, routes=None if routes is None else {b: tuple(r) for b, r in routes.items()}
    )


def autocast_features(x: Any) -> Any:
    """Inside ``torch.autocast('cuda')``: fp32 CUDA features cast to the
    autocast dtype (one cast kernel; autocast's lower-precision policy, as
    for matmul), so the aggregation reads and writes half and the next
    Linear needs no cast of its own (docs/half.md). fp64, half, CBSR
    and CPU inputs, and everything outside autocast, are returned as they
    are. Applied by the public :func:`spmm` / :func:`sddmm` and the layers'
    aggregation, not by internal graph helpers (GCN's degree and
    normalisation stay fp32)."""
    if isinstance(x, Tensor) and x.dtype == torch.float32 and x.is_cuda and torch.is_autocast_enabled('cuda'):
        return x.to(torch.get_autocast_dtype('cuda'))
    return x


def register(
    op: str,
    backend: str,
    reduces: Sequence[str] = ('sum', 'mean', 'max'),
    max_width: Optional[int] = None,
    fits: Optional[Callable[[Any], bool]] = None,
    applies: Optional[Callable[[Optional[CSRGraph], dict], bool]] = None,
    needs_kernel: Optional[bool] = None,
    deterministic: bool = True,
) -> Callable:
    """Decorator: ``fn(g, **checked_args)`` implements ``op`` under the name
    ``backend``, with the limits of ``Impl`` (``needs_kernel``
    defaults to True unless the name ends with ``'reference'``)."""
    if needs_kernel is None:
        needs_kernel = not backend.endswith('reference')

    def deco(fn: Callable) -> Callable:
        FAMILIES[op].impls[backend] = Impl(fn, tuple(reduces), max_width, fits, applies, needs_kernel, deterministic)
        return fn

    return deco


def tunable(op: str, candidates: Callable) -> None:
    """``candidates(g, width, dtype, generator) -> {backend: fn}``: the calls
    ``'auto'`` times for ``op`` (see :func:`choose_backend`)."""
    FAMILIES[op].candidates = candidates


def check_backend(backend: str, allowed: Sequence[str] = BACKENDS) -> str:
    """``backend`` if it is in the vocabulary, else a ValueError."""
    if backend not in allowed:
        raise ValueError(f'pyg_tc: backend must be one of {tuple(allowed)}, got {backend!r}')
    return backend


def _width(x: Any) -> int:
    return x.width if isinstance(x, CBSR) else x.size(-1)


def _kernel_takes(impl: Impl, x: Any) -> bool:
    """Whether ``impl``'s CUDA kernel takes features ``x``: a CUDA tensor,
    the kernels loaded, not float64, within ``max_width`` and ``fits``."""
    t = x.values if isinstance(x, CBSR) else x
    return (
        _use_kernel(t)
        and (impl.max_width is None or _width(x) <= impl.max_width)
        and (impl.fits is None or impl.fits(x))
    )


def _route(op: str, fam: Family, backend: str, g: Optional[CSRGraph], x: Any, args: dict) -> str:
    """A routed family's choice: the first implementation listed for
    ``backend`` that serves the call (``applies``) and takes the features
    (a kernel's limits where it would run: a kernel that does not take them
    gives way to the next one, as on the CPU; ``fits`` of a composition on
    every device)."""
    for name in fam.routes[backend]:
        impl = fam.impls[name]
        if impl.applies is not None and not impl.applies(g, args):
            continue
        if impl.needs_kernel:
            if not _kernel_takes(impl, x):
                continue
        elif impl.fits is not None and not impl.fits(x):
            continue
        return name
    raise ValueError(f'pyg_tc: no implementation of {op} takes this call with backend={backend!r}')


def choose(
    op: str,
    backend: str,
    g: Optional[CSRGraph],
    x: Any,
    reduce: str = 'sum',
    strict: bool = True,
    args: Optional[dict] = None,
) -> str:
    """The implementation of ``op`` that runs this call (``x``: the features
    that decide: dense or CBSR; ``reduce``: the normalised reduction;
    ``args``: the checked arguments, which a routed family's limits read).
    The only code that picks an implementation, from what the families
    declared (:func:`family`, :func:`register`):

    * an explicit backend names the implementation, ``'auto'`` the family's
      ``auto`` one, or the faster of CSR and SGT where the family declared
      candidates (:func:`~pyg_tc.ops.choose_backend`); CBSR features name ``'cbsr'``
      (``'cbsr_reference'`` for ``'reference'``);
    * a backend that lacks the op, the reduction or the feature format
      raises with ``strict`` (the op front-ends) and falls back without
      (layers): ``'sgt'`` with max aggregation, or for an op without
      tensor-core kernels (attention), runs the CSR kernel; with CBSR
      features the CBSR kernel;
    * on a CUDA tensor that the implementation's kernel does not take
      (float64, kernels not built, wider than ``max_width``, not ``fits``),
      or with deterministic algorithms on for a kernel with atomics, its
      ``<name>_reference`` runs, or the family's ``'reference'``;
    * a routed family (``routes``) takes the first implementation listed for
      the backend whose limits hold (``_route``)."""
    check_backend(backend)
    fam = FAMILIES[op]
    if fam.routes is not None:
        return _route(op, fam, backend, g, x, args or {})
    if isinstance(x, CBSR):
        if backend == 'sgt' and strict:
            raise ValueError("pyg_tc: backend='sgt' takes dense features (CBSR input uses the CBSR kernels)")
        name = 'cbsr_reference' if backend == 'reference' else 'cbsr'
    elif backend == 'auto':
        name = fam.auto
        if 'sgt' in fam.impls and reduce in fam.impls['sgt'].reduces:
            name = choose_backend(g, x.size(1), x.dtype, op)
    else:
        name = backend
    impl = fam.impls.get(name)
    if impl is None and not strict and 'csr' in fam.impls:  # (attention: no tensor-core kernels)
        name, impl = 'csr', fam.impls['csr']
    if impl is None:
        raise ValueError(f'pyg_tc: {op} has no {name!r} implementation')
    if reduce not in impl.reduces and not strict and name != 'cbsr':
        name, impl = 'csr', fam.impls['csr']
    if reduce not in impl.reduces:
        what = {'sgt': 'the tensor-core', 'cbsr': 'the CBSR'}.get(name, f'the {name}')
        raise ValueError(
            f'pyg_tc: {what} {op.upper().replace("SPMM", "SpMM")} supports reduce {" and ".join(map(repr, impl.reduces))}, '
            f'got {reduce!r}'
        )
    t = x.values if isinstance(x, CBSR) else x
    if t.is_cuda and (
        (impl.needs_kernel and not _kernel_takes(impl, x))
        or (not impl.deterministic and torch.are_deterministic_algorithms_enabled())
    ):
        return f'{name}_reference' if f'{name}_reference' in fam.impls else 'reference'
    return name


def run(op: str, g: Optional[CSRGraph], *args: Any, backend: str = 'auto', strict: bool = True, **kwargs: Any) -> Any:
    """Check a call of ``op`` on graph ``g`` (None for an op without one),
    choose its implementation (:func:`choose`) and run it."""
    fam = FAMILIES[op]
    a = fam.check(g, *args, **kwargs)
    name = choose(op, backend, g, a[fam.features], a.get('reduce', 'sum'), strict, a)
    if fam.routes is not None:  # (its implementations run other families' ops, on this backend)
        return fam.impls[name].fn(g, backend=backend, strict=strict, **a)
    return fam.impls[name].fn(g, **a)


# ---------------------------------------------------------------------------
# Graph-level calls (what the layers use) and the public front-ends.


def aggregate(
    g: CSRGraph,
    x: Any,
    value: Optional[Tensor] = None,
    reduce: str = 'sum',
    diag: Any = None,
    t_value: Optional[Tensor] = None,
    backend: str = 'auto',
    strict: bool = True,
    sampling: Optional[tuple] = None,
) -> Tensor:
    """``out[i] = reduce_{e: i <- j} value[e] * x[j] (+ diag[i] * x[i])`` on
    a :class:`~pyg_tc.formats.CSRGraph` (rows = targets), what the layers call.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph.
        x (torch.Tensor or CBSR): source features, dense or CBSR.
        value (torch.Tensor, optional): edge values in CSR order.
        reduce (str, optional): ``'sum'``, ``'mean'`` or ``'max'``.
        diag (torch.Tensor or float, optional): the self term, per node or one.
        t_value (torch.Tensor, optional): ``value`` in transpose order (saves a
            gather per backward).
        backend (str, optional): as in :func:`spmm`.
        strict (bool, optional): as in :func:`~pyg_tc.ops.dispatch.choose`.
        sampling (tuple, optional): ES-SpMM's ``(max_neighbors, sampling,
            seed)`` (a :class:`~pyg_tc.ops.es_spmm.Sampling`): the sampled
            aggregation (family ``'sampled_spmm'``, :mod:`pyg_tc.ops.es_spmm`);
            ``t_value`` is not used then.

    Shapes:
        - **input:** x :math:`(N_{src}, F)`, value :math:`(E)`, diag
          :math:`(N_{dst})` or a scalar
        - **output:** :math:`(N_{dst}, F)` in ``x``'s dtype
    """
    if sampling is not None:
        return run('sampled_spmm', g, x, value, reduce, diag, sampling, backend=backend, strict=strict)
    return run('spmm', g, x, value, reduce, diag, t_value=t_value, backend=backend, strict=strict)


def edge_scores(g: CSRGraph, a: Tensor, b: Tensor, backend: str = 'auto') -> Tensor:
    """``out[e] = <a[target(e)], b[source(e)]>`` for every edge, in CSR order.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph.
        a (torch.Tensor): target features.
        b (torch.Tensor): source features (``a``'s width and dtype).
        backend (str, optional): as in :func:`spmm`.

    Shapes:
        - **input:** a :math:`(N_{dst}, F)`, b :math:`(N_{src}, F)`
        - **output:** :math:`(E)` in ``a``'s dtype
    """
    return run('sddmm', g, a, b, backend=backend)


def _default_size(adj: Any, num_src: int, flow: str) -> Tuple[int, int]:
    """PyG's ``size`` (nodes of ``edge_index[0]``, of ``edge_index[1]``) when
    the caller gives none: the source side from ``x``; the target side from an
    ``EdgeIndex``'s sparse size, else square (as PyG's ``propagate``)."""
    from torch_geometric import EdgeIndex

    j = 0 if flow == 'source_to_target' else 1
    num_dst = adj.sparse_size(1 - j) if isinstance(adj, EdgeIndex) else None
    size = [num_src, num_src]
    if num_dst is not None:
        size[1 - j] = num_dst
    return size[0], size[1]


def spmm(
    x: Tensor,
    adj: Any,
    edge_weight: Optional[Tensor] = None,
    reduce: str = 'sum',
    *,
    size: Optional[Tuple[Optional[int], Optional[int]]] = None,
    flow: str = 'source_to_target',
    diag: Any = None,
    backend: str = 'auto',
    max_neighbors: Optional[int] = None,
    sampling: str = 'uniform',
    seed: Optional[int] = None,
) -> Tensor:
    """Neighbour aggregation ``out[i] = reduce_{(j -> i)} w_ji * x[j]``.

    Args:
        x: ``[num_src, F]`` node features (fp16, bf16, fp32 or fp64), or
            :class:`~pyg_tc.formats.CBSR` features (the SpGEMM kernel).
        adj: ``edge_index [2, E]`` (int32/int64), ``EdgeIndex``, torch.sparse
            ``adj_t``, ``SparseTensor`` or :class:`~pyg_tc.formats.CSRGraph`.
        edge_weight: optional ``[E]`` weights in the order of ``adj``'s edges.
        reduce: ``'sum'`` (``'add'``), ``'mean'`` or ``'max'``.
        size: PyG's ``size``: the node counts of ``edge_index[0]`` and
            ``edge_index[1]``, i.e. ``(num_src, num_dst)`` with
            ``flow='source_to_target'`` and ``(num_dst, num_src)`` with
            ``'target_to_source'``. Default: the sources are ``x``'s rows,
            the targets an ``EdgeIndex``'s sparse size or as many as the
            sources (square, as PyG). Sparse adjacencies carry their own size.
        flow: as in PyG's ``MessagePassing``: ``'source_to_target'``
            aggregates ``edge_index[0] -> edge_index[1]``,
            ``'target_to_source'`` the reverse (not for sparse adjacencies,
            which are ``adj_t`` with rows = targets).
        diag: optional per-node (or scalar) self term ``diag[i] * x[i]``.
        backend: one of :data:`BACKENDS` (module doc).
        max_neighbors: ES-SpMM (:mod:`pyg_tc.ops.es_spmm`): rows with more
            edges keep ``max_neighbors`` of them; sums are scaled by
            ``deg / max_neighbors`` (unbiased), means average the kept edges;
            rows with fewer edges are exact. None: the exact op.
        sampling: ``'uniform'`` (distinct, unbiased), ``'bucket'`` (the first
            ones) or ``'fastrand'`` (the paper's ``577 k mod deg``).
        seed: the sample is a pure function of (row, slot, seed); None draws
            a seed from PyTorch's default generator per call (a new sample
            each call, reproducible under ``torch.manual_seed``).

    Returns ``[num_dst, F]`` in ``x``'s dtype. Differentiable in ``x``,
    ``edge_weight`` and ``diag``.

    Shapes:
        - **input:** x :math:`(N_{src}, F)`, edge_weight :math:`(E)`, diag
          :math:`(N_{dst})` or a scalar
        - **output:** :math:`(N_{dst}, F)`
    """
    if size is None and isinstance(x, (Tensor, CBSR)) and x.dim() == 2:
        size = _default_size(adj, x.size(0), flow)
    g, value = resolve(adj, size=size, flow=flow, edge_weight=edge_weight)
    spec = None if max_neighbors is None else (max_neighbors, sampling, seed)
    return aggregate(g, autocast_features(x), value, reduce, diag, backend=backend, sampling=spec)


def sddmm(
    a: Tensor,
    b: Tensor,
    adj: Any,
    *,
    size: Optional[Tuple[Optional[int], Optional[int]]] = None,
    flow: str = 'source_to_target',
    backend: str = 'auto',
) -> Tensor:
    """Per-edge dot products ``out[e] = <a[dst_e], b[src_e]>``, in the order of
    ``adj``'s edges (CSR order for sparse inputs). Differentiable in a and b.

    Args:
        a (torch.Tensor): target features (fp16, bf16, fp32 or fp64).
        b (torch.Tensor): source features, same width and dtype.
        adj: ``edge_index [2, E]``, ``EdgeIndex``, a sparse adjacency or a
            :class:`~pyg_tc.formats.CSRGraph`.
        size (Tuple[int, int], optional): as in :func:`spmm` (default: from
            ``b`` and ``a``).
        flow (str, optional): as in :func:`spmm`.
        backend (str, optional): as in :func:`spmm`.

    Shapes:
        - **input:** a :math:`(N_{dst}, F)`, b :math:`(N_{src}, F)`
        - **output:** :math:`(E)` in ``a``'s dtype
    """
    if size is None and isinstance(b, Tensor) and isinstance(a, Tensor):
        size = (b.size(0), a.size(0)) if flow == 'source_to_target' else (a.size(0), b.size(0))
    g, _ = resolve(adj, size=size, flow=flow)
    out = edge_scores(g, autocast_features(a), autocast_features(b), backend)
    if g.perm is None:
        return out
    return out.index_select(0, g.csr_positions())


# ---------------------------------------------------------------------------
# backend='auto'

# Tensor cores are chosen when measured faster at all (margin 1.0; history in
# docs/sgt.md).
AUTO_MARGIN = 1.0
TUNE_CALLS = 10  # calls per timed run
TUNE_TRIALS = 5  # timed runs per backend, alternating; the best counts


def choose_backend(g: CSRGraph, width: int, dtype: torch.dtype, op: str = 'spmm') -> str:
    """What ``'auto'`` runs: 'sgt' or 'csr' for one graph, feature width,
    dtype and op ('spmm' or 'sddmm').

    Args:
        g (pyg_tc.formats.CSRGraph): the graph.
        width (int): the feature width.
        dtype (torch.dtype): the features' dtype.
        op (str, optional): ``'spmm'`` or ``'sddmm'``.

    No static threshold on the SGT statistics separated the graphs where
    tensor cores win from those where they lose (docs/sgt.md), so ``auto``
    measures: the first call per (graph, op, width, dtype) times the
    candidates the op family declares (ten calls in a CUDA graph, best of
    five alternating runs each, like ``cudnn.benchmark``) and keeps the
    faster (``AUTO_MARGIN``). Only graphs that carry SGT metadata (from
    :class:`~pyg_tc.transforms.SGTTransform` or an earlier ``'sgt'`` call)
    are considered; without kernels, on the CPU, for float64 or while a CUDA
    graph is being captured or compiled before tuning, the answer is 'csr'.
    The result is cached on the graph (per process and device)."""
    if g.cache.sgt is None or dtype == torch.float64 or not _library.kernels_loaded():
        return 'csr'  # (cheapest tests first: this runs on every layer call)
    if g.device.type != 'cuda':
        return 'csr'
    key = ('auto', op, int(width), dtype)
    hit = g.cache.get(key)
    if hit is not None:
        return hit
    if torch.compiler.is_compiling() or torch.cuda.is_current_stream_capturing():
        return 'csr'
    return g.cache.memo(key, lambda: _tune(g, int(width), dtype, op))


def _replayable(fn: Callable) -> Callable:
    """``fn`` TUNE_CALLS times as one callable: a CUDA graph of the calls when
    capturable (device time without the Python launch cost, which would
    otherwise hide the kernels' difference on small graphs), else eager."""
    try:
        replay = capture_graph([fn] * TUNE_CALLS).replay
    except RuntimeError:
        torch.cuda.synchronize()

        def replay():
            for _ in range(TUNE_CALLS):
                fn()

    replay()
    return replay


def _tune(g: CSRGraph, width: int, dtype: torch.dtype, op: str) -> str:
    gen = torch.Generator(device=g.device).manual_seed(0)
    with torch.no_grad():
        fns = FAMILIES[op].candidates(g, max(width, 1), dtype, gen)
        runs = {name: _replayable(fn) for name, fn in fns.items()}
        times = {name: math.inf for name in runs}
        for _ in range(TUNE_TRIALS):  # alternating, best of the trials
            for name, replay in runs.items():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                replay()
                end.record()
                end.synchronize()
                times[name] = min(times[name], start.elapsed_time(end))
        del runs
    return 'sgt' if times['sgt'] < AUTO_MARGIN * times['csr'] else 'csr'


# ---------------------------------------------------------------------------
# PyG's own path where it is faster (the layers ask: pyg_tc.nn._base)

#: ``backend='auto'`` takes PyG's own path where it is faster (:func:`prefers_pyg`);
#: False with ``PYG_TC_ALWAYS_KERNELS=1`` in the environment
PYG_WHERE_FASTER = os.environ.get('PYG_TC_ALWAYS_KERNELS', '').lower() not in ('1', 'true', 'yes')
#: per layer (PyG's class name): on the GPU, an eager call on an
#: ``edge_index`` of at most this many edges runs PyG's path
#: (:func:`prefers_pyg`): there the layer's eager training step is paced by
#: the host, and PyG's path issues less host work than the kernels'. A size
#: of the graph, not of the call, so every layer of a step on one graph
#: chooses alike (once the GPU paces the step, every layer should spend the
#: least GPU time). Measured on an H200 host: two-layer steps, 500 input
#: features, hidden 16 and 64 (``pyg-tc bench small_graphs --crossover``,
#: docs/results/small_graphs.md); layers not named are not slower on the
#: kernels at any size
PYG_BELOW = {'SAGEConv': 1 << 18, 'GCNConv': 1 << 19}
#: on the GPU, small graphs: an ``edge_index`` of at most this many edges that
#: carries no CSR yet runs PyG's path for its first :data:`FRESH_GRAPH_CALLS`
#: layer calls
SMALL_GRAPH_EDGES = 32768
_forced = [0]


@contextlib.contextmanager
def kernel_paths():
    """Inside: ``backend='auto'`` never prefers PyG's path for speed (what a
    captured step wants: replays cost no host time)."""
    _forced[0] += 1
    try:
        yield
    finally:
        _forced[0] -= 1


#: on the GPU, a small ``edge_index`` that carries no pyg_tc format yet runs
#: PyG's path for this many layer calls, then its CSR is built: a graph used
#: by more calls than one forward has layers is likely reused every step (a
#: full graph), while a ``DataLoader`` batch's is used once per layer and
#: then dropped, and building its CSR costs more than those calls save
FRESH_GRAPH_CALLS = 8


def prefers_pyg(
    backend: str, adj: Any, on_cpu: bool, below: int = 0, ready: Callable[[], bool] = lambda: True
) -> Optional[str]:
    """Why a layer with ``backend`` runs PyG's own path on this call for
    speed (None: it does not; pyg_tc.nn._base's module doc), with 'auto'
    and an ``edge_index``, outside :func:`kernel_paths` and ``torch.compile``:

    * on the CPU when ``on_cpu`` (the layer's reference is not faster than
      PyG there);
    * on the GPU, for an ``edge_index`` other than a
      :class:`~pyg_tc.formats.TCEdgeIndex` (which pyg_tc's loaders and
      transforms prepare for the kernels), of at most ``below`` edges (the
      layer's entry in :data:`PYG_BELOW`): its eager step is paced by the
      host there, and PyG's path issues less host work;
    * there too, for a graph of at most :data:`SMALL_GRAPH_EDGES` edges
      that carries no CSR yet (``ready()`` false), for its first
      :data:`FRESH_GRAPH_CALLS` calls.
    """
    if (
        backend != 'auto'
        or not PYG_WHERE_FASTER
        or _forced[0]
        or not isinstance(adj, Tensor)
        or adj.layout != torch.strided
    ):
        return None
    if adj.device.type == 'cpu':
        return "CPU: PyG's path is faster than the reference" if on_cpu else None
    if adj.dim() != 2 or isinstance(adj, TCEdgeIndex) or torch.compiler.is_compiling():
        return None
    E = adj.size(-1)
    if below and E <= below:
        return f"a graph of at most {below} edges: the step is paced by the host, and PyG's path issues less host work"
    if E <= SMALL_GRAPH_EDGES and not ready():
        calls = adj.__dict__.get('_pyg_tc_calls', 0)
        if calls < FRESH_GRAPH_CALLS:
            adj._pyg_tc_calls = calls + 1
            return (
                f'a small graph without its CSR, used by fewer than {FRESH_GRAPH_CALLS} layer calls '
                f'(a DataLoader batch): building the CSR costs more than PyG\'s path'
            )
    return None
