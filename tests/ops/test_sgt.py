"""TC-GNN tensor-core ops (backend='sgt'): SpMM and SDDMM against the fp64
oracle, gradients, precision modes, warps, split windows, determinism,
opcheck, errors; and the CPU emulation of both kernels."""

from __future__ import annotations

import pytest
import torch

from pyg_tc import ops
from pyg_tc.formats import CSRGraph
from pyg_tc.formats.carrier import csr_order
from pyg_tc.formats.sgt import SGT
from pyg_tc.testing import emulate_sgt_sddmm, emulate_sgt_spmm
from pyg_tc.ops import sgt_of, sgt_sddmm_cells, sgt_spmm_cells

from ..conftest import (
    DEVICES,
    DTYPES,
    GRAPH_KINDS,
    assert_close_ref,
    dtype_id,
    edge_weights,
    features,
    make_graph,
    sddmm_oracle,
    sizes,
    spmm_magnitude,
    spmm_oracle,
)

WIDTHS = [1, 3, 8, 16, 33, 64, 130]
CASES = [
    pytest.param(k, dt, F, id=f'{k}-{dtype_id(dt)}-F{F}') for k in ('random', 'hub') for dt in DTYPES for F in WIDTHS
] + [
    pytest.param(k, dt, F, id=f'{k}-{dtype_id(dt)}-F{F}')
    for k in GRAPH_KINDS
    if k not in ('random', 'hub')
    for dt, F in ((torch.float32, 5), (torch.float16, 16), (torch.bfloat16, 64), (torch.float32, 96))
]


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind,dtype,F', CASES)
def test_spmm_matches_oracle(kind, dtype, F, device):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    x = features(ns, F, dtype, device, seed=1)
    w = edge_weights(ei.size(1), device=device, seed=2)
    out = ops.spmm(x, ei, w, size=(ns, nd), backend='sgt')
    assert_close_ref(out, spmm_oracle(x, ei, nd, w), spmm_magnitude(x, ei, nd, w), dtype, kind)
    if ns == nd:
        diag = torch.rand(nd, device=device)
        out = ops.spmm(x, ei, w, backend='sgt', diag=diag)
        ref = spmm_oracle(x, ei, nd, w, diag=diag)
        assert_close_ref(out, ref, spmm_magnitude(x, ei, nd, w, diag=diag), dtype, kind + ' diag')


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind,dtype,F', CASES)
def test_sddmm_matches_oracle(kind, dtype, F, device):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    a = features(nd, F, dtype, device, seed=1)
    b = features(ns, F, dtype, device, seed=2)
    out = ops.sddmm(a, b, ei, size=(ns, nd), backend='sgt')
    mag = sddmm_oracle(a.abs(), b.abs(), ei)
    assert_close_ref(out, sddmm_oracle(a, b, ei), mag, dtype, kind)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('kind', ['random', 'hub', 'duplicates', 'not_tile_multiple', 'bipartite'])
def test_gradients_match_csr(kind, dtype, device):
    """x, edge-weight and diag gradients of the SpMM, a and b gradients of the
    SDDMM: the tensor-core path against the CSR path (both checked against
    the oracle elsewhere), in fp64 on the CPU and per dtype on the GPU."""
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    F = 24
    x = features(ns, F, dtype, device, seed=3, requires_grad=True)
    w = edge_weights(ei.size(1), device=device, seed=4).requires_grad_()
    diag = torch.rand(nd, device=device).requires_grad_() if ns == nd else None
    gout = features(nd, F, dtype, device, seed=5)
    grads = {}
    for be in ('csr', 'sgt'):
        out = ops.spmm(x, ei, w, size=(ns, nd), backend=be, diag=diag)
        inputs = (x, w) + ((diag,) if diag is not None else ())
        grads[be] = torch.autograd.grad(out, inputs, gout)
    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 6e-2}[dtype]
    for gc, gs in zip(grads['csr'], grads['sgt']):
        scale = gc.double().abs().max().clamp(min=1)
        assert (gc.double() - gs.double()).abs().max() <= tol * scale
    a = features(nd, F, dtype, device, seed=6, requires_grad=True)
    b = features(ns, F, dtype, device, seed=7, requires_grad=True)
    ge = features(ei.size(1), 1, dtype, device, seed=8).view(-1)
    g2 = {be: torch.autograd.grad(ops.sddmm(a, b, ei, size=(ns, nd), backend=be), (a, b), ge) for be in ('csr', 'sgt')}
    for gc, gs in zip(g2['csr'], g2['sgt']):
        scale = gc.double().abs().max().clamp(min=1)
        assert (gc.double() - gs.double()).abs().max() <= tol * scale


