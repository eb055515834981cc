"""pyg_tc.nn.RGCNConv against PyG's RGCNConv with the same weights: outputs
and gradients for every decomposition, aggregation and input kind (features,
pairs, node indices, none), graph shapes with empty relations, isolated
nodes, self loops, repeated edges and a hub; float64 gradcheck; the typed
graph kept on the edge_index and rebuilt when the edges or types change;
clear errors."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn

from pyg_tc.nn import RGCNConv

from ..conftest import DEVICES, make_graph

R = 5


def _types(E: int, device, seed: int = 0, skip: int = 3) -> torch.Tensor:
    """Edge types in [0, R) with relation ``skip`` never used (an empty relation)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, R - 1, (E,), generator=g)
    return torch.where(t >= skip, t + 1, t).to(device)


def _pair(**kw):
    torch.manual_seed(0)
    ref = pyg_nn.RGCNConv(**kw)
    ours = RGCNConv(**kw)
    ours.load_state_dict(ref.state_dict())
    return ours, ref


def _close(a, b, tol):
    scale = b.detach().double().abs().max().clamp(min=1)
    assert (a.detach().double() - b.detach().double()).abs().max() <= tol * scale


def _check(ours, ref, inputs, ei, et, tol=1e-5):
    """Outputs, and gradients of the inputs that require them and of every parameter."""
    out, exp = ours(inputs, ei, et), ref(inputs, ei, et)
    assert out.shape == exp.shape and out.dtype == exp.dtype
    _close(out, exp, tol)
    leaves = [t for t in (inputs if isinstance(inputs, tuple) else (inputs,)) if t is not None and t.requires_grad]
    go = torch.randn_like(exp)
    ga = torch.autograd.grad(out, leaves + list(ours.parameters()), go)
    gb = torch.autograd.grad(exp, leaves + list(ref.parameters()), go)
    for p, q in zip(ga, gb):
        _close(p, q, 10 * tol)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['random', 'isolated', 'self_loops', 'duplicates', 'hub', 'empty'])
@pytest.mark.parametrize(
    'conf',
    [
        dict(),
        dict(num_bases=3),
        dict(num_blocks=2),
        dict(aggr='add'),
        dict(aggr='max'),
        dict(root_weight=False, bias=False),
    ],
    ids=['plain', 'bases', 'blocks', 'add', 'max', 'no-root-bias'],
)
def test_features_match_pyg(conf, kind, device):
    ei, n = make_graph(kind, device)
    et = _types(ei.size(1), device)
    ours, ref = _pair(in_channels=6, out_channels=4, num_relations=R, **conf)
    ours, ref = ours.to(device), ref.to(device)
    x = torch.randn(n, 6, device=device, requires_grad=True)
    _check(ours, ref, x, ei, et)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('conf', [dict(), dict(num_bases=2), dict(aggr='max')], ids=['plain', 'bases', 'max'])
def test_node_indices_and_no_features_match_pyg(conf, device):
    """``x=None`` (a trainable embedding per node, R-GCN's entities) and a
    node-index tensor."""
    ei, n = make_graph('random', device)
    et = _types(ei.size(1), device, seed=1)
    ours, ref = _pair(in_channels=n, out_channels=7, num_relations=R, **conf)
    ours, ref = ours.to(device), ref.to(device)
    _check(ours, ref, None, ei, et)
    _check(ours, ref, torch.arange(n, device=device), ei, et)


@pytest.mark.parametrize('device', DEVICES)
def test_bipartite_pair_matches_pyg(device):
    ei, (ns, nd) = make_graph('bipartite', device)
    et = _types(ei.size(1), device, seed=2)
    ours, ref = _pair(in_channels=(5, 3), out_channels=4, num_relations=R)
    ours, ref = ours.to(device), ref.to(device)
    xs = torch.randn(ns, 5, device=device, requires_grad=True)
    xd = torch.randn(nd, 3, device=device, requires_grad=True)
    _check(ours, ref, (xs, xd), ei, et)


def test_gradcheck_float64():
    ei, n = make_graph('duplicates')
    ei = ei[:, :60]
    et = _types(ei.size(1), 'cpu', seed=3)
    layer = RGCNConv(3, 2, R, num_bases=2).double()
    x = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
    w, c = (p.detach().clone().requires_grad_() for p in (layer.weight, layer.comp))
    call = torch.func.functional_call
    assert torch.autograd.gradcheck(lambda x, w, c: call(layer, {'weight': w, 'comp': c}, (x, ei, et)), (x, w, c))


def test_typed_graph_is_kept_and_rebuilt_when_stale():
    """The typed graph is built once per (edge_index, edge_type); editing
    either in place, or passing other tensors, gives the new graph's result."""
    ei, n = make_graph('random')
    et = _types(ei.size(1), 'cpu')
    ours, ref = _pair(in_channels=4, out_channels=3, num_relations=R)
    x = torch.randn(n, 4)
    _close(ours(x, ei, et), ref(x, ei, et), 1e-5)
    held = ei.__dict__['_pyg_tc_typed'][False][2]
    ours(x, ei, et)
    assert ei.__dict__['_pyg_tc_typed'][False][2] is held
    et[:10] = (et[:10] + 1) % R  # in place: stale
    _close(ours(x, ei, et), ref(x, ei, et), 1e-5)
    assert ei.__dict__['_pyg_tc_typed'][False][2] is not held
    ei[0, :5] = ei[1, :5]
    _close(ours(x, ei, et), ref(x, ei, et), 1e-5)
    other = et.clone()
    other[-3:] = 0
    _close(ours(x, ei, other), ref(x, ei, other), 1e-5)


def test_errors():
    ei, n = make_graph('random')
    et = _types(ei.size(1), 'cpu')
    layer = RGCNConv(4, 3, R)
    x = torch.randn(n, 4)
    with pytest.raises(IndexError, match=r'edge_type must lie in \[0, 5\)'):
        layer(x, ei, torch.full_like(et, R))
    with pytest.raises(TypeError, match='integer'):
        layer(x, ei, et.float())
    with pytest.raises(ValueError, match='entries for the'):
        layer(x, ei, et[:-1])
    bad = ei.clone()
    bad[1, 0] = n + 3
    with pytest.raises(IndexError, match='out of range'):
        layer(x, bad, et)
    with pytest.raises(ValueError, match='Block-diagonal'):
        RGCNConv(n, 4, R, num_blocks=2)(None, ei, et)


def test_pyg_path_for_what_the_kernels_do_not_compute():
    """A SparseTensor-free adjacency without edge types and other
    aggregations take PyG's path (same results as PyG's layer)."""
    ei, n = make_graph('random')
    et = _types(ei.size(1), 'cpu')
    ours, ref = _pair(in_channels=4, out_channels=3, num_relations=R, aggr='min')
    x = torch.randn(n, 4)
    assert ours._pyg_reason(ei) == "aggr='min'"
    _close(ours(x, ei, et), ref(x, ei, et), 1e-6)
    assert isinstance(ours, pyg_nn.RGCNConv) and 'Shapes:' in RGCNConv.__doc__
