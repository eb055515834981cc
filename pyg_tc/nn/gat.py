"""Drop-in PyG ``GATConv`` and ``GATv2Conv`` on the fused attention kernels
(:func:`pyg_tc.ops.gat_attention`, :func:`pyg_tc.ops.gatv2_attention`):
scores, edge softmax, dropout and aggregation in one pass over each target
row, with no per-edge message tensor.

Self loops (``add_self_loops=True``, PyG's default) are structure: the
layers run on the self-loop graph of :mod:`pyg_tc.formats.loops` (built once
per graph; for a plain ``edge_index`` straight from its edges, so the
adjacency's own CSR graph is never built), whose map from CSR positions to
"original edge or loop" gathers edge features (and GAT's folded per-edge
scores).
"""

from typing import Any, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch.nn.parameter import UninitializedParameter
from torch_geometric.typing import Adj, OptPairTensor, OptTensor, PairTensor, Size  # noqa: F401
from torch_geometric.typing import SparseTensor as PyGSparseTensor
from torch_geometric.utils import add_self_loops as pyg_add_self_loops
from torch_geometric.utils import remove_self_loops as pyg_remove_self_loops
from torch_geometric.utils import scatter
from torch_geometric.utils.sparse import set_sparse_value

from ..formats.carrier import SparseTensor, resolve
from ..formats.csr import CSRGraph
from ..formats.loops import (
    LoopGraph,
    fill_index_from_edges,
    format_ready,
    loop_fill_index,
    loop_graph,
    loops_from_edges,
    plain_edge_index,
    pyg_order,
)
from ..ops import dispatch
from ..ops.attn import att_logits as fused_att_logits
from ..ops.attn import attention_weights, gat_logits, new_rng
from ..ops.csr import acc_dtype
from ._base import TCLayer, autocast_input, has_hooks, pyg_dtype, pyg_method, softmax_dtype
from .conv import pyg_layer

# edge features x heads x channels elements per chunk of GATv2's returned logits
_V2_LOGIT_CHUNK = 1 << 24


def _is_sparse_tensor(adj: Any) -> bool:
    return SparseTensor is not None and isinstance(adj, SparseTensor)


def _is_torch_sparse(adj: Any) -> bool:
    return isinstance(adj, Tensor) and adj.layout != torch.strided


def att_logits(x: Tensor, *atts: Tensor) -> List[Tensor]:
    """GAT's per-node logit terms ``(x * att).sum(-1)`` for each ``att``.

    In fp32 / fp64 outside autocast and with full-precision matmuls (no
    TF32), one matrix product ``x [N, H*C] @ W [H*C, k*H]`` (``W``
    block-diagonal per head) gives all ``k`` terms in one read of ``x``, and
    its backward is two more products, where PyG's product and sum make an
    ``N x H x C`` temporary and broadcast kernels forward and backward
    (about 40% of a products-shaped GAT step's GPU time). Half ``x``
    (fp16 / bf16, e.g. under autocast): :func:`pyg_tc.ops.attn.att_logits`,
    one read of ``x`` with fp32 products and sums (PyG's dtypes under
    autocast, without its fp32 ``N x H x C`` temporary; fp32 terms for a
    half model too). Otherwise, and under ``torch.compile`` (which fuses
    it), PyG's expression.

    Args:
        x (torch.Tensor): node features per head.
        *atts (torch.Tensor): attention vectors (``att_src``, ``att_dst``).

    Shapes:
        - **input:** x :math:`(N, H, C)`, each att :math:`(1, H, C)`
        - **output:** one :math:`(N, H)` tensor per att
    """
    N, H, C = x.shape
    fast = (
        x.dtype in (torch.float32, torch.float64)
        and all(a.dtype == x.dtype for a in atts)
        and not torch.compiler.is_compiling()  # (Inductor fuses PyG's expression itself)
        and not torch.is_autocast_enabled(x.device.type)
        and (x.dtype == torch.float64 or torch.get_float32_matmul_precision() == 'highest')
    )
    if not fast:
        if x.dtype in (torch.float16, torch.bfloat16) and len(atts) <= 2 and not torch.compiler.is_compiling():
            out = fused_att_logits(x, torch.stack([a.reshape(H, C).float() for a in atts]))
            return list(out.unbind(0))
        return [(x * a).sum(dim=-1) for a in atts]
    k = len(atts)
    a = torch.stack([t.reshape(H, C) for t in atts])  # [k, H, C]
    if H == 1:
        w = a.reshape(k, C).t()
    else:  # w[h * C + c, j * H + h'] = atts[j][h, c] if h == h'
        eye = torch.eye(H, dtype=a.dtype, device=a.device)
        w = (a.unsqueeze(-1) * eye.view(1, H, 1, H)).permute(1, 2, 0, 3).reshape(H * C, k * H)
    out = _ReduceAccurately.apply(x.reshape(N, H * C), w)
    return [out[:, j * H : (j + 1) * H] for j in range(k)]


