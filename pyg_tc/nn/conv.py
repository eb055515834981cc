"""Drop-in replacements for PyG's GCNConv, SAGEConv and GINConv.

Each class subclasses the PyG layer (same constructor, ``forward`` signature,
parameters and ``state_dict`` keys) and aggregates with the pyg_tc SpMM op
instead of PyG's gather/scatter message passing. ``forward`` calls the op
directly (it does not go through ``propagate``), so every adjacency type
reaches the kernels, not only the ones PyG routes to
``message_and_aggregate``; calls that need PyG's own message passing
(explain, hooks, ``decomposed_layers``, other aggregations, TorchScript) run
it (:mod:`pyg_tc.nn._base`). All three also take :class:`~pyg_tc.formats.CBSR`
node features (the output of :class:`pyg_tc.nn.MaxK`) and aggregate them with
the SpGEMM kernel.
"""

from typing import Any, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.typing import Adj, OptPairTensor, OptTensor, Size  # noqa: F401 (propagate_type)

from ..formats.carrier import SparseTensor, csr_order, resolve
from ..formats.cbsr import CBSR
from ..formats.csr import CSRGraph
from ..ops import sddmm_graph, spmm_graph
from ._base import (
    KERNEL_REDUCE,
    TCLayer,
    add_bias,
    autocast_input,
    dense,
    has_hooks,
    pyg_dtype,
    pyg_method,
)

BACKEND_DOC = """\
        backend (str, optional): pyg_tc's implementation of the sparse
            steps, decided per call by :mod:`pyg_tc.ops.dispatch`:
            :obj:`"auto"` (the faster of the CSR and tensor-core kernels for
            the graph, width and dtype, measured once per graph;
            :func:`pyg_tc.ops.choose_backend`), :obj:`"csr"` (the CSR
            engine), :obj:`"sgt"` (TC-GNN's tensor-core kernels over the
            graph's SGT; sum and mean, max stays on CSR),
            :obj:`"reference"` (the pure-PyTorch oracle) or :obj:`"pyg"`
            (PyG's own message passing, for comparisons). Without a GPU every
            backend runs the pure-PyTorch reference. Calls that need PyG's
            semantics (explain, message-passing hooks, ``decomposed_layers``,
            TorchScript) run PyG's path whatever the backend.
            (default: :obj:`"auto"`)
"""


def pyg_layer(pyg_cls: type):
    """Class decorator of a pyg_tc layer replacing ``pyg_cls``: its docstring
    is the pyg_tc one followed by ``pyg_cls``'s (math, ``Args:`` with
    ``backend`` added, ``Shapes:``), so ``help()`` and PyG's cheatsheet
    utilities read the same layer documentation; it takes ``pyg_cls``'s
    attribute annotations (TorchScript reads the class's own, e.g. the type
    of GCNConv's cache attributes)."""

    def deco(cls: type) -> type:
        cls._pyg_class = pyg_cls
        cls.__annotations__ = {**pyg_cls.__dict__.get('__annotations__', {}), **cls.__dict__.get('__annotations__', {})}
        doc = pyg_cls.__doc__ or ''
        marker = '        **kwargs (optional)'
        doc = doc.replace(marker, BACKEND_DOC + marker, 1) if marker in doc else doc + BACKEND_DOC
        cls.__doc__ = f'{cls.__doc__.rstrip()}\n\n    PyG documentation of the layer:\n\n    {doc.lstrip()}'
        return cls

    return deco


def _is_sparse(adj: Any) -> bool:
    return (SparseTensor is not None and isinstance(adj, SparseTensor)) or (
        isinstance(adj, Tensor) and adj.layout != torch.strided
    )


def _sparse_value_dtype(adj: Any) -> Optional[torch.dtype]:
    """The dtype of a sparse adjacency's values (None: a ``SparseTensor``
    without values)."""
    if isinstance(adj, Tensor):
        return adj.dtype
    value = adj.storage.value()
    return None if value is None else value.dtype


def _dtype(t: Any) -> torch.dtype:
    return t.values.dtype if isinstance(t, CBSR) else t.dtype


def _floating(x: Any) -> bool:
    """Whether every feature tensor of ``x`` (a tensor, CBSR or a pair) is
    floating point."""
    if isinstance(x, (tuple, list)):
        return all(v is None or _floating(v) for v in x)
    return isinstance(x, CBSR) or x.is_floating_point()


