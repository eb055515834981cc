"""pyg_tc.nn.GATConv / GATv2Conv against PyG's layers with the same weights:
outputs and the gradients of the features, every parameter and the edge
features, on real graphs (Cora, CiteSeer, Tolokers), every option, every
adjacency type, returned attention weights, dropout, PyG's paths
(explain, hooks, TorchScript), pickling and torch.package, torch.compile
and a float64 gradcheck."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric import EdgeIndex
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

import pyg_tc.nn as pyg_tc_nn
from pyg_tc.formats.carrier import SparseTensor, get_graph
from pyg_tc.nn import GATConv, GATv2Conv

from ..conftest import DEVICES, make_graph, writable_copy

CLASSES = {'v1': (pyg_nn.GATConv, GATConv), 'v2': (pyg_nn.GATv2Conv, GATv2Conv)}


# ---------------------------------------------------------------------------
# data and helpers


@pytest.fixture(scope='module', autouse=True)
def _one_thread():
    """One intra-op thread: these tensors are small, and on a loaded 2-core
    machine OpenMP's spin-waiting makes two threads several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope='module')
def datasets(tmp_path_factory):
    """Cora, CiteSeer and Tolokers (``Data`` objects), loaded from private copies of
    ``$PYG_TC_DATA`` (PyG writes ``processed/`` beside ``raw/``); skips without it."""
    from torch_geometric.datasets import HeterophilousGraphDataset, Planetoid

    out = {}
    for name in ('Cora', 'CiteSeer'):
        out[name] = Planetoid(str(writable_copy(tmp_path_factory, f'planetoid/{name}')), name)[0]
    root = writable_copy(tmp_path_factory, 'heterophilous/tolokers')
    out['Tolokers'] = HeterophilousGraphDataset(str(root), 'Tolokers')[0]
    return out


def make_pair(version, *args, **kw):
    """PyG's layer with non-trivial parameters, and ours with its state."""
    ref_cls, our_cls = CLASSES[version]
    torch.manual_seed(0)
    ref = ref_cls(*args, **kw)
    with torch.no_grad():  # PyG zero-inits the bias
        for p in ref.parameters():
            p.add_(torch.rand_like(p) * 0.1)
    ours = our_cls(*args, **kw)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def _close(got, want, what, rtol=1e-5, atol=1e-5):
    assert got is not None, f'{what}: no result'
    scale = want.detach().abs().max().clamp(min=1).item() if want.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol * scale, msg=lambda m: f'{what}: {m}')


def _as(t, dtype):
    if isinstance(t, tuple):
        return tuple(_as(v, dtype) for v in t)
    return None if t is None else t.detach().to(dtype).requires_grad_()


def _run(layer, x, adj, edge_attr, g, kw):
    """(output, {name: gradient of <output, g>}) for the features, edge_attr
    and every parameter; ``g`` (random if None) is kept as ``output.g``."""
    out = layer(x, adj, *((edge_attr,) if edge_attr is not None else ()), **kw)
    if g is None:
        g = torch.randn(out.shape, dtype=torch.float64, device=out.device)
    leaves = {f'grad of {k}': v for k, v in layer.named_parameters()}
    xs = x if isinstance(x, tuple) else (x,)
    leaves.update({f'grad of x{i}': t for i, t in enumerate(xs) if t is not None})
    if edge_attr is not None:
        leaves['grad of edge_attr'] = edge_attr
    grads = torch.autograd.grad((out * g.to(out.dtype)).sum(), list(leaves.values()), allow_unused=True)
    out = out.detach()
    out.g = g
    return out, dict(zip(leaves, grads))


