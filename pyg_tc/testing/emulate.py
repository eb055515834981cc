"""CPU emulations of the CUDA kernels (test oracles): each walks the kernel's
own schedule on the CPU (the same units, workspace slots and order of the
heavy-row reduction), so a schedule or tiling bug shows in tests on a
machine without a GPU. Outputs a kernel never writes stay NaN.

* :func:`~pyg_tc.testing.emulate_csr_spmm`: the CSR engine's SpMM (``kernels/csr``);
* :func:`~pyg_tc.testing.emulate_sgt_spmm`, :func:`~pyg_tc.testing.emulate_sgt_sddmm`: TC-GNN's tensor-core
  kernels over the SGT blocks (``kernels/sgt``);
* :func:`~pyg_tc.testing.emulate_cbsr_spmm`, :func:`~pyg_tc.testing.emulate_cbsr_sspmm`: MaxK-GNN's SpGEMM
  and SSpMM over CBSR features (``kernels/cbsr``);
* :func:`~pyg_tc.testing.emulate_attention`: fuseGNN's fused attention forward
  (``kernels/attn``).

The ops' pure-PyTorch references, which the CPU runs, stay beside their ops
(``pyg_tc.ops``).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ..formats.cbsr import CBSR
from ..formats.csr import CSRGraph
from ..formats.sgt import BLOCK_W, WINDOW, SGTDir, _mask_bits
from ..ops.attn import acc_dtype, attention_schedules, dropout_keep


# CPU emulation of the kernel's schedule


def _unit_edges(s):
    """A schedule's units unpacked (row, start, slot, length) with, per edge
    they cover, its unit and its CSR position."""
    u = s.units.long()
    row, start, end, slot = u.unbind(1) if u.numel() else (u.new_zeros(0),) * 4
    lens = end - start
    total = int(lens.sum())
    unit_of_edge = torch.repeat_interleave(torch.arange(u.size(0)), lens, output_size=total)
    pos = start[unit_of_edge] + torch.arange(total) - (torch.cumsum(lens, 0) - lens)[unit_of_edge]
    return row, start, slot, lens, unit_of_edge, pos


def emulate_csr_spmm(
    g: CSRGraph,
    x: Tensor,
    value: Optional[Tensor] = None,
    reduce: str = 'sum',
    diag: Optional[Tensor] = None,
    transpose: bool = False,
) -> Tensor:
    """CPU emulation of the CUDA SpMM: walks the same units, writes partial rows
    to the same slots and reduces heavy rows slot by slot. Unwritten rows stay
    NaN, so a schedule bug shows up as NaN in tests.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph.
        x (torch.Tensor): source features (of the direction used).
        value (torch.Tensor, optional): edge values in the CSR order of the
            direction used.
        reduce (str, optional): ``'sum'``, ``'mean'`` or ``'max'``.
        diag (torch.Tensor, optional): the self term (square graphs).
        transpose (bool, optional): walk the transpose's schedule.

    Shapes:
        - **input:** x :math:`(N_{src}, F)`, value :math:`(E)`, diag
          :math:`(N_{dst})` or a scalar
        - **output:** :math:`(N_{dst}, F)`
    """
    rowptr, col, s = (g.t_rowptr, g.t_col, g.t_sched) if transpose else (g.rowptr, g.col, g.sched)
    R = rowptr.numel() - 1
    F = x.size(1)
    row, start, slot, lens, unit_of_edge, pos = _unit_edges(s)
    msg = x[col.long()[pos]].float()
    if value is not None:
        msg = msg * value.float()[pos].unsqueeze(1)
    if reduce == 'max':
        acc = torch.full((row.numel(), F), float('-inf')).scatter_reduce_(
            0, unit_of_edge.unsqueeze(1).expand(-1, F), msg, 'amax'
        )
    else:
        acc = torch.zeros(row.numel(), F).index_add_(0, unit_of_edge, msg)
    out = torch.full((R, F), float('nan'))
    direct = slot < 0
    d_acc = acc[direct]
    if reduce == 'max':
        d_acc = torch.where(lens[direct].unsqueeze(1) > 0, d_acc, torch.zeros_like(d_acc))
    if reduce == 'mean':
        d_acc = d_acc / lens[direct].clamp(min=1).unsqueeze(1)
    out[row[direct]] = d_acc
    ws = torch.full((s.num_slots, F), float('nan'))
    ws[slot[~direct]] = acc[~direct]
    hp = s.heavy_ptr.long()
    hr = s.heavy_rows.long()
    # (a padded graph's schedule has spare slots and empty heavy entries: the kernel skips those)
    S = int(hp[-1])
    owner = torch.repeat_interleave(torch.arange(hr.numel()), hp[1:] - hp[:-1], output_size=S)
    if reduce == 'max':
        h = torch.full((hr.numel(), F), float('-inf')).scatter_reduce_(
            0, owner.unsqueeze(1).expand(-1, F), ws[:S], 'amax'
        )
    else:
        h = torch.zeros(hr.numel(), F).index_add_(0, owner, ws[:S])
    keep = hp[1:] > hp[:-1]
    h, hr = h[keep], hr[keep]
    if reduce == 'mean':
        h = h / (rowptr[hr + 1] - rowptr[hr]).float().unsqueeze(1)
    out[hr] = h
    if diag is not None:
        out = out + diag.float().view(-1, 1) * x.float()
    return out.to(x.dtype)


# CPU emulation of the tensor-core kernels: the same blocks, units and slots.


def _tiles(d: SGTDir, cell_val: Tensor) -> Tensor:
    """Dense A tiles [B, 16, 8] (fp32) from cell values."""
    B = d.num_blocks
    A = torch.zeros(B * 128, dtype=torch.float32, device=cell_val.device)
    A[_mask_bits(d.mask).view(-1).nonzero().flatten()] = cell_val.float()
    return A.view(B, BLOCK_W, WINDOW).transpose(1, 2)


def _gather_cols(d: SGTDir, x: Tensor) -> Tensor:
    c = d.cols.long()
    xs = x.float().index_select(0, c.clamp(min=0))
    return xs.masked_fill(c.unsqueeze(1) < 0, 0.0)


def emulate_sgt_spmm(d: SGTDir, cell_val: Tensor, x: Tensor, diag: Optional[Tensor] = None) -> Tensor:
    """``out[R, F]`` as the TCU SpMM computes it: one ``[16 x 8] @ [8 x F]``
    product per block, blocks summed in order per unit, direct units written,
    split windows reduced slot by slot. Rows no unit writes stay NaN."""
    B, F = d.num_blocks, x.size(1)
    P = (
        torch.bmm(_tiles(d, cell_val), _gather_cols(d, x).view(B, BLOCK_W, F))
        if B
        else x.new_zeros(0, WINDOW, F, dtype=torch.float32)
    )
    dev = x.device
    u = d.sched.units.long()
    win, start, end, slot = u.unbind(1) if u.numel() else (u.new_zeros(0),) * 4
    lens = end - start
    owner = torch.repeat_interleave(torch.arange(u.size(0), device=dev), lens, output_size=int(lens.sum()))
    blocks = start[owner] + torch.arange(owner.numel(), device=dev) - (torch.cumsum(lens, 0) - lens)[owner]
    acc = torch.zeros(u.size(0), WINDOW, F, device=dev).index_add_(0, owner, P[blocks])
    W = (d.num_rows + WINDOW - 1) // WINDOW
    out = torch.full((W, WINDOW, F), float('nan'), device=dev)
    direct = slot < 0
    out[win[direct]] = acc[direct]
    ws = torch.full((d.sched.num_slots, WINDOW, F), float('nan'), device=dev)
    ws[slot[~direct]] = acc[~direct]
    hp, hw = d.sched.heavy_ptr.long(), d.sched.heavy_rows.long()
    sowner = torch.repeat_interleave(
        torch.arange(hw.numel(), device=dev), hp[1:] - hp[:-1], output_size=d.sched.num_slots
    )
    out[hw] = torch.zeros(hw.numel(), WINDOW, F, device=dev).index_add_(0, sowner, ws)
    out = out.view(-1, F)[: d.num_rows]
    if diag is not None:
        out = out + diag.float().view(-1, 1) * x.float()
    return out.to(x.dtype)


def emulate_sgt_sddmm(d: SGTDir, a: Tensor, b: Tensor) -> Tensor:
    """Cell values ``<a[row], b[col]>`` as the TCU SDDMM computes them: one
    ``[16 x F] @ [F x 8]`` product per block, cells picked by the mask."""
    B, F = d.num_blocks, a.size(1)
    W = (d.num_rows + WINDOW - 1) // WINDOW
    rows = torch.zeros(W * WINDOW, F, dtype=torch.float32, device=a.device)
    rows[: d.num_rows] = a.float()
    bp = d.block_ptr.long()
    blk_win = torch.repeat_interleave(torch.arange(W, device=a.device), bp[1:] - bp[:-1], output_size=B)
    D = torch.bmm(rows.view(W, WINDOW, F)[blk_win], _gather_cols(d, b).view(B, BLOCK_W, F).transpose(1, 2))
    cells = D.transpose(1, 2).reshape(B, 128)[_mask_bits(d.mask)]
    return cells.to(a.dtype)


# CPU emulation of the CUDA kernels (same units, same slots, same order of the
# heavy-row reduction). Unwritten rows stay NaN so schedule bugs show.


def emulate_cbsr_spmm(
    g: CSRGraph, x: CBSR, value: Optional[Tensor] = None, reduce: str = 'sum', diag: Optional[Tensor] = None
) -> Tensor:
    """Emulates the forward SpGEMM: every unit accumulates ``w * values[j]``
    into a private ``width``-wide buffer at ``indices[j]`` (the kernel's
    shared-memory buffer), the first unit of a row adds ``diag * x[row]``,
    and the buffer goes to the output row (scaled for mean) or to the unit's
    workspace slot, reduced per heavy row in slot order.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph;  x (pyg_tc.formats.CBSR): source features; value, reduce,
            diag: as in :func:`~pyg_tc.ops.cbsr_spmm_graph`.

    Shapes:
        - **input:** x values :math:`(N_{src}, k)`
        - **output:** :math:`(N_{dst}, W)`, ``W = x.width`` (unwritten rows NaN)
    """
    F = x.width
    row, start, slot, lens, unit_of_edge, pos = _unit_edges(g.sched)
    U = row.numel()
    src = g.col.long()[pos]
    vals = x.values.float()[src]
    if value is not None:
        vals = vals * value.float()[pos].unsqueeze(1)
    flat = unit_of_edge.unsqueeze(1) * F + x.indices.long()[src]
    buf = torch.zeros(U * F).index_put_((flat.reshape(-1),), vals.reshape(-1), accumulate=True)
    buf = buf.view(U, F)
    if diag is not None:
        first = start == g.rowptr.long()[row]
        r = row[first]
        d = diag.float().expand(g.num_rows)[r].unsqueeze(1) * x.values.float()[r]
        flat = first.nonzero().flatten().unsqueeze(1) * F + x.indices.long()[r]
        buf = buf.reshape(-1).index_put_((flat.reshape(-1),), d.reshape(-1), accumulate=True).view(U, F)
    out = torch.full((g.num_rows, F), float('nan'))
    direct = slot < 0
    scale = 1.0 / lens[direct].clamp(min=1).float().unsqueeze(1) if reduce == 'mean' else 1.0
    out[row[direct]] = buf[direct] * scale
    s = g.sched
    ws = torch.full((s.num_slots, F), float('nan'))
    ws[slot[~direct]] = buf[~direct]
    hp, hr = s.heavy_ptr.long(), s.heavy_rows.long()
    S = int(hp[-1])  # (a padded graph's schedule: spare slots and empty heavy entries, skipped)
    owner = torch.repeat_interleave(torch.arange(hr.numel()), hp[1:] - hp[:-1], output_size=S)
    h = torch.zeros(hr.numel(), F).index_add_(0, owner, ws[:S])
    keep = hp[1:] > hp[:-1]
    h, hr = h[keep], hr[keep]
    if reduce == 'mean':
        h = h / (g.rowptr[hr + 1] - g.rowptr[hr]).float().unsqueeze(1)
    out[hr] = h
    return out.to(x.dtype)


def emulate_cbsr_sspmm(
    g: CSRGraph,
    grad: Tensor,
    indices: Tensor,
    value: Optional[Tensor] = None,
    reduce: str = 'sum',
    diag: Optional[Tensor] = None,
) -> Tensor:
    """Emulates the backward SSpMM (outer product): every unit stages the
    dense gradient row of its target ``i`` (scaled by ``1/deg(i)`` for mean),
    and every edge ``(i, j)`` adds ``w * G[i, indices[j]]`` to row ``j`` of
    the ``[N_src, k]`` result; the first unit of a row adds the diagonal
    term. Returns ``[N_src, k]`` in grad's dtype.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph; grad (torch.Tensor): the output's gradient;
            indices (torch.Tensor): the CBSR columns; value, reduce, diag: as
            in :func:`~pyg_tc.ops.cbsr_spmm_graph`.

    Shapes:
        - **input:** grad :math:`(N_{dst}, F)`, indices :math:`(N_{src}, k)`
        - **output:** :math:`(N_{src}, k)`
    """
    row, start, slot, lens, unit_of_edge, pos = _unit_edges(g.sched)
    G = grad.float()
    if reduce == 'mean':
        deg = (g.rowptr[1:] - g.rowptr[:-1]).clamp(min=1).float()
        G = G / deg.unsqueeze(1)
    idx = indices.long()
    src = g.col.long()[pos]
    tgt = row[unit_of_edge]
    contrib = G[tgt].gather(1, idx[src])
    if value is not None:
        contrib = contrib * value.float()[pos].unsqueeze(1)
    out = torch.zeros(indices.size(0), indices.size(1)).index_add_(0, src, contrib)
    if diag is not None:
        first = start == g.rowptr.long()[row]
        r = row[first]
        out.index_add_(0, r, diag.float().expand(g.num_rows)[r].unsqueeze(1) * grad.float()[r].gather(1, idx[r]))
    return out.to(grad.dtype)


# CPU emulation of the forward kernel's schedule


def emulate_attention(
    g: CSRGraph, x: Tensor, logits: Tensor, dropout: float = 0.0, rng: Optional[Tensor] = None
) -> Tuple[Tensor, Tensor]:
    """CPU emulation of the fused forward (``kernels/attn/attn_forward.cu``)
    on the same metadata: walks the units of the kernels' schedule
    (``pyg_tc.ops.attn.attention_schedules``: ``row, start, end, slot``), writes partial
    states to the same workspace slots and merges heavy rows slot by slot
    (the kernel adds the slots in interleaved groups: equal up to rounding),
    so a schedule bug shows in tests.

    ``x [Ns, H, C]`` are the messages, ``logits [E, H]`` the per-edge scores
    in CSR order (``pyg_tc.ops.attn.gat_logits`` / ``gatv2_logits``); attention
    dropout ``dropout`` draws its mask from ``rng`` with ``pyg_tc.ops.attn.dropout_keep``
    (the kernel's Philox counters). Per unit, an online softmax over its
    edges in order with the kernel's one-exponential update: ``d = s - m``,
    ``r = exp(-|d|)``; if ``d > 0``: ``l = l r + 1``, ``acc = acc r + w x``,
    ``m = s``; else ``l += r``, ``acc += r w x`` (``w`` the dropout scale).
    A light unit (``slot < 0``) writes ``out = acc * (1 / l)`` and ``lse = m +
    log l`` (0 and ``-inf`` for a row without edges); a heavy unit writes
    ``(acc, m, l)`` to its slot, and each heavy row merges its slots in slot
    order (``M = max m_s``; ``l = sum l_s e^(m_s - M)``; ``acc = sum acc_s
    e^(m_s - M)``, slots with ``m_s = -inf`` skipped; ``out = acc / l``,
    ``lse = M + log l``). Outputs never written stay NaN. Units are walked in
    lockstep (edge ``k`` of every unit at once, like the lanes of a warp),
    vectorised over heads and channels. Math in fp32 (fp64 for fp64 ``x``).
    Returns ``(out [Nd, H, C]`` in ``x``'s dtype, ``lse [Nd, H])``."""
    acc = acc_dtype(x.dtype)
    dev = x.device
    _, H, C = x.shape
    R, E = g.num_rows, g.num_edges
    s_all = logits.to(device=dev, dtype=acc).reshape(E, H)
    if dropout > 0:
        w_all = dropout_keep(rng, E, H, dropout, dev).to(acc)
    else:
        w_all = torch.ones(E, H, dtype=acc, device=dev)
    xs = x.to(acc)
    col = g.col.to(dev).long()
    sch = attention_schedules(g)[0]
    u = sch.units.to(dev).long().view(-1, 4)
    row, start, end, slot = u.unbind(1)
    lens = end - start
    U = u.size(0)
    inf = float('inf')
    m = torch.full((U, H), -inf, dtype=acc, device=dev)
    l = torch.zeros(U, H, dtype=acc, device=dev)
    a = torch.zeros(U, H, C, dtype=acc, device=dev)
    for k in range(int(lens.max()) if U else 0):
        ui = (lens > k).nonzero().squeeze(1)
        e = start[ui] + k
        s, w, xv = s_all[e], w_all[e], xs.index_select(0, col[e])
        mu = m[ui]
        d = s - mu
        r = torch.exp(-d.abs())  # e^(m - s) when s > m, else e^(s - m): one exponential
        up = d > 0
        cs = torch.where(up, r, torch.ones_like(r))  # rescale of the old state
        inc = torch.where(up, torch.ones_like(r), r)  # weight of this edge
        l[ui] = l[ui] * cs + inc
        m[ui] = torch.where(up, s, mu)
        a[ui] = a[ui] * cs.unsqueeze(-1) + (inc * w).unsqueeze(-1) * xv

    nan = float('nan')
    out = torch.full((R, H, C), nan, dtype=acc, device=dev)
    lse = torch.full((R, H), nan, dtype=torch.float64, device=dev)
    light = slot < 0
    ll = l[light]
    pos = ~(ll <= 0)  # NaN (a schedule bug) propagates
    inv = torch.where(pos, 1.0 / ll, torch.zeros_like(ll))
    out[row[light]] = a[light] * inv.unsqueeze(-1)
    lse[row[light]] = torch.where(pos, m[light].double() + torch.log(ll).double(), -inf)

    # heavy rows: partial states to their slots, merged in slot order
    S = sch.num_slots
    ws_a = torch.full((S, H, C), nan, dtype=acc, device=dev)
    ws_m = torch.full((S, H), nan, dtype=acc, device=dev)
    ws_l = torch.full((S, H), nan, dtype=acc, device=dev)
    heavy = ~light
    ws_a[slot[heavy]] = a[heavy]
    ws_m[slot[heavy]] = m[heavy]
    ws_l[slot[heavy]] = l[heavy]
    hr = sch.heavy_rows.to(dev).long()
    hp = sch.heavy_ptr.to(dev).long()
    keep = hp[1:] > hp[:-1]  # (a padded graph's empty heavy entries: the kernel skips them)
    hr, hp = hr[keep], torch.cat([hp[:1], hp[1:][keep]])  # (they follow the real ones)
    NH = hr.numel()
    if NH == 0:
        return out.to(x.dtype), lse
    nslots = hp[1:] - hp[:-1]
    M = torch.full((NH, H), -inf, dtype=acc, device=dev)
    for k in range(int(nslots.max())):
        hi = (nslots > k).nonzero().squeeze(1)
        M[hi] = torch.maximum(M[hi], ws_m[hp[hi] + k])
    L = torch.zeros(NH, H, dtype=acc, device=dev)
    A = torch.zeros(NH, H, C, dtype=acc, device=dev)
    for k in range(int(nslots.max())):
        hi = (nslots > k).nonzero().squeeze(1)
        sl = hp[hi] + k
        ms = ws_m[sl]
        live = ms != -inf
        sc = torch.where(live, torch.exp(ms - M[hi]), torch.zeros_like(ms))
        L[hi] = torch.where(live, L[hi] + ws_l[sl] * sc, L[hi])
        A[hi] = torch.where(live.unsqueeze(-1), A[hi] + ws_a[sl] * sc.unsqueeze(-1), A[hi])
    pos = ~(L <= 0)  # NaN (an unwritten slot) propagates
    out[hr] = torch.where(pos.unsqueeze(-1), A / L.unsqueeze(-1), torch.zeros_like(A))
    lse[hr] = torch.where(pos, M.double() + torch.log(L).double(), -inf)
    return out.to(x.dtype), lse
