"""pyg_tc.ops.spmm against an independent fp64 oracle (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch
from torch_geometric import EdgeIndex

import pyg_tc
from pyg_tc.formats import CSRGraph
from pyg_tc.formats.carrier import csr_order
from pyg_tc.testing import emulate_csr_spmm, kernel_overrides
from pyg_tc.ops import spmm

from ..conftest import (
    DEVICES,
    DTYPES,
    GRAPH_KINDS,
    assert_close_ref,
    cuda_only,
    dtype_id,
    edge_weights,
    features,
    make_graph,
    random_graph,
    sizes,
    spmm_magnitude,
    spmm_oracle,
)

REDUCES = ['sum', 'mean', 'max']
WIDTHS = [1, 3, 16, 33, 64, 256]
FULL_KINDS = ['random', 'hub']
REDUCED_KINDS = [k for k in GRAPH_KINDS if k not in FULL_KINDS]
# the full dtype x width cross only for the large graphs; a spread otherwise
# (scalar path: odd widths; vector path: multiples of 16 bytes)
REDUCED_DW = [(torch.float32, 1), (torch.float32, 33), (torch.float16, 3), (torch.float16, 16), (torch.bfloat16, 64)]

CASES = [pytest.param(k, dt, F, id=f'{k}-{dtype_id(dt)}-F{F}') for k in FULL_KINDS for dt in DTYPES for F in WIDTHS] + [
    pytest.param(k, dt, F, id=f'{k}-{dtype_id(dt)}-F{F}') for k in REDUCED_KINDS for dt, F in REDUCED_DW
]


def check(out, x, ei, nd, w=None, reduce='sum', diag=None, what=''):
    ref = spmm_oracle(x, ei, nd, w, reduce, diag)
    mag = spmm_magnitude(x, ei, nd, w, reduce, diag)
    assert_close_ref(out, ref, mag, x.dtype, what)


# ---------------------------------------------------------------------------
# forward


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('weighted', [False, True], ids=['unweighted', 'weighted'])
@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('kind,dtype,F', CASES)
def test_spmm_matches_oracle(kind, dtype, F, reduce, weighted, device):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    x = features(ns, F, dtype, device, seed=F)
    w = edge_weights(ei.size(1), dtype, device) if weighted else None
    out = spmm(x, ei, w, reduce, size=(ns, nd))
    assert out.device == x.device
    check(out, x, ei, nd, w, reduce, what=f'{kind} {reduce}')


@pytest.mark.parametrize('device', DEVICES)
def test_add_is_sum(device):
    ei, n = make_graph('random', device)
    x = features(n, 8, device=device)
    assert torch.equal(spmm(x, ei, reduce='add'), spmm(x, ei, reduce='sum'))


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['random', 'isolated', 'self_loops'])
def test_default_size_is_x_rows(kind, device):
    """Documented: ``size`` defaults to ``x.size(0)`` for both sides. With
    nodes beyond the largest index (isolated tail) the output must still have
    one row per node of x."""
    ei, n = make_graph(kind, device)
    x = features(n, 4, device=device)
    out = spmm(x, ei)
    assert out.shape == (n, 4)
    check(out, x, ei, n)


@pytest.mark.parametrize('device', DEVICES)
def test_default_size_from_edge_index_sparse_size(device):
    """An EdgeIndex knows its (num_src, num_dst): without ``size`` a bipartite
    EdgeIndex aggregates into num_dst rows (as PyG's propagate does)."""
    ei, (ns, nd) = make_graph('bipartite', device)
    x = features(ns, 4, device=device)
    out = spmm(x, EdgeIndex(ei, sparse_size=(ns, nd)))
    assert out.shape == (nd, 4)
    check(out, x, ei, nd)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('kind', ['random', 'hub', 'bipartite'])
def test_int32_edge_index(kind, reduce, device):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    x = features(ns, 16, device=device)
    w = edge_weights(ei.size(1), device=device)
    out32 = spmm(x, ei.int(), w, reduce, size=(ns, nd))
    check(out32, x, ei, nd, w, reduce)
    out64 = spmm(x, ei, w, reduce, size=(ns, nd))
    assert torch.equal(out32, out64)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('diag_kind', ['node', 'scalar', 'one_element'])
@pytest.mark.parametrize('reduce', ['sum', 'mean'])
@pytest.mark.parametrize('kind', ['self_loops', 'hub', 'isolated'])
def test_diag(kind, reduce, diag_kind, dtype, device):
    ei, n = make_graph(kind, device)
    x = features(n, 17, dtype, device)
    w = edge_weights(ei.size(1), device=device)
    if diag_kind == 'node':
        diag = torch.rand(n, device=device) * 2 - 0.5
    elif diag_kind == 'scalar':
        diag = 0.75
    else:
        diag = torch.tensor([-1.25], device=device)
    out = spmm(x, ei, w, reduce, size=(n, n), diag=diag)
    check(out, x, ei, n, w, reduce, diag)
    # the self term really is added: zero diag gives the plain result
    zero = spmm(x, ei, w, reduce, size=(n, n), diag=0.0)
    torch.testing.assert_close(zero, spmm(x, ei, w, reduce, size=(n, n)), rtol=0, atol=0)


@pytest.mark.parametrize('device', DEVICES)
def test_python_float_diag_keeps_float64(device):
    """A Python-float diag is taken in the input's dtype: 0.1 is not first
    rounded to float32 for float64 features."""
    ei, n = make_graph('self_loops', device)
    x = features(n, 5, torch.float64, device)
    out = spmm(x, ei, size=(n, n), diag=0.1)
    ref = spmm_oracle(x, ei, n, diag=0.1)
    torch.testing.assert_close(out, ref.to(out.dtype), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('sort', [None, 'row', 'col'])
def test_edge_index_input(sort, reduce, device):
    ei, n = make_graph('hub', device)
    w = edge_weights(ei.size(1), device=device)
    x = features(n, 16, device=device)
    adj = EdgeIndex(ei, sparse_size=(n, n))
    if sort is not None:
        adj, perm = adj.sort_by(sort)
        w = w[perm]
    out = spmm(x, adj, w, reduce)
    check(out, x, adj.as_subclass(torch.Tensor), n, w, reduce)


def _sparse_adj_t(ei, w, ns, nd, layout):
    adj_t = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), w, (nd, ns)).coalesce()
    if layout == 'csr':
        return adj_t.to_sparse_csr(), adj_t
    if layout == 'csc':
        return adj_t.to_sparse_csc(), adj_t
    return adj_t, adj_t


