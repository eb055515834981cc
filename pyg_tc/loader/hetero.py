"""``HeteroNeighborSampler``: PyG's neighbour sampling of ``HeteroData``
with pyg-lib's semantics, on pyg_tc's specification
(:mod:`pyg_tc.ops.hetero_neighbor`).

:class:`pyg_tc.loader.NeighborLoader` samples ``HeteroData`` with it: on a
GPU the ``hetero_neighbor_sample`` kernel, on the CPU its pure-PyTorch
reference, the same batches bit for bit. PyG's loaders take it as
``neighbor_sampler=`` too (with the graph's attributes on the sampler's
device). Its batches equal pyg-lib's where the fan-outs cover the degrees
(edges sorted by target and source, ``is_sorted=True``, so both read one
CSC order).
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

from ..ops.hetero_neighbor import EdgeType, hetero_neighbor_sample
from ..ops.neighbor import gather_rows
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
        device (torch.device, optional): where batches are sampled and the
            graph's CSCs are kept (default: where the graph's ``edge_index``
            tensors are, as PyG's loaders gather the batch's attributes
            there).

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
        device: Optional[Any] = None,
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
        if device is None:
            eis = [data[e].edge_index for e in data.edge_types]
            device = eis[0].device if eis else 'cpu'
        dev = torch.device(device)
        if dev.type == 'cuda' and dev.index is None:
            dev = torch.device('cuda', torch.cuda.current_device())
        self.device = dev
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
            self.colptr[e], self.row[e], self.perm[e] = _csc(ei.to(dev), self.num_nodes[dst], is_sorted)
        types = list(self.num_nodes)
        self._src = [types.index(e[0]) for e in self.edge_types]
        self._dst = [types.index(e[2]) for e in self.edge_types]
        # the kernel's state per node type: node -> batch id, first appearance (left as found)
        self._node_map = [torch.full((n,), -1, dtype=torch.int32, device=dev) for n in self.num_nodes.values()]
        self._first = [torch.full((n,), _INT32_MAX, dtype=torch.int32, device=dev) for n in self.num_nodes.values()]

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
        empty = torch.zeros(0, dtype=torch.long)
        seed_list = [seeds.get(t, empty).to(self.device, torch.long) for t in self.num_nodes]
        H = len(next(iter(self.num_neighbors.values()), []))
        nodes, src, dst, eid, counts = hetero_neighbor_sample(
            [self.colptr[e] for e in self.edge_types],
            [self.row[e] for e in self.edge_types],
            self._src,
            self._dst,
            seed_list,
            [k for e in self.edge_types for k in self.num_neighbors[e]],
            self.replace,
            rng,
            self._node_map,
            self._first,
        )
        c = counts.tolist()
        T = len(self.num_nodes)
        node = dict(zip(self.num_nodes, nodes))
        nsn = {t: c[i * (H + 1) : (i + 1) * (H + 1)] for i, t in enumerate(self.num_nodes)}
        nse = {e: c[T * (H + 1) + i * H : T * (H + 1) + (i + 1) * H] for i, e in enumerate(self.edge_types)}
        edge = {
            e: v if self.perm[e] is None else gather_rows(self.perm[e], v).long() for e, v in zip(self.edge_types, eid)
        }
        return HeteroSamplerOutput(
            node=node,
            row=dict(zip(self.edge_types, src)),
            col=dict(zip(self.edge_types, dst)),
            edge=edge,
            batch=None,
            num_sampled_nodes=nsn,
            num_sampled_edges=nse,
        )

    def __repr__(self) -> str:
        return (
            f'{type(self).__name__}(node_types={list(self.num_nodes)}, edge_types={len(self.edge_types)}, '
            f'replace={self.replace})'
        )
