"""HalfGNN at the layer level, on CUDA: every pyg_tc layer under
``torch.autocast('cuda', float16 / bfloat16)`` aggregates in half and returns
PyG's dtype (float32 for GCN, GAT, GATv2 and AGNN, whose fp32 edge weights,
attention or bias promote PyG's result; half for SAGE and GIN), casts each
node-feature input at most once per layer (and its output at most once, to
PyG's dtype), trains with ``torch.amp.GradScaler``, and compiles without graph
breaks; the same models after ``.half()`` / ``.bfloat16()``, where GAT / GATv2
keep the half dtype under autocast too. Plus the float16
overflow notice of unweighted sums (docs/half.md, "Overflow policy")."""

import copy
import warnings

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric.nn import MessagePassing

import pyg_tc

from ..conftest import dtype_id

pytestmark = pytest.mark.cuda
HALF = [torch.float16, torch.bfloat16]
KINDS = ['gcn', 'sage', 'gin', 'gat', 'gatv2', 'agnn', 'maxk']
N, CIN, HID, COUT = 600, 48, 32, 7


class Net(torch.nn.Module):
    """Two layers of one kind from ``lib`` (pyg_tc.nn or PyG's; AGNN: Linear,
    two AGNN layers, Linear; MaxK: pyg_tc's MaxKGNN with SAGE layers)."""

    def __init__(self, kind: str, lib=pyg_tc.nn):
        super().__init__()
        L = lib
        self.kind, self.pre, self.post = kind, None, None
        if kind == 'gcn':
            convs = [L.GCNConv(CIN, HID), L.GCNConv(HID, COUT)]
        elif kind == 'sage':
            convs = [L.SAGEConv(CIN, HID), L.SAGEConv(HID, COUT)]
        elif kind == 'gin':
            mlp = lambda i, o: torch.nn.Sequential(
                torch.nn.Linear(i, o),
                torch.nn.ReLU(),  # noqa: E731
                torch.nn.Linear(o, o),
            )
            convs = [L.GINConv(mlp(CIN, HID), train_eps=True), L.GINConv(mlp(HID, COUT))]
        elif kind in ('gat', 'gatv2'):
            cls = L.GATConv if kind == 'gat' else L.GATv2Conv
            convs = [cls(CIN, 8, heads=4), cls(32, COUT, heads=1, concat=False)]
        elif kind == 'agnn':
            self.pre, self.post = torch.nn.Linear(CIN, HID), torch.nn.Linear(HID, COUT)
            convs = [L.AGNNConv(), L.AGNNConv()]
        else:
            self.model = pyg_tc.nn.MaxKGNN('sage', CIN, HID, COUT, num_layers=2, k=8, dropout=0.0)
            convs = []
        self.convs = torch.nn.ModuleList(convs)

    def forward(self, x, ei):
        if self.kind == 'maxk':
            return self.model(x, ei)
        if self.pre is not None:
            x = self.pre(x).relu()
        for i, conv in enumerate(self.convs):
            x = conv(x, ei)
            if i + 1 < len(self.convs):
                x = x.relu()
        return x if self.post is None else self.post(x)

    def conv_modules(self):
        """The message-passing layers (their outputs are checked for dtype)."""
        return [m for m in self.modules() if isinstance(m, MessagePassing)]


