"""Models built from pyg_tc layers."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..formats.cbsr import CBSR
from .conv import GCNConv, GINConv, SAGEConv
from .maxk import MaxK

_CONVS = ('sage', 'gcn', 'gin')


class MaxKGNN(torch.nn.Module):
    r"""The MaxK-GNN model (Peng et al., ASPLOS'24), layout as in the paper:
    an input linear layer, then per layer

    ``Linear -> MaxK(k) (or ReLU) -> dropout -> graph conv -> LayerNorm``

    and an output linear layer. With MaxK the conv receives CBSR features and
    aggregates them with the SpGEMM kernel (backward: SSpMM); with
    ``nonlinear='relu'`` it is the same model on dense features (the
    baseline).

    Args:
        conv: ``'sage'`` (mean SAGEConv), ``'gcn'`` (GCNConv) or ``'gin'``
            (GINConv with a linear ``nn``); every conv maps hidden -> hidden.
        in_channels, hidden_channels, out_channels: widths.
        num_layers: number of (linear, nonlinearity, conv) layers.
        k: entries kept per row by MaxK (ignored for ReLU).
        dropout: dropout probability on the nonlinearity's output.
        norm: LayerNorm after every conv.
        nonlinear: ``'maxk'`` or ``'relu'``.
        backend: passed to the convs (``'auto'``, ``'csr'`` or ``'pyg'``).

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge
          indices :math:`(2, |\mathcal{E}|)` (or any adjacency the convs take)
        - **output:** :math:`(|\mathcal{V}|, F_{out})`
    """

    def __init__(
        self,
        conv: str,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int,
        k: int,
        dropout: float = 0.5,
        norm: bool = True,
        nonlinear: str = 'maxk',
        backend: str = 'auto',
    ):
        super().__init__()
        if conv not in _CONVS:
            raise ValueError(f'MaxKGNN: conv must be one of {_CONVS}, got {conv!r}')
        if nonlinear not in ('maxk', 'relu'):
            raise ValueError(f"MaxKGNN: nonlinear must be 'maxk' or 'relu', got {nonlinear!r}")
        if num_layers < 1:
            raise ValueError(f'MaxKGNN: num_layers must be >= 1, got {num_layers}')
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f'MaxKGNN: dropout must lie in [0, 1), got {dropout}')
        self.conv_kind, self.k, self.dropout, self.nonlinear = conv, k, dropout, nonlinear
        h = hidden_channels
        self.lin_in = torch.nn.Linear(in_channels, h)
        self.lins = torch.nn.ModuleList(torch.nn.Linear(h, h) for _ in range(num_layers))
        self.act = MaxK(k) if nonlinear == 'maxk' else torch.nn.ReLU()
        self.convs = torch.nn.ModuleList(self._conv(conv, h, backend) for _ in range(num_layers))
        self.norms = torch.nn.ModuleList(
            torch.nn.LayerNorm(h) if norm else torch.nn.Identity() for _ in range(num_layers)
        )
        self.lin_out = torch.nn.Linear(h, out_channels)

    @staticmethod
    def _conv(kind: str, h: int, backend: str) -> torch.nn.Module:
        if kind == 'sage':
            return SAGEConv(h, h, aggr='mean', backend=backend)
        if kind == 'gcn':
            return GCNConv(h, h, cached=True, backend=backend)
        return GINConv(torch.nn.Linear(h, h), backend=backend)

    def reset_parameters(self) -> None:
        """Re-initialise every layer."""
        for m in [self.lin_in, self.lin_out, *self.lins, *self.convs, *self.norms]:
            if hasattr(m, 'reset_parameters'):
                m.reset_parameters()

    def forward(self, x: Tensor, edge_index: Any) -> Tensor:
        """Node outputs ``[N, out_channels]``."""
        x = self.lin_in(x)
        for lin, conv, norm in zip(self.lins, self.convs, self.norms):
            x = self.act(lin(x))
            if isinstance(x, CBSR):
                x = x.with_values(F.dropout(x.values, self.dropout, self.training))
            else:
                x = F.dropout(x, self.dropout, self.training)
            x = norm(conv(x, edge_index))
        return self.lin_out(x)

    def __repr__(self) -> str:
        return (
            f'{self.__class__.__name__}(conv={self.conv_kind}, layers={len(self.convs)}, '
            f'nonlinear={self.nonlinear}, k={self.k})'
        )
