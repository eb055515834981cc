"""The MaxK nonlinearity of MaxK-GNN."""

from __future__ import annotations

import torch
from torch import Tensor

from ..formats.cbsr import CBSR
from ..ops import check_k, maxk


class MaxK(torch.nn.Module):
    r"""Keeps the ``k`` largest entries of every row and zeroes the rest:
    :math:`\mathrm{MaxK}(x)_{ij} = x_{ij}` if :math:`x_{ij}` is among the
    ``k`` largest of row ``i``, else 0. The backward pass sends gradient
    only through the kept entries.

    Returns a :class:`~pyg_tc.formats.CBSR` (values ``[N, k]``, uint8/int16
    column indices) that pyg_tc's GCNConv / SAGEConv / GINConv aggregate with
    the SpGEMM kernel; call ``.to_dense()`` for anything else. Ties at the
    k-th value keep the lowest columns; ``k >= width`` keeps every entry.

    Args:
        k (int): entries kept per row; any integral value (int, numpy
            integer, 0-d integer tensor), at least 1.

    Shapes:
        - **input:** :math:`(N, F)`
        - **output:** CBSR values and indices :math:`(N, K)` with
          ``K = min(k, F)``, width :math:`F`
    """

    def __init__(self, k: int):
        super().__init__()
        self.k = check_k(k, 'MaxK')

    def forward(self, x: Tensor) -> CBSR:
        """The ``k`` largest entries of every row of ``x`` as CBSR features."""
        return maxk(x, self.k)

    def extra_repr(self) -> str:
        """``k=...`` in the module repr."""
        return f'k={self.k}'
