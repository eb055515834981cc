"""PyG's ``trim_to_layer`` on pyg_tc's sampled batches: each layer's narrowed
``edge_index`` resolves to a graph derived from the batch's
(:meth:`pyg_tc.formats.CSRGraph.trimmed`), with no format build and no
synchronisation, and gives PyG's results."""

from __future__ import annotations

import functools
import inspect

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.data import Data
from torch_geometric.utils import trim_to_layer

import pyg_tc.nn
from pyg_tc.formats.carrier import TCEdgeIndex, get_graph
from pyg_tc.formats.csr import CSRGraph, _without_fillers
from pyg_tc.loader import NeighborLoader
from pyg_tc.ops.csr import spmm_graph
from pyg_tc.formats import padding

from ..conftest import DEVICES, cuda_only

MODELS = {
    'sage': (pyg_nn.models.GraphSAGE, lambda c: pyg_tc.nn.SAGEConv(c.in_channels, c.out_channels)),
    'gcn': (pyg_nn.models.GCN, lambda c: pyg_tc.nn.GCNConv(c.in_channels, c.out_channels)),
    'gat': (pyg_nn.models.GAT, lambda c: pyg_tc.nn.GATConv(c.in_channels, c.out_channels)),
    'gatv2': (
        functools.partial(pyg_nn.models.GAT, v2=True),
        lambda c: pyg_tc.nn.GATv2Conv(c.in_channels, c.out_channels),
    ),
}


def batch(kind: str = 'random', fanout=(5, 4, 3), batch_size: int = 16, seed: int = 0, device='cpu'):
    """A batch of pyg_tc's NeighborLoader on a random graph (self loops and
    repeated edges included), or on one with a hub row and a hub column
    ('hub': heavy rows both ways)."""
    g = torch.Generator().manual_seed(seed)
    if kind == 'random':
        N = 300
        ei = torch.randint(0, N, (2, 3000), generator=g)
    else:
        N = 400
        ei = torch.randint(0, N, (2, 2000), generator=g)
        n = torch.arange(N)
        ei = torch.cat([ei, torch.stack([n, torch.zeros_like(n)]), torch.stack([torch.ones_like(n), n])], 1)
    data = Data(x=torch.randn(N, 8, generator=g), edge_index=ei, num_nodes=N).to(device)
    torch.manual_seed(seed)
    return next(iter(NeighborLoader(data, list(fanout), batch_size=batch_size, device=device)))


def models(kind: str, device='cpu'):
    """(PyG's model with pyg_tc's layers, the same with PyG's layers), same weights."""
    cls, make = MODELS[kind]
    torch.manual_seed(0)
    ref = cls(8, 16, num_layers=3, out_channels=5)
    ours = cls(8, 16, num_layers=3, out_channels=5)
    ours.convs = torch.nn.ModuleList(make(c) for c in ref.convs)
    ours.load_state_dict(ref.state_dict())
    return ours.to(device), ref.to(device)


def run(model, b, edge_index, trim: bool):
    """Seed outputs and parameter gradients of a loss over them."""
    model.zero_grad()
    kw = (
        dict(num_sampled_nodes_per_hop=b.num_sampled_nodes, num_sampled_edges_per_hop=b.num_sampled_edges)
        if trim
        else {}
    )
    out = model(b.x, edge_index, **kw)[: b.batch_size]
    out.square().sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


def close(a, b):
    # fp32 sums in another order on the GPU (heavy rows split and merged in a
    # fixed order; PyG scatters): a few ulps over a hub row's 400 terms
    tol = dict(rtol=1e-5, atol=1e-4) if a[0].is_cuda else {}
    torch.testing.assert_close(a[0], b[0], **tol)
    for x, y in zip(a[1], b[1]):
        torch.testing.assert_close(x, y, **tol)


def test_trim_builds_formats_without_this_change():
    """The check this feature answers: a layer that narrows the batch's
    ``edge_index`` gets a tensor with no format attached; it is now a
    ``TCEdgeIndex`` slice whose graph is derived, not built."""
    b = batch()
    _, ei, _ = trim_to_layer(1, b.num_sampled_nodes, b.num_sampled_edges, b.x, b.edge_index)
    assert isinstance(ei, TCEdgeIndex) and not hasattr(ei, '_pyg_tc_graph')
    g = get_graph(ei)[0]
    assert g is b.edge_index._pyg_tc_graph[1].cache.get(('trimmed', ei.size(1), ei.sparse_size(0), ei.sparse_size(1)))


