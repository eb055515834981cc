"""``HeteroNeighborSampler``: PyG's neighbour sampling of ``HeteroData``
with pyg-lib's semantics, on pyg_tc's specification
(:mod:`pyg_tc.ops.hetero_neighbor`).

This is the sampler the GPU loaders will use for heterogeneous graphs: for
now it samples with the pure-PyTorch reference on the CPU (the oracle of
the GPU kernel to come), so it is not exported and no loader picks it;
PyG's loaders take it as ``neighbor_sampler=``. Its batches equal pyg-lib's
where the fan-outs cover the degrees (edges sorted by target and source,
``is_sorted=True``, so both read one CSC order).
"""

from typing import Any, Dict, List, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    NodeSamplerInput,
)
from torch_geometric.sampler.base import NumNeighbors
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample

from ..ops.hetero_neighbor import EdgeType, hetero_neighbor_sample_reference
from .sampler import _INT32_MAX, _check_range, _csc, draw_seed


class HeteroNeighborSampler(BaseSampler):
    r"""Uniform neighbour sampling of a ``HeteroData`` graph with the
    semantics of PyG's sampler on pyg-lib (see
    :mod:`pyg_tc.ops.hetero_neighbor`): per node type, seeds first, then
    each hop's new nodes in order of first appearance, the edge types
    sampled in ``data.edge_types`` order within a hop; per target ``k``
    distinct in-neighbours chosen uniformly (all of them for ``k = -1`` or
    ``k`` at least the degree); ``num_sampled_nodes`` per node type and
    ``num_sampled_edges`` per edge type, hop by hop. Outputs carry the
    graph's edge ids (``edge_permutation`` is None).

    Args:
        data (torch_geometric.data.HeteroData): the graph (every edge type's
            ``edge_index``).
        num_neighbors (list or dict): fan-outs per
            hop, for every edge type or per edge type (PyG's
            ``NumNeighbors``; ``-1``: all neighbours).
        replace (bool, optional): sample with replacement.
        is_sorted (bool, optional): every ``edge_index`` is sorted by target
            (no sort at construction).

    Temporal and weighted sampling, ``disjoint=True`` and
    ``subgraph_type='induced'`` raise ``NotImplementedError``.
    """

    def __init__(
        self,
        data: HeteroData,
        num_neighbors: Union[List[int], Dict[EdgeType, List[int]]],
        replace: bool = False,
        is_sorted: bool = False,
        disjoint: bool = False,
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        subgraph_type: str = 'directional',
        **kwargs: Any,
    ):
        if not isinstance(data, HeteroData):
            raise TypeError(f'pyg_tc: HeteroNeighborSampler samples HeteroData, got {type(data).__name__}')
        unsupported = {
            'disjoint=True': disjoint,
            f'time_attr={time_attr!r}': time_attr is not None,
            f'weight_attr={weight_attr!r}': weight_attr is not None,
            f'subgraph_type={subgraph_type!r}': str(getattr(subgraph_type, 'value', subgraph_type)) != 'directional',
        }
        for what, bad in unsupported.items():
            if bad:
                raise NotImplementedError(f'pyg_tc: HeteroNeighborSampler: {what} is not supported; use PyG\'s sampler')
        self.edge_types: List[EdgeType] = list(data.edge_types)
        self.num_nodes: Dict[str, int] = {t: int(data[t].num_nodes or 0) for t in data.node_types}
        fanouts = NumNeighbors(num_neighbors).get_values(self.edge_types)
        for e, ks in fanouts.items():
            if any(int(k) < -1 for k in ks):
                raise ValueError(f'pyg_tc: num_neighbors of {e} must be >= 0 or -1, got {list(ks)}')
        self.num_neighbors = {e: [int(k) for k in ks] for e, ks in fanouts.items()}
        self.replace = bool(replace)
        self.colptr: Dict[EdgeType, Tensor] = {}
        self.row: Dict[EdgeType, Tensor] = {}
        self.perm: Dict[EdgeType, Optional[Tensor]] = {}
        for e in self.edge_types:
            ei = data[e].edge_index
            ei = ei.as_tensor() if hasattr(ei, 'as_tensor') else ei
            src, _, dst = e
            if ei.dim() != 2 or ei.size(0) != 2 or ei.dtype.is_floating_point or ei.dtype == torch.bool:
                raise ValueError(f'pyg_tc: edge_index of {e} must be an integer [2, E] tensor')
            if ei.size(1) >= _INT32_MAX or max(self.num_nodes[src], self.num_nodes[dst]) >= _INT32_MAX:
                raise ValueError(f'pyg_tc: edge type {e}: 2^31 - 1 nodes or edges and more are not supported')
            _check_range(ei[0], self.num_nodes[src], f'edge_index of {e} (sources)')
            _check_range(ei[1], self.num_nodes[dst], f'edge_index of {e} (targets)')
            self.colptr[e], self.row[e], self.perm[e] = _csc(ei.cpu(), self.num_nodes[dst], is_sorted)

    @property
    def edge_permutation(self) -> None:
        """None: outputs carry the graph's edge ids (``HeteroSamplerOutput.edge``)."""
        return None

    def sample_from_nodes(self, inputs: NodeSamplerInput, seed: Optional[int] = None, **kwargs) -> HeteroSamplerOutput:
        """PyG's ``sample_from_nodes``: the batch grown from ``inputs.node`` of
        type ``inputs.input_type`` (``seed``: the draw keying the generator;
        default a fresh ``draw_seed()``)."""
        if inputs.input_type is None:
            raise ValueError('pyg_tc: HeteroNeighborSampler needs seeds of one node type (input_nodes=(type, ids))')
        return node_sample(inputs, lambda s, t: self._sample(s, t, seed))

    def sample_from_edges(
        self, inputs: EdgeSamplerInput, neg_sampling: Optional[NegativeSampling] = None, seed: Optional[int] = None
    ) -> HeteroSamplerOutput:
        """PyG's ``sample_from_edges`` (link prediction on edge type
        ``inputs.input_type``; negative sampling is PyG's own): the batch grown
        from the links' endpoints."""
        if inputs.input_type is None:
            raise ValueError(
                'pyg_tc: HeteroNeighborSampler needs links of one edge type (edge_label_index=(type, ...))'
            )
        src, _, dst = inputs.input_type
        _check_range(inputs.row, self.num_nodes[src], 'edge_label_index (sources)')
        _check_range(inputs.col, self.num_nodes[dst], 'edge_label_index (targets)')
        self.disjoint, self.node_time = False, None  # (what PyG's edge_sample reads)
        return edge_sample(inputs, lambda s, t: self._sample(s, t, seed), self.num_nodes, False, None, neg_sampling)

    def _sample(
        self, seeds: Dict[str, Tensor], seed_time: Any = None, rng: Optional[int] = None
    ) -> HeteroSamplerOutput:
        if seed_time is not None:
            raise NotImplementedError('pyg_tc: HeteroNeighborSampler: temporal sampling is not supported')
        for t, s in seeds.items():
            if t not in self.num_nodes:
                raise ValueError(f'pyg_tc: seed node type {t!r} is not a node type of the graph')
            if s.dim() != 1 or s.dtype.is_floating_point or s.dtype == torch.bool:
                raise TypeError(f'pyg_tc: seed nodes must be a 1-D integer tensor, got {s.dtype} {tuple(s.shape)}')
            _check_range(s, self.num_nodes[t], f'seed nodes of type {t!r}')
        rng = draw_seed() if rng is None else rng
        node, row, col, eid, nsn, nse = hetero_neighbor_sample_reference(
            self.colptr, self.row, seeds, self.num_neighbors, self.num_nodes, self.replace, rng
        )
        edge = {e: v if self.perm[e] is None else self.perm[e][v].long() for e, v in eid.items()}
        return HeteroSamplerOutput(
            node=node, row=row, col=col, edge=edge, batch=None, num_sampled_nodes=nsn, num_sampled_edges=nse
        )

    def __repr__(self) -> str:
        return (
            f'{type(self).__name__}(node_types={list(self.num_nodes)}, edge_types={len(self.edge_types)}, '
            f'replace={self.replace})'
        )