def test_gradcheck_fp64():
    ei, n = make_graph('duplicates')
    x = features(n, 5, torch.float64, seed=1, requires_grad=True)
    w = edge_weights(ei.size(1), torch.float64, seed=2).requires_grad_()
    d = torch.rand(n, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, d: ops.spmm(x, ei, w, backend='sgt', diag=d), (x, w, d))
    assert torch.autograd.gradgradcheck(lambda x, w: ops.spmm(x, ei, w, backend='sgt'), (x, w))
    a = features(n, 5, torch.float64, seed=3, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: ops.sddmm(a, b, ei, backend='sgt'), (a, x))
    assert torch.autograd.gradgradcheck(lambda a, b: ops.sddmm(a, b, ei, backend='sgt'), (a, x))


@pytest.mark.parametrize('device', DEVICES)
def test_opcheck(device):
    ei, n = make_graph('duplicates', device)
    g = CSRGraph.from_coo(ei[0], ei[1], n, n)
    s = sgt_of(g)
    x = features(n, 12, device=device, seed=1, requires_grad=True)
    cv = torch.rand(s.num_cells, device=device, requires_grad=True)
    d = [s.fwd, s.bwd]

    def grp(q):
        return (q.sched.units, q.cols, q.mask, q.cell_ptr, q.sched.heavy_rows, q.sched.heavy_ptr, q.sched.num_slots)

    args = (*grp(d[0]), cv, x, None, n, 1, 2, *grp(d[1]), s.t_cell)
    torch.library.opcheck(torch.ops.pyg_tc.sgt_spmm.default, args)
    args = (*grp(d[0]), x, x.detach().clone().requires_grad_(), s.num_cells, 1, 2, *grp(d[1]), s.t_cell)
    torch.library.opcheck(torch.ops.pyg_tc.sgt_sddmm.default, args)


# ---------------------------------------------------------------- CUDA only


def _graph(kind, unit_blocks=None, device='cuda'):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    g = CSRGraph.from_coo(ei[0], ei[1], ns, nd)
    g.cache.sgt = SGT.build(g, unit_blocks)
    return g, ei, ns, nd