def compare(ref, ours, x, adj, edge_attr=None, ref_adj=None, **kw):
    """PyG's layer on ``ref_adj`` (default ``adj``) and ours on ``adj``:
    output and gradients (of the features, ``edge_attr`` and every
    parameter) agree in fp32 to 1e-5 of their scale. Where they do not
    (gradients that are small sums of large cancelling terms, e.g. of
    ``att_dst``: softmax ignores a per-row shift), ours must be as close to
    PyG's float64 result as PyG's fp32 one is, within a factor 8 (the fused
    backward recomputes the coefficients from the saved log-sum-exp).
    Returns our output."""
    ref_adj = adj if ref_adj is None else ref_adj
    torch.manual_seed(1)
    want, r_grads = _run(ref, _as(x, torch.float32), ref_adj, _as(edge_attr, torch.float32), None, kw)
    got, o_grads = _run(ours, _as(x, torch.float32), adj, _as(edge_attr, torch.float32), want.g, kw)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert o_grads.keys() == r_grads.keys()
    pairs = [('output', want, got)] + [(k, r_grads[k], o_grads[k]) for k in r_grads]
    off = []
    for name, theirs, mine in pairs:
        if theirs is None:
            assert mine is None or mine.abs().max() == 0, name
            continue
        assert mine is not None, f'{name}: no gradient'
        scale = theirs.abs().max().clamp(min=1).item() if theirs.numel() else 1.0
        if theirs.numel() and (mine - theirs).abs().max().item() > 1e-5 * scale:
            off.append(name)
    if off:
        ref64 = copy.deepcopy(ref).double()
        want64, t_grads = _run(ref64, _as(x, torch.float64), ref_adj, _as(edge_attr, torch.float64), want.g, kw)
        truths = {'output': want64, **t_grads}
        for name, theirs, mine in pairs:
            if name not in off:
                continue
            truth = truths[name]
            scale = truth.abs().max().clamp(min=1).item()
            pyg_err = (theirs.double() - truth).abs().max().item()
            err = (mine.double() - truth).abs().max().item()
            assert err <= max(1e-5 * scale, 8 * pyg_err), (
                f'{name}: error {err:.3g} (PyG fp32: {pyg_err:.3g}, scale {scale:.3g})'
            )
    return got


# ---------------------------------------------------------------------------
# real graphs


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('channels', [1, 8, 41, 64])
@pytest.mark.parametrize('heads', [1, 2, 4, 8])
@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_cora_grid(datasets, version, heads, channels, device):
    """Every heads x channels combination on Cora, with edge features
    (``fill_value='mean'`` self loops). The 1,433 bag-of-words features are
    projected to 64 (a fixed random map) to keep the dense linear maps cheap
    on the CPU; test_real_graphs uses them as they are."""
    data = datasets['Cora'].to(device)
    proj = torch.randn(data.num_features, 64, generator=torch.Generator().manual_seed(5))
    x = data.x @ proj.to(device) / 8
    ref, ours = make_pair(version, 64, channels, heads=heads, edge_dim=3)
    ref, ours = ref.to(device), ours.to(device)
    ea = torch.randn(data.num_edges, 3, generator=torch.Generator().manual_seed(2)).to(device)
    compare(ref, ours, x, data.edge_index, ea)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize(
    'name,heads,channels', [('Cora', 8, 64), ('CiteSeer', 1, 41), ('CiteSeer', 8, 8), ('Tolokers', 2, 8)]
)
@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_real_graphs(datasets, version, name, heads, channels, device):
    data = datasets[name].to(device)
    ref, ours = make_pair(version, data.num_features, channels, heads=heads)
    ref, ours = ref.to(device), ours.to(device)
    compare(ref, ours, data.x, data.edge_index)


# ---------------------------------------------------------------------------
# options and graph shapes

OPTIONS = [
    ('v1', {}),
    ('v2', {}),
    ('v1', {'edge_dim': 4}),
    ('v2', {'edge_dim': 4}),
    ('v1', {'edge_dim': 4, 'fill_value': 'add'}),
    ('v2', {'edge_dim': 4, 'fill_value': 'add'}),
    ('v1', {'edge_dim': 4, 'fill_value': 0.5}),
    ('v2', {'edge_dim': 4, 'fill_value': -1.5}),
    ('v1', {'edge_dim': 4, 'fill_value': 'max'}),
    ('v1', {'edge_dim': 4, 'fill_value': torch.tensor([0.1, 0.2, 0.3, 0.4])}),
    ('v1', {'edge_dim': 1}),
    ('v2', {'edge_dim': 1}),
    ('v1', {'add_self_loops': False}),
    ('v2', {'add_self_loops': False, 'edge_dim': 4}),
    ('v1', {'concat': False}),
    ('v2', {'concat': False}),
    ('v1', {'residual': True}),
    ('v2', {'residual': True}),
    ('v2', {'share_weights': True}),
    ('v2', {'share_weights': True, 'edge_dim': 4}),
    ('v1', {'bias': False, 'negative_slope': 0.05}),
    ('v2', {'bias': False, 'negative_slope': 0.5}),
    ('v1', {'edge_dim': 4, 'residual': True, 'concat': False, 'add_self_loops': False}),
]


