"""``NeighborLoader`` / ``LinkNeighborLoader`` with PyG's signatures whose
batches are sampled, gathered and formatted on the GPU.

Each is PyG's loader (a subclass: every argument, field and behaviour of
PyG's batches) with three changes:

* sampling runs on the GPU (:class:`~pyg_tc.loader.NeighborSampler`), in
  this process (``num_workers`` is ignored, with a warning: the sampler
  needs no workers);
* node and edge attributes are gathered on the GPU, from the GPU when they
  live there, else from pinned host memory over UVA (a pinned copy is made
  once, on the first batch, for attributes in ordinary host memory; a
  matrix's rows padded to 64 bytes, the pieces PCIe reads): a feature
  matrix larger than the GPU's memory works;
* the batch's ``edge_index`` is an ``EdgeIndex`` (sorted by target) carrying
  pyg_tc's CSR (:class:`~pyg_tc.formats.TCEdgeIndex`): pyg_tc's layers build
  no format for it; PyG's layers take it as any ``EdgeIndex``.

On a GPU, batch ``i + 1`` is sampled and gathered on a side stream when it is
asked for, so it overlaps the step of batch ``i`` that is still running on
the GPU (a loop that synchronises every step, e.g. ``loss.item()``, gives the
overlap up). Without CUDA (``device='cpu'``), pyg-lib's sampler (PyG's default) makes
the batches when it is installed, else pyg_tc's pure-PyTorch reference,
whose batches are the GPU's bit for bit (``cpu_sampler='reference'`` picks it);
on the CPU the transpose and schedules of a batch's CSR are built by the
first layer that needs them.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

import torch
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.data import Data, HeteroData
from torch_geometric.data.storage import BaseStorage
from torch_geometric.loader import LinkNeighborLoader as PyGLinkNeighborLoader
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
from torch_geometric.loader.base import DataLoaderIterator
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from ..formats.carrier import attach, graph_of
from ..formats.csr import CSRGraph
from .features import FeatureStorage, as_storage, gather_from, padded_rows
from .hetero import HeteroNeighborSampler
from .sampler import NeighborSampler, SampledBatch, draw_seed, pyg_sampler_installed


#: leaves of a batch that hold no tensor (skipped without a lookup)
_LEAVES = (int, float, str, bool, type(None), torch.dtype, torch.device)


def _tensors(obj: Any, seen: Optional[set] = None) -> List[Tensor]:
    """Every tensor reachable from a batch (its attributes, the format's
    arrays), each once, in a fixed order (depth first, as stored): a loop
    over an explicit stack, as it runs twice per batch (the loader's stream
    records, the captured step's copy-in)."""
    seen = set() if seen is None else seen
    out: List[Tensor] = []
    stack = [obj]
    while stack:
        obj = stack.pop()
        if isinstance(obj, _LEAVES) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Tensor):
            out.append(obj)
            extra = obj.__dict__
            kids = [extra[n] for n in ('_pyg_tc_graph', '_pyg_tc_derived') if n in extra]
        elif isinstance(obj, (list, tuple)):
            kids = obj
        elif isinstance(obj, dict):
            kids = list(obj.values())
        elif isinstance(obj, Data):
            kids = list(obj._store.values())
        elif isinstance(obj, HeteroData):
            kids = list(obj.stores)
        elif isinstance(obj, BaseStorage):
            kids = list(obj.values())
        elif hasattr(obj, '__dict__') and type(obj).__module__.startswith('pyg_tc'):
            kids = [vars(obj)]
        else:
            continue
        stack.extend(reversed(kids))
    return out


def _record_on(batch: Any, stream: torch.cuda.Stream) -> None:
    """Every CUDA tensor of ``batch`` recorded on ``stream`` (the caching
    allocator keeps its memory until ``stream`` is done with it)."""
    for t in _tensors(batch, set()):
        if t.is_cuda:
            t.record_stream(stream)


class _SideStream:
    """Produces a loader's batches on a side CUDA stream: the current stream
    waits for each batch (an event, no host synchronisation), and every tensor
    of the batch is recorded on it, so the caching allocator does not hand its
    memory to the side stream while the step still reads it."""

    def __init__(self, it: Iterator, device: torch.device):
        self.it, self.device = it, device
        self.stream = torch.cuda.Stream(device)
        # what the current stream wrote before the epoch (the sampler's graph and state, the
        # features) is complete before the side stream reads it
        self.stream.wait_stream(torch.cuda.current_stream(device))

    def __iter__(self) -> '_SideStream':
        return self

    def __next__(self) -> Any:
        with torch.cuda.stream(self.stream):
            batch = next(self.it)
        main = torch.cuda.current_stream(self.device)
        main.wait_stream(self.stream)
        _record_on(batch, main)
        return batch

    def __len__(self) -> int:
        return len(self.it)