@pytest.mark.cuda
@pytest.mark.parametrize('unit_blocks', [1, 2, 3, None])
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_split_windows_and_warps(unit_blocks, dtype):
    """Windows split over several units (partial tiles in workspace slots,
    reduced in order) and every warps-per-CTA setting give the oracle."""
    g, ei, ns, nd = _graph('hub', unit_blocks)
    x = features(ns, 40, dtype, 'cuda', seed=1)
    w = edge_weights(ei.size(1), device='cuda', seed=2)
    cells = sgt_of(g).cell_values(csr_order(w, g))
    ref = spmm_oracle(x, ei, nd, w)
    mag = spmm_magnitude(x, ei, nd, w)
    for warps in (1, 2, 4, 8):
        out = sgt_spmm_cells(g, x, cells, warps=warps)
        assert_close_ref(out, ref, mag, dtype, f'warps={warps}')
        s = sgt_of(g).edge_values(sgt_sddmm_cells(g, x, x, warps=warps))
        e = csr_order(sddmm_oracle(x, x, ei), g)
        assert_close_ref(s, e, csr_order(sddmm_oracle(x.abs(), x.abs(), ei), g), dtype, f'sddmm w={warps}')


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('F', [16, 33, 64])
def test_spmm_dense_and_sparse_stages(dtype, F):
    """The staged SpMM copies a stage's cell values to shared memory when
    they fit (128), else reads them from global memory. Here windows of full
    16 x 8 blocks (128 cells each: the global path) sit beside sparse ones
    (staged) in one launch, and the cell count is odd so the last 16-byte
    copy is partial."""
    g_ = torch.Generator().manual_seed(11)
    N = 75
    dense = torch.cartesian_prod(torch.arange(0, 32), torch.arange(0, 48)).t()  # (src, dst)
    sparse = torch.stack([torch.randint(0, N, (301,), generator=g_), torch.randint(32, N, (301,), generator=g_)])
    half = torch.stack([torch.randint(0, N, (200,), generator=g_), torch.randint(0, 32, (200,), generator=g_)])
    ei = torch.cat([dense, sparse, half], 1).cuda()
    g = CSRGraph.from_coo(ei[0], ei[1], N, N)
    s = sgt_of(g)
    assert s.num_cells % 4 != 0  # the last stage's last 16-byte copy is partial
    cpb = (s.fwd.cell_ptr[1:] - s.fwd.cell_ptr[:-1]).cpu()
    assert int(cpb.max()) == 128 and int(cpb.min()) < 32  # both stage kinds occur
    x = features(N, F, dtype, 'cuda', seed=1)
    w = edge_weights(ei.size(1), device='cuda', seed=2)
    for warps in (1, 4):
        out = sgt_spmm_cells(g, x, s.cell_values(csr_order(w, g)), warps=warps)
        assert_close_ref(out, spmm_oracle(x, ei, N, w), spmm_magnitude(x, ei, N, w), dtype, f'warps={warps}')


@pytest.mark.cuda
def test_tf32_precision_mode():
    """'high' matmul precision runs plain TF32 (documented error ~1e-3);
    'highest' (default) runs 3xTF32 at fp32 accuracy."""
    ei, n = make_graph('random', 'cuda')
    x = features(n, 64, device='cuda', seed=1)
    w = edge_weights(ei.size(1), device='cuda', seed=2)
    ref = spmm_oracle(x, ei, n, w).double()
    mag = spmm_magnitude(x, ei, n, w).double()
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision('high')
        e_tf32 = ((ops.spmm(x, ei, w, backend='sgt').double() - ref).abs() / (ref.abs() + mag)).max()
        torch.set_float32_matmul_precision('highest')
        e_full = ((ops.spmm(x, ei, w, backend='sgt').double() - ref).abs() / (ref.abs() + mag)).max()
    finally:
        torch.set_float32_matmul_precision(before)
    assert e_tf32 < 2e-3
    assert e_full < 1e-6
    assert e_tf32 > 10 * e_full  # the two modes really differ


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_deterministic(dtype):
    g, ei, ns, nd = _graph('hub', 2)
    x = features(ns, 33, dtype, 'cuda', seed=1)
    cells = torch.rand(sgt_of(g).num_cells, device='cuda')
    a = sgt_spmm_cells(g, x, cells)
    assert torch.equal(a, sgt_spmm_cells(g, x, cells))
    assert torch.equal(sgt_sddmm_cells(g, x, x), sgt_sddmm_cells(g, x, x))


@pytest.mark.cuda
def test_gpu_builder_matches_cpu():
    for kind in ('random', 'hub', 'duplicates', 'empty', 'bipartite'):
        ei, n = make_graph(kind)
        ns, nd = sizes(n)
        gc = CSRGraph.from_coo(ei[0], ei[1], ns, nd)
        gg = CSRGraph.from_coo(ei[0].cuda(), ei[1].cuda(), ns, nd)
        a, b = SGT.build(gc), SGT.build(gg)
        for name in ('edge_order', 'edge_cell', 't_cell'):
            assert torch.equal(getattr(a, name), getattr(b, name).cpu()), name
        for d, e in ((a.fwd, b.fwd), (a.bwd, b.bwd)):
            for name in ('block_ptr', 'cols', 'mask', 'cell_ptr'):
                assert torch.equal(getattr(d, name), getattr(e, name).cpu()), name
            assert torch.equal(d.sched.units, e.sched.units.cpu())