def _opt_id(o):
    return o[0] + '-' + '-'.join(f'{k}={v if not torch.is_tensor(v) else "tensor"}' for k, v in o[1].items())


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['random', 'isolated', 'self_loops', 'duplicates', 'hub'])
@pytest.mark.parametrize('version,kw', OPTIONS, ids=[_opt_id(o) for o in OPTIONS])
def test_options_and_graphs(version, kw, kind, device):
    """Every option on graphs with empty rows and isolated nodes, repeated
    edges, self loops (several per node) and a heavy row."""
    ei, n = make_graph(kind, device)
    ref, ours = make_pair(version, 16, 8, heads=4, **kw)
    ref, ours = ref.to(device), ours.to(device)
    x = torch.randn(n, 16, generator=torch.Generator().manual_seed(3)).to(device)
    ea = None
    if 'edge_dim' in kw:
        d = kw['edge_dim']
        ea = torch.randn(ei.size(1), d, generator=torch.Generator().manual_seed(4)).to(device)
        ea = ea.view(-1) if d == 1 else ea
    compare(ref, ours, x, ei, ea)


@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_empty_graph(version):
    ref, ours = make_pair(version, 8, 4, heads=2)
    x = torch.randn(0, 8)
    ei = torch.empty(2, 0, dtype=torch.long)
    assert ours(x, ei).shape == ref(x, ei).shape == (0, 8)
    ei, n = make_graph('empty')  # nodes, no edges: only the self loops
    compare(ref, ours, torch.randn(n, 8), ei)


def test_bipartite():
    torch.manual_seed(0)
    x_src, x_dst = torch.randn(50, 12), torch.randn(30, 6)
    ei = torch.stack([torch.randint(0, 50, (400,)), torch.randint(0, 30, (400,))])
    ea = torch.randn(400, 3)
    for kw in ({}, {'edge_dim': 3}, {'residual': True}, {'add_self_loops': False}):
        ref, ours = make_pair('v1', (12, 6), 8, heads=2, **kw)
        extra = (ea,) if 'edge_dim' in kw else ()
        compare(ref, ours, (x_src, x_dst), ei, *extra)
        compare(ref, ours, (x_src, x_dst), ei, *extra, size=(50, 30))
        ref, ours = make_pair('v2', (12, 6), 8, heads=2, **kw)
        compare(ref, ours, (x_src, x_dst), ei, *extra)
    ref, ours = make_pair('v1', (12, 6), 8, heads=2)
    compare(ref, ours, (x_src, None), ei, size=(50, 30))
    ref, ours = make_pair('v1', 12, 8, heads=3)  # shared lin on a pair
    compare(ref, ours, (x_src, torch.randn(30, 12)), ei)
    ref, ours = make_pair('v2', 12, 8, heads=3, share_weights=True)
    compare(ref, ours, (x_src, torch.randn(30, 12)), ei)


def test_bipartite_target_projection_is_folded():
    """A bipartite ``GATConv``'s target projection feeds the logits only, so it
    is folded with ``att_dst`` (``x_dst @ M``, ``M [F, heads]``): ``lin_dst``
    does not run, the output and every gradient equal PyG's, float64
    gradcheck passes through the folded weight; with a hook on ``lin_dst``
    (or a lazy one) it runs as PyG's does, with the same result."""
    torch.manual_seed(0)
    x_src, x_dst = torch.randn(50, 12), torch.randn(30, 6)
    ei = torch.stack([torch.randint(0, 50, (400,)), torch.randint(0, 30, (400,))])
    ref, ours = make_pair('v1', (12, 6), 8, heads=2, add_self_loops=False)
    calls = []
    ours.lin_dst.forward = lambda *a: calls.append(1) or torch.nn.Linear.forward(ours.lin_dst, *a)
    compare(ref, ours, (x_src, x_dst), ei)
    assert not calls  # (a patched forward is no hook: folded, not called)
    same, ours_same = make_pair('v1', (12, 12), 8, heads=2, add_self_loops=False)  # one node set, two Linears
    ours_same.lin_dst.forward = lambda *a: calls.append(1) or torch.nn.Linear.forward(ours_same.lin_dst, *a)
    compare(same, ours_same, x_src, ei)
    assert not calls  # (HeteroConv's src == dst edge types: folded too)
    del ours.lin_dst.forward
    seen = []
    hook = ours.lin_dst.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    compare(ref, ours, (x_src, x_dst), ei)
    assert seen and seen[0] == (30, 16)
    hook.remove()
    torch.manual_seed(0)  # (parameters whose logits keep clear of LeakyReLU's kink for gradcheck's steps)
    ei = torch.stack([torch.randint(0, 50, (400,)), torch.randint(0, 30, (400,))])
    layer = GATConv((12, 6), 3, heads=2, add_self_loops=False).double()
    names = [k for k, _ in layer.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in layer.parameters()]
    xs = (torch.randn(50, 12, dtype=torch.float64, requires_grad=True), torch.randn(30, 6, dtype=torch.float64))

    def fn(a, *ps):
        return torch.func.functional_call(layer, dict(zip(names, ps)), ((a, xs[1]), ei))

    assert torch.autograd.gradcheck(fn, (xs[0], *params))
    go = torch.randn(30, 6, dtype=torch.float64)
    folded = torch.autograd.grad(fn(xs[0], *params), (xs[0], *params), go)
    hook = layer.lin_dst.register_forward_hook(lambda m, i, o: None)  # (the unfolded path)
    unfolded = torch.autograd.grad(fn(xs[0], *params), (xs[0], *params), go)
    hook.remove()
    for a, b in zip(folded, unfolded):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    lazy = GATConv((-1, -1), 8, heads=2, add_self_loops=False)
    first = lazy((x_src, x_dst), ei)  # (initialises the Linears: unfolded)
    ref = pyg_nn.GATConv((12, 6), 8, heads=2, add_self_loops=False)
    ref.load_state_dict(lazy.state_dict())
    torch.testing.assert_close(first, ref((x_src, x_dst), ei))
    compare(ref, lazy, (x_src, x_dst), ei)  # (folded)


