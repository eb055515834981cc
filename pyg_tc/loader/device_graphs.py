r"""Batches of small graphs assembled on the device, for
:class:`~pyg_tc.loader.GraphLoader` with ``device=``.

The dataset is collated once (PyG's ``Batch.from_data_list``), each graph's
edges put in CSR order (sorted by target, stably; edge attributes alike)
with the transpose of that CSR, and its tensors moved to the device. For a
batch of graph ids the host computes where every row, edge slot and graph
slot of the batch comes from (NumPy over the stored structure), copies those
indices to the device in two transfers, and the device gathers the features
and attributes. The batch's CSR, both directions, is the stored one shifted
per graph: no sort and no collate run per batch. A batch equals what
:class:`~pyg_tc.transforms.PadGraphs` makes of PyG's collated batch of the same
graphs, tensor for tensor (without ``pad``: PyG's batch with its edges in
CSR order and the CSR attached).

What it stores: every tensor attribute of the graphs, classified as PyG's
batch does (node attributes, edge attributes, and graph attributes with one
row per graph). Attributes that PyG increments when batching (indices into
nodes, other than ``edge_index``) and non-tensor attributes are refused
(leave them out with ``exclude_keys``).
"""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch

from ..formats.carrier import attach, plain_tensor
from ..formats.csr import (
    CSRGraph,
    Layout,
    _rowptr_from_sorted,
    auto_chunk,
    build_schedules,
    transpose,
)
from ..formats.padding import padded_layout, padded_schedules