@pytest.mark.filterwarnings('ignore::UserWarning')
@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('layout', ['csr', 'csc', 'coo'])
@pytest.mark.parametrize('kind', ['random', 'hub', 'bipartite', 'empty'])
def test_sparse_adj_t_input(kind, layout, reduce, device):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    w = edge_weights(ei.size(1), device=device)
    adj, coo = _sparse_adj_t(ei, w, ns, nd, layout)
    # the coalesced graph (duplicates summed) is what the sparse tensor holds
    idx, val = coo.indices(), coo.values()
    ref_ei = torch.stack([idx[1], idx[0]])
    x = features(ns, 12, device=device)
    out = spmm(x, adj, reduce=reduce)
    assert out.shape == (nd, 12)
    check(out, x, ref_ei, nd, val, reduce)
    with pytest.raises(ValueError, match='either'):
        spmm(x, adj, torch.ones(val.numel(), device=device), reduce=reduce)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('reduce', REDUCES)
def test_csrgraph_input(reduce, device):
    ei, n = make_graph('duplicates', device)
    g = CSRGraph.from_coo(ei[0], ei[1], n, n, chunk=8)
    w = edge_weights(ei.size(1), device=device)
    x = features(n, 24, device=device)
    check(spmm(x, g, w, reduce), x, ei, n, w, reduce)  # weights in edge_index order
    check(pyg_tc.ops.spmm_graph(g, x, csr_order(w, g), reduce), x, ei, n, w, reduce)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('kind', ['random', 'hub'])
def test_flow_target_to_source(kind, reduce, device):
    ei, n = make_graph(kind, device)
    x = features(n, 8, device=device)
    w = edge_weights(ei.size(1), device=device)
    out = spmm(x, ei, w, reduce, size=(n, n), flow='target_to_source')
    check(out, x, ei.flip(0), n, w, reduce)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('reduce', REDUCES)
