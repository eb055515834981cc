"""CapturedStep (pyg_tc.capture.step): its static buffers match every batch of
a bucket; on the CPU (and for batches outside every bucket) it is the eager
step; on CUDA the captured step's loss curve over an epoch equals the eager
loop's, with one graph per bucket."""

from __future__ import annotations

import copy

import pytest
import torch
from torch_geometric.data import Data

import pyg_tc
from pyg_tc.capture import CapturedStep, seed_loss
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import PadToBuckets, buckets_from_batches
from pyg_tc.capture.step import _Captured, _flat, _static_copy, check_capturable


def _data(N=400, E=3000, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Data(
        x=torch.randn(N, 16, generator=g),
        y=torch.randint(0, 4, (N,), generator=g),
        edge_index=torch.randint(0, N, (2, E), generator=g),
    )


class Net(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        make = {
            'sage': lambda i, o: pyg_tc.nn.SAGEConv(i, o),
            'gcn': lambda i, o: pyg_tc.nn.GCNConv(i, o),
            'gat': lambda i, o: pyg_tc.nn.GATConv(i, o, heads=2, concat=False),
        }[conv]
        self.c1, self.c2 = make(16, 32), make(32, 4)

    def forward(self, x, edge_index):
        return self.c2(self.c1(x, edge_index).relu(), edge_index)


def _loader(device, seed=0):
    data = _data()
    loader = NeighborLoader(data, [5, 3], batch_size=32, device=device, shuffle=True)
    torch.manual_seed(123)
    buckets = buckets_from_batches(loader, num_batches=6, levels=2, node_multiple=64, edge_multiple=256)
    loader.transform = PadToBuckets(buckets, 32, self_loops=True)
    return loader


def test_static_buffers_match_every_batch_of_a_bucket():
    loader = _loader('cpu')
    by_bucket = {}
    for b in loader:
        by_bucket.setdefault(b.get('bucket'), []).append(b)
    for bucket, batches in by_bucket.items():
        if bucket is None:
            continue
        static = _static_copy(batches[0])
        fs, f0 = _flat(static), _flat(batches[0])
        assert not {t.data_ptr() for t in fs if t.numel()} & {t.data_ptr() for t in f0 if t.numel()}
        for other in batches[1:]:
            fo = _flat(other)
            assert [(t.shape, t.dtype) for t in fo] == [(t.shape, t.dtype) for t in fs]


def test_buffers_hold_the_graphs_kept_in_a_batch_graphs_cache():
    """The self-loop graph a padding transform keeps in the batch graph's
    cache is part of the step's buffers (a replay reads it, so every batch's
    must be copied in)."""
    from pyg_tc.formats.carrier import graph_of
    from pyg_tc.formats.loops import pad_loop_graph

    b = next(iter(_loader('cpu')))
    lg = pad_loop_graph(graph_of(b.edge_index))  # kept by the transform: the same object
    ids = {id(t) for t in _flat(b)}
    assert {id(lg.graph.rowptr), id(lg.graph.t_perm), id(lg.graph.sched.units), id(lg.ids)} <= ids


def test_copy_in_writes_every_tensor_of_the_batch_by_dtype():
    """A replay reads the buffers: each of the batch's tensors (float, int32,
    int64, bool) lands in its own buffer, copied a dtype at a time."""
    batches = [b for b in _loader('cpu') if b.get('bucket') is not None]
    first = batches[0]
    other = next(b for b in batches[1:] if b.bucket == first.bucket)
    static = _static_copy(first)
    cap = _Captured(static, None, None, _flat(static), [])
    assert len({t.dtype for t in cap.buffers}) >= 3 and sum(len(i) for i, _ in cap.groups) == len(cap.buffers)
    src = _flat(other)
    assert any(not torch.equal(a, b) for a, b in zip(cap.buffers, src))
    cap.copy_in(src)
    for a, b in zip(_flat(static), src):
        assert a.dtype == b.dtype and torch.equal(a, b)


def _train(step_fn, loader, epochs=2):
    torch.manual_seed(7)
    losses = []
    for _ in range(epochs):
        for b in loader:
            losses.append(step_fn(b))
    return torch.stack([torch.as_tensor(v, dtype=torch.float32).cpu() for v in losses])


def _eager(model, opt):
    def step(b):
        opt.zero_grad(set_to_none=True)
        loss = seed_loss(model(b.x, b.edge_index), b)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def test_cpu_step_is_the_eager_step():
    torch.manual_seed(0)
    m1 = Net('sage')
    m2 = copy.deepcopy(m1)
    o1, o2 = torch.optim.Adam(m1.parameters(), lr=1e-2), torch.optim.Adam(m2.parameters(), lr=1e-2)
    step = CapturedStep(m2, o2)
    a = _train(_eager(m1, o1), _loader('cpu'))
    b = _train(step, _loader('cpu'))
    torch.testing.assert_close(a, b)
    assert step.replays == 0 and step.eager_steps == len(b)


def test_needs_a_capturable_optimizer():
    m = Net('sage')
    with pytest.raises(ValueError, match='capturable=True'):
        check_capturable(torch.optim.Adam(m.parameters(), capturable=False))
    check_capturable(torch.optim.SGD(m.parameters(), lr=0.1))


@pytest.mark.cuda
@pytest.mark.parametrize('conv', ['sage', 'gcn', 'gat'])
def test_captured_loss_curve_equals_eager(conv):
    torch.manual_seed(0)
    m1 = Net(conv).cuda()
    m2 = copy.deepcopy(m1)
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-2, capturable=True)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-2, capturable=True)
    step = CapturedStep(m2, o2)
    a = _train(_eager(m1, o1), _loader('cuda'))
    b = _train(step, _loader('cuda'))
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert step.replays > 0 and 1 <= len(step.graphs) <= 2
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=1e-4, rtol=1e-3)