def _acc(t: Any) -> torch.dtype:
    """Dtype of edge values and normalisation for features ``t``: float64 for
    float64, float32 otherwise (half features keep fp32 edge values)."""
    return torch.float64 if _dtype(t) == torch.float64 else torch.float32


def _count(idx: Tensor, n: int, dtype: torch.dtype) -> Tensor:
    """Occurrences of every value of ``idx`` in [0, n) as ``dtype``: an
    ``index_add`` (exact: integer sums), unlike ``bincount`` no device
    synchronisation."""
    return torch.zeros(n, dtype=dtype, device=idx.device).index_add_(
        0, idx, torch.ones(idx.numel(), dtype=dtype, device=idx.device)
    )


def _loop_info(g: CSRGraph) -> Tuple[Tensor, Tensor]:
    """CSR positions of self loops and their rows (structure only: cached on
    g). On a graph of static shapes (``g.static_shapes``: a padded one, a
    per-hop padded one and its trimmed graphs; no synchronisation): every
    position, and its row where it is a loop, else ``num_rows`` (a row
    past the end, dropped by the callers), so the padding slots count as
    no loop."""

    def find():
        row = g.row()
        if g.static_shapes:
            live = torch.arange(row.numel(), device=row.device) < g.rowptr[-1]
            is_loop = (g.col == row) & live
            return (
                torch.arange(row.numel(), device=row.device),
                torch.where(is_loop, row.long(), torch.full_like(row, g.num_rows, dtype=torch.long)),
            )
        pos = (g.col == row).nonzero().flatten()
        return pos, row[pos].long()

    return g.cache.memo('self_loops', find)


def _loop_count(lrow: Tensor, n: int, dtype: torch.dtype) -> Tensor:
    """Self loops per row from :func:`_loop_info`'s rows (a padded graph's
    non-loops, row ``n``, dropped)."""
    return _count(lrow, n + 1, dtype)[:n]


def gcn_norm_csr(
    g: CSRGraph,
    edge_weight: Optional[Tensor],
    improved: bool = False,
    add_self_loops: bool = True,
    dtype: torch.dtype = torch.float32,
) -> Tuple[Tensor, Optional[Tensor]]:
    """PyG's ``gcn_norm`` (``add_remaining_self_loops`` semantics) on a
    square CSRGraph, without building a new edge list: self loops already in
    the graph get value 0 and every node's loop (the last existing loop's
    weight in edge order, or the fill value) becomes the fused ``diag`` term.
    Returns (values in CSR order, diag or None), computed in ``dtype`` (or
    float64 when ``edge_weight`` is float64). Differentiable in
    ``edge_weight`` (original edge order). At most two edge-sized float
    temporaries are alive at once.

    PyG difference: with duplicate self loops on one node PyG's autograd (an
    ``index_put``) hands the loop gradient to every duplicate although only the
    last one is used; here the unused duplicates get gradient 0.

    Args:
        g (pyg_tc.formats.CSRGraph): a square graph (rows = targets); padded graphs too
            (static shapes, no synchronisation).
        edge_weight (torch.Tensor, optional): weights in the adjacency's edge
            order (None: every edge weighs 1).
        improved (bool, optional): loops weigh 2 (with ``edge_weight`` only, as
            PyG).
        add_self_loops (bool, optional): add the remaining self loops.
        dtype (torch.dtype, optional): the normalisation's dtype.

    Shapes:
        - **input:** edge_weight :math:`(E)`
        - **output:** values :math:`(E)` (CSR order), diag :math:`(N)` or None
    """
    N = g.num_rows
    if edge_weight is not None and edge_weight.dtype == torch.float64:
        dtype = torch.float64
    # As in PyG: without edge weights every edge, loops included, weighs 1 and
    # `improved` has no effect (PyG fills the loop weights only when an
    # edge_weight tensor exists).
    fill = 2.0 if (improved and edge_weight is not None) else 1.0
    w = csr_order(edge_weight, g)
    w = None if w is None else w.to(dtype)
    diag_w = None
    has_loops = False
    if add_self_loops:
        pos, lrow = _loop_info(g)
        diag_w = torch.full((N,), fill, device=g.device, dtype=dtype)
        has_loops = pos.numel() > 0
        if has_loops:
            if w is not None:
                # PyG keeps the weight of the last loop edge (in edge order) per node.
                # (Padded graphs: every position, non-loops in row N, so shapes stay static.)
                ids = g.perm[pos].long() if g.perm is not None else pos
                last = torch.full((N + 1,), -1, device=g.device, dtype=torch.long).scatter_reduce(0, lrow, ids, 'amax')
                sel = (ids == last[lrow]) & (lrow < N)
                if not g.static_shapes:
                    diag_w = diag_w.index_put((lrow[sel],), w[pos[sel]])
                else:
                    diag_w = torch.cat([diag_w, diag_w.new_zeros(1)]).index_put(
                        (torch.where(sel, lrow, N),), torch.where(sel, w, 0)
                    )[:N]
                keep = torch.ones(g.num_edges, device=g.device, dtype=dtype)
                keep[pos] = (lrow == N).to(dtype)
                w = w * keep  # loops live in diag only
                del keep
    if w is None:
        deg = g.degree().to(dtype)
        if has_loops:
            deg = deg - _loop_count(lrow, N, dtype)
    else:
        deg = spmm_graph(g, torch.ones(g.num_cols, 1, device=g.device, dtype=dtype), w).view(-1)
    if diag_w is not None:
        deg = deg + diag_w
    dinv = deg.pow(-0.5)
    dinv = dinv.masked_fill(dinv == float('inf'), 0.0)
    # dinv[target] * dinv[source] for every edge: an SDDMM of width 1, which
    # allocates only its output (no edge-sized index temporaries).
    d = dinv.view(-1, 1)
    value = sddmm_graph(g, d, d)
    if value.requires_grad:
        if w is not None:
            value = value * w
    elif w is not None:
        value.mul_(w)
    elif has_loops:
        if not g.static_shapes:
            value.index_fill_(0, pos, 0.0)
        else:
            value.masked_fill_(lrow < N, 0.0)
    diag = dinv * dinv * diag_w if diag_w is not None else None
    return value, diag


