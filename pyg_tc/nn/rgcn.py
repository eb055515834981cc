"""``RGCNConv`` on pyg_tc's CSR engine: every relation of a call in one SpMM.

PyG's ``RGCNConv`` aggregates relation by relation (one ``propagate`` per
relation, a Python loop), or, with pyg-lib, transforms each edge's message
by its relation's weight and then averages over *all* the target's edges,
which is not the per-relation mean its default path (and the R-GCN paper)
computes. This layer computes the default path's result with one
aggregation for all relations: the *typed graph* of a call has one row per
(target, relation) pair (row ``target * R + relation``), so one SpMM gives
every per-relation aggregate ``H [N_dst, R, F]``, and one matrix product
``H.view(N_dst, R * F) @ W.view(R * F, C)`` applies every relation's weight
(block-diagonal weights: one ``einsum``). Node-index inputs (trainable
embeddings, ``x=None``) gather from the weight instead: the typed graph's
columns are ``(source, relation)`` pairs of the ``[N_src * R, C]`` table of
every relation's rows. The typed graph is built on the first call and kept
on the ``edge_index`` tensor (rebuilt when ``edge_index`` or ``edge_type``
change, in place or for other tensors).
"""

import weakref
from typing import Any, Callable, Optional, Tuple, Union

import torch
from torch import Tensor
import torch_geometric.nn as pyg_nn

from ..formats.csr import _INT32_MAX, CSRGraph
from ._base import KERNEL_REDUCE, TCLayer, pyg_method
from .conv import _is_sparse, pyg_layer

#: where a typed graph is kept on its ``edge_index``: {kind: (edge_type ref, stamp, graph)}
_TYPED = '_pyg_tc_typed'


def typed_graph(edge_index: Tensor, edge_type: Tensor, num_relations: int, size: Tuple[int, int], by_source: bool):
    """The typed graph of ``(edge_index, edge_type)`` (see the module doc):
    rows ``target * R + relation``, columns ``source`` (or, ``by_source``,
    ``source * R + relation``), in edge order within a row; kept on
    ``edge_index`` and reused while neither tensor changes.

    Args:
        edge_index (torch.Tensor): ``[2, E]`` sources and targets.
        edge_type (torch.Tensor): ``[E]`` each edge's relation in ``[0, R)``.
        num_relations (int): ``R``.
        size (Tuple[int, int]): ``(N_src, N_dst)``.
        by_source (bool): columns by ``(source, relation)``.

    Shapes:
        - **output:** a :class:`~pyg_tc.formats.CSRGraph` of
          :math:`N_{dst} R` rows and :math:`N_{src}` (or :math:`N_{src} R`)
          columns
    """
    R, (n_src, n_dst) = int(num_relations), size

    def build(src: Tensor, dst: Tensor, t: Tensor) -> CSRGraph:
        cols, num_cols = (src * R + t, n_src * R) if by_source else (src, n_src)
        return CSRGraph.from_coo(cols, dst * R + t, num_cols, n_dst * R)

    return relational_graph(edge_index, edge_type, R, size, by_source, build, max(n_dst, n_src if by_source else 0) * R)


def relational_graph(
    edge_index: Tensor,
    edge_type: Tensor,
    num_relations: int,
    size: Tuple[int, int],
    key: Any,
    build: Callable[[Tensor, Tensor, Tensor], CSRGraph],
    span: int,
) -> CSRGraph:
    """A graph of ``(edge_index, edge_type)`` made by ``build(source,
    target, relation)`` (int64 per edge) once the inputs are checked, kept
    on ``edge_index`` under ``key`` and reused while neither tensor changes
    (the typed graphs of ``RGCNConv`` and ``RGATConv``). ``span``: the
    largest row or column count it makes (at most 2^31 - 1)."""
    R, (n_src, n_dst) = int(num_relations), size
    ei = edge_index.as_tensor() if hasattr(edge_index, 'as_tensor') else edge_index
    held = edge_index.__dict__.setdefault(_TYPED, {})
    stamp = (ei._version, getattr(edge_type, '_version', None), tuple(ei.shape), n_src, n_dst, R)
    entry = held.get(key)
    if entry is not None and entry[0]() is edge_type and entry[1] == stamp:
        return entry[2]
    if not isinstance(edge_type, Tensor) or edge_type.dim() != 1 or edge_type.is_floating_point():
        raise TypeError(f'pyg_tc: edge_type must be a 1-D integer tensor, got {getattr(edge_type, "dtype", edge_type)}')
    if ei.dim() != 2 or ei.size(0) != 2 or ei.is_floating_point():
        raise ValueError(f'pyg_tc: edge_index must be an integer [2, E] tensor, got {ei.dtype} {tuple(ei.shape)}')
    if edge_type.numel() != ei.size(1):
        raise ValueError(f'pyg_tc: edge_type has {edge_type.numel()} entries for the {ei.size(1)} edges of edge_index')
    if edge_type.device != ei.device:
        raise ValueError(f'pyg_tc: edge_type is on {edge_type.device}, edge_index on {ei.device}')
    if span > _INT32_MAX:
        raise ValueError(f'pyg_tc: {max(n_src, n_dst)} nodes x {R} relations exceed 2^31 - 1 typed rows')
    src, dst, t = ei[0].long(), ei[1].long(), edge_type.long()
    if t.numel():  # one synchronisation for every range
        lo, hi, s_lo, s_hi, d_lo, d_hi = torch.stack(
            [*torch.aminmax(t), *torch.aminmax(src), *torch.aminmax(dst)]
        ).tolist()
        if lo < 0 or hi >= R:
            raise IndexError(f'pyg_tc: edge_type must lie in [0, {R}) (num_relations); found min {lo}, max {hi}')
        if min(s_lo, d_lo) < 0 or s_hi >= n_src or d_hi >= n_dst:
            raise IndexError(
                f'pyg_tc: edge_index out of range: sources must lie in [0, {n_src}) and targets in [0, {n_dst}); '
                f'found sources in [{s_lo}, {s_hi}], targets in [{d_lo}, {d_hi}]'
            )
    g = build(src, dst, t)
    held[key] = (weakref.ref(edge_type), stamp, g)
    return g


