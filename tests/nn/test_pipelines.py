"""pyg_tc layers in PyG's training pipelines, against PyG's own layers with the
same weights on the same batches (issue 19): NeighborLoader node
classification (the format built per batch by the loader's transform),
LinkNeighborLoader link prediction, DataLoader graph classification on TU
datasets, and heterogeneous models (``to_hetero``, ``HeteroConv``). Loss
curves must agree step for step; the loaders need a sampler backend
(pyg-lib or torch_sparse) and skip with the reason without one."""

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

import pyg_tc
from pyg_tc.transforms import DegreeBucketTransform

from ..conftest import DEVICES, writable_copy

STEPS = 6


def _plain(ei):
    return ei.as_subclass(torch.Tensor) if isinstance(ei, torch.Tensor) else ei


class Net(torch.nn.Module):
    """A stack of ``kind`` layers from ``lib`` (``torch_geometric.nn`` or ``pyg_tc.nn``)."""

    def __init__(self, lib, kind: str, dims, plain: bool = False, hetero: bool = False):
        super().__init__()
        make = {
            'sage': lambda i, o: lib.SAGEConv(i, o),
            'gcn': lambda i, o: lib.GCNConv(i, o),
            'gat': (lambda i, o: lib.GATConv((-1, -1), o, heads=2, concat=False, add_self_loops=False))
            if hetero
            else (lambda i, o: lib.GATConv(i, o, heads=2, concat=False)),
            'gin': lambda i, o: lib.GINConv(
                torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(), torch.nn.Linear(o, o))
            ),
        }[kind]
        self.convs = torch.nn.ModuleList(make(i, o) for i, o in zip(dims[:-1], dims[1:]))
        self.plain = plain  # PyG's layers get a plain edge_index

    def forward(self, x, edge_index):
        ei = _plain(edge_index) if self.plain else edge_index
        for i, conv in enumerate(self.convs):
            x = conv(x, ei)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x


def twins(kind: str, dims, device):
    torch.manual_seed(0)
    ref = Net(pyg_nn, kind, dims, plain=True).to(device)
    ours = Net(pyg_tc.nn, kind, dims).to(device)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def sampled_batches(make_loader, count: int = STEPS):
    """The loader's first ``count`` batches (the same ones for both models)."""
    torch.manual_seed(0)
    try:
        it = iter(make_loader())
        return [next(it) for _ in range(count)]
    except ImportError as e:
        pytest.skip(f'neighbour sampling unavailable: {e}')


def train_both(ref, ours, batches, loss_fn, device, lr=0.01):
    """Adam steps of both models on the same batches; the two loss curves."""
    curves = []
    for model in (ref, ours):
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        losses = []
        for b in batches:
            b = b.to(device)
            opt.zero_grad()
            loss = loss_fn(model, b)
            loss.backward()
            opt.step()
            losses.append(float(loss))
        curves.append(losses)
    return curves


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['sage', 'gcn', 'gat'])
def test_neighbor_loader_training_matches_pyg(cora, kind, device):
    """3-layer node classification on NeighborLoader batches (fan-out [10, 5, 5],
    the format built per batch by the loader's transform)."""
    from torch_geometric.loader import NeighborLoader

    batches = sampled_batches(
        lambda: NeighborLoader(
            cora, num_neighbors=[10, 5, 5], batch_size=128, shuffle=True, transform=DegreeBucketTransform()
        )
    )
    assert isinstance(batches[0].edge_index, pyg_tc.formats.TCEdgeIndex)
    ref, ours = twins(kind, [cora.num_features, 32, 32, 7], device)

    def loss_fn(model, b):
        out = model(b.x, b.edge_index)[: b.batch_size]
        return F.cross_entropy(out, b.y[: b.batch_size])

    want, got = train_both(ref, ours, batches, loss_fn, device)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    assert want[-1] < want[0]  # it trains


@pytest.mark.parametrize('device', DEVICES)
def test_link_neighbor_loader_training_matches_pyg(cora, device):
    """Link prediction: a 2-layer SAGE encoder and a dot-product decoder on
    LinkNeighborLoader batches with negative sampling."""
    from torch_geometric.loader import LinkNeighborLoader

    batches = sampled_batches(
        lambda: LinkNeighborLoader(
            cora,
            num_neighbors=[10, 5],
            batch_size=64,
            shuffle=True,
            neg_sampling_ratio=1.0,
            transform=DegreeBucketTransform(),
        )
    )
    ref, ours = twins('sage', [cora.num_features, 32, 16], device)

    def loss_fn(model, b):
        z = model(b.x, b.edge_index)
        s, d = b.edge_label_index
        return F.binary_cross_entropy_with_logits((z[s] * z[d]).sum(-1), b.edge_label)

    want, got = train_both(ref, ours, batches, loss_fn, device)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope='module', params=['PROTEINS_full', 'ENZYMES'])
def tu_dataset(request, tmp_path_factory):
    """The real TU dataset from ``$PYG_TC_DATA`` (skips without it)."""
    from torch_geometric.datasets import TUDataset

    return TUDataset(str(writable_copy(tmp_path_factory, f'tu/{request.param}')), request.param)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['gin', 'gcn'])
