"""CapturedStep and CapturedForward on a full graph (no padding): the loss
over a mask with static shapes equals PyG's indexed loss; on the CPU every
call is eager; on CUDA the graph is captured the second time the same data
comes, and 200 captured steps give the eager loop's losses and parameters
for every pyg_tc layer (GAT / GATv2 with attention and feature dropout
included); a forward replay reads features changed in place; new data runs
eagerly; a step that synchronises raises naming the fix."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data

import pyg_tc
from pyg_tc.capture import CapturedForward, CapturedStep, masked_loss, step_loss

from ..conftest import DEVICES

LAYERS = {
    'gcn': lambda i, o: pyg_tc.nn.GCNConv(i, o, cached=True),
    'sage': lambda i, o: pyg_tc.nn.SAGEConv(i, o),
    'gin': lambda i, o: pyg_tc.nn.GINConv(
        torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(), torch.nn.Linear(o, o))
    ),
    'gat': lambda i, o: pyg_tc.nn.GATConv(i, o, heads=2, concat=False, dropout=0.5),
    'gatv2': lambda i, o: pyg_tc.nn.GATv2Conv(i, o, heads=2, concat=False, dropout=0.5),
    'agnn': lambda i, o: pyg_tc.nn.AGNNConv(requires_grad=True),
}


class Net(torch.nn.Module):
    """Two layers with feature dropout between them (AGNN: PyG's example, linear layers around it)."""

    def __init__(self, kind, cin=32, hidden=16, classes=5):
        super().__init__()
        self.kind = kind
        if kind == 'agnn':
            self.lin1, self.conv, self.lin2 = (
                torch.nn.Linear(cin, hidden),
                LAYERS[kind](hidden, hidden),
                torch.nn.Linear(hidden, classes),
            )
        else:
            self.c1, self.c2 = LAYERS[kind](cin, hidden), LAYERS[kind](hidden, classes)

    def forward(self, x, edge_index):
        if self.kind == 'agnn':
            return self.lin2(F.dropout(self.conv(self.lin1(x).relu(), edge_index), 0.5, self.training))
        h = F.dropout(self.c1(x, edge_index).relu(), 0.5, self.training)
        return self.c2(h, edge_index)


def _graph(device, N=600, E=3000, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(N, dtype=torch.bool)
    mask[torch.randperm(N, generator=g)[:60]] = True
    return Data(
        x=torch.randn(N, 32, generator=g),
        y=torch.randint(0, 5, (N,), generator=g),
        edge_index=torch.randint(0, N, (2, E), generator=g),
        train_mask=mask,
    ).to(device)


@pytest.mark.parametrize('device', DEVICES)
def test_masked_loss_is_pygs_indexed_loss(device):
    data = _graph(device)
    out = torch.randn(data.num_nodes, 5, device=device)
    torch.testing.assert_close(masked_loss(out, data), F.cross_entropy(out[data.train_mask], data.y[data.train_mask]))
    torch.testing.assert_close(step_loss(out, data), masked_loss(out, data))
    del data.train_mask
    torch.testing.assert_close(masked_loss(out, data), F.cross_entropy(out, data.y))


def _eager_loop(model, data, steps):
    opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=data.x.is_cuda)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def _captured_loop(model, data, steps):
    step = CapturedStep(model, torch.optim.Adam(model.parameters(), lr=0.01, capturable=data.x.is_cuda))
    return torch.stack([step(data) for _ in range(steps)]), step


def test_full_graph_step_on_the_cpu_is_the_eager_step():
    torch.manual_seed(0)
    m1 = Net('gcn')
    m2 = copy.deepcopy(m1)
    data = _graph('cpu')
    torch.manual_seed(1)
    a = _eager_loop(m1, data, 5)
    torch.manual_seed(1)
    b, step = _captured_loop(m2, data, 5)
    torch.testing.assert_close(a, b)
    assert step.replays == 0 and step.eager_steps == 5


def _eager_and_captured(kind, steps, params=True):
    """The eager loop and the captured one from the same weights and seed: they must agree
    step for step (losses) and, with ``params``, in the final parameters."""
    torch.manual_seed(0)
    m1 = Net(kind).cuda()
    m2 = copy.deepcopy(m1)
    data = _graph('cuda')
    torch.manual_seed(1)
    a = _eager_loop(m1, data, steps)
    torch.manual_seed(1)
    b, step = _captured_loop(m2, data, steps)
    torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-3)
    for p1, p2 in zip(m1.parameters(), m2.parameters()) if params else ():
        torch.testing.assert_close(p2, p1, atol=1e-4, rtol=1e-3)
    return step


