"""What every pyg_tc layer shares: per call, the choice between pyg_tc's
kernels and PyG's own message passing; TorchScript support; ``node_dim``.

Drop-in first, fast where it can be (decision, docs/architecture.md): a call
runs PyG's own ``forward`` (``propagate`` with ``message`` / ``aggregate``)
whenever its semantics need it, and pyg_tc's kernels otherwise:

* ``backend='pyg'``;
* explainability (``explain`` on: edge masks, custom ``explain_message``),
  any message-passing hook (``register_{propagate,message,aggregate,
  message_and_aggregate}_forward[_pre]_hook``) and ``decomposed_layers > 1``:
  these act on PyG's per-edge messages, which the kernels never build;
* a hook (forward, forward pre-, full backward) registered on a submodule
  that PyG's forward calls and the kernel path does not
  (:attr:`TCLayer._BYPASSED`: ``aggr_module`` in every layer, GAT's
  ``lin_edge``), so the hook fires as in PyG (e.g.
  ``torch_geometric.nn.summary(..., leaf_module=None)``). Global module
  hooks (``torch.nn.modules.module.register_module_forward_hook``) do not
  change the path: they are how whole-model tools (``ModuleTracker``,
  ``FlopCounterMode``) observe a model as it runs, and sending every layer to
  PyG's path would change what they observe; they fire for the layer and the
  modules its kernel path calls (its Linears), not for ``aggr_module``;
* an aggregation the kernels do not compute for this layer (an
  ``Aggregation`` module, a list of them, or a reduction outside
  :attr:`_TC_AGGRS`);
* under ``torch.compile`` with no format yet on the adjacency (building one
  needs data-dependent shapes, which would break the graph; PyG's path traces
  without breaks). Build it eagerly first (run once, or apply a transform) to
  compile the kernel path;
* ``torch.jit.script``: TorchScript compiles PyG's ``forward`` as is;
* with ``backend='auto'``, where PyG's own path is faster
  (:func:`pyg_tc.ops.dispatch.prefers_pyg`):
  on the CPU for the layers whose PyTorch reference is not faster than PyG
  (all but SAGE, whose reference projects before it aggregates), and on the
  GPU, eagerly, on an ``edge_index`` other than a
  :class:`~pyg_tc.formats.TCEdgeIndex`, for the layers whose host work per
  call exceeds PyG's on graphs of at most ``dispatch.PYG_BELOW[layer]``
  edges (SAGE; GCN with ``cached=True``), where the host, not the GPU,
  paces the step, and for every layer on a graph of at most
  ``dispatch.SMALL_GRAPH_EDGES`` edges that carries no CSR yet, for its
  first ``dispatch.FRESH_GRAPH_CALLS`` calls (a ``DataLoader`` batch is used
  once per layer: building its CSR costs more than those calls save; a
  full graph gets its CSR after a few steps; :class:`~pyg_tc.loader.GraphLoader`
  batches carry theirs).
  :class:`~pyg_tc.capture.CapturedStep` and :class:`~pyg_tc.capture.CapturedForward`
  run pyg_tc's kernels (``dispatch.kernel_paths()``): replayed, the host
  costs nothing. ``PYG_TC_ALWAYS_KERNELS=1`` in the environment (read at
  import, or ``dispatch.PYG_WHERE_FASTER = False``) turns this off: the test
  suite does, to test pyg_tc's own paths.

``torch.package``: a layer is packaged as itself when the exporter has an
action for pyg_tc (``extern('pyg_tc.**')`` or ``intern``); otherwise, with a
warning, as PyG's layer with the same state (same parameters and results at
PyG's speed), so a package that only knows ``torch_geometric`` still works.

Features of any rank work on the kernel path: the node dimension
(``node_dim``, -2 by default: static graphs ``[B, N, F]``) is moved to the
front and the rest flattened, so one SpMM serves every batch element.
"""

from __future__ import annotations

