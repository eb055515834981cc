"""Neighbour sampling for mini-batches: PyG's ``NeighborLoader`` semantics as
one op, ``neighbor_sample``, whose output is already the batch's CSR.

Specification (the CUDA kernel, ``kernels/neighbor/``, follows it bit for bit;
this module's reference is the CPU implementation and the test oracle):

* The graph is a CSC: ``colptr [N+1]``, ``row [E]`` (int32): the in-neighbours
  of node ``v`` are ``row[colptr[v]:colptr[v+1]]``, in the order of the graph's
  edges sorted stably by target.
* Nodes: the seeds first (in the given order; a repeated seed keeps its place
  and refers to its first occurrence), then, hop by hop, every node not seen
  before, in order of first appearance in the hop's edges.
* Hop ``h`` (fan-out ``k``) samples in-neighbours of the nodes added by the
  previous hop (hop 0: the seeds), target by target in node order. A target
  of in-degree ``d`` takes all its ``d`` edges in CSC order when ``k < 0`` or
  (without replacement) ``k >= d``; ``k`` distinct edges chosen uniformly
  (Robert Floyd's algorithm, as pyg-lib) and listed in CSC order otherwise; or,
  with ``replace=True``, ``k`` independent uniform draws in draw order (none
  when ``d = 0``).
* Randomness: draw ``i`` of the target at position ``r`` of hop ``h`` uses
  Philox 4x32-10 (``pyg_tc._philox``) of counter ``(r, h, i, t)`` under the
  64-bit key ``seed``, ``t = 0`` (a heterogeneous graph's edge type number,
  :mod:`pyg_tc.ops.hetero_neighbor`); its first two words make a 53-bit uniform ``u`` in
  ``[0, 1)`` and the integer ``min(floor(u * n), n - 1)`` in ``[0, n)``. A
  batch is a pure function of (graph, seeds, fan-outs, replace, seed).
* Edges: hop by hop, target by target, so ``dst`` never decreases: the edge
  list *is* the CSR of the batch (rows = targets = local node ids) with
  ``rowptr [num_nodes + 1]``; nodes added by the last hop have no edges.

Outputs: ``nodes`` (int64 global ids), ``edge_index`` (int64 ``[2, E]``, local
ids, row 0 = sources), ``rowptr`` and ``col`` (int32: the CSR, ``col`` =
``edge_index[0]``), ``eid`` (int64: each edge's position in the CSC) and
``counts`` (int64 on the CPU: nodes added per hop, seeds first, then edges
per hop: PyG's ``num_sampled_nodes`` and ``num_sampled_edges``).
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
from torch import Tensor

from .._library import Op
from .._philox import U32, philox4x32

_TWO53 = float(2**53)


def draw_index(seed: int, hop: int, r: Tensor, i: Tensor, n: Tensor, relation: int = 0) -> Tensor:
    """The integer in ``[0, n)`` of draw ``i`` of the targets at positions
    ``r`` of hop ``hop`` (int64 tensors, broadcast) of edge type number
    ``relation`` (0 for a homogeneous graph): see the module doc."""
    r, i, n = torch.broadcast_tensors(r, i if torch.is_tensor(i) else torch.full_like(r, i), n)
    zero = torch.zeros_like(r)
    w0, w1, _, _ = philox4x32(
        r & U32,
        zero + (hop & U32),
        i & U32,
        zero + (relation & U32),
        torch.tensor(seed & U32),
        torch.tensor((seed >> 32) & U32),
    )
    u = ((w0 >> 5).double() * 67108864.0 + (w1 >> 6).double()) / _TWO53
    return torch.minimum(torch.floor(u * n.double()).long(), n - 1)


def hop_positions(deg: Tensor, k: int, replace: bool, seed: int, hop: int, relation: int = 0) -> Tuple[Tensor, Tensor]:
    """Sampled edges of one hop (of edge type number ``relation``): (count
    per target ``[F]``, position of each sampled edge within its target's
    CSC row, concatenated in target order)."""
    F = deg.numel()
    if k < 0:
        cnt = deg.clone()
    elif replace:
        cnt = torch.where(deg > 0, torch.full_like(deg, k), torch.zeros_like(deg))
    else:
        cnt = deg.clamp(max=k)
    total = int(cnt.sum())
    rows = torch.repeat_interleave(torch.arange(F), cnt, output_size=total)
    start = torch.cumsum(cnt, 0) - cnt
    within = torch.arange(total) - start[rows]
    if k < 0 or total == 0:
        return cnt, within
    if replace:
        return cnt, draw_index(seed, hop, rows, within, deg[rows], relation)
    pos = within.clone()
    drawn = deg > k  # Floyd's rows; the others take every edge
    if bool(drawn.any()):
        r = drawn.nonzero().view(-1)
        d = deg[r]
        S = torch.empty(r.numel(), k, dtype=torch.long)
        for i in range(k):  # j = d - k + i, t uniform in [0, j]; t taken before -> j
            j = d - k + i
            t = draw_index(seed, hop, r, i, j + 1, relation)
            hit = (S[:, :i] == t.unsqueeze(1)).any(1)
            S[:, i] = torch.where(hit, j, t)
        S = S.sort(1)[0]
        slot = torch.full((F,), -1, dtype=torch.long)
        slot[r] = torch.arange(r.numel())
        e = drawn[rows]
        pos[e] = S[slot[rows[e]], within[e]]
    return cnt, pos


def neighbor_sample_reference(colptr: Tensor, row: Tensor, seeds: Tensor, fanouts: List[int], replace: bool, seed: int):
    """The CPU implementation of the ``neighbor_sample`` op (see the module doc)."""
    dev = seeds.device
    colptr, row, seeds = colptr.cpu().long(), row.cpu().long(), seeds.cpu().long()
    N, B = colptr.numel() - 1, seeds.numel()
    node_map = torch.full((N,), B, dtype=torch.long)  # first occurrence of each seed
    node_map.scatter_reduce_(0, seeds, torch.arange(B), 'amin')
    node_map[node_map == B] = -1
    nodes, srcs, eids, cnts = [seeds], [], [], []
    num_nodes, num_edges = [B], []
    begin, frontier = 0, seeds
    for hop, k in enumerate(fanouts):
        start = colptr[frontier]
        cnt, pos = hop_positions(colptr[frontier + 1] - start, int(k), replace, seed, hop)
        eid = torch.repeat_interleave(start, cnt) + pos
        cand = row[eid]
        K = cand.numel()
        seen = node_map[cand] >= 0
        first = torch.full((N,), K, dtype=torch.long)
        first.scatter_reduce_(0, cand[~seen], torch.arange(K)[~seen], 'amin')
        new = ~seen & (first[cand] == torch.arange(K))
        added = cand[new]
        end = begin + frontier.numel()
        node_map[added] = torch.arange(end, end + added.numel())
        nodes.append(added)
        srcs.append(node_map[cand])
        eids.append(eid)
        cnts.append(cnt)
        num_nodes.append(added.numel())
        num_edges.append(K)
        begin, frontier = end, added
    cnts.append(torch.zeros(frontier.numel(), dtype=torch.long))  # the last hop's nodes
    node = torch.cat(nodes)
    src = torch.cat(srcs) if srcs else torch.zeros(0, dtype=torch.long)
    per_node = torch.cat(cnts)
    dst = torch.repeat_interleave(torch.arange(node.numel()), per_node)
    rowptr = torch.cat([per_node.new_zeros(1), torch.cumsum(per_node, 0)]).to(torch.int32)
    eid = torch.cat(eids) if eids else torch.zeros(0, dtype=torch.long)
    counts = torch.tensor(num_nodes + num_edges, dtype=torch.long)
    return (
        node.to(dev),
        torch.stack([src, dst]).to(dev),
        rowptr.to(dev),
        src.to(torch.int32).to(dev),
        eid.to(dev),
        counts,
    )


def _fake(a):
    ctx = torch.library.get_ctx()
    n, e = ctx.new_dynamic_size(), ctx.new_dynamic_size()
    s = a.seeds
    return (
        s.new_empty(n, dtype=torch.long),
        s.new_empty(2, e, dtype=torch.long),
        s.new_empty(n + 1, dtype=torch.int32),
        s.new_empty(e, dtype=torch.int32),
        s.new_empty(e, dtype=torch.long),
        torch.empty(2 * len(a.fanouts) + 1, dtype=torch.long),
    )


neighbor_sample = Op(
    'neighbor_sample(Tensor colptr, Tensor row, Tensor seeds, int[] fanouts, bool replace, int seed, '
    'Tensor(a!) node_map, Tensor(b!) first) -> (Tensor nodes, Tensor edge_index, Tensor rowptr, '
    'Tensor col, Tensor eid, Tensor counts)',
    reference=neighbor_sample_reference,
    fake=_fake,
)


def check_fanouts(fanouts: Sequence[int]) -> List[int]:
    """Fan-outs as a list of ints; each ``>= 0`` or ``-1`` (all neighbours)."""
    if isinstance(fanouts, dict):
        raise NotImplementedError(
            'pyg_tc: num_neighbors per edge type (a dict) is for heterogeneous graphs, '
            'which pyg_tc.loader does not sample; use PyG\'s loader'
        )
    if not isinstance(fanouts, (list, tuple)) and not (torch.is_tensor(fanouts) and fanouts.dim() == 1):
        raise TypeError(f'pyg_tc: num_neighbors must be a list of ints (one per hop), got {fanouts!r}')
    out = []
    for k in fanouts:
        if isinstance(k, bool) or not isinstance(k, int) and not (torch.is_tensor(k) and k.numel() == 1):
            raise TypeError(f'pyg_tc: num_neighbors must be a list of ints, got {list(fanouts)!r}')
        k = int(k)
        if k < -1:
            raise ValueError(
                f'pyg_tc: num_neighbors entries must be >= 0, or -1 for all neighbours; got {list(fanouts)!r}'
            )
        out.append(k)
    return out


def gather_rows_reference(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` on ``index``'s device (``x`` may live elsewhere)."""
    return x.index_select(0, index.to(x.device)).to(index.device)


