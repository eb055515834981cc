"""pyg_tc.loader in every mode it accepts, against PyG's loader and a plain
oracle: bidirectional batches (node and link loaders), a user's own ``n_id`` /
``e_id``, NumPy attributes, the order PyG's batches come in, and the
loader's errors for bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from pyg_tc.formats.carrier import TCEdgeIndex
from pyg_tc.loader import LinkNeighborLoader, NeighborLoader, NeighborSampler

from ..conftest import DEVICES, cuda_only
from .test_sampler import _pyg_backend, graph


def _data(kind: str, seed: int = 3) -> Data:
    ei, N = graph(kind)
    g = torch.Generator().manual_seed(seed)
    return Data(
        edge_index=ei,
        num_nodes=N,
        x=torch.randn(N, 5, generator=g),
        y=torch.randint(0, 4, (N,), generator=g),
        edge_attr=torch.randn(ei.size(1), 3, generator=g),
    )


def _two_way(batch) -> list:
    """The oracle of PyG's ``to_bidirectional``: the directional batch's
    edges and their reverses, duplicates dropped, sorted by (target, source),
    as (source, target) local ids."""
    row, col = _edges(batch).tolist()
    pairs = set(zip(row, col)) | set(zip(col, row))
    return sorted(pairs, key=lambda p: (p[1], p[0]))


def _edges(batch) -> torch.Tensor:
    ei = batch.edge_index
    return ei.as_tensor() if isinstance(ei, TCEdgeIndex) else ei


def _global_edges(batch) -> set:
    """The batch's edges as (global source, global target, edge id)."""
    row, col = _edges(batch).cpu()
    n_id = batch.n_id.cpu()
    return set(zip(n_id[row].tolist(), n_id[col].tolist(), batch.e_id.cpu().tolist()))


# ---------------------------------------------------------------------------
# subgraph_type='bidirectional'


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['random', 'sparse', 'hub'])
@pytest.mark.parametrize('fanouts', [[-1, -1], [4, 3]])
def test_bidirectional_batches_are_two_way(device, kind, fanouts):
    """A bidirectional batch is the directional batch of the same draw, made
    two-way: its ``edge_index`` (with the CSR attached), ``e_id`` and edge
    attributes agree edge for edge, and a layer on it equals PyG's layer on
    the plain ``edge_index``."""
    import torch_geometric.nn as pyg_nn

    import pyg_tc.nn

    data = _data(kind)
    kw = dict(num_neighbors=fanouts, batch_size=16, device=device)
    torch.manual_seed(4)
    one_way = list(NeighborLoader(data, **kw))
    torch.manual_seed(4)
    two_way = list(NeighborLoader(data, subgraph_type='bidirectional', **kw))
    assert len(one_way) == len(two_way)
    torch.manual_seed(0)
    ref = pyg_nn.SAGEConv(5, 4).to(device)
    ours = pyg_tc.nn.SAGEConv(5, 4).to(device)
    ours.load_state_dict(ref.state_dict())
    for a, b in zip(one_way, two_way):
        assert torch.equal(a.n_id, b.n_id)
        ei = _edges(b)
        assert isinstance(b.edge_index, TCEdgeIndex) and b.edge_index.sort_order == 'col'
        assert [tuple(p) for p in ei.t().tolist()] == _two_way(a)
        assert ei.size(1) == b.e_id.numel() == b.edge_attr.size(0)
        # every edge and its edge id: a sampled edge, or the reverse of one
        sampled = {}
        for s, t, e in _global_edges(a):  # (repeated edges: any of their ids)
            sampled.setdefault((s, t), set()).add(e)
        n_id = b.n_id.cpu()
        for (s, t), e in zip(ei.cpu().t().tolist(), b.e_id.cpu().tolist()):
            u, v = int(n_id[s]), int(n_id[t])
            assert e in sampled.get((u, v), set()) | sampled.get((v, u), set())
        assert torch.equal(b.edge_attr, data.edge_attr.to(device)[b.e_id])
        assert getattr(b, 'num_sampled_nodes', None) is None  # as PyG: the hops no longer apply
        torch.testing.assert_close(ours(b.x, b.edge_index), ref(b.x, ei.clone()))