@pyg_layer(pyg_nn.RGCNConv)
class RGCNConv(TCLayer, pyg_nn.RGCNConv):
    r"""Drop-in ``torch_geometric.nn.RGCNConv`` on pyg_tc kernels: all
    relations of a call aggregate in one SpMM over the typed graph and
    transform in one matrix product (see :mod:`pyg_tc.nn.rgcn`). The result
    is PyG's default path's: per relation, the ``aggr`` (``'mean'``,
    ``'add'`` / ``'sum'``, ``'max'``) of the neighbours of that relation, times
    the relation's weight, summed over relations, plus the root term and the
    bias. A ``SparseTensor`` adjacency and other aggregations run PyG's
    path.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})` (or a pair
          :math:`((|\mathcal{V_s}|, F_{in}), (|\mathcal{V_t}|, F_{in}))`, or
          node indices :math:`(|\mathcal{V}|)`, or None: trainable
          embeddings), edge indices :math:`(2, |\mathcal{E}|)`, edge types
          :math:`(|\mathcal{E}|)` in ``[0, num_relations)``
        - **output:** node features :math:`(|\mathcal{V}_t|, F_{out})`
    """

    propagate_type = {'x': 'Tensor', 'edge_type_ptr': 'OptTensor'}
    _TC_AGGRS = tuple(KERNEL_REDUCE)
    _PYG_ON_CPU = True
    _pyg_forward = pyg_method(pyg_nn.RGCNConv.forward, '_pyg_forward')

    def __init__(
        self,
        in_channels: Union[int, Tuple[int, int]],
        out_channels: int,
        num_relations: int,
        num_bases: Optional[int] = None,
        num_blocks: Optional[int] = None,
        aggr: str = 'mean',
        root_weight: bool = True,
        is_sorted: bool = False,
        bias: bool = True,
        backend: str = 'auto',
        **kwargs: Any,
    ):
        super().__init__(
            in_channels,
            out_channels,
            num_relations,
            num_bases,
            num_blocks,
            aggr,
            root_weight,
            is_sorted,
            bias,
            **kwargs,
        )
        self._tc_init(backend)

    def forward(
        self,
        x: Union[Optional[Tensor], Tuple[Optional[Tensor], Tensor]],
        edge_index: Any,
        edge_type: Optional[Tensor] = None,
    ) -> Tensor:
        """As PyG's ``forward`` of the layer (see the class doc)."""
        if torch.jit.is_scripting():
            return self._pyg_forward(x, edge_index, edge_type)
        return self._tc_forward(x, edge_index, edge_type)

    def _format_ready(self, adj: Any) -> bool:
        return bool(adj.__dict__.get(_TYPED)) if isinstance(adj, Tensor) else False

    @torch.jit.unused
    def _tc_forward(self, x: Any, edge_index: Any, edge_type: Optional[Tensor] = None) -> Tensor:
        if (
            _is_sparse(edge_index)
            or not isinstance(edge_index, Tensor)
            or edge_type is None
            or self._pyg_reason(edge_index)
        ):
            return self._run_pyg(x, edge_index, edge_type)
        x_l = x[0] if isinstance(x, tuple) else x
        if x_l is None:
            x_l = torch.arange(self.in_channels_l, device=self.weight.device)
        x_r = x[1] if isinstance(x, tuple) else x_l
        size = (x_l.size(0), x_r.size(0))
        R, C = self.num_relations, self.out_channels
        reduce = KERNEL_REDUCE[self.aggr]
        weight = self.weight
        if self.num_bases is not None:
            weight = (self.comp @ weight.view(self.num_bases, -1)).view(R, self.in_channels_l, C)
        if x_l.is_floating_point():
            g = typed_graph(edge_index, edge_type, R, size, by_source=False)
            h = self._aggregate(g, x_l, None, reduce).view(size[1], R, -1)  # per (target, relation)
            if self.num_blocks is not None:
                B = self.num_blocks
                out = torch.einsum('nrbi,rbio->nbo', h.view(size[1], R, B, -1), weight).reshape(size[1], C)
            else:
                out = h.reshape(size[1], -1) @ weight.reshape(-1, C)
        else:
            if self.num_blocks is not None:
                raise ValueError('Block-diagonal decomposition not supported for non-continuous input features.')
            table = weight.index_select(1, x_l.view(-1)).transpose(0, 1).reshape(-1, C)  # (source, relation) rows
            g = typed_graph(edge_index, edge_type, R, size, by_source=True)
            out = self._aggregate(g, table, None, reduce).view(size[1], R, C).sum(1)
        if self.root is not None:
            out = out + (x_r @ self.root if x_r.is_floating_point() else self.root[x_r])
        if self.bias is not None:
            out = out + self.bias
        return out
