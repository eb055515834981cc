"""MaxK selection, CBSR SpGEMM (forward) and SSpMM (backward): against
independent dense oracles, on CPU (reference) and CUDA (kernels)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_tc.formats import CBSR, CSRGraph
from pyg_tc.formats.cbsr import index_dtype
from pyg_tc.ops import cbsr_sspmm_reference
from pyg_tc.nn import MaxK
from pyg_tc.ops import cbsr_spmm_graph, maxk, maxk_reference, spmm

from ..conftest import (
    DEVICES,
    DTYPES,
    GRAPH_KINDS,
    assert_close_ref,
    dtype_id,
    edge_weights,
    features,
    make_graph,
    sizes,
    spmm_magnitude,
    spmm_oracle,
)


def oracle_topk(x: torch.Tensor, k: int):
    """Independent oracle: per row, walk columns by (value desc, column asc)."""
    cols = []
    for r in x.double().cpu().tolist():
        key = sorted(range(len(r)), key=lambda c: (-(float('inf') if r[c] != r[c] else r[c]), c))
        sel = sorted(key[:k])
        cols.append(sel)
    idx = torch.tensor(cols, dtype=torch.long).view(x.size(0), k)
    return x.gather(1, idx.to(x.device)), idx


# ---------------------------------------------------------------------------
# selection


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize(
    'F,k', [(2, 1), (7, 3), (16, 4), (33, 5), (64, 16), (100, 32), (256, 16), (256, 255), (300, 64), (1024, 96)]
)
def test_maxk_matches_oracle(device, dtype, F, k):
    x = features(37, F, dtype, device, seed=F + k)
    out = maxk(x, k)
    assert isinstance(out, CBSR) and out.k == k and out.width == F
    assert out.indices.dtype == index_dtype(F) and out.values.dtype == dtype
    vals, idx = oracle_topk(x, k)
    assert torch.equal(out.indices.long().cpu(), idx)
    assert torch.equal(out.values, vals)
    dense = out.to_dense()
    assert int((dense != 0).sum(1).max()) <= k


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_maxk_ties_nan_inf_and_signed_zero(device, dtype):
    rows = [
        [1.0] * 40,  # all tied: lowest columns win
        [0.0, -0.0] * 20,  # -0 == +0
        [float('nan')] + [1.0] * 39,  # NaN counts as largest
        [float('-inf')] * 30 + [float('inf')] * 10,  # infinities
        [3.0, 2.0, 2.0, 2.0, 2.0] + [-1.0] * 35,  # ties straddle the threshold
        list(range(40)),  # distinct
        [1e30] + [1e-30 * i for i in range(39)],  # huge dynamic range
    ]
    x = torch.tensor(rows, dtype=torch.float32).to(dtype).to(device)
    for k in (1, 3, 5, 20, 39):
        out = maxk(x, k)
        vals, idx = oracle_topk(x, k)
        assert torch.equal(out.indices.long().cpu(), idx), k
        assert torch.equal(out.values.isnan(), vals.isnan())
        assert torch.equal(torch.nan_to_num(out.values), torch.nan_to_num(vals))


@pytest.mark.parametrize('device', DEVICES)
def test_maxk_identity_when_k_covers_the_row(device):
    x = features(9, 12, device=device)
    for k in (12, 50):
        out = maxk(x, k)
        assert out.k == 12 and torch.equal(out.to_dense(), x)


def test_maxk_validates_k_and_input():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match='k must be >= 1'):
        maxk(x, 0)
    with pytest.raises(TypeError, match='k must be an int'):
        maxk(x, 2.0)
    with pytest.raises(TypeError, match='k must be an int'):
        maxk(x, True)
    with pytest.raises(TypeError, match='k must be an int'):
        maxk(x, torch.tensor([2]))
    with pytest.raises(TypeError, match='k must be an int'):
        maxk(x, torch.tensor(2.0))
    with pytest.raises(TypeError, match='2-D floating'):
        maxk(torch.arange(8).view(2, 4), 2)
    with pytest.raises(TypeError, match='2-D floating'):
        maxk(torch.randn(8), 2)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_maxk_backward_only_through_kept(device, dtype):
    x = features(20, 48, dtype, device, requires_grad=True)
    out = maxk(x, 6)
    g = torch.randn(20, 6, device=device).to(dtype)
    out.values.backward(g)
    expect = torch.zeros(20, 48, dtype=dtype, device=device).scatter(1, out.indices.long(), g)
    assert torch.equal(x.grad, expect)


def test_maxk_reference_is_the_cpu_op():
    x = torch.randn(30, 50)
    v, i = maxk_reference(x, 7)
    out = maxk(x, 7)
    assert torch.equal(out.values, v) and torch.equal(out.indices, i)


# ---------------------------------------------------------------------------
# CBSR SpGEMM / SSpMM


def _cbsr(n, F, k, dtype, device, seed=0, requires_grad=False):
    x = features(n, F, dtype, device, seed=seed)
    c = maxk(x, k)
    v = c.values.detach().clone().requires_grad_(requires_grad)
    return CBSR(v, c.indices, F)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('kind', GRAPH_KINDS)
@pytest.mark.parametrize('F,k', [(16, 4), (33, 7), (256, 16), (300, 40), (64, 2), (512, 1), (2048, 4)])
def test_cbsr_spmm_matches_dense(device, dtype, kind, F, k):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    x = _cbsr(ns, F, k, dtype, device, seed=F)
    dense = x.to_dense()
    for reduce in ('sum', 'mean'):
        out = spmm(x, ei, reduce=reduce, size=(ns, nd))
        ref = spmm_oracle(dense, ei, nd, reduce=reduce)
        assert_close_ref(out, ref, spmm_magnitude(dense, ei, nd, reduce=reduce), dtype, f'{kind} {reduce}')


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('kind', ['random', 'hub', 'self_loops', 'isolated', 'bipartite'])
@pytest.mark.parametrize('reduce', ['sum', 'mean'])
@pytest.mark.parametrize('weighted', [False, True], ids=['unweighted', 'weighted'])
def test_cbsr_gradients_match_dense(device, dtype, kind, reduce, weighted):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    F, k = 64, 8
    x = _cbsr(ns, F, k, dtype, device, seed=3, requires_grad=True)
    w = edge_weights(ei.size(1), device=device).requires_grad_(weighted) if weighted else None
    diag = None
    if reduce == 'sum' and ns == nd:
        diag = (torch.rand(nd, device=device) + 0.5).requires_grad_(True)
    out = spmm(x, ei, w, reduce, size=(ns, nd), diag=diag)
    G = features(nd, F, dtype, device, seed=9)
    out.backward(G)
    # the oracle: float64 through the differentiable to_dense
    xv = x.values.detach().double().requires_grad_(True)
    wd = w.detach().double().requires_grad_(True) if weighted else None
    dd = diag.detach().double().requires_grad_(True) if diag is not None else None
    dense = CBSR(xv, x.indices, F).to_dense()
    ref = spmm_oracle(dense, ei, nd, wd, reduce, diag=dd)
    ref.backward(G.double())
    mag = spmm_magnitude(G.abs(), ei.flip(0), ns, None if w is None else w.abs(), 'sum').gather(1, x.indices.long())
    assert_close_ref(x.values.grad, xv.grad, mag + 1, dtype, 'grad values')
    if weighted:
        assert w.grad is not None
        torch.testing.assert_close(
            w.grad.double(),
            wd.grad,
            rtol=5e-2 if dtype != torch.float32 else 1e-4,
            atol=5e-2 if dtype != torch.float32 else 1e-4,
        )
    if diag is not None:
        torch.testing.assert_close(
            diag.grad.double(),
            dd.grad,
            rtol=5e-2 if dtype != torch.float32 else 1e-4,
            atol=5e-2 if dtype != torch.float32 else 1e-4,
        )


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('F,k', [(8, 1), (40, 3), (256, 32), (1024, 64), (520, 33)])
def test_cbsr_sspmm_op_matches_reference(device, dtype, F, k):
    """The raw SSpMM op (kernel on CUDA) against its reference, widths with
    int16 indices included."""
    ei, n = make_graph('hub', device)
    g = CSRGraph.from_coo(ei[0], ei[1], n, n, chunk=64)
    x = _cbsr(n, F, k, dtype, device, seed=k)
    G = features(n, F, dtype, device, seed=11)
    w = edge_weights(g.num_edges, device=device)
    s = g.sched
    for reduce in ('sum', 'mean'):
        out = torch.ops.pyg_tc.cbsr_sspmm(
            g.rowptr, g.col, w, G, x.indices, s.units, s.heavy_rows, s.heavy_ptr, s.num_slots, None, reduce
        )
        ref = cbsr_sspmm_reference(
            g.rowptr.cpu(), g.col.cpu(), w.double().cpu(), G.double().cpu(), x.indices.cpu(), None, reduce
        )
        mag = cbsr_sspmm_reference(
            g.rowptr.cpu(), g.col.cpu(), w.double().abs().cpu(), G.double().abs().cpu(), x.indices.cpu(), None, reduce
        )
        assert_close_ref(out, ref, mag, dtype, f'sspmm {reduce}')


def test_cbsr_errors():
    ei, n = make_graph('random')
    x = _cbsr(n, 32, 4, torch.float32, 'cpu')
    g = CSRGraph.from_coo(ei[0], ei[1], n, n)
    with pytest.raises(ValueError, match="'sum' and 'mean'"):
        cbsr_spmm_graph(g, x, reduce='max')
    with pytest.raises(ValueError, match="diag is supported with reduce='sum'"):
        cbsr_spmm_graph(g, x, reduce='mean', diag=1.0)
    with pytest.raises(ValueError, match='stale graph metadata'):
        cbsr_spmm_graph(g, _cbsr(n + 1, 32, 4, torch.float32, 'cpu'))
    with pytest.raises(TypeError, match='expected CBSR'):
        cbsr_spmm_graph(g, torch.randn(n, 32))
    with pytest.raises(TypeError, match='must be torch.uint8'):
        CBSR(torch.randn(3, 2), torch.zeros(3, 2, dtype=torch.int64), 16)
    with pytest.raises(TypeError, match='must be torch.int16'):
        CBSR(torch.randn(3, 2), torch.zeros(3, 2, dtype=torch.uint8), 300)
    with pytest.raises(ValueError, match='both be'):
        CBSR(torch.randn(3, 2), torch.zeros(3, 3, dtype=torch.uint8), 16)
    with pytest.raises(ValueError, match='up to 32768'):
        index_dtype(40000)
    with pytest.raises(ValueError, match='repeated'):
        CBSR(torch.randn(2, 2), torch.tensor([[1, 1], [0, 2]], dtype=torch.uint8), 16)
    with pytest.raises(ValueError, match='out of range'):
        CBSR(torch.randn(2, 2), torch.tensor([[1, 3], [0, 20]], dtype=torch.uint8), 16)
    bad = CBSR(torch.randn(2, 2), torch.tensor([[1, 1], [0, 2]], dtype=torch.uint8), 16, check=False)
    with pytest.raises(ValueError, match='repeated'):
        bad.validate()


def test_cbsr_opcheck_and_gradcheck_fp64():
    ei, n = make_graph('duplicates')
    g = CSRGraph.from_coo(ei[0], ei[1], n, n, chunk=4)
    x = _cbsr(n, 12, 3, torch.float64, 'cpu', requires_grad=True)
    w = edge_weights(g.num_edges, torch.float64).requires_grad_(True)
    d = torch.rand(n, dtype=torch.float64, requires_grad=True)
    s = g.sched
    args = (g.rowptr, g.col, w, x.values, x.indices, 12, s.units, s.heavy_rows, s.heavy_ptr, s.num_slots, d, 'sum')
    torch.library.opcheck(torch.ops.pyg_tc.cbsr_spmm.default, args)
    torch.autograd.gradcheck(
        lambda v, ww, dd: torch.ops.pyg_tc.cbsr_spmm(
            g.rowptr, g.col, ww, v, x.indices, 12, s.units, s.heavy_rows, s.heavy_ptr, s.num_slots, dd, 'sum'
        ),
        (x.values, w, d),
    )
    G = torch.randn(n, 12, dtype=torch.float64, requires_grad=True)
    sargs = (g.rowptr, g.col, None, G, x.indices, s.units, s.heavy_rows, s.heavy_ptr, s.num_slots, None, 'mean')
    torch.library.opcheck(torch.ops.pyg_tc.cbsr_sspmm.default, sargs)
    torch.autograd.gradcheck(
        lambda gg: torch.ops.pyg_tc.cbsr_sspmm(
            g.rowptr, g.col, None, gg, x.indices, s.units, s.heavy_rows, s.heavy_ptr, s.num_slots, None, 'mean'
        ),
        (G,),
    )
    xx = torch.randn(n, 10, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.pyg_tc.maxk_select.default, (xx, 4))
    torch.autograd.gradcheck(lambda t: torch.ops.pyg_tc.maxk_select(t, 4)[0], (xx,))
    # gradgradcheck of the SpGEMM through the values (SSpMM's backward is SpGEMM)
    torch.autograd.gradgradcheck(
        lambda v: torch.ops.pyg_tc.cbsr_spmm(
            g.rowptr, g.col, None, v, x.indices, 12, s.units, s.heavy_rows, s.heavy_ptr, s.num_slots, None, 'mean'
        ),
        (x.values,),
    )


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_cuda_kernels_opcheck(dtype):
    ei, n = make_graph('hub', 'cuda')
    g = CSRGraph.from_coo(ei[0], ei[1], n, n)
    x = _cbsr(n, 64, 8, dtype, 'cuda', requires_grad=True)
    s = g.sched
    args = (
        g.rowptr,
        g.col,
        None,
        x.values,
        x.indices,
        64,
        s.units,
        s.heavy_rows,
        s.heavy_ptr,
        s.num_slots,
        None,
        'mean',
    )
    torch.library.opcheck(
        torch.ops.pyg_tc.cbsr_spmm.default,
        args,
        test_utils=('test_schema', 'test_faketensor', 'test_aot_dispatch_static'),
    )
    xx = features(n, 64, dtype, 'cuda', requires_grad=True)
    torch.library.opcheck(
        torch.ops.pyg_tc.maxk_select.default,
        (xx, 8),
        test_utils=('test_schema', 'test_faketensor', 'test_aot_dispatch_static'),
    )


@pytest.mark.cuda
def test_cuda_sspmm_deterministic_mode_uses_reference():
    ei, n = make_graph('random', 'cuda')
    x = _cbsr(n, 64, 8, torch.float32, 'cuda', requires_grad=True)
    G = features(n, 64, device='cuda')
    outs = []
    for det in (False, True):
        x.values.grad = None
        torch.use_deterministic_algorithms(det)
        try:
            spmm(x, ei).backward(G)
        finally:
            torch.use_deterministic_algorithms(False)
        outs.append(x.values.grad.clone())
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
def test_cuda_cbsr_spmm_is_reproducible():
    ei, n = make_graph('hub', 'cuda')
    x = _cbsr(n, 256, 16, torch.float32, 'cuda')
    a, b = spmm(x, ei), spmm(x, ei)
    assert torch.equal(a, b)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('F', [5, 64, 256, 700])
def test_maxk_many_ties(device, dtype, F):
    """Small-integer rows (ties everywhere) and rows with signed zeros."""
    g = torch.Generator().manual_seed(F)
    x = torch.randint(-3, 4, (64, F), generator=g).float()
    x[::3] = x[::3] * 0.0 * torch.where(torch.rand(x[::3].shape, generator=g) > 0.5, 1.0, -1.0)
    x = x.to(dtype).to(device)
    for k in sorted({1, 2, F // 3 or 1, F - 1}):
        out = maxk(x, k)
        vals, idx = oracle_topk(x, k)
        assert torch.equal(out.indices.long().cpu(), idx), k
        assert torch.equal(out.values, vals)


@pytest.mark.parametrize(
    'k',
    [np.int64(3), np.int32(3), torch.tensor(3), torch.tensor(3, dtype=torch.int32)],
    ids=['np.int64', 'np.int32', 'tensor', 'tensor-int32'],
)
def test_maxk_takes_any_integral_k(k):
    """numpy integers and 0-d integer tensors work like the int they hold."""
    x = torch.randn(6, 10)
    layer = MaxK(k)
    assert layer.k == 3 and type(layer.k) is int
    assert torch.equal(layer(x).to_dense(), maxk(x, 3).to_dense())
    assert torch.equal(maxk(x, k).to_dense(), maxk(x, 3).to_dense())