import copy
import copyreg
import importlib
import operator
import types
import warnings
from typing import Any, Callable, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ..formats.carrier import has_graph, resolve
from ..formats.cbsr import CBSR
from ..formats.csr import CSRGraph
from ..ops import dispatch, ensure, es_spmm
from ..ops.dense import biased_sum

#: a layer's ``backend``: the ops' vocabulary plus PyG's own message passing
BACKENDS = dispatch.BACKENDS + ('pyg',)
KERNEL_REDUCE = dispatch.REDUCE
_HOOKS = tuple(
    f'_{what}_forward{pre}_hooks'
    for what in ('propagate', 'message', 'aggregate', 'message_and_aggregate', 'edge_update')
    for pre in ('_pre', '')
)
_MODULE_HOOKS = ('_forward_hooks', '_forward_pre_hooks', '_backward_hooks', '_backward_pre_hooks')


def pyg_method(fn: Callable, name: str) -> Callable:
    """``fn`` (a PyG layer's method) under another name. TorchScript compiles
    a method under its function's ``__name__``, so PyG's ``forward`` has to
    be renamed to live beside pyg_tc's; source, globals and annotations stay
    PyG's, so TorchScript compiles exactly PyG's code."""
    out = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__annotations__ = dict(fn.__annotations__)
    out.__qualname__ = f'{fn.__qualname__.rsplit(".", 1)[0]}.{name}'
    out.__doc__ = fn.__doc__
    return out


def dense(x: Any) -> Any:
    """CBSR features (or pairs holding them) as dense tensors, for paths
    without a CBSR kernel."""
    if isinstance(x, CBSR):
        return x.to_dense()
    if isinstance(x, (tuple, list)):
        return tuple(dense(v) for v in x)
    return x


#: float16's largest finite value
FP16_MAX = 65504.0


def warn_fp16_sum(g: CSRGraph, layer: str) -> None:
    """The overflow policy's notice (docs/half.md): an unweighted sum in
    float16 over rows of more than 2048 neighbours can exceed 65504, and
    then gives inf where the exact sum does not fit float16 (never silent
    saturation). Once per graph, eager only (the graph's maximum degree is
    read once and kept)."""
    if torch.compiler.is_compiling() or g.num_rows == 0:
        return
    if 'fp16_sum' in g.cache.notices:
        return
    if g.static_shapes and g.cache.max_degree is None:  # reading it would synchronise the step
        return
    g.cache.notices.add('fp16_sum')
    deg = g.max_degree()
    if deg > 2048:
        warnings.warn(
            f'pyg_tc: {layer} sums up to {deg:,} neighbour features in float16: a row whose sum exceeds '
            f'{FP16_MAX:.0f} gives inf (exactly where the fp32 sum does not fit float16). To avoid it use '
            'torch.bfloat16 (fp32 range), or a normalised aggregation (aggr="mean", GCN normalisation), '
            "which is scaled before it is rounded (HalfGNN's GIN variant: GINConv(nn, aggr='mean')).",
            stacklevel=4,
        )


def autocast_input(x: Any) -> Any:
    """A layer's input features (a tensor or a pair) through
    :func:`~pyg_tc.ops.dispatch.autocast_features`: under autocast, one cast
    per input tensor for all the layer's Linears (each would cast it again)."""
    if isinstance(x, (tuple, list)):
        return type(x)(dispatch.autocast_features(v) for v in x)
    return dispatch.autocast_features(x)


def has_hooks(module: Optional[torch.nn.Module]) -> bool:
    """Whether ``module`` has hooks of its own (forward, forward pre-, full
    backward or backward pre-hooks; global module hooks are not counted).
    A dictionary look-up per kind: this runs on every layer call."""
    if module is None:
        return False
    state = module.__dict__
    for hooks in _MODULE_HOOKS:
        if state.get(hooks):
            return True
    return False


