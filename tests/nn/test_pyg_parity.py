"""Drop-in details, each checked against PyG's own layer with the same
weights: hooks on the submodules PyG's forward calls (``aggr_module``, SAGE's
``lin_l``, GAT's ``lin_edge``) fire as in PyG, so
``torch_geometric.nn.summary`` reports them; output dtypes under
``torch.autocast`` (and of half models) are PyG's; GINConv promotes half and
integer features as PyG does; GAT's edge-feature errors name the user's
shapes."""

import copy

import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_tc
from pyg_tc.formats import get_graph

from ..conftest import dtype_id

KINDS = ['gcn', 'sage', 'gin', 'agnn', 'gat', 'gatv2']
N, E, CIN, COUT = 40, 160, 16, 6
HALF = [torch.bfloat16, torch.float16]


def build(lib, kind, cin=CIN, cout=COUT, **kw):
    if kind == 'gcn':
        return lib.GCNConv(cin, cout, **kw)
    if kind == 'sage':
        return lib.SAGEConv(cin, cout, **kw)
    if kind == 'gin':
        torch.manual_seed(5)
        return lib.GINConv(
            torch.nn.Sequential(torch.nn.Linear(cin, cout), torch.nn.ReLU(), torch.nn.Linear(cout, cout)), **kw
        )
    if kind == 'agnn':
        return lib.AGNNConv(**kw)
    cls = lib.GATConv if kind == 'gat' else lib.GATv2Conv
    return cls(cin, cout, **{'heads': 2, **kw})


def pair(kind, **kw):
    """(PyG layer, pyg_tc layer) with the same weights; biases, eps and
    attention parameters made non-zero (PyG zero-initialises some)."""
    torch.manual_seed(0)
    ref = build(pyg_nn, kind, **kw)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.rand_like(p) * 0.3)
    ours = build(pyg_tc.nn, kind, **kw)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def graph(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, N, (2, E), generator=g), torch.randn(N, CIN, generator=g)


def kernel_path_only(layer):
    """Make PyG's message passing raise on ``layer`` (the kernel path never calls it)."""

    def boom(*args, **kwargs):
        raise AssertionError('PyG message passing used')

    layer.propagate = boom


# ---------------------------------------------------------------------------
# hooks on submodules


@pytest.mark.parametrize('kind', KINDS)
def test_aggr_module_hooks_fire_as_in_pyg(kind):
    """Forward, forward pre- and full backward hooks on ``aggr_module`` see
    what PyG's see (the call takes PyG's path); removed, the kernels run again."""
    ei, x = graph()
    ref, ours = pair(kind)
    seen = {}
    outs = []
    for name, layer in (('ref', ref), ('ours', ours)):
        rec = seen[name] = {'pre': [], 'fwd': [], 'bwd': 0}
        handles = [
            layer.aggr_module.register_forward_pre_hook(
                lambda m, args, rec=rec: rec['pre'].append(tuple(args[0].shape))
            ),
            layer.aggr_module.register_forward_hook(
                lambda m, args, out, rec=rec: rec['fwd'].append(out.detach().clone())
            ),
            layer.aggr_module.register_full_backward_hook(
                lambda m, gin, gout, rec=rec: rec.__setitem__('bwd', rec['bwd'] + 1)
            ),
        ]
        xi = x.clone().requires_grad_()
        out = layer(xi, ei)
        out.square().sum().backward()
        outs.append((out, xi.grad))
        for h in handles:
            h.remove()
    assert seen['ref']['pre'] and seen['ours']['pre'] == seen['ref']['pre']
    assert len(seen['ours']['fwd']) == len(seen['ref']['fwd']) >= 1
    for a, b in zip(seen['ours']['fwd'], seen['ref']['fwd']):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert seen['ours']['bwd'] == seen['ref']['bwd'] >= 1
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[1][1], outs[0][1], rtol=1e-5, atol=1e-5)
    kernel_path_only(ours)  # hooks removed: the kernels again
    torch.testing.assert_close(ours(x, ei), outs[0][0].detach(), rtol=1e-5, atol=1e-5)


class Model(torch.nn.Module):
    def __init__(self, lib, kind):
        super().__init__()
        self.conv1 = build(lib, kind)
        self.conv2 = build(lib, kind, cin=COUT * (2 if kind.startswith('gat') else 1) if kind != 'agnn' else CIN)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('leaf_module', ['MessagePassing', None])
