"""pyg_tc.ops.sddmm: out[e] = <a[dst_e], b[src_e]> in the original edge order."""

from __future__ import annotations

import pytest
import torch
from torch_geometric import EdgeIndex

import pyg_tc
from pyg_tc.formats import CSRGraph, attach
from pyg_tc.ops import sddmm
from pyg_tc.testing import kernel_overrides

from ..conftest import (
    DEVICES,
    DTYPES,
    GRAPH_KINDS,
    assert_close_ref,
    dtype_id,
    features,
    make_graph,
    random_graph,
    sddmm_oracle,
    sizes,
)

WIDTHS = [1, 3, 16, 33, 64, 256]
FULL_KINDS = ['random', 'hub']
REDUCED_DW = [(torch.float32, 1), (torch.float32, 33), (torch.float16, 3), (torch.float16, 16), (torch.bfloat16, 64)]
CASES = [pytest.param(k, dt, F, id=f'{k}-{dtype_id(dt)}-F{F}') for k in FULL_KINDS for dt in DTYPES for F in WIDTHS] + [
    pytest.param(k, dt, F, id=f'{k}-{dtype_id(dt)}-F{F}')
    for k in GRAPH_KINDS
    if k not in FULL_KINDS
    for dt, F in REDUCED_DW
]


def check(out, a, b, ei, what=''):
    ref = sddmm_oracle(a, b, ei)
    mag = sddmm_oracle(a.detach().abs(), b.detach().abs(), ei)
    assert_close_ref(out, ref, mag, a.dtype, what)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind,dtype,F', CASES)
def test_sddmm_matches_oracle(kind, dtype, F, device):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    a = features(nd, F, dtype, device, seed=1)
    b = features(ns, F, dtype, device, seed=2)
    out = sddmm(a, b, ei)
    assert out.shape == (ei.size(1),)
    check(out, a, b, ei, kind)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('adj_kind', ['int32', 'EdgeIndex', 'EdgeIndex_sorted', 'TCEdgeIndex', 'CSRGraph'])
def test_sddmm_adjacency_kinds(adj_kind, device):
    ei, n = make_graph('hub', device)
    a = features(n, 24, device=device, seed=1)
    b = features(n, 24, device=device, seed=2)
    ref_ei = ei
    if adj_kind == 'int32':
        adj = ei.int()
    elif adj_kind == 'EdgeIndex':
        adj = EdgeIndex(ei, sparse_size=(n, n))
    elif adj_kind == 'EdgeIndex_sorted':
        adj, _ = EdgeIndex(ei, sparse_size=(n, n)).sort_by('col')
        ref_ei = adj.as_subclass(torch.Tensor)
    elif adj_kind == 'TCEdgeIndex':
        adj = attach(ei, n)
    else:
        adj = CSRGraph.from_coo(ei[0], ei[1], n, n, chunk=16)
    check(sddmm(a, b, adj), a, b, ref_ei, adj_kind)


@pytest.mark.filterwarnings('ignore::UserWarning')
@pytest.mark.parametrize('device', DEVICES)
def test_sddmm_sparse_adj_t_csr_order(device):
    """For sparse inputs the result is in the sparse tensor's (CSR) order."""
    ei, n = make_graph('random', device)
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.size(1), device=device), (n, n)).coalesce()
    csr = adj_t.to_sparse_csr()
    a = features(n, 8, device=device, seed=1)
    b = features(n, 8, device=device, seed=2)
    idx = adj_t.indices()  # row-major, same order as the CSR
    check(sddmm(a, b, csr), a, b, torch.stack([idx[1], idx[0]]))


@pytest.mark.parametrize('device', DEVICES)
def test_sddmm_zero_width_and_empty(device):
    ei, n = make_graph('random', device)
    out = sddmm(torch.empty(n, 0, device=device), torch.empty(n, 0, device=device), ei)
    assert out.shape == (ei.size(1),) and bool((out == 0).all())
    e, n = make_graph('empty', device)
    assert sddmm(features(n, 4, device=device), features(n, 4, device=device), e).shape == (0,)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_sddmm_unaligned(dtype, device):
    ei, n = make_graph('hub', device)
    F = 64
    buf = features(n * F + 1, 1, dtype, device).view(-1)
    a = buf[1:].view(n, F)
    b = features(F, n, dtype, device, seed=3).t()  # non-contiguous
    check(sddmm(a, b, ei), a, b, ei)


