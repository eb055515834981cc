"""``pyg_tc.ops.dense``: the ``bias_sum`` kernel and :func:`biased_sum` equal
the unfused PyTorch expression ``((x1 + b1) + (x2 + b2)) + ...`` bit for bit
(fp32 / fp16 / bf16 inputs, odd and vector widths, unaligned inputs, empty
rows, more inputs than one launch takes), and their gradients equal the
unfused expression's; where the kernel does not apply (mixed dtypes, a
float64 term, some terms without a bias) the unfused expression runs."""

from __future__ import annotations

import pytest
import torch

from pyg_tc.ops import dense
from pyg_tc.ops.dense import _BiasSum, bias_sum_op, biased_sum

from ..conftest import DEVICES, dtype_id

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
#: (rows, width): vector widths, odd widths, one column, no rows; MLPerf's R-GAT hidden width
SHAPES = [(37, 8), (301, 64), (50, 7), (33, 1), (0, 16), (129, 512), (17, 24), (9, 100)]


def _terms(M, F, k, dtype, device, bias=True, offset=0, seed=0):
    """``k`` outputs ``[M, F]`` of ``dtype`` (``offset`` > 0: starting that many
    elements into their storage, not 16-byte aligned) and fp32 biases."""
    g = torch.Generator().manual_seed(seed)
    xs = []
    for _ in range(k):
        flat = (torch.randn(M * F + offset, generator=g) * 4).to(dtype).to(device)
        xs.append(flat[offset:].view(M, F))
    bs = [torch.randn(F, generator=g).to(device) if bias else None for _ in range(k)]
    return xs, bs


def _unfused(xs, bs):
    out = None
    for x, b in zip(xs, bs):
        t = x.float() if b is None else x + b
        out = t if out is None else out + t
    return out


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('shape', SHAPES, ids=lambda s: 'x'.join(map(str, s)))
@pytest.mark.parametrize('k', [1, 3, 8, 11])
@pytest.mark.parametrize('offset', [0, 1])
def test_bias_sum_is_the_unfused_sum_bit_for_bit(device, dtype, shape, k, offset):
    xs, bs = _terms(*shape, k, dtype, device, offset=offset)
    want = _unfused(xs, bs)
    got = biased_sum([(x, b, dtype) for x, b in zip(xs, bs)])
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.equal(got, want)
    if k <= dense.MAX_INPUTS:  # the op itself, without biases, and with an initial sum
        init = torch.randn(*shape, device=device)
        assert torch.equal(bias_sum_op(xs, None, None), _unfused(xs, [None] * k))
        assert torch.equal(bias_sum_op(xs, torch.stack(bs), init), _sum_from(init, xs, bs))


def _sum_from(init, xs, bs):
    out = init
    for x, b in zip(xs, bs):
        out = out + (x + b)
    return out


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('k', [1, 2, 9])
def test_gradients_equal_the_unfused_expression(device, dtype, k):
    xs, bs = _terms(23, 16, k, dtype, device)
    xs = [x.requires_grad_() for x in xs]
    bs = [b.requires_grad_() for b in bs]
    grad = torch.randn(23, 16, device=device)
    # _BiasSum itself (CUDA: the kernel; CPU: the op's reference), against autograd of the unfused sum
    out = _BiasSum.apply(k, *xs, *bs)
    got = torch.autograd.grad(out, xs + bs, grad)
    want = torch.autograd.grad(_unfused(xs, bs), xs + bs, grad)
    for g, w, t in zip(got, want, xs + bs):
        assert g.dtype == t.dtype and g.shape == t.shape
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    if k > 1:
        assert got[k].data_ptr() != got[k + 1].data_ptr()  # each bias its own gradient tensor


def test_a_bias_gradient_is_not_shared_between_parameters():
    """Two biases' ``.grad`` are distinct tensors: accumulating into one does
    not change the other."""
    xs, bs = _terms(5, 4, 2, torch.float32, 'cpu')
    bs = [torch.nn.Parameter(b) for b in bs]
    _BiasSum.apply(2, *xs, *bs).sum().backward()
    before = bs[1].grad.clone()
    bs[0].grad.add_(1.0)
    assert torch.equal(bs[1].grad, before)


@pytest.mark.parametrize('device', DEVICES)
def test_falls_back_where_the_kernel_does_not_apply(device):
    """Mixed input dtypes, a float64 result, some terms without a bias: the
    unfused expression (the same values, PyTorch's result dtype)."""
    xs, bs = _terms(11, 8, 2, torch.float16, device)
    mixed = [(xs[0], bs[0], torch.float16), (xs[1].float(), bs[1], torch.float32)]
    assert torch.equal(biased_sum(mixed), (xs[0] + bs[0]) + (xs[1].float() + bs[1]))
    partial = [(xs[0], bs[0], torch.float16), (xs[1], None, torch.float32)]
    assert torch.equal(biased_sum(partial), (xs[0] + bs[0]) + xs[1].float())
    wide = [(xs[0], bs[0].double(), torch.float16)]
    out = biased_sum(wide)
    assert out.dtype == torch.float64 and torch.equal(out, xs[0] + bs[0].double())
    one = xs[0].float()
    assert biased_sum([(one, None, torch.float32)]) is one  # no bias, one term: nothing to compute


@pytest.mark.cuda
def test_one_term_runs_the_kernel_for_large_half_outputs_only():
    """One term: the kernel for a half output of ``ONE_TERM_FROM`` elements or
    more with an fp32 bias; PyTorch's addition for fp32 outputs and small ones."""
    F = 256
    for dtype, rows, kernel in (
        (torch.float16, dense.ONE_TERM_FROM // F, True),
        (torch.float16, dense.ONE_TERM_FROM // F - 1, False),
        (torch.float32, dense.ONE_TERM_FROM // F, False),
    ):
        xs, bs = _terms(rows, F, 1, dtype, 'cuda')
        x = xs[0].requires_grad_()
        out = biased_sum([(x, bs[0], dtype)])
        assert type(out.grad_fn).__name__ == ('_BiasSumBackward' if kernel else 'AddBackward0')
        assert torch.equal(out, x + bs[0])


@pytest.mark.cuda
def test_runs_the_kernel_on_cuda():
    xs, bs = _terms(64, 32, 3, torch.bfloat16, 'cuda')
    xs = [x.requires_grad_() for x in xs]
    out = biased_sum([(x, b, torch.bfloat16) for x, b in zip(xs, bs)])
    assert type(out.grad_fn).__name__ == '_BiasSumBackward'
    xs3 = [x.view(16, 4, 32) for x in xs]  # any rank: rows flattened, the last dimension the bias's
    out = biased_sum([(x, b, torch.bfloat16) for x, b in zip(xs3, bs)])
    assert out.shape == (16, 4, 32) and torch.equal(out.view(64, 32), _unfused(xs, bs))


@pytest.mark.parametrize('device', DEVICES)
def test_bad_input_raises(device):
    xs, bs = _terms(6, 4, 2, torch.float32, device)
    with pytest.raises(Exception, match='bias'):
        bias_sum_op(xs, torch.stack(bs)[:, :3], None)