def test_summary_same_as_pyg(kind, leaf_module):
    """``torch_geometric.nn.summary`` prints the same table for PyG's and
    pyg_tc's layers, also when it looks inside them (``leaf_module=None``:
    hooks on ``aggr_module``, ``lin``, ``nn``, ``lin_edge``...)."""
    pytest.importorskip('tabulate')
    ei, x = graph()
    torch.manual_seed(0)
    ref = Model(pyg_nn, kind)
    ours = Model(pyg_tc.nn, kind)
    ours.load_state_dict(ref.state_dict())
    kw = {} if leaf_module == 'MessagePassing' else {'leaf_module': None}
    table = pyg_nn.summary(ours, x, ei, **kw)
    assert table == pyg_nn.summary(ref, x, ei, **kw)
    if leaf_module is None:
        assert 'Aggregation' in table and '[' in table.split('Aggregation')[1].split('\n')[0]


def test_sage_lin_l_hook_sees_pyg_input():
    """SAGE applies ``lin_l`` before the aggregation when that is cheaper; a
    hook on ``lin_l`` turns that off, so the hook sees PyG's input."""
    ei, x = graph()
    ref, ours = pair('sage')
    shapes = {}
    for name, layer in (('ref', ref), ('ours', ours)):
        layer.lin_l.register_forward_hook(
            lambda m, args, out, name=name: shapes.setdefault(name, []).append(tuple(args[0].shape))
        )
    kernel_path_only(ours)  # (a hook on lin_l does not need PyG's path)
    torch.testing.assert_close(ours(x, ei), ref(x, ei), rtol=1e-5, atol=1e-5)
    assert shapes['ours'] == shapes['ref'] == [(N, CIN)]


@pytest.mark.parametrize('kind', ['gat', 'gatv2'])
def test_gat_lin_edge_hook_fires_as_in_pyg(kind):
    ei, x = graph()
    ea = torch.randn(E, 3)
    ref, ours = pair(kind, edge_dim=3)
    seen = {}
    for name, layer in (('ref', ref), ('ours', ours)):
        layer.lin_edge.register_forward_hook(
            lambda m, args, out, name=name: seen.setdefault(name, []).append(args[0].clone())
        )
    torch.testing.assert_close(ours(x, ei, ea), ref(x, ei, ea), rtol=1e-5, atol=1e-5)
    assert len(seen['ours']) == len(seen['ref']) == 1
    torch.testing.assert_close(seen['ours'][0], seen['ref'][0])


@pytest.mark.parametrize('kind', KINDS)
def test_global_module_hooks_keep_the_kernel_path(kind):
    """Decision: global module hooks (whole-model tools such as
    ``FlopCounterMode``'s module tracker) do not send a layer to PyG's path;
    they fire for the layer itself as in PyG."""
    ei, x = graph()
    ref, ours = pair(kind)
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: seen.append(type(m).__name__))
    try:
        kernel_path_only(ours)
        out = ours(x, ei)
    finally:
        handle.remove()
    torch.testing.assert_close(out, ref(x, ei), rtol=1e-5, atol=1e-5)
    assert type(ours).__name__ in seen


# ---------------------------------------------------------------------------
# dtypes under autocast and of half models

CONFIGS = [
    ('gcn', {}, {}),
    ('gcn', {'bias': False}, {}),
    ('gcn', {'normalize': False, 'bias': False}, {}),
    ('gcn', {'normalize': False, 'bias': False}, {'edge_weight'}),
    ('gcn', {}, {'edge_weight'}),
    ('sage', {}, {}),
    ('sage', {'normalize': True, 'aggr': 'sum'}, {}),
    ('sage', {'project': True}, {}),
    ('gin', {}, {}),
    ('gin', {'train_eps': True}, {}),
    ('agnn', {}, {}),
    ('agnn', {'requires_grad': False}, {}),
    ('gat', {}, {}),
    ('gat', {'bias': False}, {}),
    ('gat', {'concat': False}, {}),
    ('gat', {'residual': True}, {}),
    ('gat', {'edge_dim': 3}, {'edge_attr'}),
    ('gatv2', {}, {}),
    ('gatv2', {'bias': False, 'concat': False}, {}),
    ('gatv2', {'edge_dim': 3, 'residual': True}, {'edge_attr'}),
]