@pytest.mark.parametrize('device', DEVICES)
def test_sddmm_autograd_and_no_grad_paths_agree(device):
    ei, n = make_graph('hub', device)
    a = features(n, 20, device=device, seed=1)
    b = features(n, 20, device=device, seed=2)
    plain = sddmm(a, b, ei)
    tracked = sddmm(a.clone().requires_grad_(), b, ei)
    assert not plain.requires_grad and tracked.requires_grad
    assert torch.equal(plain, tracked.detach())
    with torch.inference_mode():
        assert torch.equal(plain, sddmm(a, b, ei))


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_sddmm_deterministic(dtype, device):
    ei, n = make_graph('hub', device)
    a = features(n, 48, dtype, device, seed=1)
    b = features(n, 48, dtype, device, seed=2)
    assert torch.equal(sddmm(a, b, ei), sddmm(a, b, ei))


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_sddmm_cora(cora, dtype, device):
    ei = cora.edge_index.to(device)
    a = cora.x.to(device).to(dtype)
    b = features(cora.num_nodes, a.size(1), dtype, device)
    check(sddmm(a, b, ei), a, b, ei, 'cora')


@pytest.mark.cuda
@pytest.mark.parametrize('inflight', [4, 8])
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_sddmm_every_inflight(inflight, dtype):
    """The sddmm_inflight override forces the edges each lane keeps in
    flight; every lane count (widths 3 .. 300, scalar and vector paths),
    heavy rows and units shorter than a window must agree with the oracle."""
    for kind in ('hub', 'random', 'duplicates'):
        ei, n = make_graph(kind, 'cuda')
        ns, nd = sizes(n)
        for F in (3, 16, 32, 40, 64, 128, 300):
            a = features(nd, F, dtype, 'cuda', seed=F)
            b = features(ns, F, dtype, 'cuda', seed=F + 1)
            with kernel_overrides(sddmm_inflight=inflight):
                out = sddmm(a, b, ei)
            check(out, a, b, ei, f'{kind} inflight={inflight} F={F}')


@pytest.mark.cuda
def test_sddmm_bad_inflight():
    pyg_tc.ops.ensure()
    if not pyg_tc._library.kernels_loaded():
        pytest.skip('CUDA kernels not loaded')
    with pytest.raises(ValueError, match='sddmm_inflight'):
        with kernel_overrides(sddmm_inflight=6):
            pass


# ---------------------------------------------------------------------------
# gradients


def test_gradcheck():
    ei = torch.cat([random_graph(6, 5, 12, seed=41), torch.tensor([[0, 1, 2], [4, 4, 4]])], 1)
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(5, 3, dtype=torch.float64, generator=gen).requires_grad_()
    b = torch.randn(6, 3, dtype=torch.float64, generator=gen).requires_grad_()

    def f(a, b):
        return sddmm(a, b, ei)

    assert torch.autograd.gradcheck(f, (a, b))
    assert torch.autograd.gradgradcheck(f, (a, b))


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('kind', ['random', 'hub', 'bipartite', 'duplicates', 'empty'])
def test_grads_match_oracle(kind, dtype, device):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    a = features(nd, 21, dtype, device, seed=1, requires_grad=True)
    b = features(ns, 21, dtype, device, seed=2, requires_grad=True)
    go = features(ei.size(1), 1, dtype, device, seed=3).view(-1)
    sddmm(a, b, ei).backward(go)
    a2 = a.detach().double().requires_grad_()
    b2 = b.detach().double().requires_grad_()
    sddmm_oracle(a2, b2, ei).backward(go.double())
    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 6e-2}[dtype]
    for got, ref, name in ((a.grad, a2.grad, 'a'), (b.grad, b2.grad, 'b')):
        assert got.dtype == dtype, name
        scale = max(1.0, ref.abs().max().item()) if ref.numel() else 1.0
        torch.testing.assert_close(got.double().cpu(), ref.cpu(), rtol=tol, atol=tol * scale, msg=f'grad {name}')


# ---------------------------------------------------------------------------
# opcheck


def sddmm_args(g, a, b):
    s, ts = g.sched, g.t_sched
    return (
        g.col,
        a,
        b,
        s.units,
        g.rowptr,
        s.heavy_rows,
        s.heavy_ptr,
        s.num_slots,
        g.t_rowptr,
        g.t_col,
        g.t_perm,
        ts.units,
        ts.heavy_rows,
        ts.heavy_ptr,
        ts.num_slots,
    )


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16], ids=dtype_id)
def test_opcheck_sddmm(dtype, device):
    pyg_tc.ops.ensure()
    ei = random_graph(25, 20, 160, seed=43, device=device)
    g = CSRGraph.from_coo(ei[0], ei[1], 25, 20, chunk=4)
    assert g.sched.num_slots > 0
    a = features(20, 16, dtype, device, seed=1, requires_grad=True)
    b = features(25, 16, dtype, device, seed=2, requires_grad=True)
    torch.library.opcheck(torch.ops.pyg_tc.sddmm_csr.default, sddmm_args(g, a, b))