def test_autograd_and_no_grad_paths_agree(reduce, device):
    """The eager fast path (nothing to differentiate, or no_grad /
    inference_mode) and the autograd path give the same result."""
    ei, n = make_graph('hub', device)
    x = features(n, 20, device=device)
    w = edge_weights(ei.size(1), device=device)
    plain = spmm(x, ei, w, reduce)
    assert not plain.requires_grad
    tracked = spmm(x.clone().requires_grad_(), ei, w, reduce)
    assert tracked.requires_grad
    assert torch.equal(plain, tracked.detach())
    with torch.no_grad():
        ng = spmm(x.clone().requires_grad_(), ei, w.clone().requires_grad_(), reduce)
    assert not ng.requires_grad and torch.equal(plain, ng)
    with torch.inference_mode():
        assert torch.equal(plain, spmm(x, ei, w, reduce))
    check(plain, x, ei, n, w, reduce)
    # only the weights require grad: still tracked
    assert spmm(x, ei, w.clone().requires_grad_(), reduce).requires_grad


@pytest.mark.parametrize('device', DEVICES)
def test_zero_nodes(device):
    ei = torch.empty(2, 0, dtype=torch.long, device=device)
    x = torch.empty(0, 4, device=device)
    for reduce in REDUCES:
        out = spmm(x, ei, reduce=reduce, size=(0, 0))
        assert out.shape == (0, 4)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('reduce', REDUCES)
def test_zero_width(reduce, device):
    ei, n = make_graph('hub', device)
    x = torch.empty(n, 0, device=device)
    assert spmm(x, ei, reduce=reduce).shape == (n, 0)


# ---------------------------------------------------------------------------
# layout and precision corner cases


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('layout', ['offset', 'transposed'])
@pytest.mark.parametrize('reduce', REDUCES)
def test_unaligned_and_noncontiguous_x(layout, reduce, dtype, device):
    """A width that takes the vector path when aligned (64) given as a view
    starting one element into its storage (not 16-byte aligned: scalar path
    on CUDA) or as a transposed (non-contiguous) view."""
    ei, n = make_graph('hub', device)
    F = 64
    if layout == 'offset':
        buf = features(n * F + 1, 1, dtype, device).view(-1)
        x = buf[1:].view(n, F)
        assert x.is_contiguous() and x.storage_offset() == 1
    else:
        x = features(F, n, dtype, device).t()
        assert not x.is_contiguous()
    w = edge_weights(ei.size(1), device=device)
    check(spmm(x, ei, w, reduce), x, ei, n, w, reduce)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize(
    'F,unaligned', [(520, False), (1030, False), (520, True)], ids=['F520', 'F1030', 'F520-unaligned']
)
@pytest.mark.parametrize('reduce', REDUCES)
def test_wide_features(F, unaligned, reduce, dtype, device):
    """Widths larger than one feature slice (several blockIdx.y slices), on
    the vector, padded (odd width) and scalar (unaligned) paths; with a row
    heavy enough to be split."""
    ei = random_graph(200, 150, 1500, seed=11, device=device)
    heavy = torch.stack(
        [torch.randint(0, 200, (600,), generator=torch.Generator().manual_seed(3)), torch.zeros(600, dtype=torch.long)]
    ).to(device)
    ei = torch.cat([ei, heavy], 1)
    if unaligned:
        x = features(200 * F + 1, 1, dtype, device).view(-1)[1:].view(200, F)
    else:
        x = features(200, F, dtype, device)
    w = edge_weights(ei.size(1), device=device)
    check(spmm(x, ei, w, reduce, size=(200, 150)), x, ei, 150, w, reduce)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize('mode', ['sum_inv_deg', 'mean', 'max'])
@pytest.mark.parametrize('kind', ['random', 'hub'])
def test_half_no_overflow(kind, mode, dtype, device):
    """Half inputs whose fp32 sum overflows fp16 but whose result does not
    (60000 per edge, averaged) must not give inf: accumulation is in fp32."""
    ei, n = make_graph(kind, device)
    x = torch.full((n, 16), 60000.0, device=device).to(dtype)
    x[1::2] = -x[1::2]  # negative values too (sum -60000 / max -60000)
    deg = torch.bincount(ei[1], minlength=n)
    if mode == 'sum_inv_deg':
        w = 1.0 / deg[ei[1]].float()
        out = spmm(x, ei, w, 'sum')
    else:
        w = None
        out = spmm(x, ei, reduce=mode)
    assert torch.isfinite(out).all()
    red = 'sum' if mode == 'sum_inv_deg' else mode
    ref = spmm_oracle(x, ei, n, w, red)
    assert ref.abs().max() <= 65504
    assert_close_ref(out, ref, spmm_magnitude(x, ei, n, w, red), dtype, mode)
    # the hub row really did sum thousands of 60000s
    assert deg.max() >= (5000 if kind == 'hub' else 10)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('F', [33, 64])
