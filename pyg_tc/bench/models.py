"""The benchmarks' models: stacks of graph convolutions built from a layer
library (``torch_geometric.nn`` or ``pyg_tc.nn``), so PyG's model and
pyg_tc's are the same code with the same initialisation. :func:`conv` makes
one layer, :class:`Net` a node-level stack (PyG's examples' layouts: GCN,
SAGE, GIN, GAT, GATv2, AGNN), :class:`GraphNet` the same stack with a sum
over each graph's nodes and a linear head (graph classification),
:class:`RGAT` MLPerf's heterogeneous R-GAT. The
benchmark suites and the tutorials whose lesson is not the model itself
build their models here."""

from __future__ import annotations

from types import ModuleType
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import trim_to_layer

#: the layer kinds :func:`conv` builds (and ``'agnn'``, a :class:`Net` layout)
KINDS = ('gcn', 'sage', 'gin', 'gin-mean', 'gin-bn', 'gat', 'gatv2', 'agnn')
#: the activations between layers
ACTS = {'relu': F.relu, 'elu': F.elu}


def conv(
    lib: ModuleType,
    kind: str,
    cin: int,
    cout: int,
    cached: bool = False,
    heads: int = 1,
    *,
    mlp_width: Optional[int] = None,
    att_dropout: float = 0.0,
    layer_kwargs: Optional[dict] = None,
) -> torch.nn.Module:
    """One ``kind`` layer of ``lib`` mapping ``cin`` to ``cout`` channels.

    Args:
        lib (types.ModuleType): ``torch_geometric.nn`` or ``pyg_tc.nn``.
        kind (str): ``'gcn'`` (``GCNConv``), ``'sage'`` (``SAGEConv``, mean
            aggregation), ``'gin'`` / ``'gin-mean'`` (``GINConv`` on
            Linear-ReLU-Linear, sum / mean aggregation), ``'gin-bn'``
            (``GINConv`` on PyG's ``MLP``: Linear, BatchNorm, ReLU, Linear),
            ``'gat'`` / ``'gatv2'`` (``GATConv`` / ``GATv2Conv`` with
            ``heads`` heads of ``cout // heads`` channels, concatenated).
        cin (int): input channels.
        cout (int): output channels.
        cached (bool, optional): ``GCNConv(cached=...)``.
        heads (int, optional): GAT's heads (``cout`` a multiple of them).
        mlp_width (int, optional): the hidden width of GIN's MLP (default
            ``cout``).
        att_dropout (float, optional): GAT's dropout of the attention
            coefficients (``GATConv(dropout=...)``).
        layer_kwargs (dict, optional): more keyword arguments of the layer
            (e.g. pyg_tc's ``backend=``).
    """
    kw = layer_kwargs or {}
    if kind == 'gcn':
        return lib.GCNConv(cin, cout, cached=cached, **kw)
    if kind == 'sage':
        return lib.SAGEConv(cin, cout, aggr='mean', **kw)
    width = mlp_width or cout
    if kind in ('gin', 'gin-mean'):
        mlp = torch.nn.Sequential(torch.nn.Linear(cin, width), torch.nn.ReLU(), torch.nn.Linear(width, cout))
        return lib.GINConv(mlp, aggr='mean', **kw) if kind == 'gin-mean' else lib.GINConv(mlp, **kw)
    if kind == 'gin-bn':
        from torch_geometric.nn import MLP

        return lib.GINConv(MLP([cin, width, cout]), **kw)
    if kind in ('gat', 'gatv2'):
        if cout % heads:
            raise ValueError(f'{kind}: {cout} output channels do not split into {heads} heads')
        layer = lib.GATConv if kind == 'gat' else lib.GATv2Conv
        return layer(cin, cout // heads, heads=heads, dropout=att_dropout, **kw)
    raise ValueError(f'unknown layer {kind!r}; choose from {KINDS[:-1]}')


class Net(torch.nn.Module):
    """``len(dims) - 1`` layers of :func:`conv` (``dims[i] -> dims[i + 1]``),
    the activation between them, dropout before each (PyG's examples' layout;
    none at ``dropout=0``; with ``input_dropout=False`` not before the first,
    so dropout follows each activation). With ``trim`` and the batch's hop
    counts, layer ``i`` runs on PyG's ``trim_to_layer`` of the batch (the
    last ``i`` hops dropped).

    ``kind='agnn'`` is PyG's examples/agnn.py: a ``Linear`` ``dims[0] ->
    dims[1]`` and ReLU, ``len(dims) - 3`` ``AGNNConv`` propagations at that
    width (the first with a fixed temperature, the others learnt), a
    ``Linear`` to ``dims[-1]``; dropout before the two ``Linear`` layers.

    Args:
        lib (types.ModuleType): ``torch_geometric.nn`` or ``pyg_tc.nn``.
        kind (str): the layer kind (``KINDS``: one :func:`conv` builds, or
            ``'agnn'``).
        dims (Sequence[int]): the widths, input first.
        dropout (float, optional): dropout before each layer.
        trim (bool, optional): ``trim_to_layer`` where hop counts are given.
        cached (bool, optional): ``GCNConv(cached=...)``.
        heads (int, optional): GAT's heads.
        last_heads (int, optional): GAT's heads in the last layer (default
            ``heads``).
        att_dropout (float, optional): GAT's attention dropout.
        act (str, optional): the activation between layers, ``'relu'`` or
            ``'elu'``.
        input_dropout (bool, optional): dropout on the input features too.
        mlp_width (int, optional): the hidden width of GIN's MLPs (default:
            each layer's output width).
        layer_kwargs (dict, optional): more keyword arguments of every
            layer (e.g. pyg_tc's ``backend=``; for ``'agnn'``,
            ``requires_grad=True`` learns the first temperature too).

    Shapes:
        - **input:** node features :math:`(|\\mathcal{V}|, F_{in})`, edge
          indices :math:`(2, |\\mathcal{E}|)`
        - **output:** :math:`(|\\mathcal{V}|, F_{out})` (with ``trim``: the
          rows the last layer keeps)
    """

    def __init__(
        self,
        lib: ModuleType,
        kind: str,
        dims: Sequence[int],
        dropout: float = 0.0,
        trim: bool = False,
        cached: bool = False,
        heads: int = 1,
        *,
        last_heads: Optional[int] = None,
        att_dropout: float = 0.0,
        act: str = 'relu',
        input_dropout: bool = True,
        mlp_width: Optional[int] = None,
        layer_kwargs: Optional[dict] = None,
    ):
        super().__init__()
        kw = layer_kwargs or {}
        if act not in ACTS:
            raise ValueError(f'unknown activation {act!r}; choose from {tuple(ACTS)}')
        self.kind, self.act = kind, act
        self.dropout, self.trim, self.input_dropout = dropout, trim, input_dropout
        if kind == 'agnn':
            if len(dims) < 4 or len(set(dims[1:-1])) != 1:
                raise ValueError(f'agnn: dims [in, width, ..., width, out] with two widths or more, got {dims}')
            self.lin_in = torch.nn.Linear(dims[0], dims[1])
            self.convs = torch.nn.ModuleList(
                lib.AGNNConv(**{'requires_grad': i > 0, **kw}) for i in range(len(dims) - 3)
            )
            self.lin_out = torch.nn.Linear(dims[-2], dims[-1])
            return
        n = len(dims) - 1
        self.convs = torch.nn.ModuleList(
            conv(
                lib,
                kind,
                i,
                o,
                cached=cached,
                heads=heads if j < n - 1 or last_heads is None else last_heads,
                mlp_width=mlp_width,
                att_dropout=att_dropout,
                layer_kwargs=kw,
            )
            for j, (i, o) in enumerate(zip(dims[:-1], dims[1:]))
        )

    def _dropout(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.dropout, self.training) if self.dropout else x

    def forward(
        self,
        x: Tensor,
        edge_index,
        num_sampled_nodes_per_hop: Optional[list] = None,
        num_sampled_edges_per_hop: Optional[list] = None,
    ) -> Tensor:
        """Logits of every node (with ``trim``: of the rows the last layer
        keeps). The hop counts are PyG's ``trim_to_layer``'s (named as in
        ``torch_geometric.nn.models.BasicGNN``, so
        :func:`pyg_tc.capture.trimmed_forward` passes them)."""
        from torch_geometric.utils import trim_to_layer

        if self.kind == 'agnn':
            x = self.lin_in(self._dropout(x)).relu()
            for layer in self.convs:
                x = layer(x, edge_index)
            return self.lin_out(self._dropout(x))
        trim = self.trim and num_sampled_nodes_per_hop is not None
        for i, layer in enumerate(self.convs):
            if trim:
                x, edge_index, _ = trim_to_layer(i, num_sampled_nodes_per_hop, num_sampled_edges_per_hop, x, edge_index)
            if i or self.input_dropout:
                x = self._dropout(x)
            x = layer(x, edge_index)
            if i < len(self.convs) - 1:
                x = ACTS[self.act](x)
        return x


class GraphNet(Net):
    """Graph classification: :class:`Net`'s stack with the activation after
    its last layer too, the sum over each graph's nodes
    (``global_add_pool``) and a ``Linear`` head to ``classes``.

    Args:
        lib (types.ModuleType): ``torch_geometric.nn`` or ``pyg_tc.nn``.
        kind (str): the layer kind (``KINDS``, not ``'agnn'``).
        dims (Sequence[int]): the node widths, input first.
        classes (int): the head's outputs.
        **kwargs: :class:`Net`'s options (``dropout``, ``heads``, ``act``, ...).

    Shapes:
        - **input:** node features :math:`(|\\mathcal{V}|, F_{in})`, edge
          indices :math:`(2, |\\mathcal{E}|)`, each node's graph
          :math:`(|\\mathcal{V}|)`
        - **output:** :math:`(|\\mathcal{G}|, C)`
    """

    def __init__(self, lib: ModuleType, kind: str, dims: Sequence[int], classes: int, **kwargs):
        if kind == 'agnn':
            raise ValueError('GraphNet: agnn is a node-level layout')
        super().__init__(lib, kind, dims, **kwargs)
        self.head = torch.nn.Linear(dims[-1], classes)

    def forward(self, x: Tensor, edge_index, batch: Tensor, num_graphs: Optional[int] = None) -> Tensor:
        """Logits of every graph of the batch (``num_graphs`` given: no read
        of ``batch`` back from the GPU, as a captured step needs)."""
        from torch_geometric.nn import global_add_pool

        x = ACTS[self.act](super().forward(x, edge_index))
        return self.head(global_add_pool(x, batch, num_graphs))


class RGAT(torch.nn.Module):
    """MLPerf Training's R-GAT (its GNN benchmark's reference model): ``layers``
    ``HeteroConv`` layers of one ``GATConv((i, i), hidden // heads, heads,
    add_self_loops=False)`` per edge type (both from ``lib``), summed per node type,
    ReLU between layers, and a linear head on the ``target`` node type.

    Args:
        lib (types.ModuleType): ``torch_geometric.nn`` or ``pyg_tc.nn``.
        edge_types (list): the graph's edge types.
        width (int): the input feature width (every node type alike).
        hidden (int): the hidden width (a multiple of ``heads``).
        heads (int): attention heads.
        classes (int): output classes.
        layers (int, optional): ``HeteroConv`` layers. (default: :obj:`3`)
        target (str, optional): the node type classified. (default: :obj:`'paper'`)
    """

    def __init__(
        self,
        lib: ModuleType,
        edge_types: Sequence[tuple],
        width: int,
        hidden: int,
        heads: int,
        classes: int,
        layers: int = 3,
        target: str = 'paper',
    ):
        super().__init__()
        if hidden % heads:
            raise ValueError(f'RGAT: hidden width {hidden} does not split into {heads} heads')
        dims = [width] + [hidden] * layers
        self.convs = torch.nn.ModuleList(
            lib.HeteroConv(
                {e: lib.GATConv((i, i), hidden // heads, heads, add_self_loops=False) for e in edge_types},
                aggr='sum',
            )
            for i in dims[:-1]
        )
        self.lin = torch.nn.Linear(hidden, classes)
        self.target = target

    def forward(
        self,
        x_dict: dict,
        edge_index_dict: dict,
        num_sampled_nodes_dict: Optional[dict] = None,
        num_sampled_edges_dict: Optional[dict] = None,
    ) -> Tensor:
        """The ``target`` nodes' class scores from the node features and
        ``edge_index`` of every type (a ``HeteroData`` batch's ``x_dict`` and
        ``edge_index_dict``). With a sampled batch's hop counts
        (``num_sampled_nodes_dict`` / ``num_sampled_edges_dict``), each layer
        first drops the hops no later layer reads (PyG's ``trim_to_layer``, as
        MLPerf's reference model with ``with_trim``): the same scores for the
        seeds, with less work."""
        trim = num_sampled_nodes_dict is not None and num_sampled_edges_dict is not None
        for i, conv in enumerate(self.convs):
            if trim:
                x_dict, edge_index_dict, _ = trim_to_layer(
                    i, num_sampled_nodes_dict, num_sampled_edges_dict, x_dict, edge_index_dict
                )
            x_dict = conv(x_dict, edge_index_dict)
            if i + 1 < len(self.convs):
                x_dict = {t: x.relu() for t, x in x_dict.items()}
        return self.lin(x_dict[self.target])