@pytest.mark.cuda
def test_captured_step_with_autocast_and_scaler():
    torch.manual_seed(0)
    m = Net('sage').cuda()
    opt = torch.optim.Adam(m.parameters(), lr=1e-2, capturable=True)
    step = CapturedStep(m, opt, autocast=torch.float16, scaler=torch.amp.GradScaler('cuda'))
    losses = _train(step, _loader('cuda'), epochs=3)
    assert bool(torch.isfinite(losses).all()) and losses[-5:].mean() < losses[:5].mean()
    assert step.replays > 0


@pytest.mark.cuda
def test_captured_and_eager_steps_mixed_with_a_scaler():
    """Batches outside the bucket take the eager step between replays; with a
    GradScaler (whose step reads .grad) the run still equals the eager loop."""
    torch.manual_seed(0)
    m1 = Net('gcn').cuda()
    m2 = copy.deepcopy(m1)
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-2, capturable=True)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-2, capturable=True)
    s1, s2 = torch.amp.GradScaler('cuda'), torch.amp.GradScaler('cuda')
    loader = _loader('cuda')
    sizes = sorted((b.num_real_nodes, b.num_real_edges) for b in loader)
    mid = sizes[len(sizes) // 2]  # about half the batches fit
    loader.transform = PadToBuckets([(mid[0] + 1, mid[1])], 32)

    def eager(b):
        o1.zero_grad(set_to_none=True)
        loss = seed_loss(m1(b.x, b.edge_index), b)
        s1.scale(loss).backward()
        s1.step(o1)
        s1.update()
        return loss.detach()

    step = CapturedStep(m2, o2, scaler=s2)
    a = _train(eager, loader)
    b = _train(step, loader)
    assert step.replays > 0 and step.eager_steps > 0
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def _master_eager(model, opt, dtype, scaler=None):
    """The reference of ``half_weights=True``: the step on a half copy of the
    model under autocast, its gradients upcast into the fp32 model, the
    optimizer's step there, the copy rounded again from it."""
    half = copy.deepcopy(model).to(dtype)
    dev = next(model.parameters()).device.type

    def step(b):
        half.zero_grad(set_to_none=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=dtype):
            loss = seed_loss(half(b.x, b.edge_index), b)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        for p, h in zip(model.parameters(), half.parameters()):
            p.grad = h.grad.float()
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        with torch.no_grad():
            for p, h in zip(model.parameters(), half.parameters()):
                h.copy_(p)
        return loss.detach()

    return step


@pytest.mark.parametrize('conv', ['sage', 'gat'])
def test_half_weights_cpu_step_is_the_master_weight_step(conv):
    torch.manual_seed(0)
    m1 = Net(conv)
    m2 = copy.deepcopy(m1)
    o1, o2 = torch.optim.Adam(m1.parameters(), lr=1e-2), torch.optim.Adam(m2.parameters(), lr=1e-2)
    step = CapturedStep(m2, o2, autocast=torch.bfloat16, half_weights=True)
    assert all(p.dtype == torch.bfloat16 for p in m2.parameters())
    assert all(p.dtype == torch.float32 for g in o2.param_groups for p in g['params'])
    a = _train(_master_eager(m1, o1, torch.bfloat16), _loader('cpu'))
    b = _train(step, _loader('cpu'))
    assert torch.equal(a, b)
    for p1, p2 in zip(m1.parameters(), step.half.masters):
        assert torch.equal(p1, p2)
    step.restore_weights()  # the fp32 parameters (the optimizer's) back in the model
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert p2.dtype == torch.float32 and torch.equal(p1, p2)
    assert [id(p) for p in m2.parameters()] == [id(p) for g in o2.param_groups for p in g['params']]


def test_half_weights_needs_a_half_autocast():
    m = Net('sage')
    opt = torch.optim.Adam(m.parameters())
    with pytest.raises(ValueError, match=r'half_weights=True\) needs autocast'):
        CapturedStep(m, opt, half_weights=True)
    with pytest.raises(ValueError, match='float16 or torch.bfloat16'):
        CapturedStep(m, opt, autocast=torch.float32, half_weights=True)


def test_half_weights_keeps_norms_fp32_and_shared_parameters_shared():
    lin = torch.nn.Linear(4, 4)
    m = torch.nn.Sequential(lin, torch.nn.BatchNorm1d(4), torch.nn.LayerNorm(4), lin)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    step = CapturedStep(m, opt, autocast=torch.bfloat16, half_weights=True)
    assert m[0].weight is m[3].weight and m[0].weight.dtype == torch.bfloat16
    assert m[1].weight.dtype == torch.float32 and m[2].weight.dtype == torch.float32
    assert len(step.half.halves) == 2  # the Linear's weight and bias, once


@pytest.mark.cuda
@pytest.mark.parametrize('conv', ['sage', 'gcn', 'gat'])
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('fused', [False, True])
def test_half_weights_captured_equals_master_weight_loop(conv, dtype, fused):
    """Captured with half weights (fp16: with a GradScaler, its step eager
    after each replay; with a fused Adam, one that unscales and skips
    without a host synchronisation): the loss curve and the fp32 masters of
    the eager master-weight loop."""
    torch.manual_seed(0)
    m1 = Net(conv).cuda()
    m2 = copy.deepcopy(m1)
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-2, capturable=True, fused=fused)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-2, capturable=True, fused=fused)
    s1 = s2 = None
    if dtype == torch.float16:
        s1, s2 = torch.amp.GradScaler('cuda'), torch.amp.GradScaler('cuda')
    step = CapturedStep(m2, o2, autocast=dtype, scaler=s2, half_weights=True)
    a = _train(_master_eager(m1, o1, dtype, s1), _loader('cuda'))
    b = _train(step, _loader('cuda'))
    assert step.replays > 0
    torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)
    for p1, p2 in zip(m1.parameters(), step.half.masters):
        torch.testing.assert_close(p1, p2, atol=2e-3, rtol=1e-2)
