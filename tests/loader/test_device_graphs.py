"""GraphLoader(device=...): batches assembled from the dataset stored on the
device equal PyG's collated batches as PadGraphs pads them (or, without
padding, with their edges in CSR order and the CSR attached), tensor for
tensor and CSR array for CSR array, in the same shuffled order; what it
cannot store is refused; on CUDA a captured step over them gives the eager
loop's losses."""

from __future__ import annotations

import copy

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

import pyg_tc
from pyg_tc.formats.carrier import _ATTR
from pyg_tc.loader import GraphLoader
from pyg_tc.transforms import PadGraphs, graph_buckets
from pyg_tc.capture import graph_loss

from ..transforms.test_pad_graphs import Net, _molecules

DEVICES = ['cpu', pytest.param('cuda', marks=pytest.mark.cuda)]


def _data():
    data = _molecules(120)
    for i, d in enumerate(data):
        d.z = torch.full((d.num_nodes,), float(i))  # a second node attribute
        d.w = torch.tensor([[i, -i]])  # a graph attribute of two columns
    data[3].edge_index = data[3].edge_index[:, :0]  # a graph without edges
    data[3].edge_attr = data[3].edge_attr[:0]
    return data


def _assert_same_batch(want, got):
    assert sorted(want.keys()) == sorted(got.keys())
    for key in want.keys():
        a, b = want[key], got[key]
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and torch.equal(
                a.as_subclass(torch.Tensor).cpu(), b.as_subclass(torch.Tensor).cpu()
            ), key
        else:
            assert a == b, key
    assert (want.num_graphs, want.num_nodes) == (got.num_graphs, got.num_nodes)
    g1, g2 = getattr(want.edge_index, _ATTR)[1], getattr(got.edge_index, _ATTR)[1]
    assert g2.device == got.x.device and g1.perm is None and g2.perm is None
    for name in ('rowptr', 'col', 't_rowptr', 't_col', 't_perm'):
        assert torch.equal(getattr(g1, name).cpu(), getattr(g2, name).cpu()), name
    for s1, s2 in ((g1.sched, g2.sched), (g1.t_sched, g2.t_sched)):
        for u, v in zip(s1, s2):
            assert u == v if isinstance(u, int) else torch.equal(u.cpu(), v.cpu())
    assert (g1.padded, g1.real_size, g1.static_shapes, g1.chunk, g1.num_rows) == (
        g2.padded,
        g2.real_size,
        g2.static_shapes,
        g2.chunk,
        g2.num_rows,
    )


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('padding', ['two buckets', 'too small', 'none'])
def test_device_batches_are_the_collated_batches(device, padding):
    data = _data()
    buckets = graph_buckets(DataLoader(data, batch_size=16), num_batches=6, levels=2)
    pad = {'two buckets': PadGraphs(buckets), 'too small': PadGraphs([(3, 64, 64)]), 'none': None}[padding]
    host = GraphLoader(data, batch_size=16, shuffle=True, pad=pad, generator=torch.Generator().manual_seed(3))
    dev = GraphLoader(
        data, batch_size=16, shuffle=True, pad=pad, device=device, generator=torch.Generator().manual_seed(3)
    )
    assert len(dev) == len(host) == 8
    for _ in range(2):  # two epochs, reshuffled alike
        seen = 0
        for want, got in zip(host, dev):
            assert got.x.device.type == device
            _assert_same_batch(want, got)
            seen += 1
        assert seen == 8
    if padding == 'two buckets':
        assert {b.bucket for b in dev} <= set(buckets) and any(b.bucket is not None for b in dev)


def test_refuses_what_it_cannot_store():
    data = _data()
    with pytest.raises(ValueError, match='num_workers'):
        GraphLoader(data, batch_size=4, device='cpu', num_workers=1)
    named = copy.deepcopy(data)
    for d in named:
        d.name = 'mol'
    with pytest.raises(TypeError, match="'name'"):
        GraphLoader(named, batch_size=4, device='cpu')
    assert next(iter(GraphLoader(named, batch_size=4, device='cpu', exclude_keys=['name']))).get('name') is None
    indexed = copy.deepcopy(data)
    for d in indexed:
        d.anchor_index = torch.zeros(1, dtype=torch.long)  # PyG increments '*_index' attributes
    with pytest.raises(ValueError, match="'anchor_index'"):
        GraphLoader(indexed, batch_size=4, device='cpu')
    with pytest.raises(ValueError, match='at least one graph'):
        GraphLoader([], batch_size=4, device='cpu')
    with pytest.raises(IndexError, match='graph ids'):
        GraphLoader(data, batch_size=4, device='cpu').graphs.batch([len(data)])


@pytest.mark.cuda
@pytest.mark.parametrize('conv', ['gin', 'gat'])
def test_captured_step_over_device_batches_equals_the_eager_loop(conv):
    """Three epochs: CapturedStep over GraphLoader(device='cuda') batches
    gives the losses of the eager loop over PyG's collated batches."""
    data = _molecules(64)
    buckets = graph_buckets(DataLoader(data, batch_size=8), num_batches=8, levels=2)

    def run(device, captured):
        loader = GraphLoader(
            data,
            batch_size=8,
            shuffle=True,
            pad=PadGraphs(buckets),
            device=device,
            generator=torch.Generator().manual_seed(0),
        )
        torch.manual_seed(0)
        model = Net(conv, 'add').cuda()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, capturable=True)
        step = pyg_tc.capture.CapturedStep(model, opt, forward=lambda m, b: m(b.x, b.edge_index, b.batch, b.num_graphs))
        losses = []
        for _ in range(3):
            for b in loader:
                if captured:
                    losses.append(step(b))
                    continue
                b = b.to('cuda')
                opt.zero_grad(set_to_none=True)
                loss = graph_loss(model(b.x, b.edge_index, b.batch, b.num_graphs), b)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
        return torch.stack(losses), step.replays

    eager, _ = run(None, False)
    captured, replays = run('cuda', True)
    assert replays > 0
    torch.testing.assert_close(captured, eager, atol=1e-4, rtol=1e-4)


def test_graph_attributes_follow_their_graphs():
    data = [
        Data(x=torch.full((i + 2, 1), float(i)), edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.tensor([i]))
        for i in range(10)
    ]
    batch = GraphLoader(data, batch_size=4, shuffle=True, device='cpu').graphs.batch([7, 2, 5])
    assert batch.y.tolist() == [7, 2, 5] and batch.num_graphs == 3
    assert batch.x[:, 0].tolist() == [7.0] * 9 + [2.0] * 4 + [5.0] * 7
    assert batch.edge_index.tolist() == [[1, 0, 10, 9, 14, 13], [0, 1, 9, 10, 13, 14]]