def test_graph_classification_dataloader_matches_pyg(tu_dataset, kind, device):
    """GIN / GCN + sum pooling on DataLoader batches of a TU dataset (the
    batched graph's format built once per batch by the transform: a format
    attached to single graphs does not survive collation)."""
    from torch_geometric.loader import DataLoader

    ds = tu_dataset[:256]
    torch.manual_seed(0)
    batches = [DegreeBucketTransform()(b) for _, b in zip(range(STEPS), DataLoader(ds, batch_size=32, shuffle=True))]
    assert isinstance(batches[0].edge_index, pyg_tc.formats.TCEdgeIndex)
    ref, ours = twins(kind, [ds.num_features, 32, 32], device)
    torch.manual_seed(1)
    heads = [torch.nn.Linear(32, ds.num_classes).to(device) for _ in range(2)]
    heads[1].load_state_dict(heads[0].state_dict())
    curves = []
    for model, hd in zip((ref, ours), heads):
        opt = torch.optim.Adam([*model.parameters(), *hd.parameters()], lr=0.01)
        losses = []
        for b in batches:
            b = b.to(device)
            opt.zero_grad()
            loss = F.cross_entropy(hd(pyg_nn.global_add_pool(model(b.x, b.edge_index), b.batch)), b.y)
            loss.backward()
            opt.step()
            losses.append(float(loss))
        curves.append(losses)
    torch.testing.assert_close(torch.tensor(curves[1]), torch.tensor(curves[0]), rtol=1e-4, atol=1e-5)


def hetero_graph(cora):
    """Cora split into two node types by id parity ('a' even, 'b' odd), its
    edges typed by their endpoints (four relations, all non-empty)."""
    from torch_geometric.data import HeteroData

    cora = cora.cpu()  # built on the CPU (the fixture may live on the GPU); callers move it
    n = cora.num_nodes
    kind = torch.arange(n) % 2
    local = torch.arange(n) // 2
    data = HeteroData()
    for t, name in ((0, 'a'), (1, 'b')):
        data[name].x = cora.x[kind == t]
        data[name].y = cora.y[kind == t]
    src, dst = cora.edge_index
    for ts, s in ((0, 'a'), (1, 'b')):
        for td, d in ((0, 'a'), (1, 'b')):
            m = (kind[src] == ts) & (kind[dst] == td)
            data[s, 'to', d].edge_index = torch.stack([local[src[m]], local[dst[m]]])
    return data


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['sage', 'gat'])
def test_to_hetero_matches_pyg(cora, kind, device):
    """``to_hetero`` of a pyg_tc model against ``to_hetero`` of PyG's, same
    weights: outputs and gradients per node type."""
    from torch_geometric.nn import to_hetero

    data = hetero_graph(cora).to(device)
    dims = [-1, 32, 7]
    torch.manual_seed(0)
    ref = to_hetero(Net(pyg_nn, kind, dims, hetero=True), data.metadata(), aggr='sum').to(device)
    torch.manual_seed(0)
    ours = to_hetero(Net(pyg_tc.nn, kind, dims, hetero=True), data.metadata(), aggr='sum').to(device)
    with torch.no_grad():  # initialise the lazy layers
        ref(data.x_dict, data.edge_index_dict)
        ours(data.x_dict, data.edge_index_dict)
    ours.load_state_dict(ref.state_dict())
    outs = []
    for model in (ref, ours):
        model.zero_grad()
        out = model(data.x_dict, data.edge_index_dict)
        sum(F.cross_entropy(out[t], data[t].y) for t in ('a', 'b')).backward()
        outs.append((out, {k: p.grad.clone() for k, p in model.named_parameters()}))
    for t in ('a', 'b'):
        torch.testing.assert_close(outs[1][0][t], outs[0][0][t], rtol=1e-4, atol=1e-5)
    for k, g in outs[0][1].items():
        torch.testing.assert_close(outs[1][1][k], g, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('device', DEVICES)
def test_hetero_conv_matches_pyg(cora, device):
    """``HeteroConv`` of pyg_tc layers (a different layer per relation, bipartite
    (src, dst) sizes) against the same of PyG's."""
    data = hetero_graph(cora).to(device)

    def make(lib):
        return pyg_nn.HeteroConv(
            {
                ('a', 'to', 'a'): lib.GCNConv(-1, 16),
                ('a', 'to', 'b'): lib.SAGEConv((-1, -1), 16),
                ('b', 'to', 'a'): lib.GATConv((-1, -1), 16, add_self_loops=False),
                ('b', 'to', 'b'): lib.GINConv(torch.nn.Linear(cora.num_features, 16)),
            },
            aggr='sum',
        )

    torch.manual_seed(0)
    ref = make(pyg_nn).to(device)
    torch.manual_seed(0)
    ours = make(pyg_tc.nn).to(device)
    with torch.no_grad():
        ref(data.x_dict, data.edge_index_dict)
        ours(data.x_dict, data.edge_index_dict)
    ours.load_state_dict(ref.state_dict())
    out_ref = ref(data.x_dict, data.edge_index_dict)
    out = ours(data.x_dict, data.edge_index_dict)
    for t in ('a', 'b'):
        torch.testing.assert_close(out[t], out_ref[t], rtol=1e-4, atol=1e-5)
    sum(o.square().sum() for o in out_ref.values()).backward()
    sum(o.square().sum() for o in out.values()).backward()
    for (k, p), (_, q) in zip(ref.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=k)