class GCNNorm(NamedTuple):
    """What GCNConv aggregates with: the graph, normalised edge values in CSR
    order (and in transpose order, for the backward), the fused self-loop
    term and the kernel reduction. Held in ``_cached_edge_index`` /
    ``_cached_adj_t`` with ``cached=True``."""

    graph: CSRGraph
    value: Optional[Tensor]
    t_value: Optional[Tensor]
    diag: Optional[Tensor]
    reduce: str

    def detached(self) -> 'GCNNorm':
        """The cache entry: values detached, their transpose order precomputed
        (``self`` when it already is one: the structure-only normalisation
        memoised on the graph is shared, not copied)."""
        if self.value is None or (
            not self.value.requires_grad
            and self.t_value is not None
            and (self.diag is None or not self.diag.requires_grad)
        ):
            return self
        v = self.value.detach()
        tv = v.index_select(0, self.graph.t_perm)
        d = None if self.diag is None else self.diag.detach()
        return GCNNorm(self.graph, v, tv, d, self.reduce)


def _mean_with_loops(g: CSRGraph, value: Tensor, diag: Tensor) -> Tuple[Tensor, Tensor]:
    """PyG's mean over a row's edges plus its added self loop, as a sum: the
    row's edges without the loops already in the graph (their value moved to
    ``diag``), plus one, divide every term."""
    pos, lrow = _loop_info(g)
    cnt = g.degree().to(diag.dtype) + 1
    if pos.numel():
        cnt = cnt - _loop_count(lrow, g.num_rows, diag.dtype)
    inv = 1.0 / cnt
    return value * g.per_edge(inv), diag * inv


