"""``RGATConv`` on pyg_tc's fused attention: every relation of a call in one
attention launch.

PyG's ``RGATConv`` transforms each edge's endpoints by the edge's relation
weight (an ``[E, F, H*C]`` gather of the weights and two batched products
per edge) and runs the attention with unfused scatter operations. This
layer projects every node by every relation's weight in one batched product
(``P [R, N, H*C]``) and runs pyg_tc's fused GAT attention once over a
*relational graph*: column ``relation * N + source`` reads the source's
projection under the edge's relation, and the logit of an edge is
``leaky_relu(q_i + k_j (+ edge term))`` with ``k = P @ k`` per column and
``q = P @ q`` of the target under the edge's relation. With
``attention_mechanism='across-relation'`` the rows are the targets (one
softmax over all incoming edges); with ``'within-relation'`` they are
``relation * N + target`` (one softmax per relation), summed over the
relations afterwards. The relational graph is built on the first call and
kept on the ``edge_index`` tensor, as ``RGCNConv``'s typed graph.
"""

from typing import Any, Optional, Tuple

import torch
from torch import Tensor
import torch_geometric.nn as pyg_nn

from ..formats.csr import CSRGraph
from ..ops import dispatch
from ..ops.attn import new_rng
from ..ops.csr import acc_dtype
from ._base import TCLayer, pyg_method
from .conv import _is_sparse, pyg_layer
from .rgcn import _TYPED, relational_graph


def _graph(edge_index: Tensor, edge_type: Tensor, R: int, N: int, within: bool) -> CSRGraph:
    """Rows: targets (``within``: ``relation * N + target``); columns:
    ``relation * N + source``."""

    def build(src: Tensor, dst: Tensor, t: Tensor) -> CSRGraph:
        rows, num_rows = (t * N + dst, R * N) if within else (dst, N)
        return CSRGraph.from_coo(t * N + src, rows, R * N, num_rows)

    return relational_graph(edge_index, edge_type, R, (N, N), ('rgat', within), build, R * N)