_CHUNK = 64  # rows a matrix product sums before the chunks' partial products are added as a reduction


class _ReduceAccurately(torch.autograd.Function):
    """``x @ w`` whose ``w`` gradient sums over the rows of ``x`` as
    accurately as PyG's reduction does: ``x^T @ g`` in chunks of
    ``_CHUNK`` rows (one batched product), the chunks added by ``sum``. One
    product over all rows accumulates its error along them (several times
    PyG's for the attention vectors' gradients). Differentiable twice."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = g @ w.t() if ctx.needs_input_grad[0] else None
        gw = None
        if ctx.needs_input_grad[1]:
            pad = -x.size(0) % _CHUNK
            xp, gp = F.pad(x, (0, 0, 0, pad)), F.pad(g, (0, 0, 0, pad))
            gw = torch.bmm(xp.view(-1, _CHUNK, x.size(1)).transpose(1, 2), gp.view(-1, _CHUNK, g.size(1))).sum(0)
        return gx, gw


def _in_csr_order(v: Tensor, g: CSRGraph) -> Tensor:
    """Per-edge rows ``v [E, ...]`` (adjacency order) in ``g``'s CSR order."""
    return v if g.perm is None else v.index_select(0, g.perm)


class _GATBase(TCLayer):
    """What GATConv and GATv2Conv share: the checks that send a call to
    PyG's path, self loops and their edge features, the epilogue and the
    returned attention weights."""

    _TC_AGGRS = ('add', 'sum')
    # GATConv folds lin_edge into one score per edge; GATv2Conv applies it to
    # the edge features in CSR order, not PyG's
    _BYPASSED = ('aggr_module', 'lin_edge')
    _PYG_ON_CPU = True
    #: the node features feed only Linears (here and on PyG's path), so a
    #: half copy made under autocast gives what the Linears compute from fp32
    #: (HeteroConv casts a node type's features once for all its edge types)
    _LINEAR_INPUTS = True

    def _gat_reason(
        self, x: Any, adj: Any, edge_attr: Optional[Tensor], return_attention_weights: Optional[bool]
    ) -> Optional[str]:
        """Why this call runs PyG's forward (None: the fused kernels)."""
        reason = self._pyg_reason(adj)
        if reason:
            return reason
        pair = not isinstance(x, Tensor)
        if pair:
            if (
                not isinstance(x, (tuple, list))
                or len(x) != 2
                or not isinstance(x[0], Tensor)
                or not (x[1] is None or isinstance(x[1], Tensor))
            ):
                return 'features that are not a tensor or pair of tensors'
            xs = [t for t in x if t is not None]
        else:
            xs = [x]
        if any(t.dim() != 2 or not t.is_floating_point() for t in xs):
            return 'features that are not 2-D floating point'
        sparse = _is_sparse_tensor(adj) or _is_torch_sparse(adj)
        if self.flow != 'source_to_target' and (pair or sparse):
            return "flow='target_to_source' with feature pairs or sparse adjacencies"
        if sparse and edge_attr is not None:
            return 'edge features with a sparse adjacency'
        if edge_attr is not None:
            reason = self._check_edge_attr(adj, edge_attr)
            if reason:
                return reason
        if _is_sparse_tensor(adj) and self.add_self_loops and self.edge_dim is not None:
            return 'SparseTensor with edge_dim and self loops (PyG raises)'
        if return_attention_weights and _is_torch_sparse(adj) and adj.layout == torch.sparse_csc:
            return 'attention weights of a CSC adjacency'
        if self.training and self.dropout >= 1.0:
            return 'dropout=1'
        return None

    def _check_edge_attr(self, adj: Any, edge_attr: Tensor) -> Optional[str]:
        """A ValueError naming the shapes when ``edge_attr`` has not one row
        per edge (PyG fails with an IndexError about a mask, or ignores the
        rows); PyG's path, which raises PyG's own error, for a width other
        than ``edge_dim``, and for features of more than two dimensions."""
        if self.lin_edge is None and not self.add_self_loops:
            return None  # PyG ignores edge_attr
        num_edges = (
            adj.num_edges
            if isinstance(adj, CSRGraph)
            else (adj.size(1) if isinstance(adj, Tensor) and adj.dim() == 2 else None)
        )
        if edge_attr.dim() == 0 or (num_edges is not None and edge_attr.size(0) != num_edges):
            raise ValueError(
                f'pyg_tc: {type(self).__name__} got edge_attr with '
                f'{edge_attr.size(0) if edge_attr.dim() else 0} rows (shape '
                f'{tuple(edge_attr.shape)}) for {num_edges} edges: it needs one row '
                'per edge'
            )
        if edge_attr.dim() > 2:
            return 'edge features of more than two dimensions'
        lin = self.lin_edge
        if (
            lin is not None
            and not isinstance(lin.weight, UninitializedParameter)
            and (edge_attr.size(1) if edge_attr.dim() == 2 else 1) != lin.weight.size(1)
        ):
            return 'edge features whose width is not edge_dim (PyG raises)'
        return None

    def _loop_mode(self, adj: Any, g: CSRGraph, num_loops: int) -> Optional[Tuple[str, int]]:
        """(mode, loop count) of this call's self-loop graph (None: no loops)."""
        if not self.add_self_loops:
            return None
        if _is_sparse_tensor(adj):  # the sparse sizes decide, as in PyG
            return 'sorted', min(g.num_rows, g.num_cols)
        if _is_torch_sparse(adj):
            return 'coalesce', min(g.num_rows, g.num_cols)
        return 'append', num_loops

    def _fill_by_source(self, adj: Any) -> bool:
        # PyG reduces over edge_index[1]: the message source for 'target_to_source'
        return self.flow == 'target_to_source' and not isinstance(adj, CSRGraph)

    def _format_ready(self, adj: Any) -> bool:
        return format_ready(adj, self.flow)

    def _graphs(
        self, adj: Any, size: Tuple[int, int], num_loops: int, edge_attr: Optional[Tensor]
    ) -> Tuple[Optional[CSRGraph], Optional[LoopGraph], bool]:
        """(graph of the adjacency or None, self-loop graph or None, ready).
        Under ``torch.compile`` a missing structure (self-loop graph,
        loop-fill index) cannot be built (data-dependent shapes): ready is
        then False and the call runs PyG's path."""
        compiling = torch.compiler.is_compiling()
        fill = edge_attr is not None and isinstance(self.fill_value, str)
        if self.add_self_loops and plain_edge_index(adj):
            lg = loops_from_edges(adj, size[0], size[1], self.flow, num_loops, build=not compiling)
            ready = lg is not None and (
                not compiling
                or not fill
                or fill_index_from_edges(lg, adj, self.flow, num_loops, self._fill_by_source(adj), build=False)
                is not None
            )
            return None, lg, ready
        g, _ = resolve(adj, size=size, flow=self.flow)
        mode = self._loop_mode(adj, g, num_loops)
        if mode is None:
            return g, None, True
        lg = loop_graph(g, mode[1], mode[0], build=not compiling)
        if (
            lg is None
            or compiling
            and fill
            and loop_fill_index(g, mode[1], self._fill_by_source(adj), build=False) is None
        ):
            return g, None, False
        return g, lg, True

    def _with_loop_rows(self, adj: Any, g: Optional[CSRGraph], lg: LoopGraph, attr: Tensor, num_loops: int) -> Tensor:
        """Edge features ``attr`` (one row per original edge) followed by
        those of the loops: PyG's ``compute_loop_attr`` (``fill_value``, or
        for a string the reduction over the node's other edges); indexed by
        :attr:`LoopGraph.ids`."""
        fill = self.fill_value
        shape = (num_loops,) + tuple(attr.shape[1:])
        if fill is None:
            loop = attr.new_ones(shape)
        elif isinstance(fill, (int, float)):
            loop = attr.new_full(shape, fill)
        elif isinstance(fill, Tensor):
            loop = fill.to(attr.device, attr.dtype)
            if attr.dim() != loop.dim():
                loop = loop.unsqueeze(0)
            loop = loop.expand(shape).contiguous()
        elif isinstance(fill, str):
            by_source = self._fill_by_source(adj)
            if g is None:  # a plain edge_index: the index lives on its self-loop graph
                ids, node = fill_index_from_edges(lg, adj, self.flow, num_loops, by_source)
            else:
                ids, node = loop_fill_index(g, num_loops, by_source)
            # (one row more: a padded graph's edges outside the reduction go there)
            loop = scatter(attr.index_select(0, ids), node, 0, num_loops + 1, fill)[:num_loops]
        else:
            raise AttributeError("No valid 'fill_value' provided")
        return torch.cat([attr, loop])

    def _edge_rows(
        self, adj: Any, g: Optional[CSRGraph], lg: Optional[LoopGraph], attr: Tensor, num_loops: int
    ) -> Tensor:
        """Edge features for every edge of the graph used, in its CSR order
        (loops included)."""
        if lg is None:
            return _in_csr_order(attr, g)
        return self._with_loop_rows(adj, g, lg, attr, num_loops).index_select(0, lg.ids)

    def _dropout(self, device: Any) -> Tuple[float, Optional[Tensor]]:
        p = float(self.dropout) if self.training else 0.0
        return p, (new_rng(device) if p > 0 else None)

    def _epilogue(self, out: Tensor, res: Optional[Tensor], dtype: torch.dtype) -> Tensor:
        """Heads concatenated or averaged, residual and bias, giving PyG's
        ``dtype`` (:meth:`_pyg_dtype`) from our ``out`` (half under autocast)
        with one cast at most."""
        if self.concat:
            out = out.reshape(-1, self.heads * self.out_channels)
        else:
            out = out.mean(dim=1, dtype=dtype)
        if res is not None:
            out = out.to(dtype) + res
            dtype = out.dtype
        return self._add_bias(out, self.bias, dtype)

    def _pyg_dtype(self, x: Tensor, *terms: Optional[Tensor]) -> torch.dtype:
        """The dtype of the attention weights, messages and aggregation:
        PyG's, the projected features ``x`` times the attention weights,
        computed from ``x`` and the attention parameters / edge terms
        ``terms`` (fp32 under CUDA autocast: PyG's ``sum`` and softmax ``exp``
        run there in fp32), so under autocast with fp32 parameters float32.
        A half model (the layer's parameters in ``x``'s half dtype, e.g.
        ``CapturedStep(..., half_weights=True)`` or ``model.bfloat16()``)
        keeps that dtype under autocast too, where PyG promotes to fp32: the
        next layer reads half activations (the aggregation accumulates in
        fp32 either way)."""
        if x.dtype in (torch.float16, torch.bfloat16) and self._parameter_dtype() == x.dtype:
            return x.dtype
        return pyg_dtype(x.dtype, softmax_dtype(x), *(t.dtype for t in terms if t is not None))

    def _parameter_dtype(self) -> torch.dtype:
        """The dtype of the layer's attention vector (``att_src`` / ``att``)."""
        att = getattr(self, 'att_src', None)
        return (att if att is not None else self.att).dtype

    def _weights(self, adj: Any, g: CSRGraph, lg: Optional[LoopGraph], alpha: Tensor, num_loops: int) -> Any:
        """PyG's second return value for ``return_attention_weights`` from
        ``alpha`` in the CSR order of the graph used."""
        used = g if lg is None else lg.graph
        if _is_sparse_tensor(adj):
            if self.add_self_loops:
                import torch_sparse

                adj = torch_sparse.set_diag(adj)
            _check_count(adj.nnz(), alpha)
            return adj.set_value(alpha, layout='coo')
        if _is_torch_sparse(adj):
            if self.add_self_loops:
                adj, _ = pyg_remove_self_loops(adj)
                adj, _ = pyg_add_self_loops(adj, fill_value=self.fill_value, num_nodes=num_loops)
            elif adj.layout == torch.sparse_coo and not adj.is_coalesced():
                adj = adj.coalesce()
            _check_count(adj._nnz(), alpha)
            return set_sparse_value(adj, alpha), alpha
        order = pyg_order(g, lg)
        if order is not None:
            alpha = alpha.index_select(0, order)
        if isinstance(adj, CSRGraph):
            ei = torch.stack([used.col.long(), used.row().long()])
            return (ei if order is None else ei.index_select(1, order)), alpha
        if self.add_self_loops:
            adj, _ = pyg_remove_self_loops(adj)
            adj, _ = pyg_add_self_loops(adj, num_nodes=num_loops)
        return adj, alpha