def pyg_dtype(*dtypes: Optional[torch.dtype]) -> torch.dtype:
    """The dtype PyG's arithmetic gives for operands of ``dtypes`` (None
    skipped): torch's type promotion, e.g. half messages times fp32 edge
    weights, or a half aggregation plus an fp32 bias, give float32."""
    out = None
    for dt in dtypes:
        if dt is not None:
            out = dt if out is None else torch.promote_types(out, dt)
    assert out is not None
    return out


def softmax_dtype(t: Tensor) -> Optional[torch.dtype]:
    """float32 inside ``torch.autocast('cuda')`` for a CUDA tensor ``t``
    (PyG's edge softmax calls ``exp``, and GAT's scores ``sum``, which CUDA
    autocast runs in fp32 whatever the operands), else None. CPU autocast
    has no such policy for them."""
    if t.is_cuda and torch.is_autocast_enabled('cuda'):
        return torch.float32
    return None


def add_bias(out: Tensor, bias: Optional[Tensor]) -> Tensor:
    """``out + bias`` as a Linear adds it: in ``out``'s dtype when ``out``
    is half and ``bias`` fp32 (SAGE's ``lin_l`` applied before its
    aggregation: under ``torch.autocast`` PyG's ``lin_l`` returns half)."""
    if bias is None:
        return out
    if out.dtype != bias.dtype and out.dtype in (torch.float16, torch.bfloat16):
        bias = bias.to(out.dtype)
    return out + bias


def _same(out: Tensor) -> Tensor:
    return out


def node_major(x: Tensor, node_dim: int) -> Tuple[Tensor, Callable[[Tensor], Tensor]]:
    """``x`` as a 2-D ``[num_nodes, rest]`` tensor (``node_dim`` moved to the
    front, the other dimensions flattened) and the function that gives an
    aggregated ``[num_rows, rest]`` result ``x``'s layout back."""
    if x.dim() == 2 and (node_dim == -2 or node_dim == 0):
        return x, _same
    d = node_dim % x.dim() if x.dim() else 0
    xm = x.movedim(d, 0)
    shape = xm.shape[1:]
    return xm.reshape(xm.size(0), -1), lambda out: out.view(out.size(0), *shape).movedim(0, d).contiguous()


class _ByName:
    """Pickles as ``getattr(importlib.import_module(module), name)``: a class
    referenced by where it is found at load time, not by the object pickled
    (PyG's test harness rebinds PyG's class names to pyg_tc's classes)."""

    def __init__(self, cls: type):
        self.module, self.name = cls.__module__, cls.__qualname__

    def __reduce__(self):
        return getattr, (_Module(self.module), self.name)


class _Module:
    def __init__(self, name: str):
        self.name = name

    def __reduce__(self):
        return importlib.import_module, (self.name,)


class _Reconstruct:
    """Pickles as an instance of ``cls`` with instance dict ``state`` (what
    pickle does for any ``nn.Module``), for another class than its own."""

    def __init__(self, cls: Any, state: dict):
        self.cls, self.state = cls, state

    def __reduce__(self):
        return copyreg._reconstructor, (self.cls, object, None), self.state


