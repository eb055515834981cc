"""The self-loop graph of a graph of static shapes (pyg_tc.formats.loops.static_loop_graph): the arrays
of the host build (PyG's remove_self_loops + add_self_loops as a CSR, then CSRGraph.pad) on whole-batch
padded graphs, per-hop padded graphs and their trimmed graphs, built without reading the device."""

from __future__ import annotations


import pytest
import torch

from pyg_tc.formats.csr import CSRGraph, Layout
from pyg_tc.formats.loops import _append_loops, _edges_of, static_loop_graph
from pyg_tc.formats import padding

from ..conftest import DEVICES, forbid_device_reads


def _graph(N, E, loops, seed, device):
    """A sampled-like square graph in CSR order: random edges, ``loops`` self loops, repeated edges."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, N, (E,), generator=g)
    src = (dst + torch.randint(1, N, (E,), generator=g)) % N  # no loop but those placed next
    at = torch.randperm(E - 4, generator=g)[:loops] + 4
    src[at] = dst[at]
    src[:3], dst[:3] = src[3], dst[3]  # repeated
    if N > 5:
        dst[dst == 5] = 4  # an empty row
    order = torch.sort(dst, stable=True)[1]
    return CSRGraph.from_coo(src[order].to(device), dst[order].to(device), N, N)


def _host(g: CSRGraph):
    """The host build: loops removed and appended (with synchronisations), padded to P + N slots where
    there is room (else the unpadded arrays)."""
    src, dst = _edges_of(g)
    lg = _append_loops(src, dst, g.num_cols, g.num_rows, g.num_rows, g.chunk)
    cap = g.num_edges + g.num_rows
    return (padding.pad(lg.graph, g.num_rows, cap) if lg.graph.num_edges < cap else lg.graph), lg.ids


def _cases(device):
    g = _graph(40, 300, 7, 0, device)
    yield 'padded', padding.pad(g, 48, 360)
    yield 'padded, no loops', padding.pad(_graph(30, 200, 0, 1, device), 31, 210)
    plain = _graph(20, 90, 0, 2, device)  # no self loop: every slot of P + N is an edge, no padding left
    assert not bool((plain.col == plain.row()).any())
    static = Layout(static_shapes=True)
    ARRAYS = ('rowptr', 'col', 'perm', 't_rowptr', 't_col', 't_perm', 'sched', 't_sched', 'num_rows', 'num_cols')
    yield 'no padding slot left', CSRGraph(*(getattr(plain, f) for f in ARRAYS), plain.chunk, static)
    hops = _sampled(device)
    yield 'per hop', hops
    for k, C in ((hops.sampled_hops.num_edges[0], sum(hops.sampled_hops.num_nodes[:2])),):
        yield 'trimmed', padding.trimmed(hops, k, C, C)


def _sampled(device):
    """A per-hop padded batch graph of pyg_tc's loader (self loops and repeated edges included)."""
    from pyg_tc.loader import NeighborLoader
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(3)
    N = 200
    ei = torch.randint(0, N, (2, 1500), generator=g)
    ei[0, :40] = ei[1, :40]
    loader = NeighborLoader(Data(x=torch.randn(N, 4), edge_index=ei, num_nodes=N), [5, 3], batch_size=16, device=device)
    torch.manual_seed(0)
    b = next(iter(loader))
    graph = b.edge_index._pyg_tc_graph[1]
    ns, es = graph.sampled_hops.num_nodes, graph.sampled_hops.num_edges
    return padding.pad_hops(graph, [n + 2 for n in ns], [e + 5 for e in es])


@pytest.mark.parametrize('device', DEVICES)
def test_static_loop_graph_equals_the_host_build(device):
    for name, g in _cases(device):
        lg = static_loop_graph(g)
        want, ids = _host(g)
        real = want.real_size[1] if want.padded else want.num_edges
        got = lg.graph
        assert got.padded and got.static_shapes and got.num_edges == g.num_edges + g.num_rows, name
        assert int(got.rowptr[-1]) == real and int(got.t_rowptr[-1]) == real, name
        for a in ('rowptr', 't_rowptr'):
            assert torch.equal(getattr(got, a), getattr(want, a).to(torch.int32)), (name, a)
        for a in ('col', 't_col', 't_perm'):
            assert torch.equal(getattr(got, a)[:real], getattr(want, a)[:real].to(torch.int32)), (name, a)
        assert torch.equal(lg.ids[:real].long(), ids[:real].long()), name
        if want.padded:  # the padding as CSRGraph.pad lays it out, and the same schedules
            for a in ('col', 't_col', 't_perm'):
                assert torch.equal(getattr(got, a), getattr(want, a).to(torch.int32)), (name, a)
            for s, w in ((got.sched, want.sched), (got.t_sched, want.t_sched)):
                assert torch.equal(s.units, w.units) and torch.equal(s.heavy_ptr, w.heavy_ptr), name
        got.validate()


def test_static_loop_graph_reads_nothing_from_the_device(monkeypatch):
    """Only prefix sums and scatters of sizes known on the host: no ``.item()``, ``.tolist()``,
    ``int()`` / ``bool()`` of a tensor or ``nonzero`` (outside a kernel's CPU reference)."""
    cases = list(_cases('cpu'))
    forbid_device_reads(monkeypatch)
    for _, g in cases:
        static_loop_graph(g)
    with pytest.raises(AssertionError, match='read a value'):  # the guard holds
        int(cases[0][1].rowptr[-1])
