"""The one dispatch point (pyg_tc.ops.dispatch): vocabulary, rules, fallbacks."""
import pytest
import torch

import pyg_tc
from pyg_tc.formats import CSRGraph
from pyg_tc.ops import dispatch

from ..conftest import DEVICES, features, make_graph


def _graph(device):
    ei, n = make_graph('hub', device)
    return CSRGraph.from_coo(ei[0], ei[1], n, n), n


@pytest.mark.parametrize('device', DEVICES)
def test_choice_per_call(device):
    g, n = _graph(device)
    x = features(n, 8, torch.float32, device)
    assert dispatch.choose('spmm', 'csr', g, x) == 'csr'
    assert dispatch.choose('spmm', 'reference', g, x) == 'reference'
    assert dispatch.choose('spmm', 'auto', g, x) == 'csr'  # no SGT attached: CSR
    assert dispatch.choose('spmm', 'sgt', g, x, 'mean') == 'sgt'
    with pytest.raises(ValueError, match='tensor-core SpMM supports'):
        dispatch.choose('spmm', 'sgt', g, x, 'max')
    assert dispatch.choose('spmm', 'sgt', g, x, 'max', strict=False) == 'csr'
    xk = pyg_tc.ops.maxk(x, 3)
    assert dispatch.choose('spmm', 'csr', g, xk) == 'cbsr'
    assert dispatch.choose('spmm', 'reference', g, xk) == 'cbsr_reference'
    with pytest.raises(ValueError, match='dense features'):
        dispatch.choose('spmm', 'sgt', g, xk)
    assert dispatch.choose('spmm', 'sgt', g, xk, strict=False) == 'cbsr'
    with pytest.raises(ValueError, match='backend must be one of'):
        dispatch.choose('spmm', 'cuda', g, x)
    if device == 'cuda' and pyg_tc._library.kernels_loaded():  # no fp64 kernel: the reference
        assert dispatch.choose('spmm', 'csr', g, x.double()) == 'reference'
        assert dispatch.choose('spmm', 'csr', g, pyg_tc.ops.maxk(x.double(), 3)) == 'cbsr_reference'


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('backend', ['csr', 'sgt', 'auto'])
def test_every_backend_matches_the_reference(backend, device):
    g, n = _graph(device)
    x = features(n, 13, torch.float32, device)
    w = torch.rand(g.num_edges, device=device)
    ref = dispatch.aggregate(g, x, w, 'mean', backend='reference')
    out = dispatch.aggregate(g, x, w, 'mean', backend=backend)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    a = features(n, 13, torch.float32, device, seed=3)
    torch.testing.assert_close(dispatch.edge_scores(g, a, x, backend),
                               dispatch.edge_scores(g, a, x, 'reference'), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('device', DEVICES)
def test_layers_pass_their_backend_down(device):
    ei, n = make_graph('random', device)
    x = features(n, 16, torch.float32, device)
    torch.manual_seed(0)
    ref = pyg_tc.nn.GCNConv(16, 8, backend='reference').to(device)
    conv = pyg_tc.nn.GCNConv(16, 8, backend='csr').to(device)
    conv.load_state_dict(ref.state_dict())
    torch.testing.assert_close(conv(x, ei), ref(x, ei), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match='backend must be one of'):
        pyg_tc.nn.SAGEConv(16, 8, backend='tcu')