@pyg_layer(pyg_nn.GCNConv)
class GCNConv(TCLayer, pyg_nn.GCNConv):
    """Drop-in ``torch_geometric.nn.GCNConv`` on pyg_tc kernels.

    Self loops are not inserted into the edge list: they are a fused diagonal
    term of the SpMM (same result as PyG's ``add_remaining_self_loops``).
    Without ``edge_weight`` the normalisation depends on the structure only
    and is computed once per graph, shared by every layer on it. With
    ``cached=True`` the normalised graph is kept in PyG's cache attributes
    (``_cached_edge_index``, ``_cached_adj_t``; set them to None to drop it);
    the call that fills the cache passes gradients to ``edge_weight``, later
    calls reuse detached values. ``aggr='max'`` runs PyG's message passing.
    """

    propagate_type = {'x': 'Tensor', 'edge_weight': 'OptTensor'}
    _TC_AGGRS = ('add', 'sum', 'mean')
    _pyg_forward = pyg_method(pyg_nn.GCNConv.forward, '_pyg_forward')
    _PYG_ON_CPU = True

    def _pyg_below(self) -> int:  # (uncached, PyG normalises on every call; pyg_tc once per graph)
        return super()._pyg_below() if self.cached else 0

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        improved: bool = False,
        cached: bool = False,
        add_self_loops: Optional[bool] = None,
        normalize: bool = True,
        bias: bool = True,
        backend: str = 'auto',
        **kwargs,
    ):
        super().__init__(in_channels, out_channels, improved, cached, add_self_loops, normalize, bias, **kwargs)
        self._tc_init(backend)

    def forward(self, x: Tensor, edge_index: Adj, edge_weight: OptTensor = None) -> Tensor:
        """As PyG's ``GCNConv.forward`` (see the class doc)."""
        if torch.jit.is_scripting():
            return self._pyg_forward(x, edge_index, edge_weight)
        return self._tc_forward(x, edge_index, edge_weight)

    def __prepare_scriptable__(self) -> 'GCNConv':
        """TorchScript types the cache attributes as PyG's; drop a pyg_tc
        cache entry (it is rebuilt on the next eager call)."""
        self._drop_tc_cache()
        return self

    def _drop_tc_cache(self) -> dict:
        held = {}
        for slot in ('_cached_edge_index', '_cached_adj_t'):
            if isinstance(getattr(self, slot, None), GCNNorm):
                held[slot] = getattr(self, slot)
                setattr(self, slot, None)
        return held

    def _run_pyg(self, *args: Any) -> Tensor:
        if not (isinstance(self._cached_edge_index, GCNNorm) or isinstance(self._cached_adj_t, GCNNorm)):
            return super()._run_pyg(*args)
        held = self._drop_tc_cache()  # PyG's forward reads its own cache format
        try:
            return super()._run_pyg(*args)
        finally:
            for slot, entry in held.items():
                setattr(self, slot, entry)

    @torch.jit.unused
    def _tc_forward(self, x: Tensor, edge_index: Adj, edge_weight: OptTensor = None) -> Tensor:
        if isinstance(x, (tuple, list)) or self._pyg_reason(edge_index):
            return self._run_pyg(x, edge_index, edge_weight)  # (PyG raises for pairs)
        cbsr = isinstance(x, CBSR)
        N = x.size(0) if cbsr else x.size(self.node_dim)
        g, value, t_value, diag, reduce = self._normalized(edge_index, edge_weight, N, _acc(x))
        if cbsr:  # MaxK features: aggregate first (SpGEMM), then the linear map
            out = self.lin(self._aggregate(g, x, value, reduce, diag))
        else:
            out = self._aggregate(g, self.lin(x), value, reduce, diag, t_value)
        # PyG's dtype: its messages are the Linear's output times the edge
        # weights (fp32 under autocast), plus the bias; ours are half
        return self._add_bias(
            out, self.bias, pyg_dtype(out.dtype, self._weight_dtype(_dtype(x), edge_index, edge_weight))
        )

    def _weight_dtype(self, x_dtype: torch.dtype, adj: Any, edge_weight: Optional[Tensor]) -> Optional[torch.dtype]:
        """The dtype of PyG's edge weights for this call (None: unweighted
        messages): ``gcn_norm`` computes them in the input's dtype unless
        edge weights or a sparse adjacency's values bring their own."""
        if _is_sparse(adj):
            value = _sparse_value_dtype(adj)
            return x_dtype if value is None and self.normalize else value
        if edge_weight is not None:
            return edge_weight.dtype
        return x_dtype if self.normalize else None

    def _normalized(self, adj: Any, edge_weight: Optional[Tensor], N: int, dtype: torch.dtype) -> GCNNorm:
        slot = '_cached_adj_t' if SparseTensor is not None and isinstance(adj, SparseTensor) else '_cached_edge_index'
        if self.cached:
            entry = getattr(self, slot)
            if isinstance(entry, GCNNorm):
                return entry
        norm = self._norm(adj, edge_weight, N, dtype)
        if self.cached:
            setattr(self, slot, norm.detached())
        return norm

    def _norm(self, adj: Any, edge_weight: Optional[Tensor], N: int, dtype: torch.dtype) -> GCNNorm:
        reduce = KERNEL_REDUCE[self.aggr]
        if _is_sparse(adj):  # PyG's sparse gcn_norm: the loops become explicit entries
            if self.normalize:
                adj = gcn_norm(adj, edge_weight, N, self.improved, self.add_self_loops, self.flow, dtype)
                adj = adj[0] if isinstance(adj, tuple) else adj
            g, value = resolve(adj)
            return GCNNorm(g, value, None, None, reduce)
        g, _ = resolve(adj, size=(N, N), flow=self.flow)
        if not self.normalize:
            return GCNNorm(g, csr_order(edge_weight, g), None, None, reduce)

        def norm(w: Optional[Tensor]) -> GCNNorm:
            value, diag = gcn_norm_csr(g, w, self.improved, self.add_self_loops, dtype)
            if reduce == 'mean' and diag is not None:
                value, diag = _mean_with_loops(g, value, diag)
                return GCNNorm(g, value, None, diag, 'sum')
            return GCNNorm(g, value, None, diag, reduce)

        if edge_weight is None:
            # Structure only: computed once per graph and shared by every GCN
            # layer on it (cached or not), with its transpose order.
            key = ('gcn_norm', self.improved, self.add_self_loops, reduce, dtype)
            return g.cache.memo(key, lambda: norm(None).detached())
        return norm(edge_weight)


