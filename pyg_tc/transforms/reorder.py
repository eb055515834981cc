"""Node reordering: reverse Cuthill-McKee (RCM) in vectorised torch.

Cuthill-McKee numbers a graph breadth-first so that neighbours get nearby ids:
a small bandwidth (``max |src - dst|``), i.e. nonzeros clustered near the
diagonal and better gather locality in SpMM. :func:`rcm_order` computes it for
all connected components at once with torch ops on the device of the edge
index (so on the GPU for GPU tensors; no SciPy, no per-node Python loop, one
loop step per BFS level):

1. the graph is made undirected, without self loops and duplicate edges;
2. connected components by min-label propagation with pointer jumping; a
   component's label, and its rank in the final order, is its smallest node id;
3. every component starts from its node of minimum ``(degree, id)``;
4. one level-synchronous BFS from all seeds: the nodes of level ``L + 1`` are
   sorted by (rank of their earliest parent in level ``L``, degree, id),
   Cuthill-McKee's rule (children of earlier parents first, ties by
   increasing degree);
5. nodes sorted by (component, level, rank in level), and each component's
   sequence reversed (RCM). Components stay in ascending order, so the graphs
   of a mini-batch stay contiguous and in order (a sorted ``batch`` stays
   sorted). Isolated nodes are components of their own.

:class:`ReorderTransform` relabels a ``Data`` by such an order (or a seeded
random one, for "native vs random vs RCM order" studies).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from ..formats.carrier import plain_tensor


def _undirected_csr(edge_index: Tensor, n: int):
    """``(ptr, row, col, deg)`` of the symmetrised graph, without self loops
    and duplicates; ``col`` sorted within each row."""
    row, col = edge_index.long()
    keep = row != col
    row, col = row[keep], col[keep]
    key = torch.unique(torch.cat([row * n + col, col * n + row]))
    row, col = key // n, key % n
    deg = torch.bincount(row, minlength=n)
    ptr = torch.cat([deg.new_zeros(1), deg.cumsum(0)])
    return ptr, row, col, deg


def _components(row: Tensor, col: Tensor, n: int) -> Tensor:
    """Per node, the smallest node id of its connected component (``row``,
    ``col`` symmetric)."""
    label = torch.arange(n, device=row.device)
    while True:
        new = label.scatter_reduce(0, row, label[col], 'amin')  # hook to the smallest neighbour label
        new = new[new]  # pointer jumping
        if torch.equal(new, label):
            return label
        label = new


def rcm_order(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Reverse Cuthill-McKee order of the graph ``edge_index`` (treated as
    undirected; self loops and duplicates ignored): ``perm`` int64
    ``[num_nodes]`` on the device of ``edge_index`` with
    ``perm[new_id] = old_id``. See the module docstring for the algorithm.

    Args:
        edge_index (torch.Tensor): the edges.
        num_nodes (int): the nodes.

    Shapes:
        - **input:** edge_index :math:`(2, E)`
        - **output:** perm :math:`(N)`
    """
    n = int(num_nodes)
    ptr, row, col, deg = _undirected_csr(plain_tensor(edge_index), n)
    ids = torch.arange(n, device=row.device)
    comp = _components(row, col, n)

    # Seeds: per component the node of minimum (degree, id), in component order.
    key = deg * n + ids
    best = key.scatter_reduce(0, comp, key, 'amin')
    front = best[comp == ids] % n

    visited = torch.zeros(n, dtype=torch.bool, device=row.device)
    visited[front] = True
    levels = [front]
    while True:
        cnt = deg[front]
        par = torch.repeat_interleave(cnt)  # per candidate edge: the parent's rank in ``front``
        if par.numel() == 0:
            break
        start = ptr[front] - (cnt.cumsum(0) - cnt)
        child = col[start[par] + torch.arange(par.numel(), device=par.device)]
        new = ~visited[child]
        child, par = child[new], par[new]
        if child.numel() == 0:
            break
        child, inv = torch.unique(child, return_inverse=True)  # sorted by id
        first = par.new_full(child.shape, n).scatter_reduce(0, inv, par, 'amin')
        front = child[torch.argsort(first * n + deg[child], stable=True)]
        visited[front] = True
        levels.append(front)

    order = torch.cat(levels).flip(0)  # (level, rank) descending
    return order[torch.argsort(comp[order], stable=True)]