@pytest.mark.cuda
@pytest.mark.parametrize('heads,channels', [(2, 8), (4, 128), (3, 41)])
def test_bipartite_fold_on_cuda(heads, channels):
    """On the GPU, the folded bipartite GAT: fp32 outputs and gradients as
    PyG's (``compare``), and under bf16 / fp16 autocast within half rounding
    of the fp32 result, with finite gradients."""
    torch.manual_seed(0)
    x_src, x_dst = torch.randn(500, 24, device='cuda'), torch.randn(300, 16, device='cuda')
    ei = torch.stack([torch.randint(0, 500, (4000,)), torch.randint(0, 300, (4000,))]).cuda()
    ref, ours = make_pair('v1', (24, 16), channels, heads=heads, add_self_loops=False)
    ref, ours = ref.cuda(), ours.cuda()
    want = compare(ref, ours, (x_src, x_dst), ei)
    for dtype, tol in ((torch.bfloat16, 5e-2), (torch.float16, 1e-2)):
        with torch.autocast('cuda', dtype=dtype):
            got = ours((x_src, x_dst), ei)
        assert (got.float() - want).abs().max() <= tol * want.abs().max().clamp(min=1)
        got.float().square().mean().backward()
        for p in ours.parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all()
        ours.zero_grad()


@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_target_to_source_flow(version):
    ei, n = make_graph('self_loops')
    ref, ours = make_pair(version, 16, 8, heads=2, edge_dim=2, flow='target_to_source')
    compare(ref, ours, torch.randn(n, 16), ei, torch.randn(ei.size(1), 2))


# ---------------------------------------------------------------------------
# adjacency types and attention weights

SPARSE = ('torch_csr', 'torch_coo', 'torch_csr_repeated', 'SparseTensor')


def _adjacency(name, ei, n):
    if name == 'edge_index':
        return ei
    if name == 'int32':
        return ei.int()
    if name == 'EdgeIndex':
        return EdgeIndex(ei, sparse_size=(n, n))
    if name == 'torch_csr':  # adj_t (rows = targets), coalesced
        return to_torch_csr_tensor(ei.flip(0), size=(n, n))
    if name == 'torch_coo':
        return to_torch_coo_tensor(ei.flip(0), size=(n, n))
    if name == 'torch_csr_repeated':  # sorted rows, repeated entries kept
        order = torch.argsort(ei[1] * n + ei[0], stable=True)
        crow = torch.zeros(n + 1, dtype=torch.long)
        crow[1:] = torch.cumsum(torch.bincount(ei[1], minlength=n), 0)
        return torch.sparse_csr_tensor(crow, ei[0, order], torch.ones(ei.size(1)), (n, n))
    if SparseTensor is None:
        pytest.skip('torch_sparse is not installed')
    return SparseTensor.from_edge_index(ei, sparse_sizes=(n, n)).t()


