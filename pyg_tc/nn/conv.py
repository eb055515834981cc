"""Drop-in replacements for PyG's GCNConv, SAGEConv and GINConv.

All three also take :class:`~pyg_tc.formats.CBSR` node features (the output
of :class:`pyg_tc.nn.MaxK`) and aggregate them with the SpGEMM kernel (sum
and mean; max and ``backend='pyg'`` densify first).

Each class subclasses the PyG layer (same constructor, ``forward`` signature,
parameters and ``state_dict`` keys) and replaces the gather/scatter
message passing by the pyg_tc SpMM op. ``forward`` calls the op directly
(it does not go through ``propagate``), so every adjacency type reaches the
kernels, not only the ones PyG routes to ``message_and_aggregate``;
``message_and_aggregate`` is overridden too, for code that calls
``propagate`` on a sparse adjacency itself.

``backend``: ``'csr'`` uses the CSR engine (CUDA kernels when built, the
pure-PyTorch reference otherwise); ``'sgt'`` TC-GNN's tensor-core kernels
over SGT blocks (sum / mean aggregation; max stays on CSR); ``'auto'``
(default) picks one of the two per graph and width
(:func:`pyg_tc.ops.choose_backend`); ``'pyg'`` runs PyG's own
implementation, for comparisons.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from ..formats.carrier import SparseTensor, get_graph
from ..formats.cbsr import CBSR
from ..formats.csr import CSRGraph
from ..ops import (_to_csr_order, cbsr_spmm_graph, choose_backend, ensure, sddmm_graph, sgt_of,
                   sgt_sddmm_cells, sgt_spmm_cells, sgt_spmm_graph, spmm, spmm_graph)

_BACKENDS = ('auto', 'csr', 'sgt', 'pyg')
_KERNEL_AGGR = {'add': 'sum', 'sum': 'sum', 'mean': 'mean', 'max': 'max'}


def _check_backend(backend: str) -> str:
    if backend not in _BACKENDS:
        raise ValueError(f'pyg_tc: backend must be one of {_BACKENDS}, got {backend!r}')
    return backend


def _dense(x: Any) -> Any:
    """CBSR features (or pairs holding them) as dense tensors, for paths
    without a CBSR kernel."""
    if isinstance(x, CBSR):
        return x.to_dense()
    if isinstance(x, (tuple, list)):
        return tuple(_dense(v) for v in x)
    return x


def _is_sparse(adj: Any) -> bool:
    return (SparseTensor is not None and isinstance(adj, SparseTensor)) or (
        isinstance(adj, Tensor) and adj.layout != torch.strided)


class _TCMixin:
    def _tc_init(self, backend: str) -> None:
        self.backend = _check_backend(backend)
        ensure()  # build/load the kernels at construction, not inside a traced forward

    def _use_kernels(self) -> bool:
        return self.backend != 'pyg' and isinstance(self.aggr, str) and self.aggr in _KERNEL_AGGR

    def _engine(self, g: CSRGraph, x: Tensor, reduce: str = 'sum', op: str = 'spmm') -> str:
        """'sgt' or 'csr' for this call (max aggregation always 'csr')."""
        if reduce == 'max' or self.backend == 'csr':
            return 'csr'
        if self.backend == 'sgt':
            return 'sgt'
        return choose_backend(g, x.size(1), x.dtype, op)

    def _spmm(self, g: CSRGraph, x: Tensor, value: Optional[Tensor], reduce: str,
              diag: Any = None) -> Tensor:
        if self._engine(g, x, reduce) == 'sgt':
            return sgt_spmm_graph(g, x, value, reduce, diag)
        return spmm_graph(g, x, value, reduce, diag)

    def _prepare(self, x: Any, edge_index: Any, size: Optional[Tuple[int, int]]):
        """(x_src, x_root, graph, edge values or None, reduce), PyG's pairing and
        size conventions."""
        x_src, x_r = (x, x) if isinstance(x, (Tensor, CBSR)) else x
        if size is None:
            size = (x_src.size(0), x_r.size(0) if x_r is not None else x_src.size(0))
        g, value = get_graph(edge_index, size=size, flow=self.flow)
        reduce = _KERNEL_AGGR[self.aggr]
        if isinstance(x_src, CBSR) and reduce == 'max':  # no CBSR max kernel
            x_src = x_src.to_dense()
        return x_src, x_r, g, value, reduce

    def message_and_aggregate(self, adj_t: Any, x: Any) -> Tensor:
        x_src = x[0] if isinstance(x, (tuple, list)) else x
        return spmm(x_src, adj_t, reduce=_KERNEL_AGGR.get(self.aggr, self.aggr))


def _loop_info(g: CSRGraph) -> Tuple[Tensor, Tensor]:
    """CSR positions of self loops and their rows (structure only: cached on g)."""
    def find():
        row = g.row()
        pos = (g.col == row).nonzero().flatten()
        return pos, row[pos].long()
    return g.memo('self_loops', find)


def gcn_norm_csr(g: CSRGraph, edge_weight: Optional[Tensor], improved: bool = False,
                 add_self_loops: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
    """PyG's ``gcn_norm`` (``add_remaining_self_loops`` semantics) on a
    square CSRGraph, without building a new edge list: self loops already in
    the graph get value 0 and every node's loop (the last existing loop's
    weight in edge order, or the fill value) becomes the fused ``diag`` term.
    Returns (values in CSR order, diag or None). Differentiable in
    ``edge_weight`` (original edge order). At most two edge-sized float
    temporaries are alive at once.

    PyG difference: with duplicate self loops on one node PyG's autograd (an
    ``index_put``) hands the loop gradient to every duplicate although only the
    last one is used; here the unused duplicates get gradient 0.
    """
    N = g.num_rows
    # As in PyG: without edge weights every edge, loops included, weighs 1 and
    # `improved` has no effect (PyG fills the loop weights only when an
    # edge_weight tensor exists).
    fill = 2.0 if (improved and edge_weight is not None) else 1.0
    w = _to_csr_order(edge_weight, g)
    w = None if w is None else w.float()
    diag_w = None
    has_loops = False
    if add_self_loops:
        pos, lrow = _loop_info(g)
        diag_w = torch.full((N,), fill, device=g.device)
        has_loops = pos.numel() > 0
        if has_loops:
            if w is not None:
                # PyG keeps the weight of the last loop edge (in edge order) per node.
                ids = g.perm[pos].long() if g.perm is not None else pos
                last = torch.full((N,), -1, device=g.device, dtype=torch.long).scatter_reduce(
                    0, lrow, ids, 'amax')
                sel = ids == last[lrow]
                diag_w = diag_w.index_put((lrow[sel],), w[pos[sel]])
                keep = torch.ones(g.num_edges, device=g.device)
                keep[pos] = 0
                w = w * keep  # loops live in diag only
                del keep
    if w is None:
        deg = g.degree().float()
        if has_loops:
            deg = deg - torch.bincount(lrow, minlength=N).float()
    else:
        deg = spmm_graph(g, torch.ones(g.num_cols, 1, device=g.device), w).view(-1)
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
        value.index_fill_(0, pos, 0.0)
    diag = dinv * dinv * diag_w if diag_w is not None else None
    return value, diag


# PyG 2.8 generates each class's `propagate` from the `self.propagate(...)`
# call it finds in the class source; these subclasses never call it, so the
# parameter types are declared explicitly (backend='pyg' and user code that
# calls propagate rely on them).
_PAIR = 'Tuple[Tensor, Optional[Tensor]]'


class GCNConv(_TCMixin, pyg_nn.GCNConv):
    """Drop-in ``torch_geometric.nn.GCNConv`` on pyg_tc kernels.

    Self loops are not inserted into the edge list: they are a fused diagonal
    term of the SpMM (same result as PyG's ``add_remaining_self_loops``).
    With ``cached=True`` the graph format, the normalised values, their
    transpose order and the diagonal are computed once.
    """
    propagate_type = {'x': Tensor, 'edge_weight': Optional[Tensor]}

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False,
                 cached: bool = False, add_self_loops: Optional[bool] = None,
                 normalize: bool = True, bias: bool = True, backend: str = 'auto', **kwargs):
        super().__init__(in_channels, out_channels, improved, cached, add_self_loops, normalize,
                         bias, **kwargs)
        self._tc_cache = None
        self._tc_init(backend)

    def reset_parameters(self):
        super().reset_parameters()
        self._tc_cache = None

    def _normalized(self, edge_index: Any, edge_weight: Optional[Tensor], N: int):
        if self.cached and self._tc_cache is not None:
            return self._tc_cache
        if _is_sparse(edge_index):
            adj = edge_index
            if self.normalize:
                adj = gcn_norm(adj, edge_weight, N, self.improved, self.add_self_loops,
                               self.flow, torch.float32)
                adj = adj[0] if isinstance(adj, tuple) else adj
            g, value = get_graph(adj)
            diag = None
        else:
            g, _ = get_graph(edge_index, size=(N, N), flow=self.flow)
            if self.normalize and edge_weight is None:
                # Structure only: computed once per graph and shared by every
                # GCN layer on it (cached or not), with its transpose order.
                def norm():
                    v, d = gcn_norm_csr(g, None, self.improved, self.add_self_loops)
                    return g, v, v.index_select(0, g.t_perm), d
                entry = g.memo(('gcn_norm', self.improved, self.add_self_loops), norm)
                if self.cached:
                    self._tc_cache = entry
                return entry
            if self.normalize:
                value, diag = gcn_norm_csr(g, edge_weight, self.improved, self.add_self_loops)
            else:
                value, diag = _to_csr_order(edge_weight, g), None
        t_value = None
        if self.cached and value is not None:
            value = value.detach()
            t_value = value.index_select(0, g.t_perm)
            diag = diag.detach() if diag is not None else None
        entry = (g, value, t_value, diag)
        if self.cached:
            self._tc_cache = entry
        return entry

    def forward(self, x: Tensor, edge_index: Any, edge_weight: Optional[Tensor] = None) -> Tensor:
        if not self._use_kernels():
            return super().forward(_dense(x), edge_index, edge_weight)
        if isinstance(x, CBSR):
            # MaxK features: aggregate first (SpGEMM), then the linear map;
            # A (X W) = (A X) W, so the result is PyG's up to rounding.
            g, value, _, diag = self._normalized(edge_index, edge_weight, x.size(0))
            if value is not None and value.dtype != torch.float32:
                value = value.float()
            out = self.lin(cbsr_spmm_graph(g, x, value, 'sum', diag))
            return out + self.bias if self.bias is not None else out
        if isinstance(x, (tuple, list)):
            raise ValueError(f"'{self.__class__.__name__}' received a tuple of node features as "
                             f"input while this layer does not support bipartite message passing. "
                             f"Please try other layers such as 'SAGEConv' or 'GraphConv' instead")
        g, value, t_value, diag = self._normalized(edge_index, edge_weight, x.size(0))
        x = self.lin(x)
        if value is not None and value.dtype != torch.float32:
            value = value.float()
        if self._engine(g, x) == 'sgt':
            out = sgt_spmm_graph(g, x, value, 'sum', diag)
        else:
            out = spmm_graph(g, x, value, _KERNEL_AGGR[self.aggr], diag, t_value=t_value)
        if self.bias is not None:
            out = out + self.bias
        return out


class SAGEConv(_TCMixin, pyg_nn.SAGEConv):
    """Drop-in ``torch_geometric.nn.SAGEConv`` on pyg_tc kernels.

    For sum/mean aggregation with fewer output than input channels, ``lin_l``
    is applied before the aggregation (linear maps commute with sums), so the
    SpMM moves ``out_channels`` instead of ``in_channels`` features per edge.
    """
    propagate_type = {'x': _PAIR}

    def __init__(self, in_channels: Union[int, Tuple[int, int]], out_channels: int,
                 aggr: Optional[Union[str, Any]] = 'mean', normalize: bool = False,
                 root_weight: bool = True, project: bool = False, bias: bool = True,
                 backend: str = 'auto', **kwargs):
        super().__init__(in_channels, out_channels, aggr, normalize, root_weight, project, bias,
                         **kwargs)
        self._tc_init(backend)

    def forward(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Any,
                size: Optional[Tuple[int, int]] = None) -> Tensor:
        if not self._use_kernels():
            return super().forward(_dense(x), edge_index, size)
        x_src, x_r, g, value, reduce = self._prepare(x, edge_index, size)
        if isinstance(x_src, CBSR) and self.project:
            x_src = x_src.to_dense()
        if self.project and hasattr(self, 'lin'):
            x_src = self.lin(x_src).relu()
        lin_l = self.lin_l
        if isinstance(x_src, CBSR):  # MaxK features: the SpGEMM kernel
            out = lin_l(cbsr_spmm_graph(g, x_src, value, reduce))
        elif reduce != 'max' and lin_l.out_channels < lin_l.in_channels:
            out = self._spmm(g, F.linear(x_src, lin_l.weight), value, reduce)
            if lin_l.bias is not None:
                out = out + lin_l.bias
        else:
            out = lin_l(self._spmm(g, x_src, value, reduce))
        if self.root_weight and x_r is not None:
            out = out + self.lin_r(_dense(x_r))
        if self.normalize:
            out = F.normalize(out, p=2., dim=-1)
        return out


class GINConv(_TCMixin, pyg_nn.GINConv):
    """Drop-in ``torch_geometric.nn.GINConv`` on pyg_tc kernels; the
    ``(1 + eps) * x`` root term is fused into the SpMM as its diagonal."""
    propagate_type = {'x': _PAIR}

    def __init__(self, nn: torch.nn.Module, eps: float = 0., train_eps: bool = False,
                 backend: str = 'auto', **kwargs):
        super().__init__(nn, eps, train_eps, **kwargs)
        self._tc_init(backend)

    def forward(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Any,
                size: Optional[Tuple[int, int]] = None) -> Tensor:
        if not self._use_kernels():
            return super().forward(_dense(x), edge_index, size)
        x_src, x_r, g, value, reduce = self._prepare(x, edge_index, size)
        cbsr = isinstance(x_src, CBSR)
        agg = cbsr_spmm_graph if cbsr else self._spmm
        if x_r is x_src and reduce != 'max' and not (cbsr and reduce == 'mean'):
            out = agg(g, x_src, value, reduce, diag=1 + self.eps)
        else:
            out = agg(g, x_src, value, reduce)
            if x_r is not None:
                out = out + (1 + self.eps) * _dense(x_r)
        return self.nn(out)
