"""SGT: TC-GNN's Sparse Graph Translation (Algorithm 1), for both directions.

Rows of the target-sorted adjacency are grouped into windows of 16 (the M of
the tensor-core MMA). Inside a window the distinct neighbour columns are
listed in ascending order and renumbered 0, 1, 2, ... ("condensed" columns);
every 8 condensed columns (the TF32 MMA's K) form one 16 x 8 *block*. An edge
``(row, col)`` lands in the *cell* ``(row % 16, condensed(col) % 8)`` of block
``condensed(col) // 8`` of its window. Duplicate edges share a cell (the SpMM
sums their weights); a cell is therefore one distinct ``(row, col)`` pair.

Per direction (:class:`SGTDir`; ``fwd`` aggregates in-edges, ``bwd`` is the
transpose used by the backward pass), all int32:

* ``block_ptr [W+1]``: blocks of window ``w`` are ``block_ptr[w] ..
  block_ptr[w+1]`` (``W = ceil(rows / 16)``);
* ``cols [B*8]``: node id of every condensed column, ``-1`` for the padding
  after a window's last column;
* ``mask [B, 4]``: 128-bit occupancy of each block, bit ``c * 16 + r`` for
  tile row ``r`` and column ``c`` (column-major: word ``c // 2``, bit
  ``(c % 2) * 16 + r``). A cell's rank among the set bits of its block is its
  offset in the block's cells, so the kernels need no per-edge index;
* ``cell_ptr [B+1]``: cells of block ``b`` are ``cell_ptr[b] ..
  cell_ptr[b+1]``, in bit order;
* ``sched``: the work units over windows, a :class:`~pyg_tc.formats.Schedule`
  built on ``block_ptr`` (unit = ``window, first block, end block, slot``;
  windows with more than ``unit_blocks`` blocks are split, their fp32 partial
  tiles go to workspace slots and are reduced in slot order: no atomics).

Shared by both directions (:class:`SGT`):

* ``edge_order [E]``: forward CSR positions sorted in forward cell order;
  ``dup_ptr [C+1]`` delimits each cell's run in it when the graph has
  duplicate edges (``None`` otherwise: cell ``i`` is edge ``edge_order[i]``);
* ``edge_cell [E]``: forward cell of every forward CSR position;
* ``t_cell [C]``: transpose cell ``k`` is forward cell ``t_cell[k]`` (cells
  are distinct pairs, so this is a bijection).

The builder is vectorised torch (two sorts and a few scans) and runs on the
device of the graph: on the CPU for datasets, on the GPU per mini-batch; the
output is identical. The tensor-core ops and their references live in
:mod:`pyg_tc.ops.sgt`, the CPU emulation of their kernels in :mod:`pyg_tc.testing`.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from .csr import CSRGraph, Schedule, _validate_schedule, build_schedule, csr_rows, stale_error

WINDOW = 16  # rows per window (MMA M)
BLOCK_W = 8  # condensed columns per block (TF32 MMA K)


# Blocks per work unit, on every graph: windows of up to 64 blocks are whole
# units, longer ones are split; where that leaves too few units to fill the GPU,
# warps share a unit (:func:`pyg_tc.ops.sgt.warps_for`). Why 64: docs/sgt.md
# ("Units").
DEFAULT_UNIT_BLOCKS = 64


class SGTDir(NamedTuple):
    block_ptr: Tensor
    cols: Tensor
    mask: Tensor
    cell_ptr: Tensor
    sched: Schedule
    num_rows: int
    num_cols: int

    @property
    def num_blocks(self) -> int:
        """Number of 16 x 8 blocks of this direction."""
        return self.cols.numel() // BLOCK_W

    def to(self, device) -> 'SGTDir':
        """This direction on ``device``."""
        return SGTDir(
            self.block_ptr.to(device),
            self.cols.to(device),
            self.mask.to(device),
            self.cell_ptr.to(device),
            self.sched.to(device),
            self.num_rows,
            self.num_cols,
        )


def _to_int32_bits(w: Tensor) -> Tensor:
    """uint32 bit patterns held in int64 -> int32 with the same bits."""
    return torch.where(w >= 2**31, w - 2**32, w).to(torch.int32)


def _build_dir(rowptr: Tensor, col: Tensor, num_rows: int, num_cols: int, unit_blocks: Optional[int]):
    """One direction; returns (SGTDir, sort order of the CSR edges = cell
    order, sorted position of every cell's first edge, cell id per sorted edge)."""
    dev = col.device
    E = col.numel()
    W = (num_rows + WINDOW - 1) // WINDOW
    row = csr_rows(rowptr).long()
    r = row % WINDOW
    win = row // WINDOW
    # One sort by (window, column, row): ascending distinct columns per
    # window, and inside a block the cells come out column-major (bit order).
    key = (win * num_cols + col.long()) * WINDOW + r
    key, order = torch.sort(key, stable=True)
    del row
    new_pair = torch.ones(E, dtype=torch.bool, device=dev)
    new_cell = torch.ones(E, dtype=torch.bool, device=dev)
    if E:
        new_pair[1:] = (key[1:] // WINDOW) != (key[:-1] // WINDOW)
        new_cell[1:] = key[1:] != key[:-1]
    del key
    upos = new_pair.nonzero().flatten()  # first sorted edge of every (window, column)
    uwin = win[order[upos]]
    ucol = col[order[upos]]
    ucount = torch.bincount(uwin, minlength=W) if upos.numel() else torch.zeros(W, dtype=torch.long, device=dev)
    nblk = (ucount + BLOCK_W - 1) // BLOCK_W
    block_ptr = torch.zeros(W + 1, dtype=torch.long, device=dev)
    torch.cumsum(nblk, 0, out=block_ptr[1:])
    B = int(block_ptr[-1])
    ustart = torch.cumsum(ucount, 0) - ucount
    cond = torch.arange(upos.numel(), device=dev) - ustart[uwin]  # condensed column
    ublock = block_ptr[:-1][uwin] + cond // BLOCK_W
    cols = torch.full((B * BLOCK_W,), -1, dtype=torch.int32, device=dev)
    cols[ublock * BLOCK_W + cond % BLOCK_W] = ucol.to(torch.int32)

    uid = torch.cumsum(new_pair, 0) - 1  # (window, column) id of every sorted edge
    cpos = new_cell.nonzero().flatten()  # first sorted edge of every cell
    cell_id = torch.cumsum(new_cell, 0, dtype=torch.int64) - 1
    cu = uid[cpos]
    cell_block = ublock[cu]
    bit = (cond[cu] % BLOCK_W) * WINDOW + r[order[cpos]]
    words = torch.zeros(B * 4, dtype=torch.int64, device=dev)
    words.index_add_(0, cell_block * 4 + bit // 32, torch.ones_like(bit) << (bit % 32))
    cell_ptr = torch.zeros(B + 1, dtype=torch.long, device=dev)
    if B:
        torch.cumsum(torch.bincount(cell_block, minlength=B), 0, out=cell_ptr[1:])
    sched = build_schedule(block_ptr.to(torch.int32), unit_blocks or DEFAULT_UNIT_BLOCKS)
    d = SGTDir(
        block_ptr.to(torch.int32),
        cols,
        _to_int32_bits(words).view(B, 4),
        cell_ptr.to(torch.int32),
        sched,
        int(num_rows),
        int(num_cols),
    )
    return d, order, cpos, cell_id


class _CellSum(torch.autograd.Function):
    """Sum of each cell's run of edge values (deterministic, in edge order);
    the backward is a gather, so it is differentiable again."""

    @staticmethod
    def forward(ctx, v, dup_ptr, cell_of_sorted):
        ctx.save_for_backward(cell_of_sorted)
        return torch.segment_reduce(v, 'sum', offsets=dup_ptr.long(), axis=0)

    @staticmethod
    def backward(ctx, grad):
        (cell_of_sorted,) = ctx.saved_tensors
        return grad.index_select(0, cell_of_sorted.long()), None, None


class SGT:
    """SGT metadata of a :class:`~pyg_tc.formats.CSRGraph`, both directions (module doc)."""

    def __init__(
        self,
        fwd: SGTDir,
        bwd: SGTDir,
        edge_order: Tensor,
        dup_ptr: Optional[Tensor],
        edge_cell: Tensor,
        t_cell: Tensor,
        num_edges: int,
    ):
        self.fwd, self.bwd = fwd, bwd
        self.edge_order, self.dup_ptr, self.edge_cell, self.t_cell = edge_order, dup_ptr, edge_cell, t_cell
        self.num_edges = int(num_edges)

    @property
    def num_cells(self) -> int:
        """Number of distinct (row, column) cells (duplicate edges share one)."""
        return self.t_cell.numel()

    @property
    def device(self) -> torch.device:
        """Device of the metadata."""
        return self.edge_cell.device

    @classmethod
    def build(cls, g: CSRGraph, unit_blocks: Optional[int] = None) -> 'SGT':
        """Build on ``g``'s device (vectorised torch; identical on CPU and GPU)."""
        E = g.num_edges
        fwd, order, cpos, cell_id = _build_dir(g.rowptr, g.col, g.num_rows, g.num_cols, unit_blocks)
        C = cpos.numel()
        edge_cell = torch.empty(E, dtype=torch.int32, device=g.device)
        edge_cell[order] = cell_id.to(torch.int32)
        dup_ptr = None
        if C != E:
            dup_ptr = torch.cat([cpos, cpos.new_full((1,), E)]).to(torch.int32)
        del cell_id
        bwd, t_order, t_cpos, _ = _build_dir(g.t_rowptr, g.t_col, g.num_cols, g.num_rows, unit_blocks)
        # transpose cell k -> its first transpose edge -> forward CSR edge -> forward cell
        t_cell = edge_cell[g.t_perm.long()[t_order[t_cpos]]]
        return cls(fwd, bwd, order.to(torch.int32), dup_ptr, edge_cell, t_cell, E)

    def to(self, device, non_blocking: bool = False) -> 'SGT':
        """This SGT (both directions) on ``device``."""

        def mv(t):
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return SGT(
            self.fwd.to(device),
            self.bwd.to(device),
            mv(self.edge_order),
            mv(self.dup_ptr),
            mv(self.edge_cell),
            mv(self.t_cell),
            self.num_edges,
        )

    # -- edge values <-> cell values -------------------------------------------
    def cell_values(self, value: Optional[Tensor]) -> Tensor:
        """Forward cell values from edge values in forward CSR order
        (duplicates summed in edge order; all ones when ``value`` is None).
        Differentiable."""
        if value is None:
            if self.dup_ptr is None:
                return torch.ones(self.num_cells, device=self.device)
            return (self.dup_ptr[1:] - self.dup_ptr[:-1]).float()
        v = value.index_select(0, self.edge_order.long())
        if self.dup_ptr is None:
            return v
        return _CellSum.apply(v, self.dup_ptr, self.edge_cell.index_select(0, self.edge_order.long()))

    def edge_values(self, cell: Tensor) -> Tensor:
        """Per-edge values (forward CSR order) from per-cell values."""
        return cell.index_select(0, self.edge_cell.long())

    # -- statistics and checks ----------------------------------------------
    def stats(self, g: Optional[CSRGraph] = None) -> dict:
        """TC-GNN Figure 7: 16 x 8 blocks with and without SGT, nonzeros
        (cells) per block; the same for the SDDMM's 16 x 16 tiles when ``g``
        is given."""
        d = self.fwd
        B = d.num_blocks
        W = d.block_ptr.numel() - 1
        out = {
            'windows': W,
            'blocks': B,
            'cells': self.num_cells,
            'edges': self.num_edges,
            'nnz_per_block': self.num_cells / B if B else 0.0,
            'blocks_per_window': B / W if W else 0.0,
            'edges_per_window': self.num_edges / W if W else 0.0,
        }
        if g is not None:
            ucount = (d.cols.view(-1, BLOCK_W) >= 0).sum(1)
            per_win = torch.zeros(W, dtype=torch.long, device=d.cols.device)
            blk_win = torch.repeat_interleave(
                torch.arange(W, device=d.cols.device), (d.block_ptr[1:] - d.block_ptr[:-1]).long(), output_size=B
            )
            per_win.index_add_(0, blk_win, ucount)
            row = csr_rows(g.rowptr).long() // WINDOW
            c = g.col.long()
            out['blocks_without_sgt'] = int(torch.unique(row * ((g.num_cols + 7) // 8) + c // 8).numel())
            out['tiles16'] = int(((per_win + 15) // 16).sum())
            out['tiles16_without_sgt'] = int(torch.unique(row * ((g.num_cols + 15) // 16) + c // 16).numel())
        return out

    def validate(self, g: CSRGraph) -> 'SGT':
        """Every edge lands in exactly one cell whose (row, column) is the
        edge's, every cell holds at least one edge, blocks and masks are
        consistent, units cover every block once (both directions), and the
        transpose cells are the forward cells swapped. Raises ValueError."""
        E = g.num_edges
        if self.num_edges != E or self.edge_cell.numel() != E or self.edge_order.numel() != E:
            raise stale_error('SGT', {'edges': (self.num_edges, E)}, 're-apply SGTTransform')
        fr, fc = _cell_coords(self.fwd)
        tr, tc = _cell_coords(self.bwd)
        C = fr.numel()
        if tr.numel() != C or self.t_cell.numel() != C:
            raise ValueError('pyg_tc: SGT cell counts of the two directions differ')
        ec = self.edge_cell.long()
        if E and (int(ec.min()) < 0 or int(ec.max()) >= C):
            raise ValueError('pyg_tc: SGT edge_cell out of range')
        row = csr_rows(g.rowptr).long()
        if not (torch.equal(fr[ec], row) and torch.equal(fc[ec], g.col.long())):
            raise ValueError('pyg_tc: an edge does not land in the cell of its (row, column)')
        hits = torch.bincount(ec, minlength=C)
        if C and int(hits.min()) < 1:
            raise ValueError('pyg_tc: SGT has a cell without an edge')
        eo = self.edge_order.long()
        if not torch.equal(torch.sort(eo)[0], torch.arange(E, device=eo.device)) or (
            E and bool((ec[eo][1:] < ec[eo][:-1]).any())
        ):
            raise ValueError('pyg_tc: SGT edge_order is not the cell order of the edges')
        if (self.dup_ptr is None) != (C == E):
            raise ValueError('pyg_tc: SGT dup_ptr does not match the duplicate edges')
        if self.dup_ptr is not None and not torch.equal((self.dup_ptr[1:] - self.dup_ptr[:-1]).long(), hits):
            raise ValueError('pyg_tc: SGT dup_ptr does not delimit the cells')
        t = self.t_cell.long()
        if not (
            torch.equal(torch.sort(t)[0], torch.arange(C, device=t.device))
            and torch.equal(fr[t], tc)
            and torch.equal(fc[t], tr)
        ):
            raise ValueError('pyg_tc: SGT transpose cells do not match the forward cells')
        return self

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"SGT(windows={s['windows']}, blocks={s['blocks']}, cells={s['cells']}, "
            f"nnz_per_block={s['nnz_per_block']:.2f}, device={self.device})"
        )


def _mask_bits(mask: Tensor) -> Tensor:
    """[B, 4] int32 masks -> [B, 128] bool, index = bit = c * 16 + r."""
    sh = torch.arange(32, device=mask.device, dtype=torch.int32)
    return ((mask.unsqueeze(-1) >> sh) & 1).bool().view(-1, 128)


def _cell_coords(d: SGTDir):
    """(row, column) node ids of every cell of a direction, after checking the
    block structure; raises ValueError."""
    B = d.num_blocks
    W = (d.num_rows + WINDOW - 1) // WINDOW
    bp = d.block_ptr.long()
    if bp.numel() != W + 1 or int(bp[0]) != 0 or int(bp[-1]) != B or bool((bp[1:] < bp[:-1]).any()):
        raise ValueError('pyg_tc: SGT block_ptr does not span the blocks')
    if d.mask.shape != (B, 4) or d.cell_ptr.numel() != B + 1:
        raise ValueError('pyg_tc: SGT mask / cell_ptr have the wrong shape')
    bits = _mask_bits(d.mask)
    cols = d.cols.view(B, BLOCK_W).long()
    if B and (int(cols.max()) >= d.num_cols or int(cols.min()) < -1):
        raise ValueError('pyg_tc: SGT column out of range')
    blk_win = torch.repeat_interleave(torch.arange(W, device=bp.device), bp[1:] - bp[:-1], output_size=B)
    # columns ascending inside a window, padding only at the end of its last block
    flat = cols.view(-1)
    win_of = blk_win.repeat_interleave(BLOCK_W)
    valid = flat >= 0
    same = win_of[1:] == win_of[:-1]
    if bool((same & valid[1:] & ~valid[:-1]).any()):
        raise ValueError('pyg_tc: SGT padding column before a real column')
    if bool((same & valid[1:] & valid[:-1] & (flat[1:] <= flat[:-1])).any()):
        raise ValueError('pyg_tc: SGT columns of a window are not strictly ascending')
    r = torch.arange(128, device=bp.device) % WINDOW
    c = torch.arange(128, device=bp.device) // WINDOW
    rows = blk_win.unsqueeze(1) * WINDOW + r
    bad = bits & ((cols[:, c] < 0) | (rows >= d.num_rows))
    if bool(bad.any()):
        raise ValueError('pyg_tc: SGT mask sets a cell in a padding column or past the last row')
    if not torch.equal((d.cell_ptr[1:] - d.cell_ptr[:-1]).long(), bits.sum(1)):
        raise ValueError('pyg_tc: SGT cell_ptr does not match the mask popcounts')
    _validate_schedule(d.sched, d.block_ptr, 'SGT')
    b_idx, bit = bits.nonzero(as_tuple=True)  # row-major over (block, bit) = cell order
    return rows[b_idx, bit], cols[b_idx, c[bit]]


def cell_coords(units: Tensor, cols: Tensor, mask: Tensor):
    """(row, column) node ids of every cell, in cell order, from a direction's
    units (window of each block), columns and masks (no structure checks)."""
    u = units.long()
    B = cols.numel() // BLOCK_W
    lens = u[:, 2] - u[:, 1] if u.numel() else u.new_zeros(0)
    blk_win = torch.zeros(B, dtype=torch.long, device=cols.device)
    if B:
        owner = torch.repeat_interleave(torch.arange(u.size(0), device=cols.device), lens, output_size=B)
        pos = u[:, 1][owner] + torch.arange(B, device=cols.device) - (torch.cumsum(lens, 0) - lens)[owner]
        blk_win[pos] = u[:, 0][owner]
    b_idx, bit = _mask_bits(mask).nonzero(as_tuple=True)
    return blk_win[b_idx] * WINDOW + bit % WINDOW, cols.view(B, BLOCK_W).long()[b_idx, bit // WINDOW]