@pytest.mark.parametrize('reduce', REDUCES)
def test_deterministic(reduce, F, dtype, device):
    """No atomics: two runs (forward and backward) are bitwise identical."""
    ei, n = make_graph('hub', device)
    w = edge_weights(ei.size(1), device=device).requires_grad_()
    x = features(n, F, dtype, device, requires_grad=True)
    go = features(n, F, dtype, device, seed=5)
    results = []
    for _ in range(2):
        x.grad = w.grad = None
        out = spmm(x, ei, w, reduce)
        out.backward(go)
        results.append((out.detach().clone(), x.grad.clone(), w.grad.clone()))
    for a, b in zip(*results):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------
# schedule emulation (the CUDA algorithm, run on the CPU)


@pytest.mark.parametrize('transpose', [False, True], ids=['forward', 'transpose'])
@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('chunk', [1, 4, 256])
@pytest.mark.parametrize('kind', GRAPH_KINDS)
def test_emulate_spmm(kind, chunk, reduce, transpose):
    ei, n = make_graph(kind)
    ns, nd = sizes(n)
    g = CSRGraph.from_coo(ei[0], ei[1], ns, nd, chunk=chunk)
    w = edge_weights(ei.size(1))
    w_csr = csr_order(w, g)
    if chunk < 256 and ei.size(1):
        assert g.sched.num_slots > 0  # heavy-row splitting is exercised
    use_diag = reduce != 'max' and ns == nd
    diag = torch.rand(nd) if use_diag else None
    if transpose:
        x = features(nd, 7)
        out = emulate_csr_spmm(g, x, w_csr[g.t_perm.long()], reduce, diag, transpose=True)
        ref_ei, rows = ei.flip(0), ns
    else:
        x = features(ns, 7)
        out = emulate_csr_spmm(g, x, w_csr, reduce, diag)
        ref_ei, rows = ei, nd
    assert not torch.isnan(out).any(), 'a row was never written'
    check(out, x, ref_ei, rows, w, reduce, diag)


# ---------------------------------------------------------------------------
# real graph


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('reduce', REDUCES)
def test_cora(cora, reduce, dtype, device):
    ei = cora.edge_index.to(device)
    n = cora.num_nodes
    deg = torch.bincount(ei[1], minlength=n).float() + 1
    dis = deg.rsqrt()
    w = dis[ei[0]] * dis[ei[1]]  # GCN normalisation (self loop as diag)
    x = cora.x.to(device).to(dtype)
    if reduce != 'sum':
        x = x[:, :200] * features(n, 200, dtype, device)
    diag = 1.0 / deg if reduce != 'max' else None
    out = spmm(x, ei, w, reduce, diag=diag)
    check(out, x, ei, n, w, reduce, diag, 'cora')


# ---------------------------------------------------------------------------
# gradients


def _grad_inputs(n, num_edges, diag_kind, seed):
    # a row with several in-edges, one isolated node (n - 1) and random edges
    ei = torch.cat([random_graph(n - 1, n - 1, num_edges, seed=seed), torch.tensor([[3, 5, 1], [0, 0, 0]])], 1)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, dtype=torch.float64, generator=gen).requires_grad_()
    w = torch.rand(ei.size(1), dtype=torch.float64, generator=gen).requires_grad_()
    inputs = [x, w]
    if diag_kind == 'node':
        inputs.append(torch.rand(n, dtype=torch.float64, generator=gen).requires_grad_())
    elif diag_kind == 'one_element':
        inputs.append(torch.rand(1, dtype=torch.float64, generator=gen).requires_grad_())
    return ei, tuple(inputs)


@pytest.mark.parametrize('reduce', ['sum', 'mean'])
@pytest.mark.parametrize('diag_kind', [None, 'node', 'one_element'])
def test_gradcheck(reduce, diag_kind):
    n = 10
    ei, inputs = _grad_inputs(n, 30, diag_kind, 21)

    def f(x, w, *d):
        return spmm(x, ei, w, reduce, size=(n, n), diag=d[0] if d else None)

    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize('reduce', ['sum', 'mean'])
