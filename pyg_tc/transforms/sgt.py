"""SGTTransform: TC-GNN's Sparse Graph Translation as a PyG transform."""

from __future__ import annotations

from typing import Optional

from torch_geometric.data import Data
from torch_geometric.data.datapipes import functional_transform

from ..formats.csr import DEFAULT_CHUNK
from ..formats.sgt import SGT, WINDOW
from .degree_bucket import DegreeBucketTransform


@functional_transform('pyg_tc_sgt')
class SGTTransform(DegreeBucketTransform):
    r"""Builds the SGT metadata of TC-GNN (Algorithm 1) for both directions
    of the graph and attaches it, with the CSR format, to ``data.edge_index``
    (a :class:`~pyg_tc.formats.TCEdgeIndex`; edge order unchanged): per row
    window of 16 target rows the sorted distinct neighbour columns, every
    edge's condensed column (as its tile cell), the tensor-core blocks per
    window, and the same for the transpose (see :mod:`pyg_tc.formats.sgt`).

    Runs on the device of ``data.edge_index``: vectorised torch, identical
    output on CPU (datasets) and GPU (e.g. per ``NeighborLoader`` mini-batch
    after moving it; docs/sgt.md has its time next to one SpMM).

    Args:
        window: rows per window; 16 (the MMA's M) is the only value the
            kernels take.
        unit_blocks: blocks per work unit (windows with more are split);
            None: ``pyg_tc.formats.sgt.DEFAULT_UNIT_BLOCKS`` (64).
        chunk: the CSR schedule's chunk (see :class:`DegreeBucketTransform`).
        validate: run :meth:`~pyg_tc.formats.sgt.SGT.validate` after building (slow; tests).
    """

    def __init__(
        self,
        window: int = WINDOW,
        unit_blocks: Optional[int] = None,
        chunk: Optional[int] = DEFAULT_CHUNK,
        validate: bool = False,
    ):
        if window != WINDOW:
            raise ValueError(f'SGTTransform: window must be {WINDOW} (the tensor-core MMA M), got {window}')
        if unit_blocks is not None and unit_blocks < 1:
            raise ValueError(f'SGTTransform: unit_blocks must be positive, got {unit_blocks}')
        super().__init__(chunk=chunk, validate=validate)
        self.window, self.unit_blocks = window, unit_blocks

    def forward(self, data: Data) -> Data:
        """Attach the SGT of ``data``'s graph (built once, kept with its CSR format)."""
        data = super().forward(data)
        g = DegreeBucketTransform.graph(data)
        if g.cache.sgt is None:
            g.cache.sgt = SGT.build(g, self.unit_blocks)
        if self.check:
            g.cache.sgt.validate(g)
        return data

    @staticmethod
    def sgt(data: Data) -> SGT:
        """The SGT a transformed ``data`` carries."""
        g = DegreeBucketTransform.graph(data)
        if g is None or g.cache.sgt is None:
            raise ValueError('SGTTransform: data.edge_index carries no SGT metadata; apply SGTTransform first')
        return g.cache.sgt

    @staticmethod
    def stats(data: Data) -> dict:
        """TC-GNN Figure 7 statistics of the forward direction: ``blocks``
        (16 x 8 tensor-core blocks after SGT), ``blocks_without_sgt`` (nonzero
        16 x 8 tiles of the untranslated adjacency), ``nnz_per_block``
        (distinct nonzeros per block), plus windows, cells, edges, blocks and
        edges per window and the SDDMM's 16 x 16 tiles with / without SGT."""
        g = DegreeBucketTransform.graph(data)
        return SGTTransform.sgt(data).stats(g)

    @staticmethod
    def validate(data: Data) -> SGT:
        """Check the attached SGT against the attached CSR graph (every edge in
        exactly one cell with its (row, column), ...); raises ValueError."""
        return SGTTransform.sgt(data).validate(DegreeBucketTransform.graph(data))

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(window={self.window}, unit_blocks={self.unit_blocks})'
