"""pyg_tc layers against PyG's own layers with the same weights: outputs and
every gradient, on real graphs, for every adjacency type PyG accepts."""

import copy
import io

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.utils import to_torch_csr_tensor

import pyg_tc
from pyg_tc.transforms import DegreeBucketTransform

from ..conftest import DEVICES, writable_copy


@pytest.fixture(scope='module', params=['Cora', 'CiteSeer'])
def real(request, tmp_path_factory):
    """The real Planetoid graph from ``$PYG_TC_DATA`` (skips without it)."""
    from torch_geometric.datasets import Planetoid

    name = request.param
    return Planetoid(str(writable_copy(tmp_path_factory, f'planetoid/{name}')), name)[0]


def make_pair(kind, in_ch, out_ch, **kw):
    torch.manual_seed(0)
    if kind == 'gin':
        mlp = torch.nn.Sequential(torch.nn.Linear(in_ch, 32), torch.nn.ReLU(), torch.nn.Linear(32, out_ch))
        ref = pyg_nn.GINConv(copy.deepcopy(mlp), **kw)
        ours = pyg_tc.nn.GINConv(copy.deepcopy(mlp), **kw)
    else:
        cls = {'gcn': 'GCNConv', 'sage': 'SAGEConv'}[kind]
        ref = getattr(pyg_nn, cls)(in_ch, out_ch, **kw)
        ours = getattr(pyg_tc.nn, cls)(in_ch, out_ch, **kw)
    with torch.no_grad():  # non-trivial parameters (PyG zero-inits biases, eps)
        for p in ref.parameters():
            p.add_(torch.rand_like(p) * 0.1)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


LAYERS = [
    ('gcn', {}),
    ('gcn', {'improved': True}),
    ('gcn', {'add_self_loops': False}),
    ('gcn', {'normalize': False, 'add_self_loops': False}),
    ('sage', {}),
    ('sage', {'aggr': 'sum'}),
    ('sage', {'aggr': 'max'}),
    ('sage', {'normalize': True, 'root_weight': False}),
    ('sage', {'project': True}),
    ('gin', {}),
    ('gin', {'train_eps': True, 'eps': 0.25}),
]


def grads(out, params):
    torch.manual_seed(1)
    g = torch.randn_like(out)
    return torch.autograd.grad((out * g).sum(), params, allow_unused=True)


def check_same(ref_out, out, ref_grads, our_grads, rtol=1e-5, atol=1e-5):
    scale = ref_out.detach().abs().max().clamp(min=1).item()
    torch.testing.assert_close(out, ref_out, rtol=rtol, atol=atol * scale)
    for a, b in zip(ref_grads, our_grads):
        if a is None:
            assert b is None or b.abs().max() == 0
            continue
        torch.testing.assert_close(b, a, rtol=rtol, atol=atol * a.abs().max().clamp(min=1).item())


@pytest.mark.parametrize(
    'kind,kw', LAYERS, ids=[f'{k}-{"-".join(f"{a}={b}" for a, b in kw.items())}' for k, kw in LAYERS]
)
@pytest.mark.parametrize('device', DEVICES)
def test_matches_pyg_on_real_graph(real, kind, kw, device):
    data = real.to(device)
    ref, ours = make_pair(kind, data.num_features, 16, **kw)
    ref, ours = ref.to(device), ours.to(device)
    assert isinstance(ours, type(ref))
    assert ours.state_dict().keys() == ref.state_dict().keys()
    x = data.x.clone().requires_grad_()
    ew = None
    if kind == 'gcn':
        ew = torch.rand(data.num_edges, device=device, requires_grad=True)
    args = (ew,) if ew is not None else ()
    ref_out = ref(x, data.edge_index, *args)
    out = ours(x, data.edge_index, *args)
    params = [x] + ([ew] if ew is not None else [])
    check_same(
        ref_out, out, grads(ref_out, params + list(ref.parameters())), grads(out, params + list(ours.parameters()))
    )