def _sampled_graph(out: SamplerOutput) -> Tuple[Tensor, Optional[CSRGraph], Optional[str]]:
    """``(edge_index, CSRGraph or None, sort order)`` of a sampler output: what
    the sampler made with it (its edges sorted by target) while ``out.row`` /
    ``out.col`` are still the rows of that ``edge_index``; else (a
    ``transform_sampler_output`` replaced the edges, or PyG's sampler gave
    them in another order) ``out.row`` / ``out.col`` stacked, in no known
    order, and no graph."""
    if isinstance(out, SampledBatch) and out.graph is not None:
        edge_index, g = out.edge_index, out.graph
        if _same_view(out.row, edge_index[0]) and _same_view(out.col, edge_index[1]):
            return edge_index, g, 'col'
    return torch.stack([out.row, out.col]), None, None


def _same_view(a: Tensor, b: Tensor) -> bool:
    return (
        isinstance(a, Tensor)
        and a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a._version == b._version
    )


def _complete(batch: Any) -> Any:
    """``batch`` with its graph's transpose and schedules built on a GPU (the
    sampler defers them: a transform that pads the batch replaces the graph),
    on the stream making the batch rather than in the step. On the CPU they
    stay deferred: the first layer that needs them builds them."""
    ei = batch.get('edge_index') if isinstance(batch, Data) else None
    graph = graph_of(ei) if ei is not None else None
    if isinstance(graph, CSRGraph) and graph.device.type == 'cuda':
        graph.complete()
    return batch


