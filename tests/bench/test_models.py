"""The benchmarks' model factory (pyg_tc.bench.models): PyG's model and
pyg_tc's are the same code (same parameters from the same seed, the same
outputs), and the layouts the suites and tutorials ask for do what they say."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_tc.nn
from pyg_tc.bench.models import KINDS, GraphNet, Net, conv

N, F_IN, C = 40, 12, 3


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _graph(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(N, F_IN, generator=g), torch.randint(0, N, (2, 160), generator=g)


def _dims(kind: str):
    return [F_IN, 8, 8, 8, C] if kind == 'agnn' else [F_IN, 8, C]


@pytest.mark.parametrize('kind', KINDS)
def test_pygs_and_pyg_tcs_models_are_the_same_model(kind):
    x, ei = _graph()
    kw = dict(heads=2, last_heads=1) if kind.startswith('gat') else {}
    models = []
    for lib in (pyg_nn, pyg_tc.nn):
        torch.manual_seed(0)
        models.append(Net(lib, kind, _dims(kind), dropout=0.5, **kw).eval())
    ref, ours = (m.state_dict() for m in models)
    assert list(ref) == list(ours) and all(torch.equal(ref[k], ours[k]) for k in ref)
    torch.testing.assert_close(models[1](x, ei), models[0](x, ei), atol=1e-5, rtol=1e-4)


def test_gat_heads_and_the_last_layers_heads():
    layers = Net(pyg_nn, 'gatv2', [F_IN, 8, 8, C], heads=4, last_heads=1, att_dropout=0.3).convs
    assert [(c.heads, c.out_channels, c.dropout) for c in layers] == [(4, 2, 0.3), (4, 2, 0.3), (1, C, 0.3)]
    with pytest.raises(ValueError, match='heads'):
        conv(pyg_nn, 'gat', F_IN, 6, heads=4)


def test_input_dropout_off_leaves_a_single_layer_deterministic():
    x, ei = _graph()
    torch.manual_seed(0)
    net = Net(pyg_nn, 'sage', [F_IN, C], dropout=0.9, input_dropout=False)
    assert torch.equal(net.train()(x, ei), net.eval()(x, ei))
    net.input_dropout = True
    assert not torch.equal(net.train()(x, ei), net.eval()(x, ei))


def test_gin_mlp_width_and_batch_norm():
    gin = conv(pyg_nn, 'gin', F_IN, C, mlp_width=16)
    assert [m.out_features for m in gin.nn if isinstance(m, torch.nn.Linear)] == [16, C]
    bn = conv(pyg_nn, 'gin-bn', F_IN, C)
    assert any(isinstance(m, torch.nn.BatchNorm1d) for m in bn.modules())


def test_agnn_layout():
    net = Net(pyg_nn, 'agnn', [F_IN, 8, 8, 8, C])
    assert [c.requires_grad for c in net.convs] == [False, True]  # PyG's examples/agnn.py
    with pytest.raises(ValueError, match='agnn'):
        Net(pyg_nn, 'agnn', [F_IN, 8, 4, C])


@pytest.mark.parametrize('kind', ['gin-bn', 'gcn', 'gat'])
def test_graph_net_gives_each_graph_its_own_row(kind):
    """A batch of two graphs gives the rows each graph gives alone; ``num_graphs`` pads with empty graphs."""
    (x1, e1), (x2, e2) = _graph(1), _graph(2)
    torch.manual_seed(0)
    net = GraphNet(pyg_tc.nn, kind, [F_IN, 8, 8], C, heads=2).eval()
    alone = [net(x, e, torch.zeros(N, dtype=torch.long)) for x, e in ((x1, e1), (x2, e2))]
    batch = torch.cat([torch.zeros(N, dtype=torch.long), torch.ones(N, dtype=torch.long)])
    both = net(torch.cat([x1, x2]), torch.cat([e1, e2 + N], 1), batch, 3)
    assert both.shape == (3, C)
    torch.testing.assert_close(both[:2], torch.cat(alone), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(both[2], net.head.bias)  # an empty graph: the head's bias


@pytest.mark.parametrize('kind', ['gcn', 'sage', 'gin', 'gat', 'agnn'])
def test_layer_kwargs_reach_every_layer(kind):
    dims = [F_IN, 8, 8, 8, C] if kind == 'agnn' else [F_IN, 8, C]
    net = Net(pyg_tc.nn, kind, dims, layer_kwargs={'backend': 'reference'})
    assert [c.backend for c in net.convs] == ['reference'] * len(net.convs)
    if kind == 'agnn':  # requires_grad given: every temperature learnt (TC-GNN's AGNN)
        learnt = Net(pyg_nn, 'agnn', dims, layer_kwargs={'requires_grad': True})
        assert [c.requires_grad for c in learnt.convs] == [True, True]