@pytest.mark.parametrize('adj_kind', ['edge_index', 'EdgeIndex', 'torch_csr', 'transform', 'int32'])
@pytest.mark.parametrize('kind', ['gcn', 'sage', 'gin'])
def test_adjacency_types(cora, adj_kind, kind):
    data = cora.clone()
    ref, ours = make_pair(kind, data.num_features, 8)
    x = data.x.clone().requires_grad_()
    ref_out = ref(x, data.edge_index)
    N = data.num_nodes
    if adj_kind == 'edge_index':
        adj = data.edge_index
    elif adj_kind == 'int32':
        adj = data.edge_index.int()
    elif adj_kind == 'EdgeIndex':
        from torch_geometric import EdgeIndex

        adj = EdgeIndex(data.edge_index, sparse_size=(N, N))
    elif adj_kind == 'torch_csr':
        # PyG's sparse path: adj_t with rows = targets. For GCN, PyG itself is the
        # reference on the same sparse input (its sparse gcn_norm differs slightly).
        adj = to_torch_csr_tensor(data.edge_index.flip(0), size=(N, N))
        ref_out = ref(x, adj)
    else:
        adj = DegreeBucketTransform(validate=True)(data).edge_index
        assert isinstance(adj, pyg_tc.formats.TCEdgeIndex)
    out = ours(x, adj)
    check_same(ref_out, out, grads(ref_out, [x] + list(ref.parameters())), grads(out, [x] + list(ours.parameters())))


def test_duplicate_self_loops_documented_difference(cora):
    """PyG's index_put hands the loop gradient to every duplicate self loop
    although only the last one is used; ours gives unused duplicates 0. All
    other edge-weight gradients, and the output, agree."""
    ei = torch.cat([cora.edge_index, torch.tensor([[0, 0, 5], [0, 0, 5]])], 1)
    ref, ours = make_pair('gcn', cora.num_features, 8)
    w = torch.rand(ei.size(1), requires_grad=True)
    ro, oo = ref(cora.x, ei, w), ours(cora.x, ei, w)
    torch.testing.assert_close(oo, ro)
    (gr,), (go,) = grads(ro, [w]), grads(oo, [w])
    unused = torch.zeros(ei.size(1), dtype=torch.bool)
    unused[cora.num_edges] = True  # first of the two (0, 0) loops: not used in forward
    assert go[unused].abs().max() == 0 and gr[unused].abs().max() > 0
    torch.testing.assert_close(go[~unused], gr[~unused], rtol=1e-5, atol=1e-6)


def test_cached_gcn_reuses_format_and_ignores_new_graph(cora):
    ref, ours = make_pair('gcn', cora.num_features, 8, cached=True)
    a = ours(cora.x, cora.edge_index)
    cache = ours._cached_edge_index
    b = ours(cora.x, cora.edge_index[:, :100])  # PyG semantics: cached ignores the new graph
    assert ours._cached_edge_index is cache
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, ref(cora.x, cora.edge_index))
    ours.reset_parameters()
    assert ours._cached_edge_index is None


def test_pyg_checkpoint_loads_and_backend_switch(cora):
    ref, _ = make_pair('sage', cora.num_features, 8)
    buf = io.BytesIO()
    torch.save(ref.state_dict(), buf)
    buf.seek(0)
    ours = pyg_tc.nn.SAGEConv(cora.num_features, 8)
    ours.load_state_dict(torch.load(buf))
    torch.testing.assert_close(ours(cora.x, cora.edge_index), ref(cora.x, cora.edge_index))
    ours.backend = 'pyg'
    torch.testing.assert_close(ours(cora.x, cora.edge_index), ref(cora.x, cora.edge_index))
    with pytest.raises(ValueError, match='backend'):
        pyg_tc.nn.GCNConv(4, 4, backend='tensor-cores-please')


def test_bipartite_sage_and_gin():
    torch.manual_seed(0)
    x_src, x_dst = torch.randn(50, 12), torch.randn(30, 12)
    ei = torch.stack([torch.randint(0, 50, (300,)), torch.randint(0, 30, (300,))])
    for kind in ('sage', 'gin'):
        ref, ours = make_pair(kind, 12, 6)
        torch.testing.assert_close(ours((x_src, x_dst), ei), ref((x_src, x_dst), ei))
        torch.testing.assert_close(ours((x_src, None), ei, size=(50, 30)), ref((x_src, None), ei, size=(50, 30)))


