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
"""

from typing import Dict, List, Sequence, Tuple

import torch
from torch import Tensor

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
