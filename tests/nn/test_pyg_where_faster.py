"""``backend='auto'`` takes PyG's own path where it is faster: on the CPU for
every layer but SAGE (whose reference is faster there), on the GPU eagerly for
SAGE and cached GCN on graphs of at most ``PYG_BELOW[layer]`` edges, and for every layer on a graph of at most
``SMALL_GRAPH_EDGES`` edges without its CSR for its first
``FRESH_GRAPH_CALLS`` calls (a ``TCEdgeIndex``, which carries its CSR, runs
the kernels at once); never
with another backend, inside ``kernel_paths()`` (what CapturedStep uses) or
with ``PYG_WHERE_FASTER`` off (the suite's default). Results equal PyG's layer
with the same weights either way."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_tc
from pyg_tc.ops import dispatch

from ..conftest import DEVICES

MAKE = {
    'gcn': lambda lib, **kw: lib.GCNConv(8, 4, cached=True, **kw),
    'gcn_uncached': lambda lib, **kw: lib.GCNConv(8, 4, **kw),
    'sage': lambda lib, **kw: lib.SAGEConv(8, 4, **kw),
    'gin': lambda lib, **kw: lib.GINConv(torch.nn.Linear(8, 4), **kw),
    'gat': lambda lib, **kw: lib.GATConv(8, 4, heads=2, **kw),
    'gatv2': lambda lib, **kw: lib.GATv2Conv(8, 4, heads=2, **kw),
    'agnn': lambda lib, **kw: lib.AGNNConv(**kw),
}
#: (layer, device type) -> PyG's path on a small graph
PYG_PATH = {
    ('gcn', 'cpu'): True,
    ('gcn_uncached', 'cpu'): True,
    ('sage', 'cpu'): False,
    ('gin', 'cpu'): True,
    ('gat', 'cpu'): True,
    ('gatv2', 'cpu'): True,
    ('agnn', 'cpu'): True,
    ('gcn', 'cuda'): True,
    ('gcn_uncached', 'cuda'): False,
    ('sage', 'cuda'): True,
    ('gin', 'cuda'): False,
    ('gat', 'cuda'): False,
    ('gatv2', 'cuda'): False,
    ('agnn', 'cuda'): False,
}


@pytest.fixture
def where_faster(monkeypatch):
    monkeypatch.setattr(dispatch, 'PYG_WHERE_FASTER', True)


def _spied(layer):
    calls = []
    run = layer._run_pyg

    def spy(*args):
        calls.append(1)
        return run(*args)

    layer._run_pyg = spy
    return calls


def _pair(kind, device, **kw):
    torch.manual_seed(0)
    ref = MAKE[kind](pyg_nn).to(device)
    ours = MAKE[kind](pyg_tc.nn, **kw).to(device)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def _inputs(device, E=300, N=60):
    g = torch.Generator().manual_seed(1)
    return torch.randn(N, 8, generator=g).to(device), torch.randint(0, N, (2, E), generator=g).to(device)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', sorted(MAKE))
def test_auto_takes_pygs_path_where_faster(where_faster, kind, device):
    ref, ours = _pair(kind, device)
    calls = _spied(ours)
    x, ei = _inputs(device)
    n = dispatch.FRESH_GRAPH_CALLS + 2
    for _ in range(n):  # (GCN: the call that fills the cache and those that read it)
        torch.testing.assert_close(ours(x, ei), ref(x, ei), atol=1e-5, rtol=1e-5)
    always = PYG_PATH[(kind, torch.device(device).type)]
    # on the GPU a fresh small graph takes PyG's path for its first calls, then gets its CSR
    fresh = dispatch.FRESH_GRAPH_CALLS if torch.device(device).type == 'cuda' else 0
    assert len(calls) == (n if always else fresh)


@pytest.mark.cuda
@pytest.mark.parametrize('kind', sorted(MAKE))
def test_a_small_graph_with_its_csr_runs_the_kernels_at_once(where_faster, kind):
    from pyg_tc.formats.carrier import attach

    ref, ours = _pair(kind, 'cuda')
    calls = _spied(ours)
    x, ei = _inputs('cuda')
    order = ei[1].argsort(stable=True)
    ei = attach(ei[:, order], x.size(0), sort_order='col')  # what GraphLoader's batches carry
    torch.testing.assert_close(ours(x, ei), ref(x, ei.as_subclass(torch.Tensor)), atol=1e-5, rtol=1e-5)
    assert not calls


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', sorted(MAKE))
def test_never_inside_kernel_paths_nor_with_another_backend(where_faster, kind, device):
    x, ei = _inputs(device)
    _, ours = _pair(kind, device)
    calls = _spied(ours)
    with dispatch.kernel_paths():
        ours(x, ei)
    _, explicit = _pair(kind, device, backend='reference' if torch.device(device).type == 'cpu' else 'csr')
    calls_explicit = _spied(explicit)
    explicit(x, ei)
    assert not calls and not calls_explicit


@pytest.mark.parametrize('device', DEVICES)
def test_off_by_default_in_the_test_suite(device):
    assert not dispatch.PYG_WHERE_FASTER  # tests/conftest.py: PYG_TC_ALWAYS_KERNELS=1
    _, ours = _pair('gcn', device)
    calls = _spied(ours)
    ours(*_inputs(device))
    assert not calls


@pytest.mark.cuda
@pytest.mark.parametrize('kind', ['sage', 'gcn'])
def test_graphs_above_the_size_run_the_kernels(where_faster, monkeypatch, kind):
    name = {'sage': 'SAGEConv', 'gcn': 'GCNConv'}[kind]
    monkeypatch.setattr(dispatch, 'PYG_BELOW', {name: 2000})
    for E, pyg in ((2001, False), (2000, True)):
        _, ours = _pair(kind, 'cuda')
        calls = _spied(ours)
        x, ei = _inputs('cuda', E=E, N=500)
        with dispatch.kernel_paths():
            ours(x, ei)  # the graph gets its CSR: the fresh-graph rule is out of the way
        ours(x, ei)
        assert bool(calls) == pyg, E