@pytest.mark.parametrize('device', DEVICES)
def test_torch_compile_no_graph_breaks(device):
    torch.manual_seed(0)
    N = 200
    ei = torch.randint(0, N, (2, 1500), device=device)
    x = torch.randn(N, 16, device=device)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = pyg_tc.nn.GCNConv(16, 32, cached=True)
            self.c2 = pyg_tc.nn.SAGEConv(32, 16)
            self.c3 = pyg_tc.nn.GINConv(torch.nn.Linear(16, 4), train_eps=True)

        def forward(self, x, ei):
            return self.c3(self.c2(self.c1(x, ei).relu(), ei).relu(), ei)

    net = Net().to(device)
    ref = net(x, ei)  # eager first: builds the formats
    torch._dynamo.reset()
    explain = torch._dynamo.explain(net)(x, ei)
    assert explain.graph_break_count == 0, [b.reason for b in explain.break_reasons]
    compiled = torch.compile(net, fullgraph=True, backend='aot_eager')
    out = compiled(x, ei)
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    assert net.c3.eps.grad is not None and net.c1.lin.weight.grad is not None


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('kind', ['gcn', 'sage', 'gin'])
def test_half_precision_cuda(cora, dtype, kind):
    data = cora.to('cuda')
    ref, ours = make_pair(kind, data.num_features, 16)
    ref, ours = ref.cuda(), ours.cuda()
    x = data.x.clone().requires_grad_()
    ref_out = ref(x, data.edge_index)
    ref_g = grads(ref_out, [x] + list(ref.parameters()))
    ours = ours.to(dtype)
    xh = data.x.to(dtype).requires_grad_()
    out = ours(xh, data.edge_index)
    our_g = grads(out.float(), [xh] + list(ours.parameters()))
    tol = 2e-2 if dtype == torch.float16 else 6e-2
    rel = (out.float() - ref_out).norm() / ref_out.norm()
    assert rel < tol, rel
    for a, b in zip(ref_g, our_g):
        assert (b.float() - a).norm() / a.norm().clamp(min=1e-12) < tol


@pytest.mark.parametrize('kind', ['gcn', 'sage', 'gin'])
def test_propagate_on_sparse_adj_and_pyg_backend(cora, kind):
    """User code calling propagate() on a sparse adj_t runs PyG's message
    passing; backend='pyg' runs PyG's own path. Both match PyG."""
    ref, ours = make_pair(kind, cora.num_features, 8)
    N = cora.num_nodes
    adj = to_torch_csr_tensor(cora.edge_index.flip(0), size=(N, N))
    x = cora.x
    xs = x if kind == 'gcn' else (x, x)
    kw = {'edge_weight': None} if kind == 'gcn' else {}
    torch.testing.assert_close(ours.propagate(adj, x=xs, **kw), ref.propagate(adj, x=xs, **kw))
    ours.backend = 'pyg'
    torch.testing.assert_close(ours(x, cora.edge_index), ref(x, cora.edge_index))


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dims', [(16, 32), (32, 8)])  # aggregate first / transform first
@pytest.mark.parametrize('bias', [True, False])
def test_sage_dense_part_folds_and_matches_pyg(dims, bias, device, monkeypatch):
    """SAGE's bias and root term folded into its matrix products (``_sage_dense`` after
    an aggregation, ``_sage_root`` after a transform-first one): PyG's outputs and
    gradients, the fold taken, and not taken under a hook."""
    from pyg_tc.nn import conv as C

    calls = []
    for name in ('_sage_dense', '_sage_root'):
        monkeypatch.setattr(C, name, (lambda f, n: lambda *a: calls.append(n) or f(*a))(getattr(C, name), name))
    g = torch.Generator().manual_seed(0)
    N, (i, o) = 60, dims
    x = torch.randn(N, i, generator=g, device='cpu').to(device).requires_grad_()
    ei = torch.randint(0, N, (2, 400), generator=g).to(device)
    ref = pyg_nn.SAGEConv(i, o, bias=bias).to(device)
    ours = pyg_tc.nn.SAGEConv(i, o, bias=bias).to(device)
    ours.load_state_dict(ref.state_dict())
    x2 = x.detach().clone().requires_grad_()
    out, want = ours(x, ei), ref(x2, ei)
    (out.square().sum()).backward()
    (want.square().sum()).backward()
    tol = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, want, **tol)
    torch.testing.assert_close(x.grad, x2.grad, **tol)
    for (n, p), q in zip(ours.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **tol, msg=n)
    assert calls == ['_sage_dense' if o > i else '_sage_root']
    ours.lin_r.register_forward_hook(lambda *a: None)
    ours(x, ei)
    assert len(calls) == 1  # a hook sees PyG's Linear call: no fold


@pytest.mark.parametrize('fn', ['dense', 'root'])
def test_sage_dense_part_gradcheck(fn):
    """float64 gradcheck and gradgradcheck of the folded dense part."""
    from pyg_tc.nn.conv import _sage_dense, _sage_root

    g = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_()  # noqa: E731
    if fn == 'dense':
        args = (r(7, 3), r(5, 3), r(5), r(7, 4), r(5, 4))
        f = _sage_dense
    else:
        args = (r(7, 5), r(5), r(7, 4), r(5, 4))
        f = _sage_root
    assert torch.autograd.gradcheck(f, args)
    assert torch.autograd.gradgradcheck(f, args)