def graph(seed: int = 0):
    """Random edges plus a 3000-edge hub row (node 0), on CUDA."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, N, (2, 6000), generator=g)
    hub = torch.stack([torch.randint(0, N, (3000,), generator=g), torch.zeros(3000, dtype=torch.long)])
    return torch.cat([ei, hub], 1).cuda()


class Casts(TorchDispatchMode):
    """Records, per pyg_tc layer call (forward hooks of ``net``'s layers), every
    floating-point dtype cast (``_to_copy``) of a tensor with ``N`` rows and
    more than one column (node features; not weights, per-edge values or
    per-node scalars such as AGNN's norms). Casts by the model around the
    layers (autocast's LayerNorm policy) are not the layers' and are not
    counted."""

    def __init__(self, net):
        super().__init__()
        self.calls, self.current = [], None
        self.hooks = []
        for m in net.conv_modules():
            self.hooks.append(m.register_forward_pre_hook(self._enter))
            self.hooks.append(m.register_forward_hook(self._leave))

    def _enter(self, m, args):
        self.current = []

    def _leave(self, m, args, out):
        self.calls.append((type(m).__name__, self.current))
        self.current = None

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and self.current is not None:
            t, dt = args[0], kwargs.get('dtype')
            if (
                t.is_floating_point()
                and t.dim() >= 2
                and t.size(0) == N
                and t[0].numel() > 1
                and dt is not None
                and dt != t.dtype
            ):
                self.current.append((tuple(t.shape), t.dtype, dt))
        return func(*args, **kwargs)


def _close(kind, out, ref, dtype):
    """Within half rounding of the fp32 model (MaxK: top-k selection may flip
    on near ties, so the mean error, not the largest)."""
    tol = 3e-2 if dtype == torch.float16 else 1.5e-1
    err = (out.float() - ref).abs()
    scale = ref.abs().max().clamp(min=1)
    assert (err.mean() if kind == 'maxk' else err.max()) <= tol * scale


def _conv_dtypes(net, x, ei):
    seen = []
    hooks = [m.register_forward_hook(lambda m, i, o: seen.append(o.dtype)) for m in net.conv_modules()]
    try:
        out = net(x, ei)
    finally:
        for h in hooks:
            h.remove()
    return out, seen


def _pyg_dtypes(kind, net, x, ei, dtype):
    """The output dtype of each layer of PyG's model with ``net``'s weights
    under ``torch.autocast('cuda', dtype)`` (MaxKGNN, pyg_tc's own model of
    SAGE layers: half)."""
    if kind == 'maxk':
        return [dtype] * len(net.conv_modules())
    ref = Net(kind, pyg_nn).cuda()
    ref.load_state_dict(net.state_dict())
    with torch.autocast('cuda', dtype=dtype):
        return _conv_dtypes(ref, x, ei)[1]


@pytest.mark.parametrize('dtype', HALF, ids=dtype_id)
@pytest.mark.parametrize('kind', KINDS)
def test_autocast_half_layers(kind, dtype):
    torch.manual_seed(0)
    ei = graph()
    x = torch.randn(N, CIN, device='cuda')
    net = Net(kind).cuda()
    ref = net(x, ei)  # fp32 (also builds the formats)
    with torch.autocast('cuda', dtype=dtype):
        out, dts = _conv_dtypes(net, x, ei)
        with Casts(net) as rec:
            net(x, ei)
    assert dts and dts == _pyg_dtypes(kind, net, x, ei, dtype)  # every layer returns PyG's dtype
    expected = {'gcn': torch.float32, 'gat': torch.float32, 'gatv2': torch.float32, 'agnn': torch.float32}.get(
        kind, dtype
    )
    assert dts[-1] == expected  # (the rule, so that a change in PyG shows up here)
    # per layer call, at most one cast of node features to half (its Linears'
    # autocast casts included) and at most one to PyG's output dtype
    assert len(rec.calls) == len(net.conv_modules())
    for _, casts in rec.calls:
        assert sum(dst == dtype for _, _, dst in casts) <= 1, rec.calls
        assert sum(dst != dtype for _, _, dst in casts) <= 1, rec.calls
    assert torch.isfinite(out).all()
    _close(kind, out, ref, dtype)
    out.float().square().mean().backward()
    for p in net.parameters():
        if p.grad is not None:
            assert p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all()


@pytest.mark.parametrize('dtype', HALF, ids=dtype_id)
@pytest.mark.parametrize('kind', ['gat', 'gatv2'])
def test_half_model_gat_keeps_half_under_autocast(kind, dtype):
    """A half model (its parameters in the autocast dtype, as
    ``CapturedStep(..., half_weights=True)`` makes it) keeps GAT's output half
    under autocast, where the fp32 model returns PyG's fp32: its values are
    the fp32 model's of the same (rounded) weights within half rounding, and
    its gradients flow in half."""
    torch.manual_seed(0)
    ei = graph()
    x = torch.randn(N, CIN, device='cuda')
    net = Net(kind).cuda()
    net(x, ei)  # (the formats)
    half = copy.deepcopy(net).to(dtype)
    ref = copy.deepcopy(half).float()(x, ei)
    with torch.autocast('cuda', dtype=dtype):
        out, dts = _conv_dtypes(half, x, ei)
        fp32_dts = _conv_dtypes(net, x, ei)[1]
    assert dts == [dtype, dtype] and fp32_dts == [torch.float32, torch.float32]
    _close(kind, out, ref, dtype)
    out.float().square().mean().backward()
    for p in half.parameters():
        assert p.grad is not None and p.grad.dtype == dtype and torch.isfinite(p.grad).all()


@pytest.mark.parametrize('kind', KINDS)
def test_grad_scaler_trains(kind):
    torch.manual_seed(0)
    ei = graph(1)
    x = torch.randn(N, CIN, device='cuda')
    y = torch.randint(0, COUT, (N,), device='cuda')
    net = Net(kind).cuda()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler('cuda')
    before = [p.detach().clone() for p in net.parameters()]
    losses = []
    for _ in range(20):
        opt.zero_grad(set_to_none=True)
        with torch.autocast('cuda', dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(net(x, ei), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(float(loss.detach()))
    assert all(map(lambda v: v == v and abs(v) < float('inf'), losses)), losses
    assert losses[-1] < losses[0]
    assert scaler.get_scale() > 0
    changed = [not torch.equal(a, p.detach()) for a, p in zip(before, net.parameters())]
    assert sum(changed) >= len(changed) - 1  # (an unused parameter, e.g. a frozen eps, may stay)


@pytest.mark.parametrize('kind', ['gcn', 'sage', 'gin', 'gat', 'gatv2', 'agnn'])
def test_compile_under_autocast_no_graph_breaks(kind):
    torch.manual_seed(0)
    ei = graph(2)
    x = torch.randn(N, CIN, device='cuda')
    net = Net(kind).cuda().eval()
    with torch.autocast('cuda', dtype=torch.float16):
        ref = net(x, ei)  # eager first: builds the formats
        torch._dynamo.reset()
        explain = torch._dynamo.explain(net)(x, ei)
        assert explain.graph_break_count == 0, [b.reason for b in explain.break_reasons]
        out = torch.compile(net, fullgraph=True, backend='aot_eager')(x, ei)
    assert out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize('dtype', HALF, ids=dtype_id)
@pytest.mark.parametrize('kind', KINDS)
def test_model_cast_to_half(kind, dtype):
    """``model.half()`` / ``.bfloat16()`` with half inputs: half everywhere, close to fp32."""
    torch.manual_seed(0)
    ei = graph(3)
    x = torch.randn(N, CIN, device='cuda')
    net = Net(kind).cuda()
    ref = net(x, ei)
    out = net.to(dtype)(x.to(dtype), ei)
    assert out.dtype == dtype and torch.isfinite(out).all()
    _close(kind, out, ref, dtype)
    out.float().sum().backward()
    assert all(p.grad.dtype == dtype for p in net.parameters() if p.grad is not None)


def test_fp16_sum_overflow_notice():
    """GIN (unweighted sum) in float16 on a graph with a row of more than 2048
    neighbours says once how to avoid overflow; bf16 and mean stay silent."""
    n = 5000
    ei = torch.stack([torch.arange(n), torch.zeros(n, dtype=torch.long)]).cuda()
    x = torch.full((n, 8), 20.0, device='cuda')  # exact sum 100,000 > 65504
    conv = pyg_tc.nn.GINConv(torch.nn.Identity()).cuda()
    with pytest.warns(UserWarning, match='bfloat16'):
        out = conv(x.half(), ei)
    assert torch.isinf(out[0]).all() and torch.isfinite(out[1:]).all()  # inf only where fp32 exceeds fp16
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        conv(x.half(), ei)  # once per graph
        ei2 = ei.clone()
        assert torch.isfinite(conv(x.bfloat16(), ei2)).all()
        mean = pyg_tc.nn.GINConv(torch.nn.Identity(), aggr='mean').cuda()
        out = mean(x.half(), ei2.clone())
        assert torch.isfinite(out).all() and float(out[0, 0]) == 40.0  # (1 + eps) * 20 + mean 20