@pytest.mark.parametrize('adj_name', ['edge_index', 'int32', 'EdgeIndex', *SPARSE])
@pytest.mark.parametrize('loops', [True, False])
@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_adjacency_types_and_attention_weights(datasets, version, loops, adj_name):
    """Every adjacency type: the output, and with ``return_attention_weights``
    the same edge index (or sparse adjacency, loops added as PyG adds them)
    and coefficients as PyG's layer on that adjacency."""
    data = datasets['Cora']
    n = data.num_nodes
    # self loops (one repeated) and a repeated edge, which PyG's loop handling
    # removes, keeps or (torch.sparse) merges
    ei = torch.cat([data.edge_index, torch.tensor([[0, 5, 5, 7, 7], [0, 5, 5, 3, 3]])], 1)
    ref, ours = make_pair(version, data.num_features, 8, heads=4, add_self_loops=loops)
    x = data.x
    adj = _adjacency(adj_name, ei, n)
    ref_adj = adj if adj_name in SPARSE else ei  # PyG's own path on the same structure
    want = ref(x, ref_adj, return_attention_weights=True)
    got = ours(x, adj, return_attention_weights=True)
    _close(got[0], want[0], 'output')
    _close(ours(x, adj), want[0], 'output without weights')
    if adj_name == 'SparseTensor':
        r_row, r_col, r_val = want[1].coo()
        o_row, o_col, o_val = got[1].coo()
        assert torch.equal(r_row, o_row) and torch.equal(r_col, o_col)
        assert want[1].sizes() == got[1].sizes()
        _close(o_val, r_val, 'alpha')
    elif adj_name in SPARSE:
        (r_adj, r_alpha), (o_adj, o_alpha) = want[1], got[1]
        assert r_adj.layout == o_adj.layout and r_adj.shape == o_adj.shape
        if o_adj.layout == torch.sparse_csr:
            assert torch.equal(r_adj.crow_indices(), o_adj.crow_indices())
            assert torch.equal(r_adj.col_indices(), o_adj.col_indices())
        else:
            assert torch.equal(r_adj.indices(), o_adj.indices())
        _close(o_adj.values(), r_adj.values(), 'adjacency values')
        _close(o_alpha, r_alpha, 'alpha')
    else:
        (r_ei, r_alpha), (o_ei, o_alpha) = want[1], got[1]
        assert torch.equal(o_ei.long(), r_ei)
        assert type(o_ei) is type(adj)
        _close(o_alpha, r_alpha, 'alpha')


@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_attention_weights_with_edge_features_and_gradient(version):
    ei, n = make_graph('self_loops')
    ref, ours = make_pair(version, 16, 8, heads=2, edge_dim=3)
    x, ea = torch.randn(n, 16, requires_grad=True), torch.randn(ei.size(1), 3)
    ro, (r_ei, r_alpha) = ref(x, ei, ea, return_attention_weights=True)
    oo, (o_ei, o_alpha) = ours(x, ei, ea, return_attention_weights=True)
    assert torch.equal(o_ei, r_ei)
    _close(oo, ro, 'output')
    _close(o_alpha, r_alpha, 'alpha')
    g = torch.randn_like(r_alpha)
    _close(
        torch.autograd.grad((o_alpha * g).sum(), x)[0], torch.autograd.grad((r_alpha * g).sum(), x)[0], 'grad of alpha'
    )


def test_csr_graph_adjacency(datasets):
    data = datasets['Cora']
    g, _ = get_graph(data.edge_index, size=(data.num_nodes, data.num_nodes))
    for version in ('v1', 'v2'):
        ref, ours = make_pair(version, data.num_features, 8, heads=2)
        want, (r_ei, r_alpha) = ref(data.x, data.edge_index, return_attention_weights=True)
        got, (o_ei, o_alpha) = ours(data.x, g, return_attention_weights=True)
        _close(got, want, 'output')
        assert torch.equal(o_ei, r_ei)  # [source, target] in the original edge order
        _close(o_alpha, r_alpha, 'alpha')


# ---------------------------------------------------------------------------
# layer contract


@pytest.mark.parametrize(
    'kw', [{}, {'edge_dim': 3, 'residual': True}, {'share_weights': True}, {'bias': False, 'concat': False}]
)
@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_state_dict_and_subclass(version, kw):
    if version == 'v1' and 'share_weights' in kw:
        pytest.skip('GATv2 only')
    ref_cls, our_cls = CLASSES[version]
    ref, ours = ref_cls(16, 8, heads=2, **kw), our_cls(16, 8, heads=2, **kw)
    assert isinstance(ours, ref_cls)
    assert list(ours.state_dict()) == list(ref.state_dict())
    ours.load_state_dict(ref.state_dict())
    assert str(ours) == str(ref)
    with pytest.raises(ValueError, match='backend'):
        our_cls(16, 8, backend='tensor-cores-please')


def test_docs():
    for cls in (GATConv, GATv2Conv):
        for section in ('Args:', 'Shapes:', 'backend (str, optional)', 'math::', 'PyG'):
            assert section in cls.__doc__, f'{cls.__name__} doc lacks {section!r}'


