"""Drop-in PyG ``AGNNConv``: cosine scores by the SDDMM, then fuseGNN's fused
softmax-aggregate (``pyg_tc.ops.gat_attention`` with the scores given); with
``backend='sgt'`` TC-GNN's tensor-core SDDMM, the edge softmax and SpMM."""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.typing import Adj

from ..formats.carrier import resolve
from ..formats.csr import CSRGraph
from ..formats.loops import format_ready, loop_graph, loops_from_edges, plain_edge_index
from ..ops import attn, dispatch
from ._base import TCLayer, pyg_dtype, pyg_method, softmax_dtype
from .conv import _loop_info, pyg_layer


def _without_loops(g: CSRGraph) -> CSRGraph:
    """``g`` minus its self loops (``g`` itself when it has none), once per graph."""

    def build():
        pos, lrow = _loop_info(g)
        if g.static_shapes:  # every position listed, loops by their row: keep the real non-loop edges
            live = torch.arange(g.num_edges, device=g.device) < g.rowptr[-1]
            keep = live & (lrow == g.num_rows)
        elif pos.numel() == 0:
            return g
        else:
            keep = torch.ones(g.num_edges, dtype=torch.bool, device=g.device)
            keep[pos] = False
        return CSRGraph.from_coo(g.col[keep], g.row()[keep], g.num_cols, g.num_rows, g.chunk)

    return g.cache.memo('without_loops', build)


