"""CapturedStep on heterogeneous mini-batches (HeteroData padded by
PadToBuckets, or hop by hop by PadHops with the model trimmed by layer):
static buffers per bucket, the default forward and seed loss;
on the CPU the eager step; on CUDA the captured loss curve and parameters
equal the eager loop's (MLPerf's R-GAT of pyg_tc's layers, fp32 and under
autocast), one graph per bucket."""

from __future__ import annotations

import copy

import pytest
import torch

import pyg_tc
from pyg_tc.bench.graphs import igbh_shaped
from pyg_tc.bench.models import RGAT
from pyg_tc.capture import CapturedStep, masked_loss, seed_loss, trimmed_forward
from pyg_tc.capture.step import _flat, _forward, _static_copy
from pyg_tc.formats.carrier import graph_of
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import PadHops, PadToBuckets, buckets_from_batches

B = 32


def _loader(device, per_hop=False):
    data = igbh_shaped(600, 12, torch.float32, 5)
    data = copy.copy(data).to(device) if device != 'cpu' else data
    loader = NeighborLoader(
        data, [4, 3], batch_size=B, input_nodes=('paper', torch.arange(6 * B + 5)), device=device, shuffle=True
    )
    torch.manual_seed(0)
    buckets = buckets_from_batches(loader, num_batches=6, levels=2, node_multiple=64, per_hop=per_hop)
    loader.transform = (PadHops if per_hop else PadToBuckets)(buckets, B)
    return loader


def _model(device):
    torch.manual_seed(0)
    return RGAT(pyg_tc.nn, igbh_shaped(10).edge_types, 12, 8, 2, 5).to(device)


def _train(step_fn, loader, epochs=2):
    torch.manual_seed(7)
    return torch.stack([torch.as_tensor(step_fn(b)).float().cpu() for _ in range(epochs) for b in loader])


def _eager(model, opt, amp=None, forward=_forward):
    def step(b):
        opt.zero_grad(set_to_none=True)
        with torch.autocast('cuda', dtype=amp, enabled=amp is not None):
            loss = seed_loss(forward(model, b), b)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def test_static_copy_owns_every_buffer_and_matches_the_bucket():
    batches = [b for b in _loader('cpu') if b.get('bucket') is not None]
    first = batches[0]
    static = _static_copy(first)
    fs, f0 = _flat(static), _flat(first)
    assert not {t.data_ptr() for t in fs if t.numel()} & {t.data_ptr() for t in f0 if t.numel()}
    for e in first.edge_types:  # each edge type's CSR travels with the buffers
        assert {id(t) for t in (graph_of(static[e].edge_index).rowptr, graph_of(static[e].edge_index).t_col)} <= {
            id(t) for t in fs
        }
    for other in (b for b in batches[1:] if b.bucket == first.bucket):
        assert [(t.shape, t.dtype) for t in _flat(other)] == [(t.shape, t.dtype) for t in fs]


@pytest.mark.parametrize('trim', [False, True], ids=['whole', 'trimmed'])
def test_cpu_step_is_the_eager_step(trim):
    m1 = _model('cpu')
    m1(*_inputs(next(iter(_loader('cpu')))))
    m2 = copy.deepcopy(m1)
    o1, o2 = torch.optim.Adam(m1.parameters(), lr=1e-2), torch.optim.Adam(m2.parameters(), lr=1e-2)
    forward = trimmed_forward if trim else _forward
    step = CapturedStep(m2, o2, forward=forward)
    a = _train(_eager(m1, o1, forward=forward), _loader('cpu', per_hop=trim))
    b = _train(step, _loader('cpu', per_hop=trim))
    torch.testing.assert_close(a, b)
    assert step.replays == 0 and step.eager_steps == len(b)


def _inputs(b):
    return b.x_dict, b.edge_index_dict


def test_full_heterogeneous_graph_needs_a_loss():
    data = igbh_shaped(50, 12, torch.float32, 5)
    data['paper'].train_mask = torch.rand(50) < 0.5
    m = _model('cpu')
    step = CapturedStep(m, torch.optim.SGD(m.parameters(), lr=0.1))
    with pytest.raises(ValueError, match='ambiguous'):
        step(data)
    step = CapturedStep(m, torch.optim.SGD(m.parameters(), lr=0.1), loss_fn=lambda o, d: masked_loss(o, d['paper']))
    assert torch.isfinite(step(data))


@pytest.mark.cuda
@pytest.mark.parametrize('amp', [None, torch.bfloat16, torch.float16])
@pytest.mark.parametrize('trim', [False, True], ids=['whole', 'trimmed'])
def test_captured_loss_curve_equals_eager(amp, trim):
    """Padded to totals (PadToBuckets) with the whole model, or hop by hop
    (PadHops) with the model trimmed by layer (trimmed_forward)."""
    loader = _loader('cuda', per_hop=trim)
    m1 = _model('cuda')
    m1(*_inputs(next(iter(loader))))
    m2 = copy.deepcopy(m1)
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-2, capturable=True)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-2, capturable=True)
    forward = trimmed_forward if trim else _forward
    step = CapturedStep(m2, o2, autocast=amp, forward=forward)
    a = _train(_eager(m1, o1, amp, forward), _loader('cuda', per_hop=trim))
    b = _train(step, _loader('cuda', per_hop=trim))
    tol = 1e-4 if amp is None else 2e-2
    torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    assert step.replays > 0 and 1 <= len(step.graphs) <= 2
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=10 * tol, rtol=10 * tol)


@pytest.mark.cuda
def test_full_heterogeneous_graph_is_captured_on_its_own_tensors():
    data = igbh_shaped(200, 12, torch.float32, 5)
    data['paper'].train_mask = torch.rand(200, generator=torch.Generator().manual_seed(0)) < 0.5
    data = data.to('cuda')
    m1 = _model('cuda')
    m2 = copy.deepcopy(m1)
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-2, capturable=True)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-2, capturable=True)
    loss_fn = lambda o, d: masked_loss(o, d['paper'])  # noqa: E731
    step = CapturedStep(m2, o2, loss_fn=loss_fn)
    for _ in range(5):
        o1.zero_grad()
        la = loss_fn(m1(data.x_dict, data.edge_index_dict), data)
        la.backward()
        o1.step()
        lb = step(data)
        torch.testing.assert_close(lb, la.detach(), atol=1e-4, rtol=1e-4)
    assert step.replays == 4 and step.eager_steps == 1 and len(step.graphs) == 1  # captured on the second call