def _check_count(nnz: int, alpha: Tensor) -> None:
    if nnz != alpha.size(0):  # pragma: no cover - a sparse tensor unlike PyG's own
        raise RuntimeError(f'pyg_tc: {alpha.size(0)} attention weights for a sparse adjacency with {nnz} entries')


@pyg_layer(pyg_nn.GATConv)
class GATConv(_GATBase, pyg_nn.GATConv):
    r"""Drop-in ``torch_geometric.nn.GATConv`` on pyg_tc's fused attention
    kernel: :math:`\alpha_{ij} = \mathrm{softmax}_j(\mathrm{LeakyReLU}(
    a_s^\top \Theta_s x_j + a_t^\top \Theta_t x_i + a_e^\top \Theta_e
    e_{ij}))` and :math:`\sum_j \alpha_{ij} \Theta_s x_j` computed row by row
    (online softmax, attention dropout from a counter-based generator), never
    materialising PyG's ``E x heads x channels`` messages.

    * The edge term is folded into one score per edge and head: with
      ``M[h, d] = sum_c W_edge[h C + c, d] a_e[h, c]`` it is ``edge_attr @
      M^T`` (``E x heads``), so ``lin_edge`` never runs on the edges.
    * Self loops (``add_self_loops=True``) are built once per graph
      (``pyg_tc.formats.loops.loop_graph``); a loop's edge features follow ``fill_value``
      exactly as PyG's ``add_self_loops`` computes them.
    * ``return_attention_weights``: PyG's edge index (or sparse adjacency)
      with the loops added, and the coefficients (after dropout) in its
      order, recomputed from the kernel's saved log-sum-exp. With a
      :class:`~pyg_tc.formats.CSRGraph` adjacency the edge index is
      ``[source, target]`` in the graph's original edge order.
    * Attention dropout keeps each coefficient with probability ``1 -
      dropout`` as PyG does, but the mask comes from pyg_tc's Philox
      generator (seeded from torch's, so reproducible under
      ``torch.manual_seed``), not from ``F.dropout``'s stream.

    PyG's own forward runs for: ``backend='pyg'``, explain, hooks,
    ``decomposed_layers``, an ``aggr`` other than sum, TorchScript,
    ``torch.compile`` before the graph's format (and self-loop graph) exist,
    features that are not 2-D floating tensors, ``flow='target_to_source'``
    with feature pairs or sparse adjacencies, edge features with a sparse
    adjacency, ``SparseTensor`` with ``edge_dim`` and self loops (PyG raises),
    attention weights of a CSC adjacency, and ``dropout=1`` in training.
    Where PyG rejects an input the kernels accept (a CSC adjacency, an
    uncoalesced COO one, a loop fill over edges whose target has no loop) the
    layer is more permissive. TorchScript compiles PyG's forward, so the
    layer scripts exactly when PyG's does (torch_geometric 2.8.1's does not
    with torch 2.13: its overloads type ``return_attention_weights`` as
    ``Optional[Tensor]``).
    """

    propagate_type = {'x': 'OptPairTensor', 'alpha': 'Tensor'}
    edge_updater_type = {'alpha': 'OptPairTensor', 'edge_attr': 'OptTensor'}
    _pyg_forward = pyg_method(pyg_nn.GATConv.forward, '_pyg_forward')

    def __init__(
        self,
        in_channels: Union[int, Tuple[int, int]],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: Optional[int] = None,
        fill_value: Union[float, Tensor, str] = 'mean',
        bias: bool = True,
        residual: bool = False,
        backend: str = 'auto',
        **kwargs,
    ):
        # PyG's __init__ sets node_dim=0: no static graphs (features are [N, F])
        super().__init__(
            in_channels,
            out_channels,
            heads,
            concat,
            negative_slope,
            dropout,
            add_self_loops,
            edge_dim,
            fill_value,
            bias,
            residual,
            **kwargs,
        )
        self._tc_init(backend)

    def forward(
        self,
        x: Union[Tensor, OptPairTensor],
        edge_index: Adj,
        edge_attr: OptTensor = None,
        size: Size = None,
        return_attention_weights: Optional[bool] = None,
    ) -> Union[Tensor, Tuple[Tensor, Tuple[Tensor, Tensor]], Tuple[Tensor, PyGSparseTensor]]:
        """As PyG's ``GATConv.forward`` (see the class doc)."""
        if torch.jit.is_scripting():
            return self._pyg_forward(x, edge_index, edge_attr, size, return_attention_weights)
        return self._tc_forward(x, edge_index, edge_attr, size, return_attention_weights)

    @torch.jit.unused
    def _tc_forward(
        self,
        x: Union[Tensor, OptPairTensor],
        edge_index: Adj,
        edge_attr: OptTensor = None,
        size: Size = None,
        return_attention_weights: Optional[bool] = None,
    ) -> Any:
        if self._gat_reason(x, edge_index, edge_attr, return_attention_weights):
            return self._run_pyg(x, edge_index, edge_attr, size, return_attention_weights)
        x = autocast_input(x)  # the residual and the Linears read one half copy
        H, C = self.heads, self.out_channels
        res: Optional[Tensor] = None
        folded: Optional[Tensor] = None
        if isinstance(x, Tensor):
            if self.res is not None:
                res = self.res(x)
            if self.lin is not None:
                x_src = x_dst = self.lin(x).view(-1, H, C)
            else:  # (tuple in_channels, one node set: e.g. HeteroConv's src == dst edge types)
                x_src = self.lin_src(x).view(-1, H, C)
                folded = _folded_logits(self.lin_dst, self.att_dst, x, H, C)
                x_dst = self.lin_dst(x).view(-1, H, C) if folded is None else x
        else:
            x_src, x_dst = x
            if x_dst is not None and self.res is not None:
                res = self.res(x_dst)
            lin_src = self.lin if self.lin is not None else self.lin_src
            lin_dst = self.lin if self.lin is not None else self.lin_dst
            x_src = lin_src(x_src).view(-1, H, C)
            if x_dst is not None:
                folded = _folded_logits(lin_dst, self.att_dst, x_dst, H, C)
                x_dst = lin_dst(x_dst).view(-1, H, C) if folded is None else x_dst
        if folded is not None:  # the targets' term without their projection
            a_src, a_dst = att_logits(x_src, self.att_src)[0], folded
        elif x_dst is None:
            a_src, a_dst = att_logits(x_src, self.att_src)[0], None
        elif x_dst is x_src:  # one Linear: both terms from one read of x
            a_src, a_dst = att_logits(x_src, self.att_src, self.att_dst)
        else:
            a_src, a_dst = att_logits(x_src, self.att_src)[0], att_logits(x_dst, self.att_dst)[0]

        n_src = x_src.size(0)
        n_dst = n_src if x_dst is None else x_dst.size(0)
        num_loops = min(size) if size is not None else min(n_src, n_dst)
        uses_attr = edge_attr is not None and self.lin_edge is not None
        sizes = (
            n_src if size is None or size[0] is None else size[0],
            n_dst if size is None or size[1] is None else size[1],
        )
        g, lg, ready = self._graphs(edge_index, sizes, num_loops, edge_attr if uses_attr else None)
        if not ready:
            return self._run_pyg(x, edge_index, edge_attr, size, return_attention_weights)
        used = g if lg is None else lg.graph

        score = None
        if uses_attr:
            ea = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
            att = self._edge_att(ea).t()
            if lg is None:
                score = _in_csr_order(ea @ att, g)
            else:  # original edges and loops, then gathered in CSR order
                score = self._with_loop_rows(edge_index, g, lg, ea, num_loops).matmul(att)
                score = score.index_select(0, lg.ids)

        p, rng = self._dropout(x_src.device)
        # (strict=False: 'sgt', which has no tensor-core attention, runs the CSR kernels)
        out, lse = dispatch.run(
            'attention',
            used,
            x_src,
            a_src,
            a_dst,
            score,
            self.negative_slope,
            p,
            rng,
            backend=self.backend,
            strict=False,
        )
        dtype = self._pyg_dtype(
            x_src, self.att_src, self.att_dst if x_dst is not None else None, self.att_edge if uses_attr else None
        )
        out = self._epilogue(out, res, dtype)
        if return_attention_weights:
            logits = gat_logits(
                used.rowptr, used.col, a_src, a_dst, score, self.negative_slope, H, acc_dtype(x_src.dtype)
            )
            alpha = attention_weights(used, logits, lse, p, rng).to(dtype)
            return out, self._weights(edge_index, g, lg, alpha, num_loops)
        return out

    def _edge_att(self, edge_attr: Tensor) -> Tensor:
        """``M [heads, edge_dim]``: ``lin_edge`` and ``att_edge`` folded, so
        the edge term of the attention logits is ``edge_attr @ M^T``."""
        lin = self.lin_edge
        if isinstance(lin.weight, UninitializedParameter):
            lin(edge_attr[:0])  # lazy edge_dim: PyG's Linear initialises on its first call
        H, C = self.heads, self.out_channels
        W = lin.weight.view(H, C, -1)
        return (W * self.att_edge.view(H, C, 1)).sum(dim=1)