def count_builds(monkeypatch) -> list:
    """Records the callers' stack of every ``CSRGraph.from_coo`` (a format
    built from edges) until ``monkeypatch.undo()``."""
    built = []
    real = CSRGraph.from_coo.__func__

    def counted(cls, *a, **k):
        built.append([f.function for f in inspect.stack()[1:]])
        return real(cls, *a, **k)

    monkeypatch.setattr(CSRGraph, 'from_coo', classmethod(counted))
    return built


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['sage', 'gcn', 'gat'])
@pytest.mark.parametrize('data', ['random', 'hub'])
def test_trim_matches_pyg_and_untrimmed(kind, data, device, monkeypatch):
    """Seed outputs and gradients with trim_to_layer: as PyG's layers with
    trim_to_layer, and (SAGE, GAT: seeds see the same neighbourhoods) as
    without trimming; GCN's normalisation sees the trimmed degrees, in PyG
    too. No graph is built for the adjacency (GAT builds the self-loop
    graph of each layer's graph, as for any graph)."""
    b = batch(data, fanout=(5, 4, 3) if data == 'random' else (-1, 3, 2), device=device)
    ours, ref = models(kind, device)
    full = run(ours, b, b.edge_index, trim=False)
    built = count_builds(monkeypatch)
    trimmed = run(ours, b, b.edge_index, trim=True)
    assert not [s for s in built if 'get_graph' in s], 'a format was built for a trimmed edge_index'
    if kind != 'gat':
        assert not built
    monkeypatch.undo()
    close(trimmed, run(ref, b, b.edge_index.as_tensor().clone(), trim=True))
    if kind != 'gcn':
        close(trimmed, full)
    g = b.edge_index._pyg_tc_graph[1]
    E, N = g.num_edges, g.num_rows
    layers = {(E - sum(b.num_sampled_edges[-i:]), N - sum(b.num_sampled_nodes[-i:])) for i in (1, 2)} - {(E, N)}
    assert layers  # one derived graph per trimmed layer (layers 2 and 3), shared by backward
    assert {k[1:3] for k in g.cache.keys() if k[0] == 'trimmed'} == layers


def hop_boundaries(b):
    ends, nodes = [0], [b.num_sampled_nodes[0]]
    for e, n in zip(b.num_sampled_edges, b.num_sampled_nodes[1:]):
        ends.append(ends[-1] + e)
        nodes.append(nodes[-1] + n)
    return ends, nodes


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('data', ['random', 'hub'])
def test_trimmed_graph_equals_a_build(data, device):
    """At every hop boundary, the derived graph is the graph built from the
    narrowed edges: both directions, schedules (less a padded-size
    schedule's fillers where heavy rows may occur), SpMM and its gradient."""
    b = batch(data, fanout=(5, 4, 3) if data == 'random' else (-1, -1), device=device)
    g = b.edge_index._pyg_tc_graph[1]
    ends, nodes = hop_boundaries(b)
    heavy = False
    for j, k in enumerate(ends):
        for R in {nodes[j], nodes[min(j + 1, len(nodes) - 1)]}:
            t = padding.trimmed(g, k, R, R)
            ei = b.edge_index.as_tensor()[:, :k]
            ref = CSRGraph.from_coo(ei[0], ei[1], R, R)
            t.validate()
            for name in ('rowptr', 'col', 't_rowptr', 't_col', 't_perm'):
                assert torch.equal(getattr(t, name), getattr(ref, name)), name
            assert t.perm is None and ref.perm is None and t.chunk == ref.chunk
            for s, r in ((t.sched, ref.sched), (t.t_sched, ref.t_sched)):
                real = _without_fillers(s) if t.layout.fillers else s
                assert torch.equal(real.units, r.units) and torch.equal(real.heavy_ptr, r.heavy_ptr)
                assert torch.equal(real.heavy_rows, r.heavy_rows) and real.num_slots == r.num_slots
                heavy |= r.num_slots > 0
            x = torch.randn(R, 3, device=device, requires_grad=True)
            out = spmm_graph(t, x)
            out.sum().backward()
            gx, x.grad = x.grad, None
            torch.testing.assert_close(out, spmm_graph(ref, x))
            spmm_graph(ref, x).sum().backward()
            torch.testing.assert_close(gx, x.grad)
            assert padding.trimmed(g, k, R, R) is t  # memoised
    assert heavy == (data == 'hub')


