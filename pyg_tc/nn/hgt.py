"""``HGTConv`` with pyg_tc's fused attention over all edge types at once.

PyG's ``HGTConv`` already joins every edge type into one bipartite graph
(sources per edge type, targets per node type) and runs one
``propagate``: per edge it gathers ``q_i``, ``k_j`` and ``v_j``, computes the
scores, a scatter softmax and the weighted messages ``[E, H*D]`` before their
scatter-sum. This layer keeps PyG's projections (``kqv_lin``, the relation
transforms ``k_rel`` / ``v_rel``, ``out_lin``, the skip gate) and replaces
that message passing with the per-edge scores ``<q_i, k_j> p_rel / sqrt(D)``
followed by one fused attention launch (softmax, weighting and sum in one
pass, no ``[E, H*D]`` messages).
"""

import math
from typing import Any, Dict, Optional

import torch
from torch import Tensor
import torch_geometric.nn as pyg_nn
from torch_geometric.utils.hetero import construct_bipartite_edge_index

from ..formats.csr import CSRGraph
from ..ops import dispatch
from ._base import TCLayer, pyg_method
from .conv import _is_sparse, pyg_layer


@pyg_layer(pyg_nn.HGTConv)
class HGTConv(TCLayer, pyg_nn.HGTConv):
    r"""Drop-in ``torch_geometric.nn.HGTConv``: PyG's projections and
    output transform, with the attention of every edge type in one fused
    launch over the joined bipartite graph (see :mod:`pyg_tc.nn.hgt`).
    Sparse adjacencies run PyG's path.

    Shapes:
        - **input:** node features per node type :math:`(|\mathcal{V}_t|,
          F_t)`, ``edge_index`` per edge type :math:`(2, |\mathcal{E}_r|)`
        - **output:** per destination node type :math:`(|\mathcal{V}_t|,
          F_{out})` (node types that receive no message: absent)
    """

    _TC_AGGRS = ('add', 'sum')
    _PYG_ON_CPU = True
    _pyg_forward = pyg_method(pyg_nn.HGTConv.forward, '_pyg_forward')

    def __init__(
        self, in_channels: Any, out_channels: int, metadata: Any, heads: int = 1, backend: str = 'auto', **kwargs: Any
    ):
        super().__init__(in_channels, out_channels, metadata, heads, **kwargs)
        self._tc_init(backend)

    def forward(self, x_dict: Dict[str, Tensor], edge_index_dict: Dict[Any, Any]) -> Dict[str, Optional[Tensor]]:
        """As PyG's ``forward`` of the layer (see the class doc)."""
        if torch.jit.is_scripting():
            return self._pyg_forward(x_dict, edge_index_dict)
        return self._tc_forward(x_dict, edge_index_dict)

    def _format_ready(self, adj: Any) -> bool:
        return False  # (the joined graph is built per call)

    @torch.jit.unused
    def _tc_forward(self, x_dict: Dict[str, Tensor], edge_index_dict: Dict[Any, Any]) -> Dict[str, Optional[Tensor]]:
        adjs = list(edge_index_dict.values())
        if not adjs or any(_is_sparse(a) or not isinstance(a, Tensor) for a in adjs) or self._pyg_reason(adjs[0]):
            return self._run_pyg(x_dict, edge_index_dict)
        H, D = self.heads, self.out_channels // self.heads
        k_dict, q_dict, v_dict = {}, {}, {}
        for key, val in self.kqv_lin(x_dict).items():
            k, q, v = torch.tensor_split(val, 3, dim=1)
            k_dict[key], q_dict[key], v_dict[key] = k.view(-1, H, D), q.view(-1, H, D), v.view(-1, H, D)
        q, dst_offset = self._cat(q_dict)
        k, v, src_offset = self._construct_src_node_feat(k_dict, v_dict, edge_index_dict)
        edge_index, p = construct_bipartite_edge_index(
            edge_index_dict, src_offset, dst_offset, edge_attr_dict=self.p_rel, num_nodes=k.size(0)
        )
        out = self._attend(edge_index, q, k, v, p)
        out_dict = {}
        for node_type, start in dst_offset.items():
            if node_type in self.dst_node_types:
                out_dict[node_type] = out[start : start + q_dict[node_type].size(0)]
        a_dict = self.out_lin({t: torch.nn.functional.gelu(o) for t, o in out_dict.items()})
        for node_type in out_dict:
            o = a_dict[node_type]
            if o.size(-1) == x_dict[node_type].size(-1):
                alpha = self.skip[node_type].sigmoid()
                o = alpha * o + (1 - alpha) * x_dict[node_type]
            out_dict[node_type] = o
        return out_dict

    def _attend(self, edge_index: Tensor, q: Tensor, k: Tensor, v: Tensor, p: Tensor) -> Tensor:
        """``out[i] = sum_j softmax_j(<q_i, k_j> p_e / sqrt(D)) v_j`` per head
        over the joined graph (rows: targets), ``[N_dst, H * D]``."""
        g = CSRGraph.from_coo(edge_index[0], edge_index[1], k.size(0), q.size(0))
        row, col = g.row().long(), g.col.long()
        p = p if g.perm is None else p.index_select(0, g.perm)
        score = (q.index_select(0, row) * k.index_select(0, col)).sum(-1) * p / math.sqrt(q.size(-1))
        out, _ = dispatch.run(
            'attention', g, v, None, None, score, 1.0, 0.0, None, backend=self.backend, strict=False
        )  # (negative_slope 1: the logit is the score itself)
        return out.reshape(q.size(0), -1)