def test_gradgradcheck(reduce):
    n = 6
    ei, inputs = _grad_inputs(n, 12, 'node', 23)

    def f(x, w, d):
        return spmm(x, ei, w, reduce, size=(n, n), diag=d)

    assert torch.autograd.gradgradcheck(f, inputs)


@pytest.mark.parametrize('weighted', [False, True])
def test_gradcheck_max(weighted):
    """Max on a graph without exactly tied messages (distinct sources per row)."""
    ei = random_graph(10, 8, 45, seed=22, unique=True)
    x = torch.randn(10, 3, dtype=torch.float64, requires_grad=True)
    inputs = [x]
    if weighted:
        inputs.append(torch.rand(ei.size(1), dtype=torch.float64, requires_grad=True) + 0.5)
        inputs[-1] = inputs[-1].detach().requires_grad_()

    def f(x, *w):
        return spmm(x, ei, w[0] if w else None, 'max', size=(10, 8))

    assert torch.autograd.gradcheck(f, tuple(inputs))


GRAD_CASES = [
    pytest.param(k, torch.float32, id=f'{k}-float32')
    for k in ['random', 'hub', 'duplicates', 'isolated', 'empty', 'bipartite']
] + [pytest.param(k, dt, id=f'{k}-{dtype_id(dt)}') for k in ['random', 'hub'] for dt in (torch.float16, torch.bfloat16)]
GRAD_TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 6e-2}


def _assert_grad(got, ref, dtype, what):
    assert got is not None, f'{what}: no gradient'
    assert got.dtype == dtype, f'{what}: gradient dtype {got.dtype}'
    ref = ref.double().cpu()
    tol = GRAD_TOL[dtype]
    scale = max(1.0, ref.abs().max().item()) if ref.numel() else 1.0
    torch.testing.assert_close(got.double().cpu(), ref, rtol=tol, atol=tol * scale, msg=what)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('weighted', [False, True], ids=['unweighted', 'weighted'])
@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('kind,dtype', GRAD_CASES)
def test_grads_match_oracle(kind, dtype, reduce, weighted, device):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    F = 19
    x = features(ns, F, dtype, device, requires_grad=True)
    w = edge_weights(ei.size(1), torch.float32, device).requires_grad_() if weighted else None
    d = None
    if reduce != 'max' and ns == nd:
        d = (torch.rand(nd, device=device) - 0.3).requires_grad_()
    go = features(nd, F, dtype, device, seed=7)
    out = spmm(x, ei, w, reduce, size=(ns, nd), diag=d)
    out.backward(go)

    x2 = x.detach().double().requires_grad_()
    w2 = None if w is None else w.detach().double().requires_grad_()
    d2 = None if d is None else d.detach().double().requires_grad_()
    if reduce == 'max' and w is not None and dtype != torch.float32:
        # weighted messages that round to the same half value are ties in half
        # precision (as in PyG run in half); the fp64 oracle must see them too
        src, dst = ei[0].long(), ei[1].long()
        msg = x2[src] * w2.unsqueeze(1)
        msg = msg + (msg.float().to(dtype).double() - msg).detach()
        ref = torch.zeros(nd, F, dtype=torch.float64, device=device).scatter_reduce(
            0, dst.unsqueeze(1).expand(-1, F), msg, 'amax', include_self=False
        )
    else:
        ref = spmm_oracle(x2, ei, nd, w2, reduce, d2)
    ref.backward(go.double())
    _assert_grad(x.grad, x2.grad, dtype, 'grad x')
    if w is not None:  # computed by an SDDMM in x's precision, returned in w's dtype
        assert w.grad.dtype == torch.float32
        _assert_grad(w.grad.to(dtype), w2.grad, dtype, 'grad edge_weight')
    if d is not None:
        _assert_grad(d.grad, d2.grad, torch.float32, 'grad diag')


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('weighted', [False, True], ids=['unweighted', 'weighted'])
@pytest.mark.parametrize('kind', ['random', 'duplicates', 'hub'])
def test_max_grad_with_zero_and_tied_messages(kind, weighted, device):
    """Max over messages that are exactly 0 or exactly tied (ReLU features,
    zero weights, repeated edges): the gradient is split as PyG's
    scatter_reduce('amax', include_self=False) splits it."""
    ei, n = make_graph(kind, device)
    x0 = torch.relu(features(n, 6, device=device)).round()  # many 0s, many exact ties
    x = x0.clone().requires_grad_()
    w = None
    if weighted:
        w = edge_weights(ei.size(1), device=device).clamp(min=0).round().requires_grad_()
    go = features(n, 6, device=device, seed=8)
    spmm(x, ei, w, 'max').backward(go)
    x2 = x0.double().requires_grad_()
    w2 = None if w is None else w.detach().double().requires_grad_()
    spmm_oracle(x2, ei, n, w2, 'max').backward(go.double())
    _assert_grad(x.grad, x2.grad, torch.float32, 'grad x')
    if w is not None:
        _assert_grad(w.grad, w2.grad, torch.float32, 'grad edge_weight')


