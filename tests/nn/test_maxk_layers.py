"""Layers with CBSR (MaxK) input against PyG's own layers fed the dense
MaxK output with the same weights (outputs and every gradient), MaxK and the
MaxKGNN model."""

import copy

import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_tc
from pyg_tc.formats import CBSR
from pyg_tc.nn import MaxK, MaxKGNN

from ..conftest import DEVICES, DTYPES, dtype_id, make_graph
from .test_layers import LAYERS, check_same, grads, make_pair, real  # noqa: F401

CBSR_LAYERS = [(k, kw) for k, kw in LAYERS]


@pytest.mark.parametrize(
    'kind,kw', CBSR_LAYERS, ids=[f'{k}-{"-".join(f"{a}={b}" for a, b in kw.items())}' for k, kw in CBSR_LAYERS]
)
@pytest.mark.parametrize('device', DEVICES)
def test_cbsr_input_matches_pyg(real, kind, kw, device):  # noqa: F811 (the fixture)
    data = real.to(device)
    hidden = 64
    torch.manual_seed(0)
    lin = torch.nn.Linear(data.num_features, hidden).to(device)
    ref, ours = make_pair(kind, hidden, 16, **kw)
    ref, ours = ref.to(device), ours.to(device)
    h = lin(data.x)
    h_ref = h.detach().requires_grad_(True)
    h_ours = h.detach().requires_grad_(True)
    x_ours = MaxK(8)(h_ours)
    assert isinstance(x_ours, CBSR)
    x_ref = pyg_tc.ops.maxk_reference(h_ref, 8)
    x_ref = torch.zeros_like(h_ref).scatter(1, x_ref[1].long(), x_ref[0])
    out_ref = ref(x_ref, data.edge_index)
    out = ours(x_ours, data.edge_index)
    pr = [h_ref] + list(ref.parameters())
    po = [h_ours] + list(ours.parameters())
    check_same(out_ref, out, grads(out_ref, pr), grads(out, po), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('device', DEVICES)
def test_cbsr_backend_pyg_densifies(device):
    ei, n = make_graph('random', device)
    conv = pyg_tc.nn.SAGEConv(32, 8, backend='pyg').to(device)
    x = torch.randn(n, 32, device=device)
    c = MaxK(4)(x)
    torch.testing.assert_close(conv(c, ei), conv(c.to_dense(), ei))


@pytest.mark.parametrize('conv', ['sage', 'gcn', 'gin'])
@pytest.mark.parametrize('nonlinear', ['maxk', 'relu'])
@pytest.mark.parametrize('device', DEVICES)
def test_maxkgnn_trains(conv, nonlinear, device):
    ei, n = make_graph('random', device)
    torch.manual_seed(0)
    x = torch.randn(n, 12, device=device)
    # learnable labels: a function of the aggregated neighbourhood
    y = pyg_tc.ops.spmm(x, ei, reduce='mean')[:, :3].argmax(1)
    model = MaxKGNN(conv, 12, 32, 3, num_layers=2, k=8, dropout=0.1, nonlinear=nonlinear).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.005)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x, ei), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert min(losses[-10:]) < 0.95 * losses[0], losses
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize('conv', ['sage', 'gcn', 'gin'])
@pytest.mark.parametrize('device', DEVICES)
def test_maxkgnn_matches_dense_equivalent(conv, device):
    """MaxKGNN(k) equals the same weights run with MaxK densified and PyG's
    own conv layers (eval mode: no dropout)."""
    ei, n = make_graph('hub', device)
    torch.manual_seed(0)
    x = torch.randn(n, 12, device=device)
    model = MaxKGNN(conv, 12, 32, 3, num_layers=2, k=4).to(device).eval()
    ref = copy.deepcopy(model)
    make = {
        'sage': lambda: pyg_nn.SAGEConv(32, 32),
        'gcn': lambda: pyg_nn.GCNConv(32, 32),
        'gin': lambda: pyg_nn.GINConv(torch.nn.Linear(32, 32)),
    }[conv]
    ref.convs = torch.nn.ModuleList(make().to(device) for _ in range(2))
    for a, b in zip(ref.convs, model.convs):
        a.load_state_dict(b.state_dict())

    class Dense(torch.nn.Module):
        def forward(self, h):
            return MaxK(4)(h).to_dense()

    ref.act = Dense()
    torch.testing.assert_close(model(x, ei), ref(x, ei), rtol=1e-4, atol=1e-4)


def test_maxk_and_model_validation():
    with pytest.raises(ValueError):
        MaxK(0)
    with pytest.raises(TypeError):
        MaxK(1.5)
    with pytest.raises(ValueError, match='conv must be'):
        MaxKGNN('gat', 4, 8, 2, 2, 4)
    with pytest.raises(ValueError, match='nonlinear'):
        MaxKGNN('sage', 4, 8, 2, 2, 4, nonlinear='tanh')
    with pytest.raises(ValueError, match='dropout'):
        MaxKGNN('sage', 4, 8, 2, 2, 4, dropout=1.5)
    assert 'k=4' in repr(MaxK(4))


@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('device', DEVICES)
def test_maxkgnn_half_precision(dtype, device):
    ei, n = make_graph('random', device)
    torch.manual_seed(0)
    model = MaxKGNN("sage", 12, 32, 3, num_layers=2, k=8).to(device).eval()
    x = torch.randn(n, 12, device=device)
    ref = model(x, ei)
    out = copy.deepcopy(model).to(dtype)(x.to(dtype), ei)
    assert out.dtype == dtype
    tol = {torch.float32: 1e-5, torch.float16: 5e-2, torch.bfloat16: 2e-1}[dtype]
    # MaxK may pick a different entry at a near-tie after rounding: compare rows mostly
    close = ((out.float() - ref).abs() <= tol * (1 + ref.abs())).all(1).float().mean()
    assert close > 0.9