@pyg_layer(pyg_nn.GATv2Conv)
class GATv2Conv(_GATBase, pyg_nn.GATv2Conv):
    r"""Drop-in ``torch_geometric.nn.GATv2Conv`` on pyg_tc's fused attention
    kernel: :math:`\alpha_{ij} = \mathrm{softmax}_j(a^\top \mathrm{LeakyReLU}(
    \Theta_s x_j + \Theta_t x_i + \Theta_e e_{ij}))` and :math:`\sum_j
    \alpha_{ij} \Theta_s x_j` computed row by row (online softmax, attention
    dropout from a counter-based generator); the ``E x heads x channels``
    pre-activations exist only inside the kernel.

    Self loops, their edge features (``fill_value``), the returned attention
    weights and dropout as in :class:`GATConv`. The edge term is
    ``lin_edge`` of the edge features gathered in the graph's CSR order
    (``E x heads x channels``, as the kernel reads it). Returning attention
    weights recomputes the logits in chunks of edges.

    PyG's own forward runs for the cases listed in :class:`GATConv`, and for
    edge features without ``edge_dim`` or a feature pair with no target
    features (PyG asserts).
    """

    propagate_type = {'x': 'PairTensor', 'alpha': 'Tensor'}
    edge_updater_type = {'x': 'PairTensor', 'edge_attr': 'OptTensor'}
    _pyg_forward = pyg_method(pyg_nn.GATv2Conv.forward, '_pyg_forward')

    def __init__(
        self,
        in_channels: Union[int, Tuple[int, int]],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: Optional[int] = None,
        fill_value: Union[float, Tensor, str] = 'mean',
        bias: bool = True,
        share_weights: bool = False,
        residual: bool = False,
        backend: str = 'auto',
        **kwargs,
    ):
        # PyG's __init__ sets node_dim=0: no static graphs (features are [N, F])
        super().__init__(
            in_channels,
            out_channels,
            heads,
            concat,
            negative_slope,
            dropout,
            add_self_loops,
            edge_dim,
            fill_value,
            bias,
            share_weights,
            residual,
            **kwargs,
        )
        self._tc_init(backend)

    def forward(
        self,
        x: Union[Tensor, PairTensor],
        edge_index: Adj,
        edge_attr: OptTensor = None,
        return_attention_weights: Optional[bool] = None,
    ) -> Union[Tensor, Tuple[Tensor, Tuple[Tensor, Tensor]], Tuple[Tensor, PyGSparseTensor]]:
        """As PyG's ``GATv2Conv.forward`` (see the class doc)."""
        if torch.jit.is_scripting():
            return self._pyg_forward(x, edge_index, edge_attr, return_attention_weights)
        return self._tc_forward(x, edge_index, edge_attr, return_attention_weights)

    @torch.jit.unused
    def _tc_forward(
        self,
        x: Union[Tensor, PairTensor],
        edge_index: Adj,
        edge_attr: OptTensor = None,
        return_attention_weights: Optional[bool] = None,
    ) -> Any:
        reason = self._gat_reason(x, edge_index, edge_attr, return_attention_weights)
        if reason is None and edge_attr is not None and self.lin_edge is None:
            reason = 'edge features without edge_dim'
        if reason is None and not isinstance(x, Tensor) and x[1] is None:
            reason = 'no target features'
        if reason:
            return self._run_pyg(x, edge_index, edge_attr, return_attention_weights)
        x = autocast_input(x)  # the residual and lin_l / lin_r read one half copy
        H, C = self.heads, self.out_channels
        res: Optional[Tensor] = None
        if isinstance(x, Tensor):
            if self.res is not None:
                res = self.res(x)
            x_l = self.lin_l(x).view(-1, H, C)
            x_r = x_l if self.share_weights else self.lin_r(x).view(-1, H, C)
        else:
            x_l, x_r = x
            if self.res is not None:
                res = self.res(x_r)
            x_l = self.lin_l(x_l).view(-1, H, C)
            x_r = self.lin_r(x_r).view(-1, H, C)

        num_loops = min(x_l.size(0), x_r.size(0))
        g, lg, ready = self._graphs(edge_index, (x_l.size(0), x_r.size(0)), num_loops, edge_attr)
        if not ready:
            return self._run_pyg(x, edge_index, edge_attr, return_attention_weights)
        used = g if lg is None else lg.graph

        edge = None
        if edge_attr is not None:
            ea = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
            edge = self.lin_edge(self._edge_rows(edge_index, g, lg, ea, num_loops)).view(-1, H, C)

        att = self.att.view(H, C)
        p, rng = self._dropout(x_l.device)
        out, lse = dispatch.run(
            'attention_v2', used, x_l, x_r, att, edge, self.negative_slope, p, rng, backend=self.backend, strict=False
        )
        dtype = self._pyg_dtype(x_l, x_r, att, edge)
        out = self._epilogue(out, res, dtype)
        if return_attention_weights:
            logits = _gatv2_logits(used, x_l, x_r, att, edge, self.negative_slope)
            alpha = attention_weights(used, logits, lse, p, rng).to(dtype)
            return out, self._weights(edge_index, g, lg, alpha, num_loops)
        return out