def test_cheatsheet_same_as_pyg(monkeypatch):
    """PyG's cheatsheet utilities (they read the class's doc, signature and
    source) say the same of pyg_tc's layers as of PyG's."""
    import torch_geometric.nn.conv as conv_mod
    from torch_geometric.nn.conv import utils

    names = [n for n in dir(utils) if n.startswith(('supports_', 'processes_', 'paper_'))]
    for name, cls in (('GATConv', GATConv), ('GATv2Conv', GATv2Conv)):
        want = {n: getattr(utils, n)(name) for n in names}
        monkeypatch.setitem(conv_mod.__dict__, name, cls)
        assert {n: getattr(utils, n)(name) for n in names} == want
        monkeypatch.undo()


@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_pyg_paths(version):
    """backend='pyg', message-passing hooks and lazy input sizes."""
    ei, n = make_graph('random')
    x = torch.randn(n, 16)
    ref, ours = make_pair(version, 16, 8, heads=2)
    want = ref(x, ei)
    ours.backend = 'pyg'
    torch.testing.assert_close(ours(x, ei), want)
    ours.backend = 'auto'
    seen = []
    h = ours.register_edge_update_forward_hook(lambda *a: seen.append(1))
    torch.testing.assert_close(ours(x, ei), want)
    assert seen
    h.remove()
    lazy = CLASSES[version][1](-1, 8, heads=2, edge_dim=-1)
    assert lazy(x, ei, torch.randn(ei.size(1), 5)).shape == (n, 16)


class TwoLayerGAT(torch.nn.Module):
    def __init__(self, lib):
        super().__init__()
        self.c1 = lib.GATConv(8, 4, heads=2)
        self.c2 = lib.GATv2Conv(8, 3, heads=2, concat=False)

    def forward(self, x, edge_index):
        return self.c2(self.c1(x, edge_index).relu(), edge_index).log_softmax(-1)


def _two_layer_pair():
    torch.manual_seed(0)
    ref, ours = TwoLayerGAT(pyg_nn), TwoLayerGAT(pyg_tc_nn)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.rand_like(p) * 0.1)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def test_fast_path_is_the_default_and_explain_matches_pyg():
    """Without explain / hooks the kernels run (PyG's propagate and
    edge_updater are never called); GNNExplainer (PyG's path) gives PyG's
    explanation."""
    from torch_geometric.explain import Explainer
    from torch_geometric.explain.algorithm import GNNExplainer

    ei, n = make_graph('self_loops')
    x = torch.randn(n, 8)
    ref, ours = _two_layer_pair()

    def boom(*args, **kwargs):
        raise AssertionError('PyG message passing used')

    for conv in (ours.c1, ours.c2):
        conv.propagate = conv.edge_updater = boom
    _close(ours(x, ei), ref(x, ei), 'output')
    for conv in (ours.c1, ours.c2):
        del conv.propagate, conv.edge_updater
    masks = []
    for model in (ref, ours):
        explainer = Explainer(
            model,
            GNNExplainer(epochs=10),
            explanation_type='model',
            node_mask_type='attributes',
            edge_mask_type='object',
            model_config=dict(mode='multiclass_classification', task_level='node', return_type='log_probs'),
        )
        torch.manual_seed(1)
        masks.append(explainer(x, ei, index=3))
    assert masks[1].edge_mask.abs().sum() > 0
    _close(masks[1].edge_mask, masks[0].edge_mask, 'edge mask', 1e-4, 1e-4)
    _close(masks[1].node_mask, masks[0].node_mask, 'node mask', 1e-4, 1e-4)


def test_pickle_and_torch_package():
    ei, n = make_graph('random')
    x = torch.randn(n, 8)
    _, ours = _two_layer_pair()
    expected = ours(x, ei)  # formats and self-loop graphs cached on ei, not on the layers
    _close(pickle.loads(pickle.dumps(ours))(x, ei), expected, 'pickled')
    _close(copy.deepcopy(ours)(x, ei), expected, 'deep copy')
    buf = io.BytesIO()
    with torch.package.PackageExporter(buf) as pe:
        pe.extern(['torch_geometric.**', 'pyg_tc.**', '_operator', __name__])
        pe.save_pickle('models', 'model.pkl', ours)
    buf.seek(0)
    loaded = torch.package.PackageImporter(buf).load_pickle('models', 'model.pkl')
    assert type(loaded.c1) is GATConv and type(loaded.c2) is GATv2Conv
    _close(loaded(x, ei), expected, 'packaged')


def test_torchscript_as_pyg():
    """TorchScript compiles PyG's forward: it scripts exactly when PyG's
    layer scripts (torch_geometric 2.8's GATConv does not with recent torch)."""
    for version in ('v1', 'v2'):
        ref, ours = make_pair(version, 16, 8, heads=2)
        try:
            torch.jit.script(ref)
            ok = True
        except Exception:
            ok = False
        if ok:
            torch.jit.script(ours)
        else:
            with pytest.raises(Exception):
                torch.jit.script(ours)


