"""The benchmarks' model: one stack of graph convolutions built from a layer
library (``torch_geometric.nn`` or ``pyg_tc.nn``), so PyG's model and
pyg_tc's are the same code with the same initialisation."""

from __future__ import annotations

from types import ModuleType
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

#: the layer kinds :func:`conv` builds
KINDS = ('gcn', 'sage', 'gin', 'gin-mean', 'gat')


def conv(lib: ModuleType, kind: str, cin: int, cout: int, cached: bool = False, heads: int = 1) -> torch.nn.Module:
    """One ``kind`` layer of ``lib`` mapping ``cin`` to ``cout`` channels.

    Args:
        lib (types.ModuleType): ``torch_geometric.nn`` or ``pyg_tc.nn``.
        kind (str): ``'gcn'`` (``GCNConv``), ``'sage'`` (``SAGEConv``, mean
            aggregation), ``'gin'`` / ``'gin-mean'`` (``GINConv`` on
            Linear-ReLU-Linear, sum / mean aggregation) or ``'gat'``
            (``GATConv`` with ``heads`` heads of ``cout // heads`` channels).
        cin (int): input channels.
        cout (int): output channels.
        cached (bool, optional): ``GCNConv(cached=...)``.
        heads (int, optional): GAT's heads.
    """
    if kind == 'gcn':
        return lib.GCNConv(cin, cout, cached=cached)
    if kind == 'sage':
        return lib.SAGEConv(cin, cout, aggr='mean')
    if kind in ('gin', 'gin-mean'):
        mlp = torch.nn.Sequential(torch.nn.Linear(cin, cout), torch.nn.ReLU(), torch.nn.Linear(cout, cout))
        return lib.GINConv(mlp, aggr='mean') if kind == 'gin-mean' else lib.GINConv(mlp)
    if kind == 'gat':
        return lib.GATConv(cin, cout // heads, heads=heads)
    raise ValueError(f'unknown model {kind!r}; choose from {KINDS}')


class Net(torch.nn.Module):
    """``len(dims) - 1`` layers of :func:`conv` (``dims[i] -> dims[i + 1]``),
    ReLU between them, dropout before each (PyG's examples' layout; none at
    ``dropout=0``). With ``trim`` and the batch's hop counts, layer ``i`` runs
    on PyG's ``trim_to_layer`` of the batch (the last ``i`` hops dropped).

    Args:
        lib (types.ModuleType): ``torch_geometric.nn`` or ``pyg_tc.nn``.
        kind (str): the layer kind (``KINDS``: one :func:`conv` builds).
        dims (Sequence[int]): the widths, input first.
        dropout (float, optional): dropout before each layer.
        trim (bool, optional): ``trim_to_layer`` where hop counts are given.
        cached (bool, optional): ``GCNConv(cached=...)``.
        heads (int, optional): GAT's heads.

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
    ):
        super().__init__()
        self.convs = torch.nn.ModuleList(
            conv(lib, kind, i, o, cached=cached, heads=heads) for i, o in zip(dims[:-1], dims[1:])
        )
        self.dropout, self.trim = dropout, trim

    def forward(
        self, x: Tensor, edge_index, num_sampled_nodes: Optional[list] = None, num_sampled_edges: Optional[list] = None
    ) -> Tensor:
        """Logits of every node (with ``trim``: of the rows the last layer keeps)."""
        from torch_geometric.utils import trim_to_layer

        trim = self.trim and num_sampled_nodes is not None
        for i, layer in enumerate(self.convs):
            if trim:
                x, edge_index, _ = trim_to_layer(i, num_sampled_nodes, num_sampled_edges, x, edge_index)
            if self.dropout:
                x = F.dropout(x, self.dropout, self.training)
            x = layer(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x