gather_rows = Op(
    'gather_rows(Tensor x, Tensor index) -> Tensor',
    reference=gather_rows_reference,
    fake=lambda a: a.x.new_empty((a.index.numel(),) + tuple(a.x.shape[1:]), device=a.index.device),
)


#: the fp8 format of features stored by the loader (``FeatureStorage``)
FP8 = torch.float8_e4m3fn
#: the dtypes an fp8 gather upcasts to
UPCAST = (torch.float32, torch.float16, torch.bfloat16)


def gather_rows_scaled_reference(x: Tensor, scale: Tensor, index: Tensor, dtype: torch.dtype) -> Tensor:
    """``dtype(float(x[index]) * scale)`` on ``index``'s device: an fp8
    (e4m3) matrix's rows upcast, ``scale`` per column (``[F]``) or one for
    the matrix (``[1]``); one fp32 product and one rounding to ``dtype``."""
    if x.dtype != FP8 or x.dim() != 2:
        raise ValueError(f'pyg_tc: gather_rows_scaled: x must be a 2-D {FP8} matrix, got {x.dtype} {tuple(x.shape)}')
    if scale.dtype != torch.float32 or scale.dim() != 1 or scale.numel() not in (1, x.size(1)):
        raise ValueError(
            f'pyg_tc: gather_rows_scaled: scale must be fp32 of 1 or {x.size(1)} values, got '
            f'{scale.dtype} {tuple(scale.shape)}'
        )
    if dtype not in UPCAST:
        raise ValueError(f'pyg_tc: gather_rows_scaled: dtype must be one of {UPCAST}, got {dtype}')
    rows = x.index_select(0, index.to(x.device)).to(index.device)
    return (rows.float() * scale.to(index.device)).to(dtype)


gather_rows_scaled = Op(
    'gather_rows_scaled(Tensor x, Tensor scale, Tensor index, ScalarType dtype) -> Tensor',
    reference=gather_rows_scaled_reference,
    fake=lambda a: a.x.new_empty((a.index.numel(), a.x.size(1)), dtype=a.dtype, device=a.index.device),
)