@pytest.mark.parametrize('kind', ['random', 'sparse', 'hub'])
@pytest.mark.parametrize('is_sorted', [True, False])
def test_bidirectional_equals_pygs_loader(kind, is_sorted):
    """With covering fan-outs, PyG's bidirectional batch and pyg_tc's are
    equal as sets of nodes and edges, each edge's id one of the graph's
    edges between its ends (an edge present both ways keeps either id, by
    the order the sampler met them); with ``is_sorted=True`` the same batch
    (nodes, edges, ids and attributes in order). Repeated edges are dropped
    from the graph (their coalesced id is any of the copies)."""
    _pyg_backend()
    from torch_geometric.loader import NeighborLoader as PyGLoader

    data = _data(kind)
    ei = data.edge_index
    keep = torch.unique(ei[1] * data.num_nodes + ei[0], return_inverse=True)[1]
    first = torch.full((int(keep.max()) + 1,), ei.size(1)).scatter_reduce(0, keep, torch.arange(ei.size(1)), 'amin')
    data = Data(edge_index=ei[:, first], num_nodes=data.num_nodes, x=data.x, edge_attr=data.edge_attr[first])
    if is_sorted:
        order = torch.argsort(data.edge_index[1] * data.num_nodes + data.edge_index[0])
        data.edge_index, data.edge_attr = data.edge_index[:, order], data.edge_attr[order]
    seeds = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(2))[:20]
    kw = dict(
        num_neighbors=[5000, 5000], input_nodes=seeds, batch_size=8, subgraph_type='bidirectional', is_sorted=is_sorted
    )
    ours, ref = list(NeighborLoader(data, **kw, device='cpu')), list(PyGLoader(data, **kw))
    assert len(ours) == len(ref) == 3
    for a, b in zip(ours, ref):
        assert set(a.n_id.tolist()) == set(b.n_id.tolist())
        assert {e[:2] for e in _global_edges(a)} == {e[:2] for e in _global_edges(b)}
        ends = data.edge_index[:, a.e_id].sort(0).values  # each id is an edge between the ends it sits on
        assert torch.equal(ends, a.n_id[_edges(a)].sort(0).values)
        if is_sorted:
            assert torch.equal(a.n_id, b.n_id) and torch.equal(_edges(a), b.edge_index)
            assert torch.equal(a.e_id, b.e_id) and torch.equal(a.edge_attr, b.edge_attr)
        assert torch.equal(a.x, data.x[a.n_id]) and torch.equal(a.edge_attr, data.edge_attr[a.e_id])
        assert set(a.keys()) == set(b.keys())


@pytest.mark.parametrize('device', DEVICES)
def test_bidirectional_link_loader(device):
    """The link loader's bidirectional batches: two-way edges with their ids
    and attributes, the labelled links' endpoints in the batch."""
    data = _data('random')
    label_index = data.edge_index[:, :40]
    kw = dict(num_neighbors=[3, 2], edge_label_index=label_index, batch_size=10, device=device)
    torch.manual_seed(6)
    a = next(iter(LinkNeighborLoader(data, **kw)))
    torch.manual_seed(6)
    b = next(iter(LinkNeighborLoader(data, subgraph_type='bidirectional', **kw)))
    assert torch.equal(a.n_id, b.n_id)
    assert [tuple(p) for p in _edges(b).t().tolist()] == _two_way(a)
    assert torch.equal(b.edge_attr, data.edge_attr.to(device)[b.e_id])
    assert torch.equal(b.n_id[b.edge_label_index].cpu(), label_index[:, b.input_id.cpu()])


def test_transform_sampler_output_that_replaces_edges():
    """A ``transform_sampler_output`` that changes the sampled edges: the
    batch's ``edge_index`` and its CSR are the changed edges, not the
    sampler's."""
    import pyg_tc.nn

    def drop_first_edge(out):
        out.row, out.col, out.edge = out.row[1:], out.col[1:], out.edge[1:]
        return out

    data = _data('random')
    torch.manual_seed(1)
    a = next(iter(NeighborLoader(data, [3, 2], batch_size=8, device='cpu')))
    torch.manual_seed(1)
    b = next(iter(NeighborLoader(data, [3, 2], batch_size=8, device='cpu', transform_sampler_output=drop_first_edge)))
    assert torch.equal(_edges(b), _edges(a)[:, 1:]) and torch.equal(b.e_id, a.e_id[1:])
    conv = pyg_tc.nn.GCNConv(5, 3)
    torch.testing.assert_close(conv(b.x, b.edge_index), conv(b.x, _edges(a)[:, 1:].clone()))


# ---------------------------------------------------------------------------
# the user's attributes