class TCLayer:
    """Mixin of every pyg_tc conv layer (before the PyG class in the bases).

    A subclass sets ``_pyg_forward = pyg_method(PyGClass.forward,
    '_pyg_forward')``, implements ``_tc_forward`` (the kernel path, same
    arguments as ``forward``) and defines ``forward`` with PyG's signature as
    ``if torch.jit.is_scripting(): return self._pyg_forward(...)`` followed by
    ``return self._tc_forward(...)``.
    """

    #: aggregations the kernel path computes for this layer
    _TC_AGGRS: Tuple[str, ...] = tuple(KERNEL_REDUCE)
    #: submodules PyG's forward calls and the kernel path does not: a hook
    #: on one sends the call to PyG's path, so that it fires
    _BYPASSED: Tuple[str, ...] = ('aggr_module',)
    #: the PyG class this layer replaces (set by ``pyg_layer``)
    _pyg_class: type
    # PyG compiles a per-class ``propagate`` on first instantiation and keeps
    # the one it found as ``_orig_propagate``, which explain mode and
    # ``decomposed_layers`` switch to. Inherited from the PyG class, that would
    # be PyG's already compiled one (no explain support) whenever a PyG layer
    # was built first; the generic one is pinned here.
    propagate = MessagePassing.propagate

    #: set by :class:`~pyg_tc.nn.HeteroConv` for one call: the layer returns
    #: its output without the bias and leaves ``(bias, dtype)`` in
    #: ``_deferred_bias``, for the sum over edge types to add in one pass
    _defer_bias = False

    def _add_bias(self, out: Tensor, bias: Optional[Tensor], dtype: torch.dtype) -> Tensor:
        """The layer's last step: PyG's ``out + bias`` in PyG's ``dtype``
        (:func:`~pyg_tc.ops.dense.biased_sum` of one term: one cast at most,
        a large half output in one kernel), or deferred (above)."""
        if self._defer_bias:
            self._deferred_bias = (bias, dtype)
            return out
        return biased_sum([(out, bias, dtype)])

    def _tc_init(self, backend: str) -> None:
        self.backend = dispatch.check_backend(backend, BACKENDS)
        ensure()  # build/load the kernels at construction, not inside a traced forward

    def _pyg_reason(self, adj: Any) -> Optional[str]:
        """Why this call runs PyG's own message passing (None: the kernels)."""
        if self.backend == 'pyg':
            return "backend='pyg'"
        if self.explain:
            return 'explain'
        if self.decomposed_layers > 1:
            return 'decomposed_layers'
        state = self.__dict__  # (a plain loop: this check runs on every call)
        for hooks in _HOOKS:
            if state.get(hooks):
                return 'message-passing hooks'
        modules = state['_modules']
        for name in self._BYPASSED:
            if has_hooks(modules.get(name)):
                return f'hooks on {name}'
        if not isinstance(self.aggr, str) or self.aggr not in self._TC_AGGRS:
            return f'aggr={self.aggr!r}'
        if torch.compiler.is_compiling() and not self._format_ready(adj):
            return 'torch.compile without a prebuilt format'
        return dispatch.prefers_pyg(
            self.backend, adj, self._PYG_ON_CPU, self._pyg_below(), lambda: self._format_ready(adj)
        )

    #: ``backend='auto'`` on the CPU runs PyG's path (its reference is not faster)
    _PYG_ON_CPU = False

    def _pyg_below(self) -> int:
        """The graph size (edges) up to which ``backend='auto'`` runs PyG's
        path on the GPU (``dispatch.PYG_BELOW``; 0: none)."""
        return dispatch.PYG_BELOW.get(getattr(self, '_pyg_class', TCLayer).__name__, 0)

    def _format_ready(self, adj: Any) -> bool:
        """Whether ``adj`` carries the format this layer runs on (under
        ``torch.compile`` nothing can be built)."""
        return has_graph(adj, self.flow)

    def _run_pyg(self, *args: Any) -> Tensor:
        """PyG's own forward for this call (CBSR features densified)."""
        for a in args:  # (a plain loop: on small graphs this call's host time is the step's)
            if isinstance(a, (CBSR, tuple, list)):
                return self._pyg_forward(*dense(args))
        return self._pyg_forward(*args)

    def _aggregate(
        self,
        g: CSRGraph,
        x: Any,
        value: Optional[Tensor],
        reduce: str,
        diag: Any = None,
        t_value: Optional[Tensor] = None,
    ) -> Tensor:
        """``reduce_{j -> i} value * x_j (+ diag_i * x_i)`` along ``node_dim``
        (CBSR features: the SpGEMM), on the layer's ``backend``
        (:func:`pyg_tc.ops.dispatch.aggregate`; a backend without the
        reduction runs the CSR kernel). Inside ``torch.autocast('cuda')`` fp32
        features are cast once to the autocast dtype
        (:func:`~pyg_tc.ops.dispatch.autocast_features`); inside
        :func:`pyg_tc.sampled_aggregation` the sampled aggregation runs (``sampling=`` of :func:`~pyg_tc.ops.dispatch.aggregate`)."""
        spec = es_spmm.active()
        restore = _same
        if not isinstance(x, CBSR):
            x = dispatch.autocast_features(x)
            if spec is None and x.dtype == torch.float16 and value is None and reduce == 'sum':
                warn_fp16_sum(g, type(self).__name__)
            x, restore = node_major(x, self.node_dim)
        return restore(
            dispatch.aggregate(g, x, value, reduce, diag, t_value, self.backend, strict=False, sampling=spec)
        )

    def _prepare(self, x: Any, adj: Any, size: Optional[Tuple[int, int]]):
        """(message source features, root features, graph, edge values in CSR
        order or None, kernel reduction) of a call with a feature tensor or
        pair; CBSR features are densified for max (no CBSR max kernel)."""
        src, x_r, sizes = self._sizes(x)
        g, value = resolve(adj, size=size or sizes, flow=self.flow)
        reduce = KERNEL_REDUCE[self.aggr]
        if isinstance(src, CBSR) and reduce == 'max':
            src = src.to_dense()
        return src, x_r, g, value, reduce

    def _sizes(self, x: Any) -> Tuple[Any, Any, Tuple[int, int]]:
        """(message source features ``x[0]``, root features ``x[1]``, PyG's
        ``size``) of a feature tensor or pair. As PyG's compiled
        ``propagate``: ``size`` is (nodes of ``edge_index[0]``, nodes of
        ``edge_index[1]``) = (x[0], x[1]) along ``node_dim``, and messages
        come from ``x[0]`` for either flow."""
        if isinstance(x, Tensor):
            n = x.size(self.node_dim)
            return x, x, (n, n)
        x0, x1 = (x, x) if isinstance(x, CBSR) else x
        n0 = x0.size(0) if isinstance(x0, CBSR) else x0.size(self.node_dim)
        n1 = n0 if x1 is None else (x1.size(0) if isinstance(x1, CBSR) else x1.size(self.node_dim))
        return x0, x1, (n0, n1)

    def _package_state(self, cls: type) -> dict:
        """This layer's instance state for ``cls`` (this class or PyG's): the
        inspector points at ``cls`` by name; PyG's class gets no pyg_tc cache
        entries."""
        state = dict(self.__dict__)
        if cls is not type(self):
            for k in ('_cached_edge_index', '_cached_adj_t'):
                if state.get(k) is not None and type(state[k]) is not tuple:
                    state[k] = None  # a pyg_tc entry (PyG's is a plain tuple or SparseTensor)
        inspector = copy.copy(self.inspector)
        inspector._cls, inspector._source_dict = _ByName(cls), {}
        state['inspector'] = inspector
        return state

    def __reduce_package__(self, exporter: Any):
        """``torch.package`` hook (see the module doc): the layer is saved as
        its own pickle resource, as this class or as PyG's, and loaded by
        ``importer.load_pickle``."""
        cls = type(self)
        if not any(pattern.matches(cls.__module__) for pattern in exporter.patterns):
            warnings.warn(
                f'pyg_tc: torch.package has no action for {cls.__module__}, so the '
                f'package holds PyG\'s {self._pyg_class.__name__} (same parameters and '
                f"results); extern or intern 'pyg_tc.**' to package pyg_tc's layer"
            )
            cls = self._pyg_class
        # Classes go by name (a class object with this hook would be taken for
        # an instance); their module is declared, so the exporter checks it.
        exporter.add_dependency(cls.__module__)
        resource = f'{cls.__name__}_{id(self)}.pkl'
        exporter.save_pickle('pyg_tc_layers', resource, _Reconstruct(_ByName(cls), self._package_state(cls)))
        return operator.methodcaller('load_pickle', 'pyg_tc_layers', resource), ()
