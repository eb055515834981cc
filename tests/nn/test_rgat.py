"""pyg_tc.nn.RGATConv against PyG's RGATConv with the same weights: outputs
and gradients on the fused path (across and within relations, heads
concatenated and averaged, basis and block weights, edge features) over
graph shapes with an empty relation, isolated nodes, self loops, repeated
edges and a hub; float64 gradcheck; the relational graph kept on the
edge_index and rebuilt when stale; PyG's path for what it does not fuse;
attention dropout; clear errors; bf16 autocast on CUDA."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn

from pyg_tc.nn import RGATConv

from ..conftest import DEVICES, make_graph

R = 4
F = 6


def _types(E: int, device, seed: int = 0) -> torch.Tensor:
    """Edge types in [0, R) with relation 2 never used (an empty relation)."""
    t = torch.randint(0, R - 1, (E,), generator=torch.Generator().manual_seed(seed))
    return torch.where(t >= 2, t + 1, t).to(device)


def _pair(device='cpu', **kw):
    torch.manual_seed(0)
    ref = pyg_nn.RGATConv(F, 5, R, **kw)
    with torch.no_grad():  # (PyG zero-initialises the bias)
        for p in ref.parameters():
            p.add_(torch.rand_like(p) * 0.1)
    ours = RGATConv(F, 5, R, **kw)
    ours.load_state_dict(ref.state_dict())
    return ours.to(device), ref.to(device)


def _fused_only(layer):
    """Makes PyG's path an error on ``layer`` (the test then proves the fused path ran)."""

    def fail(*args, **kwargs):
        raise AssertionError("PyG's path ran")

    layer._pyg_forward = fail


def _check(ours, ref, x, *args, tol=1e-5):
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, exp = ours(xa, *args), ref(xb, *args)
    assert out.shape == exp.shape and out.dtype == exp.dtype
    scale = exp.detach().abs().max().clamp(min=1)
    torch.testing.assert_close(out, exp, atol=tol * scale, rtol=tol)
    go = torch.randn_like(exp)
    pa, pb = [xa, *ours.parameters()], [xb, *ref.parameters()]
    ga = torch.autograd.grad(out, pa, go, allow_unused=True)
    gb = torch.autograd.grad(exp, pb, go, allow_unused=True)
    for (name, _), a, b in zip([('x', None), *ours.named_parameters()], ga, gb):
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(a, b, atol=10 * tol * b.abs().max().clamp(min=1), rtol=10 * tol, msg=name)


CONFS = [
    dict(),
    dict(heads=3),
    dict(heads=2, concat=False),
    dict(attention_mechanism='within-relation', heads=2),
    dict(num_bases=2, heads=2),
    dict(num_blocks=2, heads=2, out_channels=None),
    dict(heads=2, bias=False, negative_slope=0.5),
]
CONF_IDS = ['plain', 'heads', 'mean-heads', 'within', 'bases', 'blocks', 'no-bias']


def _conf(conf: dict) -> dict:
    conf = dict(conf)
    conf.pop('out_channels', None)  # (blocks: 2 x 5 channels split into 2 blocks)
    return conf


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['random', 'isolated', 'self_loops', 'duplicates', 'hub', 'empty'])
@pytest.mark.parametrize('conf', CONFS, ids=CONF_IDS)
def test_matches_pyg(conf, kind, device):
    ei, n = make_graph(kind, device)
    et = _types(ei.size(1), device)
    ours, ref = _pair(device, **_conf(conf))
    _fused_only(ours)
    _check(ours, ref, torch.randn(n, F, device=device), ei, et)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('within', [False, True])
@pytest.mark.parametrize('edge_dim', [3, 1])
def test_edge_features_match_pyg(device, within, edge_dim):
    """Edge features (``edge_dim=1``: a 1-D ``edge_attr``, as PyG takes it)."""
    ei, n = make_graph('duplicates', device)
    et = _types(ei.size(1), device, seed=1)
    mech = 'within-relation' if within else 'across-relation'
    ours, ref = _pair(device, heads=2, edge_dim=edge_dim, attention_mechanism=mech)
    _fused_only(ours)
    ea = torch.randn(ei.size(1), edge_dim, device=device)
    _check(ours, ref, torch.randn(n, F, device=device), ei, et, ea.view(-1) if edge_dim == 1 else ea)