class _PairLayer(TCLayer):
    """The ``forward`` of layers taking a feature tensor or pair and ``size``
    (PyG's signature for SAGEConv and GINConv)."""

    def forward(self, x: Union[Tensor, OptPairTensor], edge_index: Adj, size: Size = None) -> Tensor:
        """As PyG's ``forward`` of the layer (see the class doc)."""
        if torch.jit.is_scripting():
            return self._pyg_forward(x, edge_index, size)
        return self._tc_forward(x, edge_index, size)


@pyg_layer(pyg_nn.SAGEConv)
class SAGEConv(_PairLayer, pyg_nn.SAGEConv):
    """Drop-in ``torch_geometric.nn.SAGEConv`` on pyg_tc kernels.

    For sum/mean aggregation with fewer output than input channels, ``lin_l``
    is applied before the aggregation (linear maps commute with sums), so the
    SpMM moves ``out_channels`` instead of ``in_channels`` features per edge.
    """

    propagate_type = {'x': 'OptPairTensor'}
    _pyg_forward = pyg_method(pyg_nn.SAGEConv.forward, '_pyg_forward')

    def __init__(
        self,
        in_channels: Union[int, Tuple[int, int]],
        out_channels: int,
        aggr: Optional[Union[str, Any]] = 'mean',
        normalize: bool = False,
        root_weight: bool = True,
        project: bool = False,
        bias: bool = True,
        backend: str = 'auto',
        **kwargs,
    ):
        super().__init__(in_channels, out_channels, aggr, normalize, root_weight, project, bias, **kwargs)
        self._tc_init(backend)

    @torch.jit.unused
    def _tc_forward(self, x: Union[Tensor, OptPairTensor], edge_index: Adj, size: Size = None) -> Tensor:
        if self._pyg_reason(edge_index):
            return self._run_pyg(x, edge_index, size)
        x = autocast_input(x)  # lin_l and lin_r read one half copy
        if self.project and hasattr(self, 'lin'):  # as PyG: x[0] only
            x0, x_r = (x, x) if isinstance(x, (Tensor, CBSR)) else x
            x = (self.lin(dense(x0)).relu(), x_r)
        src, x_r, g, value, reduce = self._prepare(x, edge_index, size)
        lin_l, lin_r = self.lin_l, self.lin_r if self.root_weight and x_r is not None else None
        fold = lin_r is not None and _folds(src, x_r, lin_l, lin_r)
        if isinstance(src, CBSR):  # MaxK features: the SpGEMM kernel
            out = lin_l(self._aggregate(g, src, value, reduce))
        elif reduce != 'max' and lin_l.out_channels < lin_l.in_channels and not has_hooks(lin_l):
            # (a hook on lin_l sees what PyG's sees: lin_l after the aggregation)
            t = self._aggregate(g, F.linear(src, lin_l.weight), value, reduce)
            if fold and t.dtype == x_r.dtype:  # bias and root term in one matrix product
                return self._finish(_sage_root(t, lin_l.bias, x_r, lin_r.weight))
            out = add_bias(t, lin_l.bias)
        elif fold:
            return self._finish(
                _sage_dense(self._aggregate(g, src, value, reduce), lin_l.weight, lin_l.bias, x_r, lin_r.weight)
            )
        else:
            out = lin_l(self._aggregate(g, src, value, reduce))
        if lin_r is not None:
            out = out + lin_r(dense(x_r))
        return self._finish(out)

    def _finish(self, out: Tensor) -> Tensor:
        if self.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return out