@pytest.mark.parametrize('device', DEVICES)
def test_user_n_id_and_e_id_are_kept(device):
    """As PyG: a graph's own ``n_id`` / ``e_id`` are node / edge attributes,
    gathered; the loader adds its ids only where the graph has none."""
    data = _data('random')
    data.n_id = torch.arange(data.num_nodes) * 10 + 7
    data.e_id = torch.arange(data.num_edges) * 3 + 1
    torch.manual_seed(2)
    plain = next(iter(NeighborLoader(_data('random'), [3, 2], batch_size=8, device=device)))
    torch.manual_seed(2)
    b = next(iter(NeighborLoader(data, [3, 2], batch_size=8, device=device)))
    assert torch.equal(b.n_id, plain.n_id * 10 + 7) and torch.equal(b.e_id, plain.e_id * 3 + 1)
    assert b.n_id.device.type == b.x.device.type == torch.device(device).type


def test_user_ids_equal_pygs_loader():
    _pyg_backend()
    from torch_geometric.loader import NeighborLoader as PyGLoader

    data = _data('random')
    data.edge_index = data.edge_index[:, torch.argsort(data.edge_index[1] * data.num_nodes + data.edge_index[0])]
    data.n_id = torch.arange(data.num_nodes).flip(0)
    data.e_id = torch.arange(data.num_edges) + 100
    kw = dict(num_neighbors=[-1, -1], input_nodes=torch.arange(12), batch_size=4, is_sorted=True)
    for a, b in zip(NeighborLoader(data, device='cpu', **kw), PyGLoader(data, **kw)):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.e_id, b.e_id)


@pytest.mark.parametrize('device', DEVICES)
def test_numpy_attributes_are_gathered(device):
    """NumPy node and edge attributes are gathered as PyG gathers them, and
    arrive as tensors on the loader's device; other per-node containers are
    refused, naming the attribute."""
    data = _data('random')
    data.feat = data.x.numpy().astype(np.float64)
    data.w = data.edge_attr[:, 0].numpy().copy()
    torch.manual_seed(3)
    b = next(iter(NeighborLoader(data, [3, 2], batch_size=8, device=device)))
    assert isinstance(b.feat, torch.Tensor) and b.feat.dtype == torch.float64
    assert b.feat.device.type == torch.device(device).type
    assert torch.equal(b.feat.cpu(), torch.from_numpy(data.feat)[b.n_id.cpu()])
    assert torch.equal(b.w.cpu(), torch.from_numpy(data.w)[b.e_id.cpu()])
    data.names = [f'node {i}' for i in range(data.num_nodes)]
    with pytest.raises(TypeError, match="'names' is a list"):
        next(iter(NeighborLoader(data, [3, 2], batch_size=8, device=device)))


def test_numpy_attributes_equal_pygs_loader():
    _pyg_backend()
    from torch_geometric.loader import NeighborLoader as PyGLoader

    data = _data('random')
    data.feat = data.x.numpy().copy()
    kw = dict(num_neighbors=[5000], input_nodes=torch.arange(8), batch_size=8)
    a = next(iter(NeighborLoader(data, device='cpu', **kw)))
    b = next(iter(PyGLoader(data, **kw)))
    assert torch.equal(a.feat[torch.argsort(a.n_id)], b.feat[torch.argsort(b.n_id)])


# ---------------------------------------------------------------------------
# order


def test_unsorted_graph_equals_pygs_as_sets():
    """Without ``is_sorted``, covering fan-outs give PyG's batch as sets of
    nodes and edges (pyg-lib's sort by target does not keep the edge order
    within a target); with ``is_sorted=True`` node for node and edge for
    edge (test_sampler.test_batches_equal_pygs_sampler)."""
    _pyg_backend()
    from torch_geometric.loader import NeighborLoader as PyGLoader

    data = _data('hub')  # a target of 3,000 in-edges, in random edge order
    kw = dict(num_neighbors=[5000, 5000], input_nodes=torch.arange(0, 40, 3), batch_size=7)
    ours, ref = list(NeighborLoader(data, device='cpu', **kw)), list(PyGLoader(data, **kw))
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        assert torch.equal(a.n_id[: a.batch_size], b.n_id[: b.batch_size])
        assert set(a.n_id.tolist()) == set(b.n_id.tolist())
        assert _global_edges(a) == _global_edges(b)
        if getattr(b, 'num_sampled_nodes', None) is not None:  # (torch_sparse's path sets none)
            assert a.num_sampled_nodes == b.num_sampled_nodes and a.num_sampled_edges == b.num_sampled_edges


# ---------------------------------------------------------------------------
# errors


