"""``NeighborSampler``: PyG's neighbour sampling on the GPU, whose batches
carry pyg_tc's CSR.

A ``torch_geometric.sampler.BaseSampler``: plug it into PyG's loaders
(``NeighborLoader(..., neighbor_sampler=...)``, ``LinkNeighborLoader(...,
neighbor_sampler=...)``) or use :class:`pyg_tc.loader.NeighborLoader`, which
also gathers the batch's features on the GPU and attaches the format to its
``edge_index``. The sampling itself is the op
:data:`pyg_tc.ops.neighbor.neighbor_sample` (its module doc is the
specification).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, List, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.sampler import BaseSampler, EdgeSamplerInput, NegativeSampling, NodeSamplerInput, SamplerOutput
from torch_geometric.sampler.base import SubgraphType
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample

from ..formats.csr import CSRGraph, sort_int32
from ..ops import neighbor as ops

_INT32_MAX = 2**31 - 1
GRAPH_MEMORY = ('auto', 'device', 'pinned')
CPU_SAMPLERS = ('auto', 'pyg', 'reference')


def pyg_sampler_installed(semantics: bool = False) -> bool:
    """Whether PyG's own CPU sampler can run (pyg-lib or torch_sparse); with
    ``semantics``, whether it is pyg-lib's (torch_sparse's gives no hop
    counts and does not draw uniformly)."""
    import torch_geometric.typing as t

    return bool(t.WITH_PYG_LIB or not semantics and t.WITH_TORCH_SPARSE)


def _csc(edge_index: Tensor, num_nodes: int, is_sorted: bool):
    """``(colptr int64 [N+1], row int32 [E], perm int32 [E] or None)``: the
    edges sorted stably by target on ``edge_index``'s device (``perm``:
    CSC position -> edge id)."""
    src, dst = edge_index[0], edge_index[1]
    perm = None
    if not is_sorted:
        dst, perm = sort_int32(dst.to(torch.int32), num_nodes)
        src = src.index_select(0, perm)
    bounds = torch.arange(num_nodes + 1, dtype=dst.dtype, device=dst.device)
    colptr = torch.searchsorted(dst.contiguous(), bounds).to(torch.int64)
    return colptr, src.to(torch.int32).contiguous(), perm


def _check_range(index: Tensor, n: int, what: str) -> None:
    """IndexError naming the first entry of ``index`` outside ``[0, n)``."""
    if not index.numel():
        return
    lo, hi = (int(v) for v in torch.aminmax(index))
    if lo >= 0 and hi < n:
        return
    flat = index.reshape(-1) if index.dim() < 2 else index.t().reshape(-1)  # edge_index: edge by edge
    first = int(((flat < 0) | (flat >= n)).nonzero()[0])
    where = (
        f'edge {first // 2} ({"source" if first % 2 == 0 else "target"})' if index.dim() == 2 else f'position {first}'
    )
    raise IndexError(f'pyg_tc.loader: {what} must lie in [0, {n}); {where} is {int(flat[first])}')


@dataclasses.dataclass
class SampledBatch(SamplerOutput):
    """PyG's ``SamplerOutput`` with what :class:`NeighborSampler` made with
    it: ``edge_index`` (``row`` and ``col`` are its rows, sorted by target)
    and the batch's :class:`~pyg_tc.formats.CSRGraph` (``graph``). Where a
    ``transform_sampler_output`` replaced ``row`` / ``col``, the loaders
    leave them unused."""

    edge_index: Optional[Tensor] = dataclasses.field(repr=False, default=None)
    graph: Optional[CSRGraph] = dataclasses.field(repr=False, default=None)


def draw_seed() -> int:
    """A batch's draw from ``torch``'s default generator (the key of the
    kernel's counter-based generator)."""
    return int(torch.randint(0, 2**62, ()))


class NeighborSampler(BaseSampler):
    r"""Uniform neighbour sampling on the GPU with the semantics of PyG's
    :class:`torch_geometric.sampler.NeighborSampler` (pyg-lib's): seeds
    first, then each hop's new nodes in order of first appearance; per
    target, ``k`` distinct in-neighbours chosen uniformly (all of them when
    ``k >= degree`` or ``k = -1``; ``k`` independent draws with
    ``replace=True``); ``num_sampled_nodes`` / ``num_sampled_edges`` per hop.
    Each output also carries the batch's :class:`~pyg_tc.formats.CSRGraph`,
    which falls out of the sampling (edges come sorted by target), so
    pyg_tc's layers build nothing for it (:class:`pyg_tc.loader.NeighborLoader`
    attaches it).

    Randomness comes from ``torch``'s default generator (one 62-bit draw per
    batch keys the kernel's counter-based generator): ``torch.manual_seed``
    makes batches reproducible, and every batch draws new ones. On the CPU
    the pure-PyTorch reference gives the same batches as the GPU.

    Args:
        data (torch_geometric.data.Data): the graph (``edge_index``; its edge
            and node attributes are gathered by the loader). Heterogeneous
            graphs and remote stores are not supported (use PyG's sampler).
        num_neighbors (List[int]): fan-out per hop (``-1``: all neighbours).
        subgraph_type (str, optional): ``'directional'`` (default) or
            ``'bidirectional'`` (edges made two-way after sampling and
            coalesced, sorted by target, as PyG; the batch's CSR is theirs).
            ``'induced'`` is not supported.
        replace (bool, optional): sample with replacement.
        disjoint (bool, optional): not supported (``NotImplementedError``).
        is_sorted (bool, optional): ``edge_index`` is already sorted by
            target (no sort at construction).
        device (torch.device, optional): where sampling runs (default: the
            current CUDA device, else the CPU).
        graph_memory (str, optional): where the sampler keeps the graph's
            CSC on a GPU: ``'device'``, ``'pinned'`` (host memory read by the
            kernels over UVA, for graphs that do not fit) or ``'auto'``
            (default: the device when it has room for the CSC three times
            over, else pinned).
        cpu_sampler (str, optional): the sampler on the CPU: ``'pyg'`` (PyG's
            own: pyg-lib's, the same semantics with its own draws; else
            torch_sparse's, which gives no hop counts, so no
            ``trim_to_layer`` or :class:`~pyg_tc.transforms.PadHops`, and does not draw
            uniformly), ``'reference'`` (pyg_tc's pure-PyTorch sampler,
            whose batches are the GPU kernel's bit for bit, and slower) or
            ``'auto'`` (default: pyg-lib's when it is installed, else the
            reference). On a GPU the kernel samples (the reference's twin;
            ``'pyg'`` is an error).

    The other arguments of PyG's sampler (``temporal_strategy``,
    ``time_attr``, ``weight_attr``, ``share_memory``, ``directed``) are
    accepted; temporal and weighted sampling raise ``NotImplementedError``.
    """

    def __init__(
        self,
        data: Data,
        num_neighbors: List[int],
        subgraph_type: Union[SubgraphType, str] = 'directional',
        replace: bool = False,
        disjoint: bool = False,
        temporal_strategy: str = 'uniform',
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        is_sorted: bool = False,
        share_memory: bool = False,
        directed: bool = True,
        device: Optional[Any] = None,
        graph_memory: str = 'auto',
        cpu_sampler: str = 'auto',
    ):
        if not isinstance(data, Data):
            raise NotImplementedError(
                f'pyg_tc.loader.NeighborSampler samples homogeneous Data objects, got {type(data).__name__}: '
                'use torch_geometric.sampler.NeighborSampler (PyG\'s loaders without neighbor_sampler=) '
                'for heterogeneous graphs and remote stores'
            )
        if not directed:
            subgraph_type = SubgraphType.induced
        self.subgraph_type = SubgraphType(subgraph_type)
        unsupported = {
            'disjoint=True': disjoint,
            f'time_attr={time_attr!r}': time_attr is not None,
            f'weight_attr={weight_attr!r}': weight_attr is not None,
            "subgraph_type='induced'": self.subgraph_type == SubgraphType.induced,
        }
        for what, bad in unsupported.items():
            if bad:
                raise NotImplementedError(
                    f'pyg_tc.loader.NeighborSampler: {what} is not supported; '
                    "use PyG's own sampler (drop neighbor_sampler=, or use "
                    'torch_geometric.loader.NeighborLoader)'
                )
        if graph_memory not in GRAPH_MEMORY:
            raise ValueError(f'pyg_tc: graph_memory must be one of {GRAPH_MEMORY}, got {graph_memory!r}')
        if cpu_sampler not in CPU_SAMPLERS:
            raise ValueError(
                f'pyg_tc.loader.NeighborSampler: cpu_sampler must be one of {CPU_SAMPLERS}, got {cpu_sampler!r}'
            )
        if 'edge_index' not in data or data.edge_index is None:
            raise NotImplementedError(
                'pyg_tc.loader.NeighborSampler needs data.edge_index (adj_t / SparseTensor graphs: use PyG\'s sampler)'
            )
        self.num_neighbors = ops.check_fanouts(num_neighbors)
        self.replace = bool(replace)
        self.disjoint = False
        self.temporal_strategy = temporal_strategy
        self.node_time = None  # (PyG's edge_sample reads it)
        dev = (
            torch.device(device) if device is not None else torch.device('cuda' if torch.cuda.is_available() else 'cpu')
        )
        if dev.type == 'cuda' and dev.index is None:
            dev = torch.device('cuda', torch.cuda.current_device())
        self.device = dev
        if dev.type == 'cuda' and cpu_sampler == 'pyg':
            raise ValueError(
                f"pyg_tc.loader.NeighborSampler: cpu_sampler='pyg' samples on the CPU (PyG has no GPU "
                f"sampler); on {dev} the kernel samples, or pass device='cpu'"
            )
        if cpu_sampler == 'pyg' and not pyg_sampler_installed():
            raise ImportError("pyg_tc.loader.NeighborSampler: cpu_sampler='pyg' needs pyg-lib or torch_sparse")
        ei = data.edge_index
        N = int(data.num_nodes)
        E = ei.size(1)
        if N >= _INT32_MAX or E >= _INT32_MAX:
            raise ValueError(
                'pyg_tc.loader.NeighborSampler: graphs of 2^31 - 1 nodes or edges and more are not supported'
            )
        self.num_nodes = N
        self.data = data
        self._stamp = self._graph_stamp(data)
        where = self._graph_device(N, E, graph_memory)
        src = ei.as_tensor() if hasattr(ei, 'as_tensor') else ei
        if src.dtype.is_floating_point or src.dtype.is_complex or src.dtype == torch.bool:
            raise TypeError(f'pyg_tc.loader.NeighborSampler: edge_index must hold integers, got {src.dtype}')
        if src.dim() != 2 or src.size(0) != 2:
            raise ValueError(f'pyg_tc.loader.NeighborSampler: edge_index must be [2, E], got {tuple(src.shape)}')
        _check_range(src, N, 'edge_index')
        self._pyg = None
        if dev.type == 'cpu' and (
            cpu_sampler == 'pyg' or cpu_sampler == 'auto' and pyg_sampler_installed(semantics=True)
        ):
            from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler

            self.sampler = 'pyg'  # PyG's sampler keeps its own CSC
            self._pyg = PyGNeighborSampler(
                Data(edge_index=src.cpu(), num_nodes=N),
                self.num_neighbors,
                subgraph_type=self.subgraph_type,
                replace=self.replace,
                is_sorted=is_sorted,
                share_memory=share_memory,
            )
            self.colptr = self.row = self.perm = None
            self.graph_memory = 'cpu'
            self._node_map = self._first = torch.zeros(0, dtype=torch.int32)
            return
        self.sampler = 'kernel' if dev.type == 'cuda' else 'reference'
        colptr, row, perm = _csc(src.to(where), N, is_sorted)
        if self.device.type == 'cuda' and where.type == 'cpu':  # read over UVA by the kernels
            colptr, row = colptr.pin_memory(), row.pin_memory()
            perm = perm.pin_memory() if perm is not None else None
        self.colptr, self.row, self.perm = colptr, row, perm
        self.graph_memory = 'pinned' if self.colptr.is_pinned() else where.type
        if self.device.type == 'cuda':  # the sampler's state: node -> batch id, first appearance
            self._node_map = torch.full((N,), -1, dtype=torch.int32, device=self.device)
            self._first = torch.full((N,), _INT32_MAX, dtype=torch.int32, device=self.device)
        else:
            self._node_map = self._first = torch.zeros(0, dtype=torch.int32)

    # -- set-up -------------------------------------------------------------
    def _graph_device(self, N: int, E: int, graph_memory: str) -> torch.device:
        if self.device.type != 'cuda' or graph_memory == 'device':
            return self.device
        if graph_memory == 'pinned':
            return torch.device('cpu')
        need = 8 * (N + 1) + 8 * E  # colptr, row and perm (int32 each)
        free, _ = torch.cuda.mem_get_info(self.device)
        return self.device if 3 * need < free else torch.device('cpu')

    @staticmethod
    def _graph_stamp(data: Data) -> tuple:
        """The graph's identity: ``edge_index`` (storage, shape, version) and
        a ``num_nodes`` the graph stores (one inferred from the features
        leaves the sampled graph as it is)."""
        ei = data.edge_index
        return (ei.data_ptr(), tuple(ei.shape), ei._version, data._store._mapping.get('num_nodes'))

    def _check_graph(self) -> None:
        now = self._graph_stamp(self.data)
        if now != self._stamp:
            raise RuntimeError(
                'pyg_tc.loader.NeighborSampler: the graph changed after the sampler was built '
                f'(edge_index or num_nodes: {self._stamp[1:]} -> {now[1:]}); build a new sampler '
                '(or loader) for the new graph'
            )

    @property
    def edge_permutation(self) -> None:
        """None: the sampler's outputs carry the original edge ids already
        (``SamplerOutput.edge``), so PyG's loaders index edge attributes by
        them directly."""
        return None

    # -- sampling -----------------------------------------------------------
    def sample_from_nodes(self, inputs: NodeSamplerInput, seed: Optional[int] = None, **kwargs) -> SamplerOutput:
        """PyG's ``sample_from_nodes``: the batch grown from ``inputs.node``
        (``seed``: the draw keying the kernel's generator; default a fresh
        ``draw_seed()``)."""
        if self._pyg is not None:
            self._check_graph()
            self._seeds(inputs.node)
            return self._from_pyg(self._pyg.sample_from_nodes(inputs))
        return self._finish(node_sample(inputs, functools.partial(self._sample, rng=seed)))

    def sample_from_edges(
        self, inputs: EdgeSamplerInput, neg_sampling: Optional[NegativeSampling] = None, seed: Optional[int] = None
    ) -> SamplerOutput:
        """PyG's ``sample_from_edges`` (link prediction; binary and triplet
        negative sampling are PyG's own, the batch is grown from the link
        endpoints as PyG does; ``seed`` as in :meth:`sample_from_nodes`)."""
        if self._pyg is not None:
            self._check_graph()
            for ends in (inputs.row, inputs.col):
                _check_range(ends, self.num_nodes, 'edge_label_index')
            return self._from_pyg(self._pyg.sample_from_edges(inputs, neg_sampling))
        sample = functools.partial(self._sample, rng=seed)
        return self._finish(edge_sample(inputs, sample, self.num_nodes, self.disjoint, self.node_time, neg_sampling))

    def _from_pyg(self, out: SamplerOutput) -> SamplerOutput:
        """PyG's sampler output with the graph's edge ids in ``out.edge`` (as
        this sampler's: no ``edge_permutation``) and, where its edges come
        sorted by target (pyg-lib's do, hop by hop as this sampler's), the
        batch's :class:`CSRGraph` with its hops, as :meth:`_sample` gives."""
        perm = self._pyg.edge_permutation
        if perm is not None and out.edge is not None:
            out.edge = perm[out.edge]
        col = out.col
        if col.numel() > 1 and not bool((col[1:] >= col[:-1]).all()):
            return out
        return self._with_graph(out)

    def _finish(self, out: SamplerOutput) -> SamplerOutput:
        """``out``, made two-way for ``subgraph_type='bidirectional'`` (PyG's
        ``to_bidirectional``: edges coalesced, sorted by target) and carrying
        the graph of those edges."""
        if self.subgraph_type != SubgraphType.bidirectional:
            return out
        return self._with_graph(out.to_bidirectional())

    def _with_graph(self, out: SamplerOutput) -> SamplerOutput:
        """``out`` (edges sorted by target) carrying the batch's
        :class:`CSRGraph` (deferred, with its hops where ``out`` has them),
        as :meth:`_sample` makes it."""
        n = out.node.numel()
        edge_index = torch.stack([out.row, out.col])
        out.row, out.col = edge_index[0], edge_index[1]
        rows = out.col.to(torch.int32)
        rowptr = torch.zeros(n + 1, dtype=torch.int32, device=rows.device)
        torch.cumsum(torch.bincount(rows, minlength=n), 0, out=rowptr[1:])
        one_way = self.subgraph_type != SubgraphType.bidirectional
        known = None if not one_way or min(self.num_neighbors, default=0) < 0 else max(self.num_neighbors, default=0)
        hops = one_way and out.num_sampled_nodes is not None and out.num_sampled_edges is not None
        graph = CSRGraph.from_sampled(
            rowptr,
            out.row.to(torch.int32),
            rows,
            n,
            max_degree=known,
            num_sampled_nodes=out.num_sampled_nodes if hops else None,
            num_sampled_edges=out.num_sampled_edges if hops else None,
            defer=True,
        )
        fields = {f.name: getattr(out, f.name) for f in dataclasses.fields(SamplerOutput)}
        return SampledBatch(**fields, edge_index=edge_index, graph=graph)

    def _seeds(self, seed: Tensor) -> Tensor:
        if not isinstance(seed, Tensor):
            raise NotImplementedError('pyg_tc.loader.NeighborSampler samples homogeneous graphs only')
        if seed.dim() != 1 or seed.dtype.is_floating_point or seed.dtype == torch.bool:
            raise TypeError(
                f'pyg_tc: seed nodes must be a 1-D integer tensor, got {seed.dtype} of shape {tuple(seed.shape)}'
            )
        if seed.is_cuda and seed.device != self.device:
            raise ValueError(f'pyg_tc: seed nodes are on {seed.device} but the sampler runs on {self.device}')
        # (PyG's loaders hand seeds over on the CPU: a CUDA tensor costs a synchronisation)
        _check_range(seed, self.num_nodes, 'seed nodes')
        return seed.to(self.device, torch.int64, non_blocking=True)

    def _sample(
        self, seed: Tensor, seed_time: Optional[Tensor] = None, rng: Optional[int] = None, **kwargs
    ) -> SampledBatch:
        """One batch from ``seed`` (global node ids) with the draw ``rng``
        (default a fresh ``draw_seed()``): a :class:`SampledBatch`."""
        self._check_graph()
        seeds = self._seeds(seed)
        rng = draw_seed() if rng is None else rng
        nodes, edge_index, rowptr, col, eid, counts = ops.neighbor_sample(
            self.colptr, self.row, seeds, self.num_neighbors, self.replace, rng, self._node_map, self._first
        )
        H = len(self.num_neighbors)
        c = counts.tolist()
        edge = eid if self.perm is None else ops.gather_rows(self.perm, eid).to(torch.int64)
        known = None if min(self.num_neighbors, default=0) < 0 else max(self.num_neighbors, default=0)
        graph = CSRGraph.from_sampled(
            rowptr,
            col,
            edge_index[1].to(torch.int32),
            nodes.numel(),
            max_degree=known,
            num_sampled_nodes=c[: H + 1],
            num_sampled_edges=c[H + 1 :],
            defer=True,
        )
        return SampledBatch(
            node=nodes,
            row=edge_index[0],
            col=edge_index[1],
            edge=edge,
            num_sampled_nodes=c[: H + 1],
            num_sampled_edges=c[H + 1 :],
            edge_index=edge_index,
            graph=graph,
        )

    def __repr__(self) -> str:
        return (
            f'{type(self).__name__}(num_nodes={self.num_nodes}, num_neighbors={self.num_neighbors}, '
            f'replace={self.replace}, device={self.device}, graph={self.graph_memory}, sampler={self.sampler})'
        )