def _folds(src: Any, x_r: Any, lin_l: torch.nn.Module, lin_r: torch.nn.Module) -> bool:
    """Whether SAGE's dense part may run as :func:`_sage_dense` /
    :func:`_sage_root`: plain tensors and parameters of one dtype, no
    autocast (its casts are autograd's), no hooks (they see PyG's
    ``Linear`` calls), a root ``Linear`` without bias (PyG's), not under
    ``torch.compile`` (which fuses on its own)."""
    if not (isinstance(src, Tensor) and isinstance(x_r, Tensor)) or x_r.dim() != 2 or lin_r.bias is not None:
        return False
    if has_hooks(lin_l) or has_hooks(lin_r) or torch.compiler.is_compiling():
        return False
    if torch.is_autocast_enabled(x_r.device.type):
        return False
    dt = x_r.dtype
    return (
        src.dtype == dt
        and lin_l.weight.dtype == dt
        and lin_r.weight.dtype == dt
        and (lin_l.bias is None or lin_l.bias.dtype == dt)
    )


def _sage_dense(agg: Tensor, w_l: Tensor, b: Optional[Tensor], x_r: Tensor, w_r: Tensor) -> Tensor:
    """``agg @ w_l^T + b + x_r @ w_r^T`` (SAGE's dense part after an
    aggregation): two matrix products writing one output (the bias in the
    first, the root term accumulated in place by the second), under
    PyTorch's own autograd (no Python on the backward)."""
    out = torch.addmm(b, agg, w_l.t()) if b is not None else agg @ w_l.t()
    return out.addmm_(x_r, w_r.t())


def _sage_root(t: Tensor, b: Optional[Tensor], x_r: Tensor, w_r: Tensor) -> Tensor:
    """``t + b + x_r @ w_r^T`` (SAGE's root term and bias after a
    transform-first aggregation ``t``): one matrix product with the bias,
    one addition in place."""
    out = torch.addmm(b, x_r, w_r.t()) if b is not None else x_r @ w_r.t()
    return out.add_(t)


@pyg_layer(pyg_nn.GINConv)
class GINConv(_PairLayer, pyg_nn.GINConv):
    """Drop-in ``torch_geometric.nn.GINConv`` on pyg_tc kernels; the
    ``(1 + eps) * x`` root term is fused into the SpMM as its diagonal."""

    propagate_type = {'x': 'OptPairTensor'}
    _pyg_forward = pyg_method(pyg_nn.GINConv.forward, '_pyg_forward')
    _PYG_ON_CPU = True

    def __init__(self, nn: torch.nn.Module, eps: float = 0.0, train_eps: bool = False, backend: str = 'auto', **kwargs):
        super().__init__(nn, eps, train_eps, **kwargs)
        self._tc_init(backend)

    @torch.jit.unused
    def _tc_forward(self, x: Union[Tensor, OptPairTensor], edge_index: Adj, size: Size = None) -> Tensor:
        if self._pyg_reason(edge_index) or not _floating(x):
            return self._run_pyg(x, edge_index, size)  # (integer features: PyG promotes them)
        src, x_r, g, value, reduce = self._prepare(x, edge_index, size)
        cbsr = isinstance(src, CBSR)
        agg = self._aggregate
        # PyG adds (1 + eps) * x_r to the aggregation, which promotes features
        # of a lower precision than eps (half x, fp32 model) before nn. Under
        # autocast the half aggregation is kept for nn (whose first Linear
        # casts to half anyway).
        promotes = torch.promote_types(_dtype(src), self.eps.dtype) != _dtype(src) and not torch.is_autocast_enabled(
            g.device.type
        )
        if x_r is src and reduce != 'max' and not (cbsr and reduce == 'mean') and not promotes:
            out = agg(g, src, value, reduce, diag=1 + self.eps)
        else:
            out = agg(g, src, value, reduce)
            if x_r is not None:
                out = out + (1 + self.eps) * dense(x_r)
        return self.nn(out)