def test_gradcheck_float64():
    ei, n = make_graph('duplicates')
    ei = ei[:, :80]
    et = _types(ei.size(1), 'cpu', seed=3)
    for mech in ('across-relation', 'within-relation'):
        torch.manual_seed(0)
        layer = RGATConv(3, 2, R, heads=2, edge_dim=2, attention_mechanism=mech).double()
        names = [k for k, _ in layer.named_parameters()]
        ps = [p.detach().clone().requires_grad_() for p in layer.parameters()]
        x = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
        ea = torch.randn(ei.size(1), 2, dtype=torch.float64)

        def fn(x, *ps):
            return torch.func.functional_call(layer, dict(zip(names, ps)), (x, ei, et, ea))

        used = [i for i, k in enumerate(names) if k in ('weight', 'q', 'k', 'e', 'bias', 'lin_edge.weight')]
        assert torch.autograd.gradcheck(
            lambda x, *sub: fn(x, *[sub[used.index(i)] if i in used else p for i, p in enumerate(ps)]),
            (x, *[ps[i] for i in used]),
        )


@pytest.mark.parametrize(
    'conf',
    [dict(mod='additive'), dict(mod='f-scaled'), dict(attention_mode='multiplicative-self-attention', dim=2)],
    ids=['additive', 'f-scaled', 'multiplicative'],
)
def test_pyg_path_for_what_is_not_fused(conf):
    ei, n = make_graph('random')
    et = _types(ei.size(1), 'cpu')
    ours, ref = _pair(heads=2, **conf)
    _check(ours, ref, torch.randn(n, F), ei, et)


def test_attention_weights_run_pyg():
    """``return_attention_weights`` gives PyG's result and PyG's weights (its path)."""
    ei, n = make_graph('random')
    et = _types(ei.size(1), 'cpu')
    ours, ref = _pair(heads=2)
    x = torch.randn(n, F)
    out, (ei_a, alpha) = ours(x, ei, et, return_attention_weights=True)
    exp, (ei_b, beta) = ref(x, ei, et, return_attention_weights=True)
    torch.testing.assert_close(out, exp)
    assert torch.equal(ei_a, ei_b)
    torch.testing.assert_close(alpha, beta)


def test_relational_graph_is_kept_and_rebuilt_when_stale():
    ei, n = make_graph('random')
    et = _types(ei.size(1), 'cpu')
    ours, ref = _pair(heads=2)
    x = torch.randn(n, F)
    torch.testing.assert_close(ours(x, ei, et), ref(x, ei, et))
    held = ei.__dict__['_pyg_tc_typed'][('rgat', False)][2]
    ours(x, ei, et)
    assert ei.__dict__['_pyg_tc_typed'][('rgat', False)][2] is held
    et[:10] = (et[:10] + 1) % R  # in place: stale
    torch.testing.assert_close(ours(x, ei, et), ref(x, ei, et))
    assert ei.__dict__['_pyg_tc_typed'][('rgat', False)][2] is not held
    ei[0, :5] = ei[1, :5]
    torch.testing.assert_close(ours(x, ei, et), ref(x, ei, et))


@pytest.mark.parametrize('device', DEVICES)
def test_attention_dropout(device):
    """Training with dropout: reproducible under one seed, different from
    eval, every gradient finite; eval equals PyG."""
    ei, n = make_graph('random', device)
    et = _types(ei.size(1), device)
    ours, ref = _pair(device, heads=2, dropout=0.5)
    _fused_only(ours)
    x = torch.randn(n, F, device=device)
    torch.manual_seed(3)
    a = ours(x, ei, et)
    torch.manual_seed(3)
    b = ours(x, ei, et)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    ours.eval(), ref.eval()
    torch.testing.assert_close(ours(x, ei, et), ref(x, ei, et))
    assert not torch.allclose(a, ours(x, ei, et))
    ours.train()
    a.square().sum().backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in ours.parameters())


def test_errors():
    ei, n = make_graph('random')
    et = _types(ei.size(1), 'cpu')
    ours, _ = _pair()
    x = torch.randn(n, F)
    with pytest.raises(IndexError, match=r'edge_type must lie in \[0, 4\)'):
        ours(x, ei, torch.full_like(et, R))
    with pytest.raises(ValueError, match='entries for the'):
        ours(x, ei, et[:-1])
    with pytest.raises(IndexError, match='out of range'):
        ours(x[:10], ei, et)
    with pytest.raises(TypeError, match='integer'):
        ours(x, ei, et.float())


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_autocast_close_to_fp32(dtype):
    ei, n = make_graph('hub', 'cuda')
    et = _types(ei.size(1), 'cuda')
    ours, _ = _pair('cuda', heads=4)
    _fused_only(ours)
    x = torch.randn(n, F, device='cuda')
    want = ours(x, ei, et)
    with torch.autocast('cuda', dtype=dtype):
        got = ours(x, ei, et)
    assert (got.float() - want).abs().max() <= 3e-2 * want.abs().max()
    got.float().square().mean().backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in ours.parameters())