def test_not_a_hop_boundary_or_not_a_prefix_is_built():
    """A slice that is not a hop boundary, not a prefix, or on too few nodes
    is built from its edges (correct, no derivation)."""
    b = batch()
    g = b.edge_index._pyg_tc_graph[1]
    ends, nodes = hop_boundaries(b)
    N = b.num_nodes
    assert padding.trimmed(g, ends[1] + 1, N, N) is None
    assert padding.trimmed(g, ends[2], nodes[0], nodes[2]) is None  # hop-2 edges point to hop-1 nodes
    assert padding.trimmed(g, ends[2], nodes[2], nodes[1]) is None  # ... from hop-2 nodes
    assert padding.trimmed(g, g.num_edges, N, N) is g
    mid = b.edge_index[:, : ends[1] + 1]
    assert isinstance(mid, TCEdgeIndex)  # a prefix, but no hop boundary: built
    r = get_graph(mid, size=(N, N))[0]
    assert torch.equal(r.rowptr, CSRGraph.from_coo(mid.as_tensor()[0], mid.as_tensor()[1], N, N).rowptr)
    assert not any(k[0] == 'trimmed' and k[1] == ends[1] + 1 for k in g.cache.keys())
    tail = b.edge_index[:, 1 : ends[2] + 1]  # not a prefix
    assert not isinstance(tail, TCEdgeIndex)
    # an in-place write to the batch after slicing: the slice no longer derives from it
    cut = b.edge_index.narrow(1, 0, ends[2])
    b.edge_index[0, 0] = nodes[1] - 1
    assert get_graph(cut, size=(nodes[2], nodes[2]))[0] is not g.cache.get(('trimmed', ends[2], nodes[2], nodes[2]))
    assert int(get_graph(cut, size=(nodes[2], nodes[2]))[0].col[0]) == nodes[1] - 1


def test_derivation_reads_nothing_from_the_device(monkeypatch):
    """No host synchronisation in the derivation: no ``.item()``,
    ``.tolist()``, ``int()`` / ``bool()`` / ``float()`` of a tensor, no
    ``nonzero`` (the calls that synchronise with a GPU), for light and heavy
    schedules. (What this cannot see: an op that synchronises inside, e.g.
    ``repeat_interleave`` without ``output_size``; the code passes sizes.)"""
    graphs = []
    for data, fanout in (('random', (5, 4, 3)), ('hub', (-1, -1))):
        b = batch(data, fanout=fanout)
        b.edge_index._pyg_tc_graph[1].complete()  # (on the CPU the batch's own build waits for first use)
        graphs.append((b, hop_boundaries(b)))

    def boom(*a, **k):
        raise AssertionError('the derivation read a value from the device')

    for name in ('item', 'tolist', '__int__', '__bool__', '__float__', '__index__', 'nonzero'):
        monkeypatch.setattr(torch.Tensor, name, boom)
    monkeypatch.setattr(torch, 'nonzero', boom)
    fillers = False
    for b, (ends, nodes) in graphs:
        for j in range(1, len(ends) - 1):
            ei = b.edge_index.narrow(1, 0, ends[j])
            t = get_graph(ei, size=(nodes[j], nodes[j]))[0]
            fillers |= t.layout.fillers
    monkeypatch.undo()
    assert fillers  # the heavy (padded-size) schedules were derived too


def test_hop_counts_must_describe_the_batch():
    """``from_sampled``'s hop counts are checked against the batch's sizes;
    ``to()`` keeps them (the derivation works on any device)."""
    b = batch()
    g = b.edge_index._pyg_tc_graph[1]
    args = (g.rowptr, g.col, g.row(), g.num_rows)
    with pytest.raises(ValueError, match='hop node counts'):
        CSRGraph.from_sampled(*args, num_sampled_nodes=b.num_sampled_nodes[:-1], num_sampled_edges=b.num_sampled_edges)
    with pytest.raises(ValueError, match='hop node counts'):
        CSRGraph.from_sampled(
            *args, num_sampled_nodes=b.num_sampled_nodes, num_sampled_edges=[e + 1 for e in b.num_sampled_edges]
        )
    assert (
        g.to('cpu').sampled_hops == g.sampled_hops == (tuple(b.num_sampled_nodes), tuple(b.num_sampled_edges), 5, None)
    )
    with pytest.raises(
        ValueError, match='source counts'
    ):  # a bipartite graph's source counts: one per hop, its columns
        CSRGraph.from_sampled(
            *args, num_sampled_nodes=b.num_sampled_nodes, num_sampled_edges=b.num_sampled_edges, num_sampled_src=[1, 2]
        )
    assert padding.trimmed(CSRGraph.from_sampled(*args), b.num_sampled_edges[0], g.num_rows, g.num_rows) is None


@cuda_only
def test_derivation_does_not_synchronise_on_the_gpu():
    """On a GPU, deriving every trimmed graph of a batch (light and heavy
    schedules) runs under ``torch.cuda.set_sync_debug_mode('error')``."""
    for data, fanout in (('random', (5, 4, 3)), ('hub', (-1, -1))):
        b = batch(data, fanout=fanout, device='cuda')
        ends, nodes = hop_boundaries(b)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode('error')
        try:
            for j in range(1, len(ends) - 1):
                t = get_graph(b.edge_index.narrow(1, 0, ends[j]), size=(nodes[j], nodes[j]))[0]
                assert t is b.edge_index._pyg_tc_graph[1].cache.get(('trimmed', ends[j], nodes[j], nodes[j]))
        finally:
            torch.cuda.set_sync_debug_mode(0)
