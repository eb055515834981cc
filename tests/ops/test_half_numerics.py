"""The fp16 two-level sum (HalfGNN's half2 path, docs/halfgnn.md) on hub rows:
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
    w = {'gcn': 1 / torch.sqrt(dj * deg), 'sum': torch.ones(deg, dtype=torch.float64),
         'mean': torch.full((deg,), 1.0 / deg, dtype=torch.float64)}[kind]
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
