"""Drop-in PyG ``AGNNConv`` on TC-GNN's kernels: SDDMM (cosine scores),
edge softmax, SpMM."""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.typing import Adj

from ..formats.carrier import resolve
from ..formats.csr import CSRGraph
from ..ops import dispatch
from ._base import TCLayer, pyg_method
from .conv import _loop_info, pyg_layer


def _without_loops(g: CSRGraph) -> CSRGraph:
    """``g`` minus its self loops (``g`` itself when it has none), once per graph."""
    def build():
        pos, _ = _loop_info(g)
        if pos.numel() == 0:
            return g
        keep = torch.ones(g.num_edges, dtype=torch.bool, device=g.device)
        keep[pos] = False
        return CSRGraph.from_coo(g.col[keep], g.row()[keep], g.num_cols, g.num_rows, g.chunk)
    return g.memo('without_loops', build)


def edge_softmax(g: CSRGraph, score: Tensor, loop: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """Softmax of per-edge scores (CSR order) over each target row, with an
    optional extra self-loop score per row (PyG's ``softmax`` over the edges
    plus one added loop). Segment reductions in CSR order: deterministic, no
    atomics, no per-edge row index. Returns (edge weights, loop weights)."""
    offsets = g.rowptr.long()
    acc = torch.float64 if score.dtype == torch.float64 else torch.float32
    s = score.to(acc)
    # the shift does not change the result: no gradient through it (as PyG)
    m = torch.segment_reduce(s.detach(), 'max', offsets=offsets, axis=0, unsafe=True,
                             initial=float('-inf'))
    if loop is not None:
        m = torch.maximum(m, loop.detach().to(acc))
    m = m.masked_fill(torch.isinf(m), 0.0)
    e = torch.exp(s - g.per_edge(m))
    den = torch.segment_reduce(e, 'sum', offsets=offsets, axis=0, unsafe=True, initial=0.0)
    el = None
    if loop is not None:
        el = torch.exp(loop.to(acc) - m)
        den = den + el
    inv = 1.0 / (den + 1e-16)  # PyG adds 1e-16 to the denominator as well
    alpha = e * g.per_edge(inv)
    return alpha, (el * inv if el is not None else None)


@pyg_layer(pyg_nn.AGNNConv)
class AGNNConv(TCLayer, pyg_nn.AGNNConv):
    r"""Drop-in ``torch_geometric.nn.AGNNConv``:
    ``out_i = sum_{j in N(i) + i} softmax_j(beta cos(x_i, x_j)) x_j``.

    Cosine scores by the SDDMM of the L2-normalised features, edge softmax in
    CSR order, aggregation by the SpMM; with ``'sgt'`` (or ``'auto'``
    choosing it) both sparse ops run on tensor cores over the graph's SGT.
    With ``add_self_loops=True`` (PyG's default) existing loops are dropped
    and every node's loop is a fused diagonal term (its score
    ``beta * |x_norm_i|^2``), so no edge list is rebuilt. No ``E x F`` tensor
    is ever materialised. Gradients for ``x`` and ``beta`` flow through all
    three steps. ``aggr='mean'`` divides by the row's edge count (loop
    included); ``aggr='max'`` and features of more than two dimensions run
    PyG's message passing.
    """
    propagate_type = {'x': 'Tensor', 'x_norm': 'Tensor'}
    _TC_AGGRS = ('add', 'sum', 'mean')
    _pyg_forward = pyg_method(pyg_nn.AGNNConv.forward, '_pyg_forward')

    def __init__(self, requires_grad: bool = True, add_self_loops: bool = True,
                 backend: str = 'auto', **kwargs):
        super().__init__(requires_grad, add_self_loops, **kwargs)
        self._tc_init(backend)

    def forward(self, x: Tensor, edge_index: Adj) -> Tensor:
        """As PyG's ``AGNNConv.forward`` (see the class doc)."""
        if torch.jit.is_scripting():
            return self._pyg_forward(x, edge_index)
        return self._tc_forward(x, edge_index)

    @torch.jit.unused
    def _tc_forward(self, x: Tensor, edge_index: Adj) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 2 or self._pyg_reason(edge_index):
            return self._run_pyg(x, edge_index)
        N = x.size(0)
        g, _ = resolve(edge_index, size=(N, N), flow=self.flow)  # edge values are ignored, as in PyG
        if self.add_self_loops:
            g = _without_loops(g)
        xn = F.normalize(x, p=2., dim=-1)
        score = dispatch.edge_scores(g, xn, xn, self.backend)
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        beta = self.beta.to(acc)
        loop = beta * xn.to(acc).square().sum(-1) if self.add_self_loops else None
        alpha, alpha_loop = edge_softmax(g, beta * score.to(acc), loop)
        if self.aggr == 'mean':  # PyG's mean over the row's messages, loop included
            cnt = g.degree().to(acc) + (1 if self.add_self_loops else 0)
            inv = 1.0 / cnt.clamp(min=1)
            alpha = alpha * g.per_edge(inv)
            alpha_loop = alpha_loop * inv if alpha_loop is not None else None
        return self._aggregate(g, x, alpha, 'sum', alpha_loop)