@pyg_layer(pyg_nn.RGATConv)
class RGATConv(TCLayer, pyg_nn.RGATConv):
    r"""Drop-in ``torch_geometric.nn.RGATConv`` on pyg_tc's fused attention
    (see :mod:`pyg_tc.nn.rgat`): all relations of a call in one batched
    projection and one attention launch, with PyG's result: additive
    self-attention, across or within relations, with or without edge
    features, basis or block-diagonal weights, attention dropout, concatenated
    or averaged heads. ``mod`` (``'additive'``, ``'scaled'``,
    ``'f-additive'``, ``'f-scaled'``), multiplicative self-attention, node
    index inputs, a sparse adjacency and returned attention weights run PyG's
    path. Attention dropout draws its own random numbers (pyg_tc's fused
    dropout), so a dropped edge set differs from PyG's under the same seed.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge
          indices :math:`(2, |\mathcal{E}|)`, edge types
          :math:`(|\mathcal{E}|)` in ``[0, num_relations)``, edge features
          :math:`(|\mathcal{E}|, D)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}|, H F_{out})` (heads
          averaged: :math:`(|\mathcal{V}|, F_{out})`)
    """

    propagate_type = {'x': 'Tensor', 'edge_type': 'OptTensor', 'edge_attr': 'OptTensor'}
    _TC_AGGRS = ('add', 'sum')
    _PYG_ON_CPU = True
    _pyg_forward = pyg_method(pyg_nn.RGATConv.forward, '_pyg_forward')

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        num_relations: int,
        num_bases: Optional[int] = None,
        num_blocks: Optional[int] = None,
        mod: Optional[str] = None,
        attention_mechanism: str = 'across-relation',
        attention_mode: str = 'additive-self-attention',
        heads: int = 1,
        dim: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        edge_dim: Optional[int] = None,
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
            mod,
            attention_mechanism,
            attention_mode,
            heads,
            dim,
            concat,
            negative_slope,
            dropout,
            edge_dim,
            bias,
            **kwargs,
        )
        self._tc_init(backend)

    def forward(
        self,
        x: Tensor,
        edge_index: Any,
        edge_type: Optional[Tensor] = None,
        edge_attr: Optional[Tensor] = None,
        size: Optional[Tuple[int, int]] = None,
        return_attention_weights: Optional[bool] = None,
    ) -> Any:
        """As PyG's ``forward`` of the layer (see the class doc)."""
        if torch.jit.is_scripting():
            return self._pyg_forward(x, edge_index, edge_type, edge_attr, size, return_attention_weights)
        return self._tc_forward(x, edge_index, edge_type, edge_attr, size, return_attention_weights)

    def _format_ready(self, adj: Any) -> bool:
        return bool(adj.__dict__.get(_TYPED)) if isinstance(adj, Tensor) else False

    def _rgat_reason(self, x: Any, edge_index: Any, edge_type: Any, edge_attr: Any, size: Any, weights: Any) -> bool:
        """Whether this call runs PyG's path (module doc)."""
        return (
            _is_sparse(edge_index)
            or not isinstance(edge_index, Tensor)
            or edge_type is None
            or weights is not None
            or self.mod is not None
            or self.attention_mode != 'additive-self-attention'
            or not isinstance(x, Tensor)
            or not x.is_floating_point()
            or x.dim() != 2
            or (edge_attr is not None and self.lin_edge is None)
            or (size is not None and tuple(size) != (x.size(0), x.size(0)))
            or self._pyg_reason(edge_index) is not None
        )

    def _relation_weights(self) -> Tensor:
        """Every relation's ``[F, H*C]`` weight (bases combined)."""
        if self.num_bases is not None:
            return (self.att @ self.basis.view(self.num_bases, -1)).view(self.num_relations, self.in_channels, -1)
        return self.weight

    def _project(self, x: Tensor) -> Tensor:
        """``P [R, N, H*C]``: every node under every relation's weight."""
        w = self._relation_weights()
        if self.num_blocks is not None:  # w [R, B, F / B, HC / B]
            B = self.num_blocks
            return torch.einsum('nbi,rbio->rnbo', x.view(x.size(0), B, -1), w).reshape(w.size(0), x.size(0), -1)
        return torch.matmul(x, w)

    @torch.jit.unused
    def _tc_forward(
        self,
        x: Tensor,
        edge_index: Any,
        edge_type: Optional[Tensor] = None,
        edge_attr: Optional[Tensor] = None,
        size: Optional[Tuple[int, int]] = None,
        return_attention_weights: Optional[bool] = None,
    ) -> Any:
        if self._rgat_reason(x, edge_index, edge_type, edge_attr, size, return_attention_weights):
            return self._run_pyg(x, edge_index, edge_type, edge_attr, size, return_attention_weights)
        R, H, C, N = self.num_relations, self.heads, self.out_channels, x.size(0)
        within = self.attention_mechanism == 'within-relation'
        g = _graph(edge_index, edge_type, R, N, within)
        P = self._project(x)  # [R, N, H*C]
        acc = acc_dtype(P.dtype)
        a_src = (P @ self.k).view(R * N, H).to(acc)
        q = (P @ self.q).view(R * N, H).to(acc)
        a_dst, score = None, None
        if within:  # rows are (relation, target): the target term is per row
            a_dst = q
        else:  # the target's term under each edge's relation: (relation of the column, row)
            col = g.col.long()
            score = q.index_select(0, torch.div(col, N, rounding_mode='floor') * N + g.row().long())
        if edge_attr is not None:
            ea = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
            term = (self.lin_edge(ea).view(-1, H * C) @ self.e).to(acc)  # [E, H], edge order
            term = term if g.perm is None else term.index_select(0, g.perm)
            score = term if score is None else score + term
        p = float(self.dropout) if self.training else 0.0
        rng = new_rng(x.device) if p > 0 else None
        out, _ = dispatch.run(
            'attention',
            g,
            P.view(R * N, H, C),
            a_src,
            a_dst,
            score,
            self.negative_slope,
            p,
            rng,
            backend=self.backend,
            strict=False,
        )
        if within:
            out = out.view(R, N, H, C).sum(0)
        out = out.reshape(N, H * C) if self.concat else out.mean(dim=1)
        return out if self.bias is None else out + self.bias