class DeviceGraphs:
    """A dataset of graphs stored on ``device``, and its batches (see the module doc).

    Args:
        graphs (Sequence[torch_geometric.data.Data]): the graphs (a dataset
            is read once: its ``transform`` runs once per graph).
        device (torch.device or str): where the graphs are stored and the
            batches assembled.
        exclude_keys (Sequence[str], optional): attributes left out.
    """

    def __init__(self, graphs: Sequence[Any], device: Any, exclude_keys: Sequence[str] = ()):
        data_list = [graphs[i] for i in range(len(graphs))]
        if not data_list:
            raise ValueError('pyg_tc: GraphLoader(device=...) needs at least one graph')
        big = Batch.from_data_list(data_list, exclude_keys=list(exclude_keys))
        store = big._store
        if not isinstance(store.get('edge_index'), Tensor):
            raise ValueError('pyg_tc: GraphLoader(device=...) needs graphs with an edge_index')
        self.device = torch.device(device)
        self.num_graphs, self.num_nodes = len(data_list), int(big.num_nodes)
        ei = plain_tensor(big.edge_index).long()
        self.num_edges = ei.size(1)
        order = torch.sort(ei[1], stable=True).indices  # CSR order within every graph (graphs stay contiguous)
        ei = ei.index_select(1, order)
        rows, col = ei[1].to(torch.int32), ei[0].to(torch.int32)
        t_rowptr, t_col, t_perm = transpose(col, rows, self.num_nodes)
        np64 = lambda t: t.numpy().astype(np.int64)  # noqa: E731
        self.node_ptr = np64(big.ptr)
        self.edge_ptr = np64(big._slice_dict['edge_index'])
        self.rowptr, self.rows, self.col = np64(_rowptr_from_sorted(rows, self.num_nodes)), np64(rows), np64(col)
        self.t_rowptr, self.t_col, self.t_perm = np64(t_rowptr), np64(t_col), np64(t_perm)
        #: key -> (kind: 'node' / 'edge' / 'graph', cat dim, the stored tensor with a zero slot appended)
        self.attrs: Dict[str, Tuple[str, int, Tensor]] = {}
        for key, value in store.items():
            if key in ('edge_index', 'batch', 'ptr', 'num_nodes'):
                continue
            if not isinstance(value, Tensor):
                raise TypeError(
                    f'pyg_tc: GraphLoader(device=...) stores tensors; attribute {key!r} is a '
                    f'{type(value).__name__} (leave it out: exclude_keys=[{key!r}])'
                )
            inc = big._inc_dict.get(key)
            if inc is not None and bool(torch.as_tensor(inc).ne(0).any()):
                raise ValueError(
                    f'pyg_tc: GraphLoader(device=...) cannot batch attribute {key!r}: PyG increments it '
                    f'when batching (an index into nodes); only edge_index is shifted'
                )
            dim = big.__cat_dim__(key, value, store)
            dim = dim % value.dim() if value.dim() else 0
            if store.is_node_attr(key):
                kind = 'node'
            elif store.is_edge_attr(key):
                kind, value = 'edge', value.index_select(dim, order)
            elif dim == 0 and value.dim() >= 1 and value.size(0) == self.num_graphs:
                kind = 'graph'
            else:
                raise ValueError(
                    f'pyg_tc: GraphLoader(device=...) cannot tell whether attribute {key!r} (shape '
                    f'{tuple(value.shape)}) belongs to nodes, edges or graphs'
                )
            shape = list(value.shape)
            shape[dim] = 1
            self.attrs[key] = (kind, dim, torch.cat([value, value.new_zeros(shape)], dim).to(self.device))

    def batch(self, ids: Sequence[int], pad: Any = None) -> Batch:
        """The batch of graphs ``ids`` (in that order), padded to ``pad``'s
        bucket when it fits one.

        Args:
            ids (Sequence[int]): graph indices into the stored dataset.
            pad (PadGraphs, optional): the buckets (default: none; the batch
                unpadded, its edges in CSR order with the CSR attached).
        """
        ids = np.asarray(ids, dtype=np.int64)
        G = ids.size
        if G == 0 or ids.min() < 0 or ids.max() >= self.num_graphs:
            raise IndexError(f'pyg_tc: graph ids must lie in [0, {self.num_graphs}) and be at least one')
        nn = self.node_ptr[ids + 1] - self.node_ptr[ids]
        ne = self.edge_ptr[ids + 1] - self.edge_ptr[ids]
        n, E = int(nn.sum()), int(ne.sum())
        bucket = pad.bucket_for(G, n, E) if pad is not None else None
        S, N, P = bucket if bucket is not None else (G, n, E)
        ends_n, ends_e = np.cumsum(nn), np.cumsum(ne)
        dn = self.node_ptr[ids] - (ends_n - nn)  # global node id - batch row, per graph
        de = self.edge_ptr[ids] - (ends_e - ne)  # global CSR position - batch edge slot, per graph
        dn_of_edge, de_of_edge, de_of_node = np.repeat(dn, ne), np.repeat(de, ne), np.repeat(de, nn)
        node_src = np.arange(n) + np.repeat(dn, nn)  # the stored node of every real row
        edge_src = np.arange(E) + de_of_edge  # the stored edge of every real slot

        pin = self.device.type == 'cuda'
        b64 = torch.empty(2 * N + 2 * S + 1 + 3 * P, dtype=torch.int64, pin_memory=pin)
        b32 = torch.empty(2 * (N + 1) + 3 * P, dtype=torch.int32, pin_memory=pin)
        a64, a32 = b64.numpy(), b32.numpy()
        cuts64 = np.cumsum([0, N, P, S, N, S + 1, P, P])  # x index, edge index, graph index, batch, ptr, ei[0], ei[1]
        part = [a64[cuts64[i] : cuts64[i + 1]] for i in range(7)]
        _fill(part[0], node_src, self.num_nodes)  # padded rows read the zero slot
        _fill(part[1], edge_src, self.num_edges)
        _fill(part[2], ids, self.num_graphs)
        _fill(part[3], np.repeat(np.arange(G), nn), S - 1)  # padded rows: the padding slot
        part[4][0] = 0
        part[4][1 : G + 1] = ends_n
        part[4][G + 1 :] = n
        part[4][-1] = N
        _fill(part[5], self.col[edge_src] - dn_of_edge, N - 1)  # sources; padding slots: loops of the last row
        _fill(part[6], self.rows[edge_src] - dn_of_edge, N - 1)
        cuts32 = np.cumsum([0, N + 1, N + 1, P, P, P])  # rowptr, t_rowptr, col, t_col, t_perm
        rowptr, t_rowptr, col, t_col, t_perm = [a32[cuts32[i] : cuts32[i + 1]] for i in range(5)]
        _fill(rowptr, self.rowptr[node_src] - de_of_node, E)  # padded rows repeat E
        _fill(t_rowptr, self.t_rowptr[node_src] - de_of_node, E)
        col[:] = part[5]
        _fill(t_col, self.t_col[edge_src] - dn_of_edge, N - 1)
        t_perm[:E] = self.t_perm[edge_src] - de_of_edge
        t_perm[E:] = np.arange(E, P)

        d64, d32 = b64.to(self.device, non_blocking=True), b32.to(self.device, non_blocking=True)
        v64 = [d64[cuts64[i] : cuts64[i + 1]] for i in range(7)]
        v32 = [d32[cuts32[i] : cuts32[i + 1]] for i in range(5)]
        out = Batch()
        index = {'node': v64[0], 'edge': v64[1], 'graph': v64[2]}
        for key, (kind, dim, value) in self.attrs.items():
            out[key] = value.index_select(dim, index[kind])
        if bucket is not None:
            chunk = auto_chunk(P, N)
            sched = padded_schedules([v32[0], v32[1]], chunk, P)
        else:
            chunk = auto_chunk(E, n)
            sched = build_schedules([v32[0], v32[1]], chunk)
        layout = Layout() if bucket is None else padded_layout((n, E))
        g = CSRGraph(v32[0], v32[2], None, v32[1], v32[3], v32[4], sched[0], sched[1], N, N, chunk, layout)
        out.edge_index = attach(d64[cuts64[5] : cuts64[7]].view(2, P), N, g, sort_order='col')
        out.batch, out.ptr = v64[3], v64[4]
        out._num_graphs = S
        if pad is not None:
            out.num_real_graphs, out.num_real_nodes, out.num_real_edges = G, n, E
            out.bucket = bucket
        if bucket is not None:
            out.num_nodes = N
            out.node_mask = v64[0] != self.num_nodes
            out.graph_mask = v64[2] != self.num_graphs
        return out


def _fill(dst: np.ndarray, values: np.ndarray, rest: int) -> None:
    """``dst`` = ``values`` followed by ``rest`` up to its length."""
    dst[: values.size] = values
    dst[values.size :] = rest