def _args(kind, x, ei, extra, dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    kw = {}
    if 'edge_weight' in extra:
        kw['edge_weight'] = torch.rand(E, generator=g) + 0.5  # fp32, also for half models
    if 'edge_attr' in extra:
        kw['edge_attr'] = torch.randn(E, 3, generator=g).to(dtype)
    return (x, ei), kw


def _run(layer, args, kw, ctx):
    """Output, and gradients of ``x`` and the parameters."""
    x = args[0].clone().requires_grad_()
    with ctx():
        out = layer(x, *args[1:], **kw)
    out.float().square().sum().backward()
    grads = [x.grad] + [p.grad for p in layer.parameters()]
    layer.zero_grad(set_to_none=True)
    return out, grads


def _err(out, grads, out_t, grads_t):
    """Largest error of an output and its gradients against ``out_t`` /
    ``grads_t``, relative to each one's largest magnitude (at least 1)."""
    pairs = [(out, out_t)] + [(a, b) for a, b in zip(grads, grads_t) if b is not None]
    return max(
        float((a.detach().float() - b.detach().float()).abs().max() / b.detach().float().abs().max().clamp(min=1))
        for a, b in pairs
    )


def _check(ref, ours, args, kw, ctx, tol, truth=None):
    """Same output and gradient dtypes as PyG's layer; values and gradients
    within ``tol`` of PyG's. With ``truth`` = (fp32 layer, args, kwargs) (a
    half model, whose PyG is no more exact than pyg_tc): within ``tol`` of
    that fp32 computation, or at most 1.5x PyG's own error."""
    out_r, grads_r = _run(ref, args, kw, ctx)
    out_o, grads_o = _run(ours, args, kw, ctx)
    assert out_o.dtype == out_r.dtype
    for a, b in zip(grads_o, grads_r):
        assert (a is None) == (b is None)
        assert a is None or a.dtype == b.dtype
    if truth is None:
        assert _err(out_o, grads_o, out_r, grads_r) <= tol
    else:
        out_t, grads_t = _run(*truth, torch.enable_grad)
        err = _err(out_o, grads_o, out_t, grads_t)
        assert err <= max(tol, 1.5 * _err(out_r, grads_r, out_t, grads_t)), err
    return out_o.dtype


CONFIG_IDS = [
    f'{k}-{"-".join(f"{a}={b}" for a, b in kw.items()) or "default"}{"-" + "-".join(sorted(extra)) if extra else ""}'
    for k, kw, extra in CONFIGS
]


@pytest.mark.parametrize('dtype', HALF, ids=dtype_id)
@pytest.mark.parametrize('kind,kw,extra', CONFIGS, ids=CONFIG_IDS)
def test_cpu_autocast_dtype_as_pyg(kind, kw, extra, dtype):
    """Under ``torch.autocast('cpu', dtype)`` every layer returns PyG's dtype
    (GCN, GAT, GATv2: float32, from the fp32 edge weights / attention
    parameters / bias; SAGE, GIN: half, from their Linears; AGNN: float32),
    with PyG's values and gradients to half rounding."""
    ei, x = graph()
    ref, ours = pair(kind, **kw)
    args, kwargs = _args(kind, x, ei, extra)
    got = _check(ref, ours, args, kwargs, lambda: torch.autocast('cpu', dtype), 5e-2)
    expected = (
        dtype
        if kind in ('sage', 'gin')
        or (kind == 'gcn' and not kw.get('bias', True) and not kw.get('normalize', True) and not extra)
        else torch.float32
    )
    assert got == expected  # (the rule, so that a change in PyG shows up here)


@pytest.mark.parametrize('autocast', [False, True], ids=['plain', 'autocast'])
@pytest.mark.parametrize('dtype', HALF, ids=dtype_id)
@pytest.mark.parametrize('kind,kw,extra', CONFIGS, ids=CONFIG_IDS)
def test_half_model_dtype_as_pyg(kind, kw, extra, dtype, autocast):
    """``model.to(half)`` with half features, with and without CPU autocast:
    PyG's dtypes (half; float32 where fp32 edge weights promote GCN's
    messages), values and gradients within half rounding of the fp32 layer."""
    ei, x = graph()
    ref, ours = pair(kind, **kw)
    truth = (copy.deepcopy(ref),) + _args(kind, x, ei, extra)
    ref, ours = ref.to(dtype), ours.to(dtype)
    args, kwargs = _args(kind, x.to(dtype), ei, extra, dtype)
    ctx = (lambda: torch.autocast('cpu', dtype)) if autocast else torch.enable_grad
    got = _check(ref, ours, args, kwargs, ctx, 2e-2 if dtype == torch.bfloat16 else 4e-3, truth)
    assert got == (torch.float32 if 'edge_weight' in extra else dtype)


@pytest.mark.parametrize('dtype', HALF, ids=dtype_id)
@pytest.mark.parametrize('kind', ['gat', 'gatv2'])
def test_attention_weights_dtype_as_pyg(kind, dtype):
    """``return_attention_weights`` under autocast: PyG's weights are fp32
    (computed with the fp32 attention parameters); so are pyg_tc's."""
    ei, x = graph()
    ref, ours = pair(kind)
    with torch.autocast('cpu', dtype):
        out_r, (ei_r, alpha_r) = ref(x, ei, return_attention_weights=True)
        out_o, (ei_o, alpha_o) = ours(x, ei, return_attention_weights=True)
    assert (out_o.dtype, alpha_o.dtype) == (out_r.dtype, alpha_r.dtype) == (torch.float32,) * 2
    assert torch.equal(ei_o, ei_r)
    torch.testing.assert_close(alpha_o, alpha_r, rtol=5e-2, atol=2e-2)


@pytest.mark.parametrize('dtype', HALF, ids=dtype_id)
def test_agnn_half_features_fp32_beta(dtype):
    """AGNN has no Linear: half features with the fp32 ``beta`` give PyG's
    fp32 result (its attention weights are fp32)."""
    ei, x = graph()
    ref, ours = pair('agnn')
    out_r, out_o = ref(x.to(dtype), ei), ours(x.to(dtype), ei)
    assert out_o.dtype == out_r.dtype == torch.float32
    torch.testing.assert_close(out_o, out_r, rtol=2e-2, atol=2e-2)


def test_gcn_autocast_adds_the_bias_in_fp32():
    """The half aggregation is kept and PyG's fp32 bias is added to it in
    fp32: the result is the half aggregation (rounded once) plus the exact
    bias, not a half sum."""
    ei, x = graph()
    _, ours = pair('gcn')
    with torch.autocast('cpu', torch.bfloat16):
        out = ours(x, ei)
        no_bias = copy.deepcopy(ours)
        no_bias.bias = None
        agg = no_bias(x, ei)
    assert agg.dtype == torch.float32  # (PyG's: fp32 edge weights)
    assert torch.equal(agg, agg.bfloat16().float())  # aggregated in bf16
    assert torch.equal(out, agg + ours.bias)


@pytest.mark.parametrize('kind', ['gcn', 'gat', 'gatv2', 'gin', 'agnn'])
def test_compile_under_cpu_autocast_no_graph_breaks(kind):
    ei, x = graph()
    _, ours = pair(kind)
    ours.eval()
    with torch.autocast('cpu', torch.bfloat16):
        ref = ours(x, ei)  # eager first: builds the formats
        torch._dynamo.reset()
        explain = torch._dynamo.explain(ours)(x, ei)
        assert explain.graph_break_count == 0, [b.reason for b in explain.break_reasons]
        out = torch.compile(ours, fullgraph=True, backend='aot_eager')(x, ei)
    assert out.dtype == ref.dtype
    torch.testing.assert_close(out, ref)


# ---------------------------------------------------------------------------
# GINConv's type promotion


@pytest.mark.parametrize('train_eps', [False, True])
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16, torch.int64, torch.int32], ids=dtype_id)
def test_gin_promotes_features_as_pyg(dtype, train_eps):
    """Half or integer features with an fp32 ``nn``: PyG adds ``(1 + eps) *
    x`` (fp32) to the aggregation, which promotes it; so does pyg_tc."""
    ei, x = graph()
    x = (x * 4).to(dtype)
    ref, ours = pair('gin', train_eps=train_eps)
    out_r, out_o = ref(x, ei), ours(x, ei)
    assert out_o.dtype == out_r.dtype == torch.float32
    torch.testing.assert_close(out_o, out_r, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(out_r)
    gr = torch.autograd.grad(out_r, list(ref.parameters()), g)
    go = torch.autograd.grad(out_o, list(ours.parameters()), g)
    for a, b in zip(go, gr):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    if dtype.is_floating_point:  # the kernels, not PyG's path
        kernel_path_only(ours)
        torch.testing.assert_close(ours(x, ei), out_r, rtol=1e-5, atol=1e-5)
        # a pair with a half root feature tensor as well
        torch.testing.assert_close(ours((x, x), ei), out_r, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# GAT's edge-feature errors


@pytest.mark.parametrize('loops', [True, False])
@pytest.mark.parametrize('kind', ['gat', 'gatv2'])
def test_gat_edge_attr_errors_name_the_users_shapes(kind, loops):
    ei, x = graph()
    ref, ours = pair(kind, edge_dim=2, add_self_loops=loops)
    for rows in (E - 1, E + 5):  # wrong length: a ValueError naming both counts
        with pytest.raises(ValueError, match=rf'edge_attr with {rows} rows .* for {E} edges'):
            ours(x, ei, torch.randn(rows, 2))
    for ea in (torch.randn(E, 3), torch.randn(E), torch.randn(E, 2, 1)):  # wrong width: PyG's error
        with pytest.raises(RuntimeError) as want:
            ref(x, ei, ea)
        with pytest.raises(RuntimeError) as got:
            ours(x, ei, ea)
        assert str(got.value) == str(want.value)
        assert 'mat1 and mat2 shapes cannot be multiplied' in str(got.value)
    g, _ = get_graph(ei, size=(N, N))  # a CSRGraph adjacency
    with pytest.raises(ValueError, match=rf'{E - 1} rows .* for {g.num_edges} edges'):
        ours(x, g, torch.randn(E - 1, 2))
