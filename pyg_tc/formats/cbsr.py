"""CBSR: the Compressed Balanced Sparse Row feature format of MaxK-GNN.

A :class:`CBSR` holds a feature matrix ``[N, width]`` with exactly ``k``
stored entries per row (the output of :class:`pyg_tc.nn.MaxK`):

* ``values [N, k]`` in the feature dtype (fp32 / fp16 / bf16 / fp64);
* ``indices [N, k]``: the column of every stored value, ``uint8`` when
  ``width <= 256``, ``int16`` otherwise (``width <= 32768``). Columns of one
  row are distinct; the MaxK kernel writes them in ascending order, but no
  consumer relies on the order.

The graph side of the CBSR kernels is the CSR engine's schedule
(:class:`~pyg_tc.formats.csr.Schedule`): its units *are* MaxK-GNN's edge
groups (runs of at most ``chunk`` edges of one row, one warp each; rows above
``chunk`` edges are split and their partial rows reduced in order), so one
format serves the dense and the CBSR kernels (see
:class:`~pyg_tc.transforms.CBSRTransform`).

The CBSR ops and their references live in :mod:`pyg_tc.ops.cbsr`, the CPU
emulations of their kernels in :mod:`pyg_tc.testing`.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

MAX_WIDTH = 32768  # int16 column indices (0..32767)


def index_dtype(width: int) -> torch.dtype:
    """Column-index dtype for a feature width: uint8 up to 256, int16 above."""
    if width <= 256:
        return torch.uint8
    if width <= MAX_WIDTH:
        return torch.int16
    raise ValueError(f'pyg_tc: CBSR supports feature widths up to {MAX_WIDTH}, got {width}')


class CBSR:
    """Sparse rows with ``k`` stored entries each (see the module doc).

    ``check=True`` validates the indices once (range, distinct within a row:
    the kernels rely on it); :func:`pyg_tc.ops.maxk` builds valid ones and
    skips the check.

    Behaves enough like a ``[N, width]`` tensor for PyG-style code:
    ``size()``, ``shape``, ``dtype``, ``device``, ``dim()``; ``to_dense()``
    (differentiable) gives the dense matrix for everything else. Gradients
    flow through ``values``.
    """

    __slots__ = ('values', 'indices', 'width')

    def __init__(self, values: Tensor, indices: Tensor, width: int, check: bool = True):
        if not isinstance(values, Tensor) or not isinstance(indices, Tensor):
            raise TypeError('pyg_tc: CBSR values and indices must be tensors')
        if values.dim() != 2 or indices.shape != values.shape:
            raise ValueError(
                f'pyg_tc: CBSR values and indices must both be [N, k]; got '
                f'{tuple(values.shape)} and {tuple(indices.shape)}'
            )
        width = int(width)
        if indices.dtype != index_dtype(width):
            raise TypeError(f'pyg_tc: CBSR indices for width {width} must be {index_dtype(width)}, got {indices.dtype}')
        if values.size(1) > width:
            raise ValueError(f'pyg_tc: CBSR has k={values.size(1)} entries per row but width {width}')
        if indices.device != values.device:
            raise ValueError('pyg_tc: CBSR values and indices must be on one device')
        self.values, self.indices, self.width = values, indices, width
        if check:
            self.validate()

    # -- tensor-like surface ------------------------------------------------
    @property
    def k(self) -> int:
        """Stored entries per row."""
        return self.values.size(1)

    @property
    def shape(self) -> torch.Size:
        """The dense shape ``[N, width]``."""
        return torch.Size((self.values.size(0), self.width))

    def size(self, dim: Optional[int] = None):
        """The dense size, as ``Tensor.size``."""
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        """Always 2 (a ``[N, width]`` matrix)."""
        return 2

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the values."""
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        """Device of the values."""
        return self.values.device

    @property
    def requires_grad(self) -> bool:
        """Whether the values require gradients."""
        return self.values.requires_grad

    def to(self, *args, **kwargs) -> 'CBSR':
        """Moves / casts the values (indices follow the device only)."""
        values = self.values.to(*args, **kwargs)
        return CBSR(values, self.indices.to(values.device), self.width, check=False)

    def with_values(self, values: Tensor) -> 'CBSR':
        """Same sparsity, new values (e.g. after dropout)."""
        return CBSR(values, self.indices, self.width, check=False)

    def to_dense(self) -> Tensor:
        """The dense ``[N, width]`` matrix (differentiable in ``values``)."""
        out = self.values.new_zeros(self.values.size(0), self.width)
        return out.scatter_(1, self.indices.long(), self.values)  # in place: no copy

    def validate(self) -> 'CBSR':
        """Columns in range and distinct within each row; raises ValueError."""
        idx = self.indices.long()
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.width):
            raise ValueError(f'pyg_tc: CBSR column index out of range [0, {self.width})')
        if idx.numel() and bool((torch.sort(idx, 1)[0].diff(dim=1) == 0).any()):
            raise ValueError('pyg_tc: CBSR row has a repeated column index')
        return self

    def __repr__(self) -> str:
        return (
            f'CBSR(shape={tuple(self.shape)}, k={self.k}, dtype={self.dtype}, '
            f'index_dtype={self.indices.dtype}, device={self.device})'
        )