# ---------------------------------------------------------------------------
# torch.library.opcheck on the registered op


def spmm_args(g, x, value, diag, reduce, t_value=False):
    s, ts = g.sched, g.t_sched
    tv = value.detach()[g.t_perm.long()] if (t_value and value is not None) else None
    return (
        g.rowptr,
        g.col,
        value,
        x,
        s.units,
        s.heavy_rows,
        s.heavy_ptr,
        diag,
        s.num_slots,
        reduce,
        g.t_rowptr,
        g.t_col,
        g.t_perm,
        tv,
        ts.units,
        ts.heavy_rows,
        ts.heavy_ptr,
        ts.num_slots,
    )


SPMM_SAMPLES = {
    'sum-value-diag-tvalue': dict(reduce='sum', value=True, diag=True, t_value=True),
    'mean-diag': dict(reduce='mean', value=False, diag=True, t_value=False),
    'max-value': dict(reduce='max', value=True, diag=False, t_value=False),
    'sum-value-fp16': dict(reduce='sum', value=True, diag=False, t_value=False, dtype=torch.float16),
}


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('sample', list(SPMM_SAMPLES))
def test_opcheck_spmm(sample, device):
    pyg_tc.ops.ensure()
    cfg = SPMM_SAMPLES[sample]
    ei = random_graph(30, 30, 200, seed=31, device=device, unique=True)
    g = CSRGraph.from_coo(ei[0], ei[1], 30, 30, chunk=4)  # heavy rows on the GPU path
    assert g.sched.num_slots > 0
    x = features(30, 20, cfg.get('dtype', torch.float32), device, requires_grad=True)
    value = edge_weights(g.num_edges, device=device).requires_grad_() if cfg['value'] else None
    diag = torch.rand(30, device=device).requires_grad_() if cfg['diag'] else None
    args = spmm_args(g, x, value, diag, cfg['reduce'], cfg['t_value'])
    torch.library.opcheck(torch.ops.pyg_tc.spmm_csr.default, args)


# ---------------------------------------------------------------------------
# CUDA only: the kernels themselves


@cuda_only
def test_cuda_kernels_are_used():
    """On a GPU machine the CUDA tests must exercise the kernels, not the
    pure-PyTorch fallback."""
    from pyg_tc import _kernels

    pyg_tc.ops.ensure()
    assert pyg_tc._library.kernels_loaded(), f'kernels not loaded: {_kernels.status()}'


SPMM_CONFIGS = [(4, 1), (8, 1), (16, 1), (32, 1), (8, 2), (16, 2), (32, 2)]


@cuda_only
@pytest.mark.parametrize('config', SPMM_CONFIGS, ids=str)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_every_kernel_config(config, dtype):
    """The spmm_config override forces each (lanes, vectors) instantiation;
    all must agree with the oracle on every path (scalar, padded, vector,
    multi-slice) and with heavy rows."""
    ei, n = make_graph('hub', 'cuda')
    w = edge_weights(ei.size(1), device='cuda')
    for F in (3, 16, 33, 64, 256, 520):
        x = features(n, F, dtype, 'cuda', seed=F)
        for reduce in REDUCES:
            with kernel_overrides(spmm_config=config):
                out = spmm(x, ei, w, reduce)
            check(out, x, ei, n, w, reduce, what=f'{config} F={F} {reduce}')


@cuda_only
def test_bad_kernel_config():
    pyg_tc.ops.ensure()
    if not pyg_tc._library.kernels_loaded():
        pytest.skip('CUDA kernels not loaded')
    with pytest.raises(ValueError, match='unsupported spmm_config'):
        with kernel_overrides(spmm_config=(7, 3)):
            pass
    with pytest.raises(ValueError, match='unknown launch override'):
        with kernel_overrides(spmm_lanes=8):
            pass
    assert pyg_tc._kernels.overrides() == {}