def _folded_logits(lin: torch.nn.Module, att: Tensor, x: Tensor, H: int, C: int) -> Optional[Tensor]:
    """GAT's target term ``(lin(x).view(-1, H, C) * att).sum(-1)`` of a
    bipartite layer as ``x @ M`` with ``M [F, H]`` the Linear's weight folded
    with ``att`` (exact algebra, other rounding): the targets' projection is
    read by nothing else, so its ``N x H*C`` product (as large as the
    sources') is not made. In the accumulation dtype (``[N, H]``; fp32 for
    fp32 and half ``x``, as the attention kernels take it), computed in
    ``x``'s dtype outside autocast. None where the fold does
    not apply: a Linear not yet initialised (lazy), with a bias or hooks of
    its own, or not a plain 2-D input."""
    w = getattr(lin, 'weight', None)
    if (
        not isinstance(w, Tensor)
        or isinstance(w, UninitializedParameter)
        or getattr(lin, 'bias', None) is not None
        or has_hooks(lin)
        or x.dim() != 2
        or w.shape != (H * C, x.size(1))
    ):
        return None
    acc = acc_dtype(w.dtype)  # (half weights: the fold's products summed in fp32, rounded once)
    m = (w.to(acc).view(H, C, -1) * att.reshape(H, C, 1).to(acc)).sum(1)  # [H, F]
    with torch.autocast(x.device.type, enabled=False):
        return torch.matmul(x, m.t().to(x.dtype)).to(acc_dtype(x.dtype))


def _gatv2_logits(
    g: CSRGraph, x: Tensor, x_r: Tensor, att: Tensor, edge: Optional[Tensor], negative_slope: float
) -> Tensor:
    """GATv2's logits ``[E, H]`` (CSR order, accumulation dtype), in chunks
    of edges so at most ``_V2_LOGIT_CHUNK`` pre-activations exist at once."""
    acc = acc_dtype(x.dtype)
    E, H, C = g.num_edges, x.size(1), x.size(2)
    if E == 0:
        return x.new_zeros(0, H, dtype=acc)
    row, col = g.row().long(), g.col.long()
    att = att.to(acc)
    step = max(1, _V2_LOGIT_CHUNK // max(1, H * C))
    parts = []
    for s in range(0, E, step):
        z = x.to(acc).index_select(0, col[s : s + step]) + x_r.to(acc).index_select(0, row[s : s + step])
        if edge is not None:
            z = z + edge[s : s + step].to(acc)
        parts.append((F.leaky_relu(z, negative_slope) * att).sum(-1))
    return torch.cat(parts) if len(parts) > 1 else parts[0]