@pytest.mark.cuda
@pytest.mark.parametrize('kind', sorted(LAYERS))
def test_captured_full_graph_training_equals_the_eager_loop(kind):
    step = _eager_and_captured(kind, 200)
    assert step.eager_steps == 1 and step.replays == 199 and len(step.graphs) == 1


@pytest.mark.cuda
@pytest.mark.parametrize('kind', sorted(LAYERS))
def test_captured_forward_equals_eager_and_reads_features_changed_in_place(kind):
    torch.manual_seed(0)
    model = Net(kind).cuda().eval()
    data = _graph('cuda')
    infer = CapturedForward(model)
    with torch.no_grad():
        want = model(data.x, data.edge_index)
    for _ in range(3):
        torch.testing.assert_close(infer(data), want, atol=1e-5, rtol=1e-5)
    assert infer.replays == 2 and infer.eager_steps == 1
    data.x.mul_(2)
    with torch.no_grad():
        want = model(data.x, data.edge_index)
    torch.testing.assert_close(infer(data), want, atol=1e-5, rtol=1e-5)
    assert infer.replays == 3


@pytest.mark.cuda
def test_new_graphs_run_eagerly():
    torch.manual_seed(0)
    model = Net('sage').cuda()
    step = CapturedStep(model, torch.optim.Adam(model.parameters(), lr=0.01, capturable=True))
    for seed in range(4):
        step(_graph('cuda', seed=seed))
    assert step.replays == 0 and step.eager_steps == 4 and not step.graphs


@pytest.mark.cuda
def test_a_step_that_synchronises_raises_naming_the_fix():
    torch.manual_seed(0)
    model = Net('gcn').cuda()
    data = _graph('cuda')

    def indexed(out, d):
        return F.cross_entropy(out[d.train_mask], d.y[d.train_mask])

    step = CapturedStep(model, torch.optim.Adam(model.parameters(), lr=0.01, capturable=True), loss_fn=indexed)
    before = [p.detach().clone() for p in model.parameters()]
    step(data)
    after_eager = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(RuntimeError, match='could not be captured.*masked_loss'):
        step(data)
    for p, q in zip(model.parameters(), after_eager):  # the failed capture left the model as it was
        torch.testing.assert_close(p, q)
    assert any(not torch.equal(p, q) for p, q in zip(before, after_eager))
    # nothing was left half-captured: random numbers and a captured step with a static loss work
    torch.rand(3, device='cuda')
    step = CapturedStep(model, torch.optim.Adam(model.parameters(), lr=0.01, capturable=True))
    for _ in range(3):
        step(data)
    assert step.replays == 2


@pytest.mark.cuda
@pytest.mark.parametrize('kind', ['gcn', 'sage'])
def test_captured_where_eager_takes_pygs_path(kind, monkeypatch):
    """Where ``backend='auto'`` runs PyG's path eagerly (small graphs), the
    captured step runs pyg_tc's kernels and still trains as the eager loop."""
    from pyg_tc.ops import dispatch

    monkeypatch.setattr(dispatch, 'PYG_WHERE_FASTER', True)
    # (eagerly PyG's path, captured pyg_tc's kernels: the losses agree, the parameters to round-off)
    assert _eager_and_captured(kind, 50, params=False).replays == 49