def edge_softmax(g: CSRGraph, score: Tensor, loop: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """Softmax of per-edge scores (CSR order) over each target row, with an
    optional extra self-loop score per row (PyG's ``softmax`` over the edges
    plus one added loop): the unfused path of the tensor-core backend.
    Returns (edge weights, loop weights)."""
    acc = torch.float64 if score.dtype == torch.float64 else torch.float32
    s = score.to(acc)
    if loop is None:
        return attn.edge_softmax(g, s), None
    # the loop as one more entry per row: max and sum over edges + loop
    m = torch.segment_reduce(s.detach(), 'max', offsets=g.rowptr.long(), axis=0, unsafe=True, initial=float('-inf'))
    m = torch.maximum(m, loop.detach().to(acc))
    m = m.masked_fill(torch.isinf(m), 0.0)
    e = torch.exp(s - g.per_edge(m))
    den = torch.segment_reduce(e, 'sum', offsets=g.rowptr.long(), axis=0, unsafe=True, initial=0.0)
    el = torch.exp(loop.to(acc) - m)
    inv = 1.0 / (den + el + 1e-16)  # PyG adds 1e-16 to the denominator as well
    return e * g.per_edge(inv), el * inv


def _unit_rows(x: Tensor) -> Tensor:
    """``F.normalize(x, dim=-1)`` (PyG's); for half ``x`` the norms are summed
    in fp32 and the result stays half (cosines lie in [-1, 1]): no fp32 copy
    of the features, also under autocast (which would run the norm on one)."""
    if x.dtype not in (torch.float16, torch.bfloat16):
        return F.normalize(x, p=2.0, dim=-1)
    with torch.autocast(x.device.type, enabled=False):
        n = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
    return x / n.clamp_min(1e-12).to(x.dtype)


@pyg_layer(pyg_nn.AGNNConv)
class AGNNConv(TCLayer, pyg_nn.AGNNConv):
    r"""Drop-in ``torch_geometric.nn.AGNNConv``:
    ``out_i = sum_{j in N(i) + i} softmax_j(beta cos(x_i, x_j)) x_j``.

    Cosine scores by the SDDMM of the L2-normalised features (on tensor cores
    when ``'auto'`` measures them faster), then the fused softmax-aggregate
    of fuseGNN (:func:`pyg_tc.ops.gat_attention` with the scores given and
    the identity as activation) over the graph with one self loop per node
    (PyG's ``add_self_loops``; built once per graph). With ``'sgt'``, or rows
    wider than the fused kernel takes (2048 bytes), the unfused path: SDDMM,
    edge softmax, SpMM with the loops as a fused diagonal term. No ``E x F``
    tensor is ever materialised. Gradients for ``x`` and ``beta`` flow through all
    three steps. ``aggr='mean'`` divides by the row's edge count (loop
    included); ``aggr='max'`` and features of more than two dimensions run
    PyG's message passing.
    """

    propagate_type = {'x': 'Tensor', 'x_norm': 'Tensor'}
    _TC_AGGRS = ('add', 'sum', 'mean')
    _pyg_forward = pyg_method(pyg_nn.AGNNConv.forward, '_pyg_forward')
    _PYG_ON_CPU = True

    def __init__(self, requires_grad: bool = True, add_self_loops: bool = True, backend: str = 'auto', **kwargs):
        super().__init__(requires_grad, add_self_loops, **kwargs)
        self._tc_init(backend)

    def forward(self, x: Tensor, edge_index: Adj) -> Tensor:
        """As PyG's ``AGNNConv.forward`` (see the class doc)."""
        if torch.jit.is_scripting():
            return self._pyg_forward(x, edge_index)
        return self._tc_forward(x, edge_index)

    def _format_ready(self, adj: Adj) -> bool:
        return format_ready(adj, self.flow)

    def _loop_graph(self, adj: Adj, N: int) -> Optional[CSRGraph]:
        """The graph the fused path runs on: with ``add_self_loops`` PyG's
        ``remove_self_loops`` + ``add_self_loops`` (shared with GATConv's on
        the same adjacency: :func:`pyg_tc.formats.loops.loops_from_edges` for a
        plain ``edge_index``, else memoised on its graph). None: under
        ``torch.compile`` it does not exist yet."""
        compiling = torch.compiler.is_compiling()
        if not self.add_self_loops:
            return resolve(adj, size=(N, N), flow=self.flow)[0]
        if plain_edge_index(adj):
            lg = loops_from_edges(adj, N, N, self.flow, N, build=not compiling)
            return None if lg is None else lg.graph
        g, _ = resolve(adj, size=(N, N), flow=self.flow)
        lg = loop_graph(g, N, 'append', build=not compiling)
        return None if lg is None else lg.graph

    @torch.jit.unused
    def _tc_forward(self, x: Tensor, edge_index: Adj) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 2 or self._pyg_reason(edge_index):
            return self._run_pyg(x, edge_index)
        # PyG's dtype: messages x_j times attention weights computed with beta
        # (in fp32 under CUDA autocast); ours are aggregated in x's dtype
        dtype = pyg_dtype(x.dtype, self.beta.dtype, softmax_dtype(x))
        x = dispatch.autocast_features(x)  # under autocast: the attention runs in half
        xn = _unit_rows(x)
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        beta = self.beta.to(acc)
        return dispatch.run('agnn', None, self, x, edge_index, xn, beta, dtype, backend=self.backend)


# AGNN's two paths, chosen by dispatch.choose: the fused one where the fused
# attention kernel takes the rows (its head limit, on every device: elsewhere the
# unfused path never builds an E x F tensor), except with 'sgt' (tensor cores have
# no fused attention); else the unfused one.


def _check_agnn(
    g: None, layer: AGNNConv, x: Tensor, edge_index: Adj, xn: Tensor, beta: Tensor, dtype: torch.dtype
) -> dict:
    return dict(layer=layer, x=x, heads=x.unsqueeze(1), edge_index=edge_index, xn=xn, beta=beta, dtype=dtype)


_BOTH = ('fused', 'unfused')
dispatch.family(
    'agnn', _check_agnn, features='heads', routes={'auto': _BOTH, 'csr': _BOTH, 'reference': _BOTH, 'sgt': ('unfused',)}
)


@dispatch.register('agnn', 'fused', reduces=('sum', 'mean'), fits=attn._fits, needs_kernel=False)
def _fused(
    g: None,
    layer: AGNNConv,
    x: Tensor,
    heads: Tensor,
    edge_index: Adj,
    xn: Tensor,
    beta: Tensor,
    dtype: torch.dtype,
    backend: str,
    strict: bool,
) -> Tensor:
    """Cosine scores on the graph with one loop per node, then softmax and
    aggregation in one pass (no E x F tensor)."""
    acc = beta.dtype
    gl = layer._loop_graph(edge_index, x.size(0))
    if gl is None:  # torch.compile before the self-loop graph exists
        return layer._run_pyg(x, edge_index)
    score = beta * dispatch.edge_scores(gl, xn, xn, backend).to(acc)
    out, _ = attn.gat_attention(gl, heads, score=score.unsqueeze(1), negative_slope=1.0, backend=backend)
    out = out.squeeze(1).to(dtype)
    if layer.aggr == 'mean':  # PyG's mean over the row's messages, loop included
        out = out / gl.degree().clamp(min=1).to(out.dtype).unsqueeze(1)
    return out


@dispatch.register('agnn', 'unfused', reduces=('sum', 'mean'), needs_kernel=False)
def _unfused(
    g: None,
    layer: AGNNConv,
    x: Tensor,
    heads: Tensor,
    edge_index: Adj,
    xn: Tensor,
    beta: Tensor,
    dtype: torch.dtype,
    backend: str,
    strict: bool,
) -> Tensor:
    """SDDMM, edge softmax, SpMM (tensor cores, or rows too wide for the
    fused kernel), existing loops dropped and every node's loop a fused
    diagonal term."""
    acc = beta.dtype
    N = x.size(0)
    g, _ = resolve(edge_index, size=(N, N), flow=layer.flow)  # edge values are ignored, as in PyG
    if layer.add_self_loops:
        g = _without_loops(g)
    score = dispatch.edge_scores(g, xn, xn, backend)
    loop = beta * xn.to(acc).square().sum(-1) if layer.add_self_loops else None
    alpha, alpha_loop = edge_softmax(g, beta * score.to(acc), loop)
    if layer.aggr == 'mean':  # PyG's mean over the row's messages, loop included
        cnt = g.degree().to(acc) + (1 if layer.add_self_loops else 0)
        inv = 1.0 / cnt.clamp(min=1)
        alpha = alpha * g.per_edge(inv)
        alpha_loop = alpha_loop * inv if alpha_loop is not None else None
    return layer._aggregate(g, x, alpha, 'sum', alpha_loop).to(dtype)