# ---------------------------------------------------------------- errors


def test_errors():
    ei, n = make_graph('random')
    x = features(n, 8)
    with pytest.raises(ValueError, match='backend'):
        ops.spmm(x, ei, backend='tcu')
    with pytest.raises(ValueError, match="'sum' and 'mean'"):
        ops.spmm(x, ei, reduce='max', backend='sgt')
    g = CSRGraph.from_coo(ei[0], ei[1], n, n)
    other = CSRGraph.from_coo(ei[0, :10], ei[1, :10], n, n)
    g.cache.sgt = SGT.build(other)
    with pytest.raises(ValueError, match='stale SGT'):
        ops.sgt_spmm_graph(g, x)
    g.cache.sgt = None
    with pytest.raises(ValueError, match='cell values'):
        sgt_spmm_cells(g, x, torch.ones(3))
    with pytest.raises(ValueError, match='stale graph metadata'):
        ops.sgt_spmm_graph(g, features(n + 1, 8))


# ---------------------------------------------------------------- CPU emulation


@pytest.mark.parametrize('unit_blocks', [1, 3, None])
@pytest.mark.parametrize('kind', GRAPH_KINDS)
def test_emulation_matches_reference(kind, unit_blocks):
    """The emulation walks the kernels' blocks, units and slots with dense
    matmuls: equal to the oracle for both ops and both directions (rows left
    unwritten by a schedule bug would be NaN)."""
    ei, n = make_graph(kind)
    ns, nd = sizes(n)
    g = CSRGraph.from_coo(ei[0], ei[1], ns, nd)
    s = SGT.build(g, unit_blocks)
    s.validate(g)
    x = features(ns, 19, torch.float64, seed=1)
    w = edge_weights(ei.size(1), torch.float64, seed=2)
    cells = s.cell_values(csr_order(w, g))
    out = emulate_sgt_spmm(s.fwd, cells, x.float())
    assert torch.allclose(out.double(), spmm_oracle(x, ei, nd, w), atol=1e-4, rtol=1e-4)
    y = features(nd, 19, torch.float64, seed=3)
    t_out = emulate_sgt_spmm(s.bwd, cells[s.t_cell.long()], y.float())  # A^T y
    ref_t = spmm_oracle(y, ei.flip(0), ns, w)
    assert torch.allclose(t_out.double(), ref_t, atol=1e-4, rtol=1e-4)
    sd = s.edge_values(emulate_sgt_sddmm(s.fwd, y.float(), x.float()))
    assert torch.allclose(sd.double(), csr_order(sddmm_oracle(y, x, ei), g), atol=1e-4, rtol=1e-4)


def test_spmm_warps_rule():
    """warps_for (docs/sgt.md): 8 warps per unit on graphs with few units,
    else enough to fill the GPU while each warp keeps 8 blocks; shapes of
    the measured graphs (units, blocks with 64-block units)."""
    from types import SimpleNamespace as NS

    from pyg_tc.ops.sgt import warps_for

    def fake(U, B):
        return NS(fwd=NS(sched=NS(units=torch.zeros(U, 4, dtype=torch.int32)), num_blocks=B))

    assert warps_for(fake(170, 1268), 16, torch.float32) == 8  # Cora
    assert warps_for(fake(2717, 12880), 32, torch.float16) == 1  # PROTEINS_full: 4.7 blocks per unit
    assert warps_for(fake(1413, 64292), 16, torch.float32) == 4  # Tolokers (RCM)
    assert warps_for(fake(2023, 105781), 64, torch.float32) == 4  # Tolokers, two feature slices
    assert warps_for(fake(11650, 251867), 16, torch.float32) == 1  # ogbn-arxiv
    assert warps_for(fake(121875, 7328462), 32, torch.float32) == 1  # Reddit-shaped
    assert warps_for(fake(1100, 1100 * 64), 16, torch.float32) == 8  # long units, few of them
    assert warps_for(fake(0, 0), 16, torch.float32) == 1
