"""pyg_tc.nn.AGNNConv and GCNConv(backend='sgt') against PyG's layers with
the same weights: outputs and gradients, every backend, with and without
self loops, on CPU and CUDA."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn

from pyg_tc.nn import AGNNConv, GCNConv
from pyg_tc.transforms import SGTTransform
from torch_geometric.data import Data

from ..conftest import DEVICES, make_graph

BACKENDS = ['csr', 'sgt', 'auto']


def _close(a, b, tol):
    scale = b.detach().double().abs().max().clamp(min=1)
    assert (a.detach().double() - b.detach().double()).abs().max() <= tol * scale


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('loops', [True, False])
@pytest.mark.parametrize('kind', ['random', 'self_loops', 'isolated', 'duplicates', 'hub'])
def test_agnn_matches_pyg(kind, loops, backend, device):
    ei, n = make_graph(kind, device)
    if kind == 'hub':
        ei = SGTTransform()(Data(edge_index=ei, num_nodes=n)).edge_index  # attached SGT: 'auto' can pick it
    torch.manual_seed(0)
    ours = AGNNConv(add_self_loops=loops, backend=backend).to(device)
    ref = pyg_nn.AGNNConv(add_self_loops=loops).to(device)
    with torch.no_grad():
        ours.beta.fill_(0.7)
        ref.beta.fill_(0.7)
    x = torch.randn(n, 20, device=device, requires_grad=True)
    plain = ei.as_subclass(torch.Tensor)
    out, exp = ours(x, ei), ref(x, plain)
    _close(out, exp, 1e-5)
    g = torch.randn_like(exp)
    ga = torch.autograd.grad(out, (x, ours.beta), g)
    gb = torch.autograd.grad(exp, (x, ref.beta), g)
    for p, q in zip(ga, gb):
        _close(p, q, 1e-4)


def test_agnn_is_pyg_subclass_and_loads_state():
    ref = pyg_nn.AGNNConv()
    ours = AGNNConv()
    assert isinstance(ours, pyg_nn.AGNNConv)
    ours.load_state_dict(ref.state_dict())
    with pytest.raises(ValueError, match='backend'):
        AGNNConv(backend='tcgnn')


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['random', 'self_loops', 'duplicates', 'not_tile_multiple'])
def test_gcn_sgt_matches_pyg(kind, device):
    ei, n = make_graph(kind, device)
    torch.manual_seed(0)
    ref = pyg_nn.GCNConv(16, 7).to(device)
    ours = GCNConv(16, 7, backend='sgt', cached=True).to(device)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(n, 16, device=device, requires_grad=True)
    w = torch.rand(ei.size(1), device=device)
    # PyG keeps one weight per self loop; with repeated loops its CUDA index_put
    # picks any of them, so repeated loops share one weight here
    w[ei[0] == ei[1]] = 0.7
    for ew in (None, w):
        layer = ours if ew is None else GCNConv(16, 7, backend='sgt').to(device)
        layer.load_state_dict(ref.state_dict())
        out, exp = layer(x, ei, ew), ref(x, ei, ew)
        _close(out, exp, 1e-5)
        g = torch.randn_like(exp)
        _close(torch.autograd.grad(out, x, g)[0], torch.autograd.grad(exp, x, g)[0], 1e-5)