class _SeedBatches:
    """The batches of seed indices of a loader with torch's default samplers
    (``shuffle`` on or off, no ``sampler`` / ``batch_sampler`` of the user's),
    each one slice of a tensor: the permutation ``RandomSampler`` draws
    (the same draws, so the same batches as torch's ``BatchSampler``) or
    ``0 .. n - 1``, without walking the indices one by one in Python."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool):
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    @staticmethod
    def handles(loader: Any) -> bool:
        """Whether ``loader``'s batches come from torch's default samplers."""
        s, bs = loader.sampler, loader.batch_sampler
        if type(bs) is not torch.utils.data.BatchSampler or bs.sampler is not s:
            return False
        if type(s) is torch.utils.data.RandomSampler:
            return not s.replacement and s._num_samples is None
        return type(s) is torch.utils.data.SequentialSampler

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Tensor]:
        s, bs = self.sampler, self.batch_size
        n = len(s.data_source)
        shuffled = isinstance(s, torch.utils.data.RandomSampler)
        if shuffled:
            g = s.generator
            if g is None:  # as RandomSampler: a generator seeded from torch's default one
                g = torch.Generator()
                g.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
            order = torch.randperm(n, generator=g)
        else:
            order = torch.arange(n)
        stop = n - n % bs if self.drop_last else n
        for i in range(0, stop, bs):
            yield order[i : i + bs]
        if shuffled:  # RandomSampler's last draw (its empty remainder's): a given generator advances as there
            torch.randperm(n, generator=g)


class _Batches:
    """A loader's batches made in the loop's thread: torch's iterator walked
    for the seed indices (its draws; :class:`_SeedBatches` where it applies),
    each batch made by the loader's ``collate_fn`` and ``filter_fn`` (the
    dataset is ``range(n)``: an index is its own seed position)."""

    def __init__(self, loader: Any):
        self.loader = loader
        self.indices = torch.utils.data.DataLoader._get_iterator(loader)

    def __iter__(self) -> '_Batches':
        return self

    def __next__(self) -> Any:
        index = self.indices._next_index()
        return self.loader.filter_fn(self.loader.collate_fn(index))

    def __len__(self) -> int:
        return len(self.indices)


def _produce(
    loader: Any, stream: Optional[torch.cuda.Stream], requests: queue.SimpleQueue, results: queue.SimpleQueue
) -> None:
    """The body of a :class:`_Prefetch` thread: makes the requested batches
    in order (on a GPU on ``stream``, each with an event recorded after it)."""
    if stream is not None:
        torch.cuda.set_device(stream.device)
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        while True:
            request = requests.get()
            if request is None:
                return
            index, seed = request
            try:
                out = loader._sample_batch(index, seed)
                batch = loader.filter_fn(out)
                done = None
                if stream is not None:
                    done = torch.cuda.Event()
                    done.record(stream)
                results.put((True, (batch, done)))
            except BaseException as e:  # raised in the loop, at this batch
                results.put((False, e))


class _Prefetch:
    """A loader's iterator that makes the next batches on a thread of its
    own (``NeighborLoader(..., prefetch=k)``): batches ``i + 1 .. i + k`` are
    sampled, gathered and transformed while the loop launches step ``i``, so
    the sampler's synchronisation and the host work of both overlap.

    The loop's thread keeps every draw from ``torch``'s default generator, in
    the order of the loader without prefetching: the shuffle (it walks the
    seed indices of torch's own iterator) and each batch's sampling seed,
    handed to the thread with the batch's seed nodes. So a seed gives the same batches with
    and without prefetching. The thread works on a side stream; the current
    stream waits for each batch's event, and the batch's tensors are recorded
    on it (as :class:`_SideStream`). Its CUDA calls (a synchronisation per
    batch) may run while the loop captures a CUDA graph: capture with
    ``capture_error_mode='thread_local'`` (``CapturedStep`` and
    ``torch.compile`` do). An error in the thread is raised by the loop's
    ``next`` at its batch, and ends the epoch."""

    def __init__(self, loader: Any, device: torch.device, depth: int):
        self.device = device
        self.requests: Optional[queue.SimpleQueue] = None
        # torch's iterator (its draws at the epoch's start), walked for the seed nodes only
        self.batches = torch.utils.data.DataLoader._get_iterator(loader)
        self.remaining = len(self.batches)
        self.stream = torch.cuda.Stream(device) if device.type == 'cuda' else None
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(device))
        self.requests, self.results = queue.SimpleQueue(), queue.SimpleQueue()
        self.pending = 0
        # the thread holds the loader, not this iterator: dropping the iterator stops it
        threading.Thread(
            target=_produce,
            args=(loader, self.stream, self.requests, self.results),
            name='pyg_tc-prefetch',
            daemon=True,
        ).start()
        for _ in range(depth):
            self._request()

    def _request(self) -> None:
        try:
            index = self.batches._next_index()
        except StopIteration:
            return
        self.requests.put((index, draw_seed()))
        self.pending += 1

    def __iter__(self) -> '_Prefetch':
        return self

    def __next__(self) -> Any:
        if not self.pending:
            self.close()
            raise StopIteration
        self._request()
        ok, value = self.results.get()
        self.pending -= 1
        self.remaining -= 1
        if not ok:  # the epoch ends here
            self.pending = 0
            self.close()
            raise value
        batch, done = value
        if done is None:  # made on the CPU
            return batch
        main = torch.cuda.current_stream(self.device)
        main.wait_event(done)
        _record_on(batch, main)
        return batch

    def __len__(self) -> int:
        return self.remaining

    def close(self) -> None:
        """Stops the thread once it has made the batches already asked for."""
        if self.requests is not None:
            self.requests.put(None)
            self.requests = None

    def __del__(self) -> None:
        self.close()


class _GPULoader:
    """What the two loaders share: the workers check, the gather sources, the
    batch's node and edge attributes and ``edge_index`` from a
    ``SamplerOutput``, and the side-stream iterator."""

    _sampler: NeighborSampler

    @staticmethod
    def _loader_kwargs(kwargs: Dict[str, Any], device: torch.device) -> Dict[str, Any]:
        workers = kwargs.get('num_workers', 0)
        if workers:
            warnings.warn(
                f'pyg_tc.loader: sampling runs in this process (on {device}); num_workers={workers} is ignored',
                stacklevel=3,
            )
        if kwargs.get('pin_memory') and device.type == 'cuda':
            warnings.warn('pyg_tc.loader: batches are made on the GPU; pin_memory=True is ignored', stacklevel=3)
            kwargs['pin_memory'] = False
        kwargs['num_workers'] = 0
        kwargs.pop('persistent_workers', None)
        kwargs.pop('prefetch_factor', None)
        return kwargs

    def _source(self, key: str, value: Tensor) -> Tensor:
        """Where attribute ``key`` is gathered from: itself on the sampler's
        device or on a CPU sampler, else a pinned copy (made once per tensor;
        a matrix's rows padded to 64 bytes, :func:`~pyg_tc.loader.features.padded_rows`)."""
        dev = self._sampler.device
        if dev.type != 'cuda' or value.device == dev or value.is_pinned():
            return value
        if value.dim() == 2:
            return self._converted('_pinned', key, value, lambda: padded_rows(value, pin=True))
        return self._converted('_pinned', key, value, lambda: value.contiguous().pin_memory())

    def _converted(self, cache: str, key: str, value: Tensor, make: Any) -> Any:
        """``make()`` for attribute ``key``, made once per tensor and version
        (kept in ``self.<cache>``); a CUDA tensor on another GPU than the
        sampler's is an error."""
        dev = self._sampler.device
        if dev.type == 'cuda' and value.is_cuda and value.device != dev:
            raise ValueError(f'pyg_tc.loader: data.{key} is on {value.device} but the sampler runs on {dev}')
        kept = self.__dict__.setdefault(cache, {})
        hit = kept.get(key)
        if hit is None or hit[0] is not value or hit[1] != value._version:
            hit = kept[key] = (value, value._version, make())
        return hit[2]

    def _use_storage(self, storage: Union[None, torch.dtype, FeatureStorage], data: Any) -> None:
        """Keeps ``feature_storage`` (checked: its attributes exist on ``data``,
        for ``HeteroData`` on one node type at least)."""
        self.feature_storage = as_storage(storage)
        if self.feature_storage is not None and isinstance(data, HeteroData):
            for key in self.feature_storage.attrs:
                if not any(isinstance(store.get(key), Tensor) for store in data.node_stores):
                    raise ValueError(
                        f'pyg_tc.loader: feature_storage stores data[node_type].{key}, which no node type has'
                    )
        if self.feature_storage is not None and isinstance(data, Data):
            for key in self.feature_storage.attrs:
                if not isinstance(data.get(key), Tensor) or not data.is_node_attr(key):
                    raise ValueError(f'pyg_tc.loader: feature_storage stores data.{key}, which is not a node attribute')

    def _stored(self, key: Any, value: Tensor) -> Any:
        """Attribute ``key`` (a name, or ``(node type, name)``) as
        ``feature_storage`` keeps it (converted once per tensor and version,
        where its ``memory`` puts it; on a CPU sampler on the CPU)."""
        storage, dev = self.feature_storage, self._sampler.device
        pin = storage.pinned(value, dev)
        name = key if isinstance(key, str) else f'[{key[0]!r}].{key[1]}'
        return self._converted('_stored_features', key, value, lambda: storage.store(name, value, pin, dev))

    def _gather(self, key: Any, value: Any, index: Tensor, dim: int) -> Any:
        """The rows ``index`` (along ``dim``) of attribute ``key``: a name, or
        ``(node type, name)`` / ``(edge type, name)`` of a ``HeteroData``."""
        storage = getattr(self, 'feature_storage', None)
        node_attr = key if isinstance(key, str) else key[1] if isinstance(key[0], str) else None
        if storage is not None and dim == 0 and node_attr in storage.attrs and isinstance(value, Tensor):
            return storage.gather(self._stored(key, value), index)
        if isinstance(value, np.ndarray):  # as PyG: gathered on the host, then a tensor (on the batch's device)
            return torch.from_numpy(np.take(value, index.cpu().numpy(), axis=dim)).to(index.device)
        if not isinstance(value, Tensor):
            raise TypeError(
                f'pyg_tc.loader: attribute {key!r} is a {type(value).__name__} of one entry per '
                'node or edge; the loader gathers tensors and NumPy arrays only (as PyG\'s)'
            )
        src = self._source(key, value)
        if dim == 0:
            return gather_from(src, index)
        return src.index_select(dim, index.to(src.device)).to(index.device)

    def _filter_data(self, out: SamplerOutput) -> Optional[Data]:
        """The batch of a homogeneous ``SamplerOutput`` (PyG's ``filter_data``
        on the GPU), or None when PyG's path must make it."""
        data = self.data
        if not isinstance(data, Data):
            return None
        edge_index, g, order = _sampled_graph(out)
        store = data._store
        batch = copy.copy(data)
        for key, value in store.items():
            if key == 'num_nodes':
                batch.num_nodes = out.node.numel()
            elif key == 'edge_index':
                n = out.node.numel()
                if g is None and not edge_index.is_cuda:  # (on the CPU a pyg_tc layer builds the CSR if it runs)
                    batch.edge_index = EdgeIndex(edge_index, sparse_size=(n, n), sort_order=order)
                else:
                    batch.edge_index = attach(edge_index, n, g, sort_order=order)
            elif key == 'adj_t':
                raise NotImplementedError("pyg_tc.loader: data.adj_t is not supported; use PyG's loader")
            elif store.is_node_attr(key):
                batch[key] = self._gather(key, value, out.node, data.__cat_dim__(key, value, store))
            elif store.is_edge_attr(key):
                batch[key] = self._gather(key, value, out.edge, data.__cat_dim__(key, value, store))
        if 'n_id' not in batch:  # as PyG: a user's own n_id / e_id is kept (gathered above)
            batch.n_id = out.node
        if out.edge is not None and 'e_id' not in batch:
            batch.e_id = out.edge
        batch.batch = out.batch
        batch.num_sampled_nodes = out.num_sampled_nodes
        batch.num_sampled_edges = out.num_sampled_edges
        return batch

    def _filter_hetero_data(self, out: HeteroSamplerOutput) -> HeteroData:
        """The batch of a ``HeteroSamplerOutput`` (PyG's ``filter_hetero_data``
        and the fields PyG's loaders add to every batch; each loader adds its
        input fields), every attribute gathered on the sampler's device (from the GPU,
        or pinned host memory over UVA)."""
        data = self.data
        batch = copy.copy(data)
        dev = self._sampler.device
        empty = torch.zeros(0, dtype=torch.long, device=dev)
        for t in data.node_types:
            index = out.node.get(t, empty)
            store, dst = data[t], batch[t]
            for key, value in store.items():
                if key == 'num_nodes':
                    dst.num_nodes = index.numel()
                elif store.is_node_attr(key):
                    dst[key] = self._gather((t, key), value, index, data.__cat_dim__(key, value, store))
            if 'n_id' not in dst:
                dst.n_id = index
        for e in data.edge_types:
            edge = out.edge.get(e, empty) if out.edge is not None else empty
            store, dst = data[e], batch[e]
            for key, value in store.items():
                if key == 'edge_index':
                    dst.edge_index = self._typed_edge_index(e, out, empty)
                elif key == 'adj_t':
                    raise NotImplementedError("pyg_tc.loader: adj_t is not supported; use PyG's loader")
                elif store.is_edge_attr(key):
                    dst[key] = self._gather((e, key), value, edge, data.__cat_dim__(key, value, store))
            if 'e_id' not in dst:
                dst.e_id = edge
        batch.set_value_dict('batch', out.batch)
        batch.set_value_dict('num_sampled_nodes', out.num_sampled_nodes)
        batch.set_value_dict('num_sampled_edges', out.num_sampled_edges)
        return batch

    def _hetero_batch(self, out: Any) -> Optional[HeteroData]:
        """The common part of a heterogeneous batch made by pyg_tc's sampler
        (after ``transform_sampler_output``), or None where PyG's
        ``filter_fn`` makes the batch (PyG's own sampler, or a homogeneous one)."""
        if not (isinstance(self.data, HeteroData) and isinstance(self._sampler, HeteroNeighborSampler)):
            return None
        if self.transform_sampler_output:
            out = self.transform_sampler_output(out)
        if not isinstance(out, HeteroSamplerOutput):
            return None
        return self._filter_hetero_data(out)

    def _typed_edge_index(self, e: Any, out: HeteroSamplerOutput, empty: Tensor) -> Tensor:
        """Edge type ``e``'s ``edge_index`` of a batch made by pyg_tc's
        sampler (sorted by target: its CSR over the batch's target nodes),
        with that CSR attached (no sort; on a GPU its transpose and schedules
        built here, on the CPU by the first layer that needs them) and its hop
        structure (so ``trim_to_layer``'s graphs are derived from it)."""
        src, _, dst = e
        row, col = out.row.get(e, empty), out.col.get(e, empty)
        n_src, n_dst = out.node[src].numel() if src in out.node else 0, out.node[dst].numel() if dst in out.node else 0
        rows = col.to(torch.int32)
        bounds = torch.arange(n_dst + 1, dtype=torch.int32, device=rows.device)
        rowptr = torch.searchsorted(rows, bounds, out_int32=True)
        fan = self._sampler.num_neighbors.get(e, [-1])
        known = None if min(fan, default=-1) < 0 else max(fan, default=0)  # (with replace too)
        graph = CSRGraph.from_sampled(
            rowptr,
            row.to(torch.int32),
            rows,
            n_dst,
            max_degree=known,
            defer=True,
            num_cols=n_src,
            **_hop_counts(out, e, n_src, n_dst, row.numel()),
        )
        if graph.device.type == 'cuda':
            graph.complete()
        return attach(torch.stack([row, col]), (n_src, n_dst), graph, sort_order='col')

    def _use_sampler(
        self, sampler: Optional[NeighborSampler], data: Any, num_neighbors: List[int], **kwargs: Any
    ) -> NeighborSampler:
        """The given sampler, or one of ``data`` built with the loader's
        sampling arguments: a :class:`NeighborSampler`, or for ``HeteroData`` a
        ``HeteroNeighborSampler`` (the kernel on a GPU; on the CPU its
        reference, or PyG's sampler where ``cpu_sampler`` picks it)."""
        if sampler is None and isinstance(data, HeteroData):
            sampler = _hetero_sampler(data, num_neighbors, **kwargs)
        elif sampler is None:
            sampler = NeighborSampler(data, num_neighbors, **kwargs)
        self._sampler = sampler
        return sampler

    def _filter(self, out: Any, pyg_filter: Any):
        """``(out, batch)``: the sampler output after ``transform_sampler_output``
        and the batch made from it (:meth:`_filter_data`, its loader-specific
        fields still to add); or ``(None, PyG's finished batch)`` where PyG's
        own ``filter_fn`` must make it (a heterogeneous output, or a graph that
        is not a ``Data``: PyG applies the loader's ``transform`` then)."""
        if self.transform_sampler_output:
            out = self.transform_sampler_output(out)
        data = self._filter_data(out) if isinstance(out, SamplerOutput) else None
        if data is not None:
            return out, data
        keep, self.transform_sampler_output = self.transform_sampler_output, None
        try:
            return None, pyg_filter(self, out)
        finally:
            self.transform_sampler_output = keep

    @property
    def _index_sampler(self) -> Any:
        """What torch's iterator draws the batches' seed indices from: for
        torch's default samplers :class:`_SeedBatches` (tensor slices, the same
        batches), else torch's own."""
        if self._auto_collation and _SeedBatches.handles(self):
            return _SeedBatches(self.sampler, self.batch_size, self.drop_last)
        return torch.utils.data.DataLoader._index_sampler.fget(self)

    def _get_iterator(self) -> Iterator:
        dev = self._sampler.device
        if getattr(self, 'prefetch', 0) > 0:
            return _Prefetch(self, dev, self.prefetch)
        if isinstance(self.dataset, range) and self.dataset == range(len(self.dataset)):
            it = _Batches(self)
        else:
            it = DataLoaderIterator(torch.utils.data.DataLoader._get_iterator(self), self.filter_fn)
        if dev.type == 'cuda':
            return _SideStream(it, dev)
        return it


class NeighborLoader(_GPULoader, PyGNeighborLoader):
    r"""PyG's :class:`torch_geometric.loader.NeighborLoader`, sampled on the
    GPU (see the module doc): same arguments, same batches' fields
    (``x``, ``y``, ``edge_index``, edge attributes, ``n_id``, ``e_id``,
    ``input_id``, ``batch_size``, ``num_sampled_nodes``,
    ``num_sampled_edges``), same semantics as PyG's sampler, with the batch's
    CSR attached to ``edge_index``.

    A ``HeteroData`` graph gives ``HeteroData`` batches with PyG's fields per
    node and edge type, sampled by the ``hetero_neighbor_sample`` kernel
    (pyg-lib's semantics) and gathered on the GPU, each edge type's
    ``edge_index`` carrying its CSR over the batch's (sources, targets);
    ``feature_storage`` applies to the named attributes of every node
    type; ``graph_memory`` other than the sampler's device is not
    supported for it yet.

    Args:
        data (torch_geometric.data.Data or torch_geometric.data.HeteroData):
            the graph, on the CPU or the GPU.
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]):
            fan-out per hop (``-1``: all neighbours); for a ``HeteroData``
            graph also one list per edge type.
        device (torch.device, optional): where batches are sampled and
            gathered (default: the current CUDA device, else the CPU).
        graph_memory (str, optional): see :class:`NeighborSampler`.
        cpu_sampler (str, optional): the sampler on the CPU (see
            :class:`NeighborSampler`): pyg-lib's when it is installed
            (``'auto'``, default), ``'pyg'`` or ``'reference'``; for a
            ``HeteroData`` graph pyg_tc's reference unless ``'pyg'``.
        prefetch (int, optional): batches made ahead on a thread of the
            loader's own (default 0: each batch is made when the loop asks
            for it, on a GPU on a side stream; on the CPU it samples with
            pyg_tc's reference). With ``prefetch=k`` batches
            ``i + 1 .. i + k`` are sampled, gathered and transformed (e.g.
            padded) while the loop launches step ``i``: the sampler's
            synchronisation and the transform's host work leave the loop's
            path. The batches are the same as without (every draw from
            ``torch``'s generator stays on the loop's thread, in the same
            order); a CUDA graph captured in the loop needs
            ``capture_error_mode='thread_local'`` (the thread's CUDA calls
            would otherwise break the capture; :class:`~pyg_tc.capture.CapturedStep` and
            ``torch.compile`` capture so).
        feature_storage (torch.dtype or FeatureStorage, optional): node
            features stored and gathered in half precision or fp8
            (:class:`~pyg_tc.loader.FeatureStorage`; a dtype is
            ``FeatureStorage(dtype)``): the batch's ``x`` in bfloat16 /
            float16 (fp8: upcast in the gather, bfloat16 by default). Default
            None: gathered as stored.
        **kwargs: every other argument of PyG's ``NeighborLoader``
            (``input_nodes``, ``batch_size``, ``shuffle``, ``replace``,
            ``transform``, ...). ``neighbor_sampler=`` takes a
            :class:`NeighborSampler` built beforehand.
    """

    def __init__(
        self,
        data: Data,
        num_neighbors: List[int],
        input_nodes: Any = None,
        input_time: Optional[Tensor] = None,
        replace: bool = False,
        subgraph_type: str = 'directional',
        disjoint: bool = False,
        temporal_strategy: str = 'uniform',
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        transform: Any = None,
        transform_sampler_output: Any = None,
        is_sorted: bool = False,
        filter_per_worker: Optional[bool] = None,
        neighbor_sampler: Optional[NeighborSampler] = None,
        directed: bool = True,
        device: Optional[Any] = None,
        graph_memory: str = 'auto',
        prefetch: int = 0,
        cpu_sampler: str = 'auto',
        feature_storage: Union[None, torch.dtype, FeatureStorage] = None,
        **kwargs,
    ):
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f'pyg_tc.loader.NeighborLoader: prefetch must be an int >= 0, got {prefetch!r}')
        self.prefetch = prefetch
        if prefetch and cpu_sampler == 'pyg':
            raise ValueError(
                "pyg_tc.loader.NeighborLoader: prefetch needs pyg_tc's sampler (the loop's thread "
                "hands each batch its draw); PyG's draws on the prefetch thread itself. Pass "
                "prefetch=0 or cpu_sampler='reference'"
            )
        if prefetch and cpu_sampler == 'auto':
            cpu_sampler = 'reference'  # (on a GPU the kernel, the reference's twin, either way)
        self._use_storage(feature_storage, data)
        neighbor_sampler = self._use_sampler(
            neighbor_sampler,
            data,
            num_neighbors,
            subgraph_type=subgraph_type,
            replace=replace,
            disjoint=disjoint,
            temporal_strategy=temporal_strategy,
            time_attr=time_attr,
            weight_attr=weight_attr,
            is_sorted=is_sorted,
            directed=directed,
            device=device,
            graph_memory=graph_memory,
            cpu_sampler=cpu_sampler,
        )
        _check_input(input_nodes)
        super().__init__(
            data,
            num_neighbors,
            input_nodes=input_nodes,
            input_time=input_time,
            transform=transform,
            transform_sampler_output=transform_sampler_output,
            filter_per_worker=False,
            neighbor_sampler=neighbor_sampler,
            **self._loader_kwargs(kwargs, neighbor_sampler.device),
        )

    def _sample_batch(self, index: List[int], seed: int) -> SamplerOutput:
        """PyG's ``collate_fn`` (filtering aside) with the sampling draw ``seed``."""
        return self._sampler.sample_from_nodes(self.input_data[index], seed=seed)

    def filter_fn(self, out: SamplerOutput) -> Any:
        """PyG's ``filter_fn``, with the batch's node and edge attributes gathered on the sampler's
        device and its CSR attached to ``edge_index``."""
        data = self._hetero_batch(out) if isinstance(out, HeteroSamplerOutput) else None
        if data is not None:
            input_type = self.input_data.input_type
            data[input_type].input_id = out.metadata[0]
            data[input_type].seed_time = out.metadata[1]
            data[input_type].batch_size = out.metadata[0].size(0)
            return data if self.transform is None else self.transform(data)
        out, data = self._filter(out, PyGNeighborLoader.filter_fn)
        if not isinstance(data, Data) or out is None:
            return data
        data.input_id = out.metadata[0]
        data.seed_time = out.metadata[1]
        data.batch_size = out.metadata[0].size(0)
        return _complete(data if self.transform is None else self.transform(data))


class LinkNeighborLoader(_GPULoader, PyGLinkNeighborLoader):
    r"""PyG's :class:`torch_geometric.loader.LinkNeighborLoader`, sampled on
    the GPU (see the module doc): same arguments (``edge_label_index``,
    ``edge_label``, ``neg_sampling`` binary or triplet, ...) and batches
    (``edge_label_index`` / ``edge_label``, or ``src_index`` /
    ``dst_pos_index`` / ``dst_neg_index``), with the batch's CSR attached to
    ``edge_index``.

    A ``HeteroData`` graph (``edge_label_index=(edge type, links)``) gives
    ``HeteroData`` batches as :class:`NeighborLoader`'s, with PyG's link
    fields on the input edge type (or the triplet indices on its end
    types), on the sampler's device.

    Args:
        data (torch_geometric.data.Data or torch_geometric.data.HeteroData):
            the graph, on the CPU or the GPU.
        num_neighbors (List[int]): fan-out per hop (``-1``: all neighbours).
        device (torch.device, optional): where batches are sampled and
            gathered (default: the current CUDA device, else the CPU).
        graph_memory (str, optional): see :class:`NeighborSampler`.
        cpu_sampler (str, optional): the sampler on the CPU (see
            :class:`NeighborSampler`).
        feature_storage (torch.dtype or FeatureStorage, optional): node
            features stored and gathered in half precision or fp8
            (:class:`~pyg_tc.loader.FeatureStorage`; a dtype is
            ``FeatureStorage(dtype)``): the batch's ``x`` in bfloat16 /
            float16 (fp8: upcast in the gather, bfloat16 by default). Default
            None: gathered as stored.
        **kwargs: every other argument of PyG's ``LinkNeighborLoader``.
    """

    def __init__(
        self,
        data: Data,
        num_neighbors: List[int],
        edge_label_index: Any = None,
        edge_label: Optional[Tensor] = None,
        edge_label_time: Optional[Tensor] = None,
        replace: bool = False,
        subgraph_type: str = 'directional',
        disjoint: bool = False,
        temporal_strategy: str = 'uniform',
        neg_sampling: Any = None,
        neg_sampling_ratio: Any = None,
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        transform: Any = None,
        transform_sampler_output: Any = None,
        is_sorted: bool = False,
        filter_per_worker: Optional[bool] = None,
        neighbor_sampler: Optional[NeighborSampler] = None,
        directed: bool = True,
        device: Optional[Any] = None,
        graph_memory: str = 'auto',
        cpu_sampler: str = 'auto',
        feature_storage: Union[None, torch.dtype, FeatureStorage] = None,
        **kwargs,
    ):
        self._use_storage(feature_storage, data)
        neighbor_sampler = self._use_sampler(
            neighbor_sampler,
            data,
            num_neighbors,
            subgraph_type=subgraph_type,
            replace=replace,
            disjoint=disjoint,
            temporal_strategy=temporal_strategy,
            time_attr=time_attr,
            weight_attr=weight_attr,
            is_sorted=is_sorted,
            directed=directed,
            device=device,
            graph_memory=graph_memory,
            cpu_sampler=cpu_sampler,
        )
        if isinstance(edge_label_index, Tensor):
            _check_input(edge_label_index, 'edge_label_index', dim=1)
        super().__init__(
            data,
            num_neighbors,
            edge_label_index=edge_label_index,
            edge_label=edge_label,
            edge_label_time=edge_label_time,
            neg_sampling=neg_sampling,
            neg_sampling_ratio=neg_sampling_ratio,
            time_attr=time_attr,
            transform=transform,
            transform_sampler_output=transform_sampler_output,
            filter_per_worker=False,
            neighbor_sampler=neighbor_sampler,
            **self._loader_kwargs(kwargs, neighbor_sampler.device),
        )

    def _sample_batch(self, index: List[int], seed: int) -> SamplerOutput:
        """PyG's ``collate_fn`` (filtering aside) with the sampling draw ``seed``."""
        return self._sampler.sample_from_edges(self.input_data[index], neg_sampling=self.neg_sampling, seed=seed)

    def filter_fn(self, out: SamplerOutput) -> Any:
        """PyG's ``filter_fn``, with the batch's node and edge attributes gathered on the sampler's
        device and its CSR attached to ``edge_index``."""
        data = self._hetero_batch(out) if isinstance(out, HeteroSamplerOutput) else None
        if data is not None:
            return self._hetero_link_fields(data, out)
        out, data = self._filter(out, PyGLinkNeighborLoader.filter_fn)
        if not isinstance(data, Data) or out is None:
            return data
        meta = self._link_metadata(out)
        data.input_id = meta[0]
        if self.neg_sampling is None or self.neg_sampling.is_binary():
            data.edge_label_index = meta[1]
            data.edge_label = meta[2]
            data.edge_label_time = meta[3]
        elif self.neg_sampling.is_triplet():
            data.src_index = meta[1]
            data.dst_pos_index = meta[2]
            data.dst_neg_index = meta[3]
            data.seed_time = meta[4]
            del data.edge_label_index
            del data.edge_label_time
        return _complete(data if self.transform is None else self.transform(data))

    def _link_metadata(self, out: Any) -> List[Any]:
        """The sampler output's link metadata (``input_id``, labels and their
        indices, times) on the sampler's device, where the rest of the batch is."""
        dev = self._sampler.device
        return [m.to(dev) if isinstance(m, Tensor) else m for m in out.metadata]

    def _hetero_link_fields(self, data: HeteroData, out: HeteroSamplerOutput) -> Any:
        """PyG's link fields of a heterogeneous batch (on the input edge
        type, or its end types for triplet negatives), then the transform."""
        t = self.input_data.input_type
        meta = self._link_metadata(out)
        data[t].input_id = meta[0]
        if self.neg_sampling is None or self.neg_sampling.is_binary():
            data[t].edge_label_index = meta[1]
            data[t].edge_label = meta[2]
            data[t].edge_label_time = meta[3]
        elif self.neg_sampling.is_triplet():
            data[t[0]].src_index = meta[1]
            data[t[-1]].dst_pos_index = meta[2]
            data[t[-1]].dst_neg_index = meta[3]
            data[t[0]].seed_time = meta[4]
            data[t[-1]].seed_time = meta[4]
            if t in data.edge_types:
                del data[t].edge_label_index
                del data[t].edge_label_time
        return data if self.transform is None else self.transform(data)


def _check_input(index: Any, what: str = 'input_nodes', dim: int = 0) -> None:
    """An empty ``input_nodes`` / ``edge_label_index`` is an error (PyG's
    loader would yield no batch at all, silently)."""
    if isinstance(index, tuple):  # (node type, nodes): heterogeneous, the sampler says so
        return
    if isinstance(index, Tensor) and index.size(dim if index.dim() > dim else 0) == 0:
        raise ValueError(f'pyg_tc.loader: {what} is empty: there is nothing to sample from')


def _hop_counts(out: HeteroSamplerOutput, e: Any, n_src: int, n_dst: int, num_edges: int) -> dict:
    """``CSRGraph.from_sampled``'s hop counts of edge type ``e`` in a sampler
    output, or none where they do not describe its edges (a changed output)."""
    nsn, nse = out.num_sampled_nodes or {}, out.num_sampled_edges or {}
    nodes_src, nodes_dst, edges = nsn.get(e[0]), nsn.get(e[-1]), nse.get(e)
    if nodes_src is None or nodes_dst is None or edges is None:
        return {}
    nodes_src, nodes_dst, edges = list(map(int, nodes_src)), list(map(int, nodes_dst)), list(map(int, edges))
    if (
        len(nodes_src) != len(nodes_dst)
        or len(nodes_dst) != len(edges) + 1
        or (sum(nodes_src), sum(nodes_dst), sum(edges)) != (n_src, n_dst, num_edges)
    ):
        return {}
    return dict(num_sampled_nodes=nodes_dst, num_sampled_edges=edges, num_sampled_src=nodes_src)


def _hetero_sampler(
    data: HeteroData,
    num_neighbors: Any,
    device: Optional[Any] = None,
    cpu_sampler: str = 'auto',
    graph_memory: str = 'auto',
    directed: bool = True,
    **kwargs: Any,
) -> Any:
    """The sampler of a ``HeteroData`` graph: pyg_tc's
    ``HeteroNeighborSampler`` on ``device`` (default: the current CUDA
    device, else the CPU; on the CPU its reference, the GPU's batches bit
    for bit), or PyG's own sampler on the CPU with ``cpu_sampler='pyg'``."""
    from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler

    dev = torch.device(device) if device is not None else torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    if cpu_sampler not in ('auto', 'pyg', 'reference'):
        raise ValueError(f"pyg_tc.loader: cpu_sampler must be 'auto', 'pyg' or 'reference', got {cpu_sampler!r}")
    if graph_memory not in ('auto', 'device'):
        raise NotImplementedError(
            f"pyg_tc.loader: graph_memory={graph_memory!r} is not supported for HeteroData yet (the graph's CSCs "
            "live on the sampler's device)"
        )
    if not directed:
        kwargs['subgraph_type'] = 'induced'
    if cpu_sampler == 'pyg':
        if dev.type != 'cpu':
            raise ValueError(f"pyg_tc.loader: cpu_sampler='pyg' samples on the CPU (PyG has no GPU sampler), not {dev}")
        if not pyg_sampler_installed():
            raise ImportError("pyg_tc.loader: cpu_sampler='pyg' needs pyg-lib or torch_sparse")
        sampler = PyGNeighborSampler(data, num_neighbors, **kwargs)
        sampler.device = dev  # (where the loader makes its batches)
        return sampler
    return HeteroNeighborSampler(data, num_neighbors, device=dev, **kwargs)