@functional_transform('pyg_tc_reorder')
class ReorderTransform(BaseTransform):
    r"""Relabels the nodes of a :class:`~torch_geometric.data.Data` in a new
    order: every node-level attribute (``x``, ``y``, masks, ``batch``, ...,
    as told by ``data.is_node_attr``) is permuted, and every node-index
    attribute (``edge_index`` and other keys PyG increments by ``num_nodes``
    when batching, e.g. ``edge_label_index``) is mapped ``new = inv[old]``
    with its edge order kept, so ``edge_attr`` / ``edge_weight`` stay aligned.
    Index tensors come out as plain tensors (attached formats, e.g. a
    :class:`~pyg_tc.formats.TCEdgeIndex`, are dropped: they describe the old
    order, so apply this transform first). Other adjacency forms (``adj_t``)
    are not relabelled.

    ``data.node_perm`` (``perm[new_id] = old_id``) maps results back:
    ``out_old = out.new_empty(out.shape).index_copy_(0, data.node_perm, out)``.
    It is not permuted like the other node attributes: applying the transform
    again composes, so ``node_perm`` always refers to the original ids.

    Args:
        method: ``'rcm'`` (:func:`rcm_order`), ``'random'`` (a random
            permutation drawn from ``seed``; the same on every call) or
            ``'none'`` (identity).
        seed: the seed of ``'random'``.
    """

    METHODS = ('rcm', 'random', 'none')

    def __init__(self, method: str = 'rcm', seed: int = 0):
        if method not in self.METHODS:
            raise ValueError(f'ReorderTransform: unknown method {method!r}, expected one of {self.METHODS}')
        self.method = method
        self.seed = seed

    def order(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """``perm`` (new -> old) of the configured method."""
        if self.method == 'rcm':
            return rcm_order(edge_index, num_nodes)
        if self.method == 'random':
            g = torch.Generator().manual_seed(self.seed)
            return torch.randperm(num_nodes, generator=g).to(edge_index.device)
        return torch.arange(num_nodes, device=edge_index.device)

    def forward(self, data: Data) -> Data:
        """Relabel the nodes of ``data`` (see the class doc); ``data.node_perm`` maps back."""
        if 'edge_index' not in data or data.edge_index is None:
            raise ValueError('ReorderTransform needs data.edge_index')
        ei = plain_tensor(data.edge_index)
        n = data.num_nodes
        perm = self.order(ei, n)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(n, device=perm.device)
        prev = data.node_perm if 'node_perm' in data else None
        for key, value in list(data.items()):
            if key == 'node_perm':
                continue
            if torch.is_tensor(value) and ('index' in key or key == 'face'):
                data[key] = inv[plain_tensor(value).to(inv.device)].to(value.device)
            elif data.is_node_attr(key):
                data[key] = _permute(value, perm, data.__cat_dim__(key, value))
        data.node_perm = perm if prev is None else prev[perm.to(prev.device)]
        return data

    @staticmethod
    def bandwidth(edge_index: Tensor, num_nodes: int = None) -> int:
        """``max |src - dst|`` over the edges (0 without edges); ``num_nodes``
        is unused and accepted for a uniform ``(edge_index, num_nodes)`` call."""
        if edge_index.numel() == 0:
            return 0
        ei = plain_tensor(edge_index)
        return int((ei[0] - ei[1]).abs().max())

    def __repr__(self) -> str:
        seed = f', seed={self.seed}' if self.method == 'random' else ''
        return f'{self.__class__.__name__}(method={self.method!r}{seed})'


def _permute(value, perm: Tensor, dim: int):
    """``value`` reordered along its node dimension ``dim``."""
    if torch.is_tensor(value):
        return value.index_select(dim, perm.to(value.device))
    if isinstance(value, np.ndarray):
        return np.take(value, perm.cpu().numpy(), axis=dim)
    if isinstance(value, (list, tuple)):
        return type(value)(value[i] for i in perm.tolist())
    return value[perm]
