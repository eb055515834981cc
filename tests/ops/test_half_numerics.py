"""The fp16 two-level sum (HalfGNN's half2 path, docs/half.md) on hub rows:
relative error against fp64 at most 1e-3 (issue 17, requirement 2), the
power-of-two batch scaling needed for it on a 700K hub with GCN weights, and
no intermediate overflow (a batch whose fp16 total overflows is summed in
fp32)."""

import pytest
import torch

from pyg_tc.ops.csr import half2_two_level_sum


def _rel(out, ref):
    return float((out.double() - ref).norm() / ref.norm())


def _row(deg, kind, F=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(deg, F, generator=g).half()
    dj = torch.randint(1, 20000, (deg,), generator=g).double()
    w = {
        'gcn': 1 / torch.sqrt(dj * deg),
        'sum': torch.ones(deg, dtype=torch.float64),
        'mean': torch.full((deg,), 1.0 / deg, dtype=torch.float64),
    }[kind]
    return x, w, (w.unsqueeze(1) * x.double()).sum(0)


@pytest.mark.parametrize('deg,kind', [(700_000, 'gcn'), (100_000, 'sum'), (5_000, 'mean'), (37, 'gcn')])
@pytest.mark.parametrize('batch', [4, 8])
def test_hub_rows_within_1e3(deg, kind, batch):
    x, w, ref = _row(deg, kind)
    assert _rel(half2_two_level_sum(x, w, batch), ref) < 1e-3


def test_scaling_keeps_gcn_weights_out_of_subnormals():
    # 700K-degree hub: GCN weights 1/sqrt(d_i d_j) down to 1e-6, subnormal in fp16
    x, w, ref = _row(700_000, 'gcn')
    scaled = _rel(half2_two_level_sum(x, w, 8, scale=True), ref)
    plain = _rel(half2_two_level_sum(x, w, 8, scale=False), ref)
    assert scaled < 0.6e-3 < plain


def test_no_intermediate_overflow():
    # +-60000 alternating: every fp16 pair sum overflows, the true sum is small
    x = torch.tensor([[60000.0], [60000.0], [-60000.0], [-60000.0]] * 8).half()
    w = torch.ones(32)
    out = half2_two_level_sum(x, w, batch=4)
    assert torch.isfinite(out).all() and float(out) == 0.0
    # a true sum beyond fp16's range stays finite in fp32 (the final cast to
    # fp16 is where it becomes inf, exactly when fp32 itself does not fit)
    out = half2_two_level_sum(torch.full((64, 1), 60000.0).half(), torch.ones(64), batch=4)
    assert float(out) == 64 * 60000.0


def test_bf16_two_level_within_3x_its_own_rounding():
    # bf16 (8 mantissa bits): the batch partials cost about 2-2.5x the error
    # of rounding the exact result to bf16 (docs/half.md)
    x, w, ref = _row(100_000, 'gcn')
    xb = x.float().bfloat16()
    ref = (w.unsqueeze(1) * xb.double()).sum(0)
    own = _rel(ref.bfloat16(), ref)
    assert _rel(half2_two_level_sum(xb, w, 8), ref) < 3 * own


# ---------------------------------------------------------------------------
# the CUDA kernel's half2 path against the emulation (same batches, same
# roundings inside a batch; only the fp32 merge order differs)


def _star_graph(deg, small=(1, 2, 3, 4), seed=0, device='cuda'):
    """Row 0: a hub with ``deg`` in-edges from random sources; rows 1..: one
    row per entry of ``small`` with that many in-edges. GCN-like weights."""
    g = torch.Generator().manual_seed(seed)
    n = max(deg, 64) + 1
    dst = [torch.zeros(deg, dtype=torch.long)]
    src = [torch.randint(1, n, (deg,), generator=g)]
    for i, d in enumerate(small):
        dst.append(torch.full((d,), i + 1, dtype=torch.long))
        src.append(torch.randint(0, n, (d,), generator=g))
    ei = torch.stack([torch.cat(src), torch.cat(dst)])
    dj = torch.randint(1, 20000, (ei.size(1),), generator=g).double()
    w = (1 / torch.sqrt(dj * deg)).float()
    return ei.to(device), w.to(device), n


def _emulated_rows(x, ei, w, rows, batch):
    out = []
    for r in rows:
        m = ei[1] == r
        out.append(half2_two_level_sum(x[ei[0, m]].cpu(), w[m].cpu(), batch))
    return torch.stack(out)


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16], ids=['float16', 'bfloat16'])
@pytest.mark.parametrize('config', [(4, 1), (8, 1), (16, 1), (16, 2), (32, 1)], ids=str)
@pytest.mark.parametrize('coop', [False, True])
def test_kernel_two_level_sum_matches_emulation(dtype, config, coop):
    from pyg_tc.ops import spmm
    from pyg_tc.testing import kernel_overrides

    ei, w, n = _star_graph(20_000)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 64, generator=g).to(dtype).cuda()
    with kernel_overrides(spmm_config=config, spmm_coop=coop, spmm_two_level=True):
        out = spmm(x, ei, w, 'sum', size=(n, n), backend='csr')
    batch = 8  # every config: batches of 8 edges from the unit's start
    rows = [0, 1, 2, 3, 4]
    emu = _emulated_rows(x, ei, w, rows, batch)
    exact = torch.stack(
        [(w[ei[1] == r].double().unsqueeze(1) * x[ei[0, ei[1] == r]].double()).sum(0) for r in rows]
    ).cpu()
    got = out[rows].cpu()
    # the hub: kernel == emulation up to the fp32 merge order (a few 1e-6),
    # so after the cast nearly every element is bitwise the emulation's
    # (another sum, e.g. fp32 products, differs by about half an ulp in half
    # of them), none by more than one ulp; and within the bound against fp64
    emu0 = emu[0].to(dtype)
    assert int((got[0] == emu0).sum()) >= 60
    ulp = float(torch.finfo(dtype).eps) * emu0.double().abs().clamp(min=float(torch.finfo(dtype).tiny))
    assert ((got[0].double() - emu0.double()).abs() <= ulp).all()
    assert _rel(got[0], exact[0]) < (1e-3 if dtype == torch.float16 else 6e-3)
    # rows of one batch: bitwise the emulation (one scale, the same HFMA2 chain)
    assert torch.equal(got[1:], emu[1:].to(dtype))


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16], ids=['float16', 'bfloat16'])
@pytest.mark.parametrize('two_level', [False, True])
def test_kernel_no_2048_ceiling_and_overflow_policy(dtype, two_level):
    """A sum of 4096 ones is 4096 (fp16 scatter in PyG stops at 2048);
    +-60000 in pairs overflow the half2 partials and are summed again in
    fp32 (0, not inf); a sum beyond the dtype's range is inf only
    where fp32 exceeds it; the mean of 60000s is 60000."""
    from pyg_tc.ops import spmm

    from pyg_tc.testing import kernel_overrides

    with kernel_overrides(spmm_two_level=two_level):
        n = 4097
        ei = torch.stack([torch.arange(1, n), torch.zeros(n - 1, dtype=torch.long)]).cuda()
        ones = torch.ones(n, 16, dtype=dtype, device='cuda')
        assert float(spmm(ones, ei, size=(n, n), backend='csr')[0, 0]) == 4096.0
        big = torch.full((n, 16), 60000.0, device='cuda').to(dtype)
        big[(torch.arange(n, device='cuda') // 2) % 2 == 1] *= -1  # + + - - ...: partials overflow
        assert float(spmm(big, ei, size=(n, n), backend='csr')[0, 0]) == 0.0
        assert float(spmm(big, ei, reduce='mean', size=(n, n), backend='csr')[0, 0]) == 0.0
        same = torch.full((n, 16), 60000.0, device='cuda').to(dtype)
        mean = spmm(same, ei, reduce='mean', size=(n, n), backend='csr')
        # fp16: exact; bf16 (8-bit significand): its batch partials round, one ulp
        ulp = 0 if dtype == torch.float16 else 256
        assert torch.isfinite(mean).all() and abs(float(mean[0, 0]) - float(same[0, 0])) <= ulp
        total = spmm(same, ei, size=(n, n), backend='csr')[0, 0]
        if dtype == torch.float16:
            assert torch.isinf(total)  # 4096 * 60000 does not fit fp16
        else:
            assert abs(float(total) / (4096 * float(same[0, 0])) - 1) < 2**-7  # two bf16 ulps


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16], ids=['float16', 'bfloat16'])
def test_sddmm_half_products_overflow_falls_back(dtype):
    """<a, b> with products beyond 65504 whose sum is representable: the half2
    products overflow, the edge is computed again with fp32 products."""
    from pyg_tc.ops import sddmm

    a = torch.tensor([[300.0, 300.0] * 8], device='cuda').to(dtype)
    b = torch.tensor([[300.0, -300.0] * 8, [1.0, 2.0] * 8], device='cuda').to(dtype)
    ei = torch.tensor([[0, 1], [0, 0]], device='cuda')
    out = sddmm(a, b, ei, size=(2, 1), backend='csr')
    assert float(out[0]) == 0.0
    assert float(out[1]) == float(torch.tensor(300.0 * 3 * 8).to(dtype))