# ---------------------------------------------------------------------------
# dropout


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_dropout(version, device):
    ei, n = make_graph('random', device)
    x = torch.randn(n, 16, device=device)
    ref, ours = make_pair(version, 16, 8, heads=4, dropout=0.3)
    ref, ours = ref.to(device), ours.to(device)
    # eval: no dropout, same as PyG
    ref.eval(), ours.eval()
    torch.testing.assert_close(ours(x, ei), ref(x, ei))
    ours.train()
    torch.manual_seed(7)
    a, (ei_a, alpha_a) = ours(x, ei, return_attention_weights=True)
    torch.manual_seed(7)
    b, (_, alpha_b) = ours(x, ei, return_attention_weights=True)
    assert torch.equal(a, b) and torch.equal(alpha_a, alpha_b)  # deterministic per seed
    c, (_, alpha_c) = ours(x, ei, return_attention_weights=True)
    assert not torch.equal(alpha_a, alpha_c)  # a new mask per call
    kept = (alpha_a > 0).float().mean().item()
    assert abs(kept - 0.7) < 0.02, kept
    # the returned weights are the ones the output used: recompute it from them
    H, C = 4, 8
    xl = (ours.lin if version == 'v1' else ours.lin_l)(x).view(-1, H, C)
    msg = alpha_a.unsqueeze(-1) * xl[ei_a[0]]
    out = torch.zeros(n, H, C, device=device).index_add_(0, ei_a[1], msg).view(n, H * C)
    bias = ours.bias
    torch.testing.assert_close(a, out + bias, rtol=1e-5, atol=1e-5)


def test_plain_edge_index_keeps_one_graph():
    """A plain edge_index: the self-loop graph is built straight from its
    edges and cached on the tensor; the plain CSR graph is never built, the
    loop graph keeps one edge map (ids; its perm is None), AGNNConv shares
    it, and an in-place edit of the edges rebuilds it."""
    from pyg_tc.formats.carrier import format_bytes, has_graph
    from pyg_tc.nn import AGNNConv
    from pyg_tc.formats.loops import loops_from_edges

    torch.manual_seed(0)
    N, E = 300, 2000
    ei = torch.randint(0, N, (2, E))
    ei = ei[:, ei[0] != ei[1]]
    x = torch.randn(N, 16)
    ours, ref = GATConv(16, 8, heads=2), pyg_nn.GATConv(16, 8, heads=2)
    ref.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(x, ei), ref(x, ei))
    assert not has_graph(ei)
    lg = loops_from_edges(ei, N, N, 'source_to_target', N, build=False)
    assert lg is not None and lg.graph.perm is None and lg.graph.num_edges == ei.size(1) + N
    assert torch.equal(lg.ids.sort().values, torch.arange(ei.size(1) + N, dtype=lg.ids.dtype))
    one = format_bytes(ei)
    assert one == format_bytes(lg.graph) + lg.ids.untyped_storage().nbytes()
    AGNNConv()(x, ei)
    assert format_bytes(ei) == one  # the same loop graph
    get_graph(ei, size=(N, N))  # the plain graph, for a GCN layer, is a second one
    assert format_bytes(ei) > 1.5 * one
    # self loops in the input: dropped, ids map around them
    ei2 = torch.cat([ei, torch.arange(0, N, 7).repeat(2, 1)], 1)[:, torch.randperm(ei.size(1) + 43)]
    lg2 = loops_from_edges(ei2, N, N, 'source_to_target', N)
    assert lg2.graph.perm is None and lg2.graph.num_edges == ei.size(1) + N
    assert int(lg2.ids.max()) == ei2.size(1) + N - 1  # loops after all original ids
    torch.testing.assert_close(ours(x, ei2), ref(x, ei2))
    # an in-place edit: a new loop graph on the next call
    with torch.no_grad():
        ei2[0, :100] = torch.randint(0, N, (100,))
    torch.testing.assert_close(ours(x, ei2), ref(x, ei2))
    assert loops_from_edges(ei2, N, N, 'source_to_target', N, build=False) is not lg2


# ---------------------------------------------------------------------------
# torch.compile and gradcheck


