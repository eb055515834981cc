"""Neighbour sampling of heterogeneous graphs with PyG's semantics
(pyg-lib's ``hetero_neighbor_sample``): the specification and the
pure-PyTorch reference (the test oracle of the GPU kernel to come).

Specification, extending :mod:`pyg_tc.ops.neighbor` to typed graphs:

* One CSC per edge type ``(src, rel, dst)``: ``colptr [N_dst + 1]``, ``row
  [E]``, the in-neighbours (of type ``src``) of each ``dst`` node in the
  order of that type's edges sorted stably by target.
* Nodes, per node type: the seeds of that type first (in the given order),
  then, hop by hop, every node not seen before, in order of first appearance.
* Hop ``h``: for each edge type in the given order, every node of type
  ``dst`` that the previous hop added (hop 0: the seeds of ``dst``) samples
  ``num_neighbors[edge type][h]`` in-neighbours as in the homogeneous op
  (target by target in node order; all of them in CSC order for ``-1`` or a
  fan-out at least the degree; Floyd's distinct draws listed in CSC order;
  independent draws with ``replace=True``); a new ``src`` node joins its
  type's list at once, so a later edge type of the same hop sees it as
  sampled; the nodes a hop adds to a type are that type's targets in the
  next hop.
* Randomness: the homogeneous op's draws (Philox of counter ``(r, h, i,
  t)``), ``t`` the edge type's position in the given order, ``r`` the
  target's position among its type's targets of the hop. A graph of one
  edge type gives the homogeneous op's batch.
* Edges, per edge type: hop by hop, target by target (local ids, so
  ``col`` never decreases: the edge type's CSR over the batch's ``dst``
  nodes); ``eid`` each edge's CSC position.

With fan-outs covering the degrees, batches equal pyg-lib's.

The op ``hetero_neighbor_sample`` takes the graph as lists (node and edge
types by number): each edge type's CSC (``colptrs`` int64, ``rows`` int32),
its source and target type (``edge_src``, ``edge_dst``), the seeds of every
node type (int64, empty where a type has none), the fan-outs of every edge
type in one list (``fanouts[e * H + h]``) and two int32 state arrays per
node type (``node_maps`` all -1, ``firsts`` all ``2^31 - 1``; the CUDA
kernel leaves them as it found them). It returns each type's nodes (global
ids), each edge type's local sources and targets (int64) and CSC positions,
and the counts (int64, on the CPU): nodes per type per hop
(``[T][H + 1]``), then edges per edge type per hop (``[R][H]``).
"""

from typing import Dict, List, Sequence, Tuple

import torch
from torch import Tensor

from .._library import Op
from .neighbor import hop_positions

EdgeType = Tuple[str, str, str]


def hetero_neighbor_sample_reference(
    colptr: Dict[EdgeType, Tensor],
    row: Dict[EdgeType, Tensor],
    seeds: Dict[str, Tensor],
    num_neighbors: Dict[EdgeType, Sequence[int]],
    num_nodes: Dict[str, int],
    replace: bool,
    seed: int,
) -> Tuple[Dict[str, Tensor], Dict[EdgeType, Tensor], Dict[EdgeType, Tensor], Dict[EdgeType, Tensor], dict, dict]:
    """One heterogeneous batch (see the module doc), on the CPU.

    Args:
        colptr, row (dict): each edge type's CSC (``(src, rel, dst)`` -> tensor); the
            dict's order is the order edge types are sampled in.
        seeds (dict): global seed ids per node type.
        num_neighbors (dict): fan-outs per hop (a list) of
            each edge type (all of one length).
        num_nodes (dict): nodes per node type (every type of the
            graph: the outputs have one entry per type, in this order).
        replace (bool): sample with replacement.
        seed (int): the batch's draw (the generator's key).

    Returns:
        ``(node, row, col, eid, num_sampled_nodes, num_sampled_edges)``:
        global node ids per type; per edge type the local source and target
        ids and each edge's CSC position; per node type the nodes added per
        hop (seeds first) and per edge type the edges per hop (lists).
    """
    edge_types = list(colptr)
    hops = {len(num_neighbors[e]) for e in edge_types}
    if len(hops) > 1:
        raise ValueError(f'pyg_tc: every edge type needs as many fan-outs (hops), got {num_neighbors}')
    H = hops.pop() if hops else 0
    i64 = torch.long
    node_map = {t: torch.full((int(n),), -1, dtype=i64) for t, n in num_nodes.items()}
    nodes: Dict[str, List[Tensor]] = {t: [] for t in num_nodes}
    count = {t: 0 for t in num_nodes}
    frontier: Dict[str, Tuple[int, Tensor]] = {}
    num_sampled_nodes = {t: [] for t in num_nodes}
    for t in num_nodes:
        s = seeds.get(t, torch.zeros(0, dtype=i64)).cpu().long()
        B = s.numel()
        first = torch.full((int(num_nodes[t]),), B, dtype=i64)
        first.scatter_reduce_(0, s, torch.arange(B), 'amin')  # a repeated seed refers to its first occurrence
        node_map[t] = torch.where(first < B, first, torch.full_like(first, -1))
        nodes[t].append(s)
        count[t] = B
        frontier[t] = (0, s)
        num_sampled_nodes[t].append(B)
    rows = {e: [] for e in edge_types}
    cols = {e: [] for e in edge_types}
    eids = {e: [] for e in edge_types}
    num_sampled_edges = {e: [] for e in edge_types}
    for hop in range(H):
        added = {t: [] for t in num_nodes}
        for rel, e in enumerate(edge_types):
            src, _, dst = e
            begin, targets = frontier[dst]
            cp, rw = colptr[e].cpu().long(), row[e].cpu().long()
            start = cp[targets]
            cnt, pos = hop_positions(cp[targets + 1] - start, int(num_neighbors[e][hop]), replace, seed, hop, rel)
            eid = torch.repeat_interleave(start, cnt) + pos
            cand = rw[eid]
            K = cand.numel()
            nm = node_map[src]
            seen = nm[cand] >= 0
            first = torch.full((nm.numel(),), K, dtype=i64)
            first.scatter_reduce_(0, cand[~seen], torch.arange(K)[~seen], 'amin')
            new = ~seen & (first[cand] == torch.arange(K))
            fresh = cand[new]
            nm[fresh] = torch.arange(count[src], count[src] + fresh.numel())
            count[src] += fresh.numel()
            added[src].append(fresh)
            rows[e].append(nm[cand])
            cols[e].append(begin + torch.repeat_interleave(torch.arange(targets.numel()), cnt))
            eids[e].append(eid)
            num_sampled_edges[e].append(K)
        for t in num_nodes:
            fresh = torch.cat(added[t]) if added[t] else torch.zeros(0, dtype=i64)
            nodes[t].append(fresh)
            frontier[t] = (count[t] - fresh.numel(), fresh)
            num_sampled_nodes[t].append(fresh.numel())

    def cat(parts: List[Tensor]) -> Tensor:
        return torch.cat(parts) if parts else torch.zeros(0, dtype=i64)

    node = {t: cat(v) for t, v in nodes.items()}
    return (
        node,
        {e: cat(v) for e, v in rows.items()},
        {e: cat(v) for e, v in cols.items()},
        {e: cat(v) for e, v in eids.items()},
        num_sampled_nodes,
        num_sampled_edges,
    )