def test_loader_input_errors():
    ei, N = graph('random')
    with pytest.raises(TypeError, match='edge_index must hold integers, got torch.float32'):
        NeighborLoader(Data(edge_index=ei.float(), num_nodes=N), [3], device='cpu')
    with pytest.raises(TypeError, match='integers'):
        NeighborLoader(Data(edge_index=ei.bool(), num_nodes=N), [3], device='cpu')
    with pytest.raises(TypeError, match=r"num_neighbors must be a list of ints \(one per hop\), got '10'"):
        NeighborLoader(Data(edge_index=ei, num_nodes=N), '10', device='cpu')
    with pytest.raises(TypeError, match='num_neighbors'):
        NeighborLoader(Data(edge_index=ei, num_nodes=N), 10, device='cpu')
    bad = ei.clone()
    bad[1, 17] = N + 5
    with pytest.raises(IndexError, match=rf'\[0, {N}\); edge 17 \(target\) is {N + 5}'):
        NeighborLoader(Data(edge_index=bad, num_nodes=N), [3], device='cpu')
    loader = NeighborLoader(
        Data(edge_index=ei, num_nodes=N), [3], input_nodes=torch.tensor([4, 9, N + 2, -1]), batch_size=4, device='cpu'
    )
    with pytest.raises(IndexError, match=rf'seed nodes must lie in \[0, {N}\); position 2 is {N + 2}'):
        next(iter(loader))
    with pytest.raises(NotImplementedError, match='heterogeneous'):
        NeighborSampler(Data(edge_index=ei, num_nodes=N), {('a', 'to', 'b'): [3]}, device='cpu')


# ---------------------------------------------------------------------------
# the sampler on the CPU


def _pyg_lib():
    import torch_geometric.typing as t

    if not t.WITH_PYG_LIB:
        pytest.skip('pyg-lib (PyG\'s default sampler, optional) is not installed')


@pytest.mark.parametrize('subgraph_type', ['directional', 'bidirectional'])
def test_cpu_loader_samples_with_pyg_lib(subgraph_type):
    """With pyg-lib installed the CPU loader samples with it: under one seed,
    PyG's loader and pyg_tc's give the same batches (partial fan-outs,
    shuffled), pyg_tc's with its CSR and hops, so trim_to_layer and layers
    work as on the reference's batches."""
    _pyg_lib()
    from torch_geometric.loader import NeighborLoader as PyGLoader

    import pyg_tc.nn

    data = _data('hub')
    kw = dict(num_neighbors=[4, 3], batch_size=16, shuffle=True, subgraph_type=subgraph_type)
    loader = NeighborLoader(data, device='cpu', **kw)
    assert loader._sampler.sampler == 'pyg'
    torch.manual_seed(9)
    ours = list(loader)
    torch.manual_seed(9)
    ref = list(PyGLoader(data, **kw))
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.e_id, b.e_id)
        assert torch.equal(_edges(a), b.edge_index) and torch.equal(a.x, b.x)
        assert isinstance(a.edge_index, TCEdgeIndex) and a.edge_index.sort_order == 'col'
        assert getattr(a, 'num_sampled_nodes', None) == getattr(b, 'num_sampled_nodes', None)
    conv = pyg_tc.nn.SAGEConv(5, 3)
    torch.testing.assert_close(conv(ours[0].x, ours[0].edge_index), conv(ours[0].x, _edges(ours[0]).clone()))


def test_cpu_sampler_backends():
    import torch_geometric.typing as t

    data = _data('random')
    ref = NeighborSampler(data, [3], device='cpu', cpu_sampler='reference')
    assert ref.sampler == 'reference' and 'sampler=reference' in repr(ref)
    auto = NeighborSampler(data, [3], device='cpu')
    assert auto.sampler == ('pyg' if t.WITH_PYG_LIB else 'reference')
    if t.WITH_PYG_LIB or t.WITH_TORCH_SPARSE:
        s = NeighborSampler(data, [3], device='cpu', cpu_sampler='pyg')
        assert s.sampler == 'pyg'
        loader = NeighborLoader(
            data, [3], input_nodes=torch.tensor([0, data.num_nodes]), batch_size=2, device='cpu', cpu_sampler='pyg'
        )
        with pytest.raises(IndexError, match=rf'position 1 is {data.num_nodes}'):  # (PyG's own would crash)
            next(iter(loader))
    else:
        with pytest.raises(ImportError, match='pyg-lib or torch_sparse'):
            NeighborSampler(data, [3], device='cpu', cpu_sampler='pyg')
    with pytest.raises(ValueError, match='cpu_sampler must be one of'):
        NeighborSampler(data, [3], device='cpu', cpu_sampler='kernel')


@cuda_only
def test_gpu_sampler_takes_no_cpu_backend():
    with pytest.raises(ValueError, match="cpu_sampler='pyg' samples on the CPU"):
        NeighborSampler(_data('random'), [3], device='cuda', cpu_sampler='pyg')