@pytest.mark.parametrize('device', DEVICES)
def test_torch_compile_no_graph_breaks(device):
    torch.manual_seed(0)
    N = 200
    ei = torch.randint(0, N, (2, 1500), device=device)
    ea = torch.randn(1500, 3, device=device)
    x = torch.randn(N, 16, device=device)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = GATConv(16, 8, heads=4, edge_dim=3)
            self.c2 = GATv2Conv(32, 4, heads=2, concat=False)

        def forward(self, x, ei, ea):
            return self.c2(self.c1(x, ei, ea).relu(), ei)

    net = Net().to(device)
    ref = net(x, ei, ea)  # eager first: builds the formats and self-loop graphs
    torch._dynamo.reset()
    explain = torch._dynamo.explain(net)(x, ei, ea)
    assert explain.graph_break_count == 0, [b.reason for b in explain.break_reasons]
    compiled = torch.compile(net, fullgraph=True, backend='aot_eager')
    out = compiled(x, ei, ea)
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    assert net.c1.att_edge.grad is not None and net.c2.att.grad is not None
    # no format yet (a new edge_index tensor): PyG's path (whose
    # remove_self_loops breaks the graph, as for PyG's own layer), same result
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(net, backend='aot_eager')(x, ei.clone(), ea), ref)


@pytest.mark.parametrize('version', ['v1', 'v2'])
def test_gradcheck_float64(version):
    torch.manual_seed(0)
    n = 7
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 2, 2, 1, 4], [1, 2, 3, 4, 5, 6, 0, 0, 0, 1, 1]])
    layer = CLASSES[version][1](5, 3, heads=2, edge_dim=2, residual=True).double()
    names = [k for k, _ in layer.named_parameters()]
    x = torch.randn(n, 5, dtype=torch.float64, requires_grad=True)
    ea = torch.randn(ei.size(1), 2, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in layer.parameters()]

    def fn(x, ea, *ps):
        return torch.func.functional_call(layer, dict(zip(names, ps)), (x, ei, ea))

    assert torch.autograd.gradcheck(fn, (x, ea, *params))


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['random', 'empty', 'isolated', 'duplicates', 'hub'])
@pytest.mark.parametrize('num_loops', ['all', 'fewer'])
def test_loops_merged_into_target_ordered_edges(kind, num_loops, device):
    """Edges already in target order without self loops (NeighborLoader's
    batches) get their loops written into the CSR without a sort: the same
    graph and edge ids as the sorted construction."""
    from pyg_tc.formats import CSRGraph
    from pyg_tc.formats.loops import _append_loops, _merge_loops

    ei, n = make_graph(kind, device)
    N = n if isinstance(n, int) else max(n)
    ei = ei[:, ei[0] != ei[1]]
    ei = ei[:, torch.sort(ei[1], stable=True)[1]]
    L = N if num_loops == 'all' else N // 2
    src, dst = ei[0], ei[1]
    got = _merge_loops(src, dst, N, N, L, None)
    loops = torch.arange(L, device=ei.device)
    ref = CSRGraph.from_coo(torch.cat([src, loops]), torch.cat([dst, loops]), N, N)
    ref_ids = torch.arange(ei.size(1) + L, device=ei.device) if ref.perm is None else ref.perm.long()
    for name in ('rowptr', 'col', 't_rowptr', 't_col', 't_perm'):
        assert torch.equal(getattr(got.graph, name), getattr(ref, name)), name
    assert torch.equal(got.ids.long(), ref_ids)
    got.graph.validate()
    # _append_loops takes this path for such edges and the general one otherwise
    via = _append_loops(src, dst, N, N, L, None)
    assert torch.equal(via.graph.col, ref.col) and torch.equal(via.ids.long(), ref_ids)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('H,C', [(1, 7), (3, 5), (8, 8)])
@pytest.mark.parametrize('k', [1, 2])
def test_att_logits_equal_pygs_expression(device, H, C, k):
    """GAT's per-node logit terms as one matrix product (block-diagonal per
    head) equal PyG's ``(x * att).sum(-1)``, values and gradients (float64
    gradcheck), and under autocast keep PyG's expression and dtypes."""
    from pyg_tc.nn.gat import att_logits

    g = torch.Generator().manual_seed(H * 10 + k)
    x = torch.randn(37, H, C, generator=g, dtype=torch.float64).to(device).requires_grad_()
    atts = [torch.randn(1, H, C, generator=g, dtype=torch.float64).to(device).requires_grad_() for _ in range(k)]
    got = att_logits(x, *atts)
    ref = [(x * a).sum(-1) for a in atts]
    assert len(got) == k
    for a, b in zip(got, ref):
        assert a.shape == (37, H)
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda x, *a: torch.cat(att_logits(x, *a), 1), (x, *atts))
    xf = x.detach().float()
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
        out = att_logits(xf.to(torch.bfloat16), *[a.detach().float() for a in atts])
        want = [(xf.to(torch.bfloat16) * a.detach().float()).sum(-1) for a in atts]
    assert [o.dtype for o in out] == [w.dtype for w in want]