# ---------------------------------------------------------------------------
# autocast policy: fp32 CUDA features are aggregated in the autocast dtype


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16], ids=['float16', 'bfloat16'])
def test_autocast_aggregates_in_half(dtype):
    from pyg_tc.nn import GINConv
    from pyg_tc.ops import sddmm, spmm

    ei, w, n = _star_graph(3000)
    x = torch.randn(n, 32, device='cuda', requires_grad=True)
    with torch.autocast('cuda', dtype=dtype):
        out = spmm(x, ei, w, size=(n, n))
        s = sddmm(x, x, ei, size=(n, n))
    assert out.dtype == dtype and s.dtype == dtype
    ref = spmm(x.detach().to(dtype), ei, w, size=(n, n))
    assert torch.equal(out, ref)  # the same kernel on the cast input
    out.float().sum().backward()
    assert x.grad.dtype == torch.float32 and torch.isfinite(x.grad).all()
    # outside autocast, and for fp64, nothing changes
    assert spmm(x, ei, w, size=(n, n)).dtype == torch.float32
    with torch.autocast('cuda', dtype=dtype):
        assert spmm(x.double(), ei, w.double(), size=(n, n)).dtype == torch.float64
    # a layer whose aggregation comes first (GIN) aggregates in half too
    conv = GINConv(torch.nn.Linear(32, 16)).cuda()
    with torch.autocast('cuda', dtype=dtype):
        y = conv(x, ei)
    assert y.dtype == dtype and torch.isfinite(y).all()


@pytest.mark.cuda
def test_gcn_normalisation_stays_fp32_under_autocast():
    """GCN's degrees (a 70K-edge hub: 70K ones in a width-1 SpMM) are not
    cast: the layer under autocast matches the fp32 layer to half rounding."""
    from pyg_tc.nn import GCNConv

    ei, w, n = _star_graph(70_000)  # hub degree beyond fp16's 65504
    conv = GCNConv(16, 8).cuda()
    x = torch.randn(n, 16, device='cuda')
    ref = conv(x, ei, w)
    with torch.autocast('cuda', dtype=torch.float16):
        out = conv(x, ei, w)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
