"""``pyg_tc.ops.attn.att_logits``: GAT's per-node logit terms of half (and
fp32) features, forward and backward, against float64 (the reference on the
CPU, the kernel on CUDA), and GAT's layer under autocast taking it."""

from __future__ import annotations

import pytest
import torch

from pyg_tc.ops.attn import att_logits

from ..conftest import DEVICES, dtype_id

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
#: (N, H, C): one channel, odd widths, many heads, a wide head, an empty graph; heads of
#: whole 16-byte vectors (the vector path: MLPerf's R-GAT 4 x 128, three vectors a head)
SHAPES = [
    (37, 1, 1),
    (37, 1, 7),
    (301, 1, 256),
    (64, 3, 7),
    (50, 8, 8),
    (90, 2, 100),
    (33, 4, 33),
    (0, 2, 5),
    (77, 4, 128),
    (45, 3, 24),
]
EPS = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
#: half the spacing of the dtype's subnormals (the rounding's absolute error there)
TINY = {torch.float32: 2.0**-150, torch.float16: 2.0**-25, torch.bfloat16: 2.0**-134}


def case(N, H, C, k, dtype, device, seed=0, offset=0):
    """x, att, grad; ``offset`` > 0: x starts that many elements into its
    storage (contiguous, not 16-byte aligned: the single-element path)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N * H * C + offset, generator=g).to(dtype).to(device)[offset:].view(N, H, C)
    att = torch.randn(k, H, C, generator=g)
    grad = torch.randn(k, N, H, generator=g)
    return x, att.to(device), grad.to(device)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('shape', SHAPES, ids=lambda s: 'x'.join(map(str, s)))
@pytest.mark.parametrize('k', [1, 2])
@pytest.mark.parametrize('offset', [0, 1])
def test_att_logits_against_float64(device, dtype, shape, k, offset):
    x, att, grad = case(*shape, k, dtype, device, offset=offset)
    x.requires_grad_(True)
    att.requires_grad_(True)
    out = att_logits(x, att)
    assert out.dtype == torch.float32 and out.shape == (k, shape[0], shape[1])
    gx, gatt = torch.autograd.grad(out, (x, att), grad)
    assert gx.dtype == dtype and gatt.dtype == torch.float32
    xd, ad, gd = x.detach().double(), att.detach().double(), grad.double()
    prod = xd.unsqueeze(0) * ad.unsqueeze(1)
    # fp32 products and sums: within C fp32 roundings of the sum of magnitudes
    C = shape[2]
    tol = (C + 2) * 2.0**-24 * prod.abs().sum(-1) + 1e-30
    assert torch.all((out.double() - prod.sum(-1)).abs() <= tol)
    # g_x: sum over the k terms in fp32, one rounding to x's dtype
    true_gx = (gd.unsqueeze(-1) * ad.unsqueeze(1)).sum(0)
    mag_gx = (gd.unsqueeze(-1) * ad.unsqueeze(1)).abs().sum(0)
    assert torch.all((gx.double() - true_gx).abs() <= EPS[dtype] * true_gx.abs() + 4 * 2.0**-24 * mag_gx + TINY[dtype])
    # g_att: sum over the nodes in fp32
    terms = gd.unsqueeze(-1) * xd.unsqueeze(0)
    true_ga = terms.sum(1)
    assert torch.all((gatt.double() - true_ga).abs() <= (shape[0] + 2) * 2.0**-24 * terms.abs().sum(1) + 1e-30)


@pytest.mark.parametrize('device', DEVICES)
def test_att_logits_errors(device):
    x = torch.randn(5, 2, 3, device=device)
    with pytest.raises((ValueError, RuntimeError), match='att'):
        att_logits(x, torch.randn(1, 2, 3, device=device).half())
    with pytest.raises((ValueError, RuntimeError), match='att'):
        att_logits(x, torch.randn(3, 2, 3, device=device))
    with pytest.raises((ValueError, RuntimeError), match='x must'):
        att_logits(x.double(), torch.randn(1, 2, 3, device=device))


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize('heads', [1, 4])
def test_gat_under_autocast_matches_pyg(dtype, heads):
    """pyg_tc's GATConv under autocast (logit terms by att_logits) against
    PyG's under the same autocast, same weights: outputs and every gradient
    as close to the fp32 model as PyG's."""
    import torch_geometric.nn as pyg_nn

    import pyg_tc

    torch.manual_seed(0)
    N = 700
    ei = torch.randint(0, N, (2, 6000), device='cuda')
    x = torch.randn(N, 40, device='cuda')
    ours = pyg_tc.nn.GATConv(40, 64 // heads, heads=heads).cuda()
    ref = pyg_nn.GATConv(40, 64 // heads, heads=heads).cuda()
    ref.load_state_dict(ours.state_dict())
    full = pyg_nn.GATConv(40, 64 // heads, heads=heads).cuda().double()
    full.load_state_dict(ours.state_dict())
    want = full(x.double(), ei)
    want.square().sum().backward()
    res = {}
    for name, layer in (('ours', ours), ('pyg', ref)):
        with torch.autocast('cuda', dtype=dtype):
            out = layer(x, ei)
        out.float().square().sum().backward()
        res[name] = (out.double(), {n: p.grad.double() for n, p in layer.named_parameters()})
    for name in ('ours', 'pyg'):
        assert res[name][0].dtype == torch.float64
    err = {k: (v[0] - want).norm() / want.norm() for k, v in res.items()}
    assert err['ours'] <= 1.5 * err['pyg'] + 1e-6, err
    for n, p in full.named_parameters():
        e = {k: (v[1][n] - p.grad).norm() / p.grad.norm() for k, v in res.items()}
        assert e['ours'] <= 1.5 * e['pyg'] + 1e-6, (n, e)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('shape', SHAPES, ids=lambda s: 'x'.join(map(str, s)))
@pytest.mark.parametrize('offset', [0, 1])
def test_row_dots_against_float64(device, dtype, shape, offset):
    """The attention backward's ``<grad, out>`` per row and head (``offset``:
    operands not 16-byte aligned)."""
    from pyg_tc.ops.attn import row_dots

    g = torch.Generator().manual_seed(3)
    n = shape[0] * shape[1] * shape[2]
    a, b = (torch.randn(n + offset, generator=g).to(dtype).to(device)[offset:].view(shape) for _ in range(2))
    out = row_dots(a, b)
    a, b = a.cpu(), b.cpu()
    assert out.dtype == torch.float32 and out.shape == shape[:2]
    prod = a.double() * b.double()
    tol = (shape[2] + 2) * 2.0**-24 * prod.abs().sum(-1) + 1e-30
    assert torch.all((out.cpu().double() - prod.sum(-1)).abs() <= tol)