def hetero_neighbor_sample_op_reference(
    colptrs: List[Tensor],
    rows: List[Tensor],
    edge_src: List[int],
    edge_dst: List[int],
    seeds: List[Tensor],
    fanouts: List[int],
    replace: bool,
    seed: int,
    node_maps: List[Tensor],
) -> Tuple[List[Tensor], List[Tensor], List[Tensor], List[Tensor], Tensor]:
    """The ``hetero_neighbor_sample`` op on the CPU (see the module doc):
    :func:`hetero_neighbor_sample_reference` with types by number."""
    T, R = len(seeds), len(colptrs)
    H = len(fanouts) // R if R else 0
    types = [str(t) for t in range(T)]
    ets = [(types[a], f'r{e}', types[b]) for e, (a, b) in enumerate(zip(edge_src, edge_dst))]
    dev = node_maps[0].device if node_maps else torch.device('cpu')
    node, row, col, eid, nsn, nse = hetero_neighbor_sample_reference(
        dict(zip(ets, colptrs)),
        dict(zip(ets, rows)),
        dict(zip(types, seeds)),
        {et: list(fanouts[e * H : (e + 1) * H]) for e, et in enumerate(ets)},
        {t: m.numel() for t, m in zip(types, node_maps)},
        replace,
        seed,
    )
    counts = [c for t in types for c in nsn[t]] + [c for et in ets for c in nse[et]]
    return (
        [node[t].to(dev) for t in types],
        [row[et].to(dev) for et in ets],
        [col[et].to(dev) for et in ets],
        [eid[et].to(dev) for et in ets],
        torch.tensor(counts, dtype=torch.long),
    )


def _fake(a):
    ctx = torch.library.get_ctx()
    dev = a.node_maps[0].device
    R, T = len(a.colptrs), len(a.seeds)
    H = len(a.fanouts) // R if R else 0

    def empties(n: int) -> List[Tensor]:
        return [torch.empty(ctx.new_dynamic_size(), dtype=torch.long, device=dev) for _ in range(n)]

    edges = [ctx.new_dynamic_size() for _ in range(R)]
    return (
        empties(T),
        [torch.empty(m, dtype=torch.long, device=dev) for m in edges],
        [torch.empty(m, dtype=torch.long, device=dev) for m in edges],
        [torch.empty(m, dtype=torch.long, device=dev) for m in edges],
        torch.empty(T * (H + 1) + R * H, dtype=torch.long),
    )


hetero_neighbor_sample = Op(
    'hetero_neighbor_sample(Tensor[] colptrs, Tensor[] rows, int[] edge_src, int[] edge_dst, Tensor[] seeds, '
    'int[] fanouts, bool replace, int seed, Tensor(a!)[] node_maps, Tensor(b!)[] firsts) -> '
    '(Tensor[] nodes, Tensor[] src, Tensor[] dst, Tensor[] eid, Tensor counts)',
    reference=hetero_neighbor_sample_op_reference,
    fake=_fake,
)
