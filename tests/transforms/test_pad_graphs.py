"""Padded batches of small graphs (pyg_tc.transforms.pad_graphs): a padded batch
gives the real graphs' pooled outputs, losses and gradients of the unpadded
PyG batch (GIN, GCN, GAT; add, mean and max readouts); the padding is where
the module doc says; GraphLoader pads in its collate function, in worker
processes too, with the CSR attached; a batch larger than every bucket comes
unpadded; CapturedStep's default loss is the graph loss."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool

import pyg_tc
from pyg_tc.formats import has_graph
from pyg_tc.transforms import GraphBucket, PadGraphs, graph_buckets
from pyg_tc.loader import GraphLoader
from pyg_tc.capture import graph_loss, step_loss

POOLS = {'add': global_add_pool, 'mean': global_mean_pool, 'max': global_max_pool}
CONVS = {
    'gin': lambda i, o: pyg_tc.nn.GINConv(
        torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(), torch.nn.Linear(o, o))
    ),
    'gcn': lambda i, o: pyg_tc.nn.GCNConv(i, o),
    'gat': lambda i, o: pyg_tc.nn.GATConv(i, o, heads=2, concat=False),
}


def _molecules(count=40, seed=0):
    """Molecule-shaped graphs: 10-40 nodes, about 1.1 undirected edges per node (degree about 2.2)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        n = int(torch.randint(10, 41, (1,), generator=g))
        src = torch.arange(1, n)
        dst = torch.stack([torch.randint(0, int(i), (1,), generator=g)[0] for i in range(1, n)])  # a tree
        extra = torch.randint(0, n, (2, max(n // 10, 1)), generator=g)  # a few rings
        ei = torch.cat([torch.stack([src, dst]), extra], 1)
        ei = torch.cat([ei, ei.flip(0)], 1)
        out.append(
            Data(
                x=torch.randn(n, 8, generator=g),
                edge_index=ei,
                y=torch.randint(0, 3, (1,), generator=g),
                edge_attr=torch.randn(ei.size(1), 2, generator=g),
            )
        )
    return out


class Net(torch.nn.Module):
    def __init__(self, conv, pool):
        super().__init__()
        self.c1, self.c2 = CONVS[conv](8, 16), CONVS[conv](16, 16)
        self.head, self.pool = torch.nn.Linear(16, 3), POOLS[pool]

    def forward(self, x, edge_index, batch, size=None):
        x = self.c2(self.c1(x, edge_index).relu(), edge_index).relu()
        return self.head(self.pool(x, batch, size))


def _batches(batch_size=8):
    return list(DataLoader(_molecules(), batch_size=batch_size))


@pytest.mark.parametrize('pool', sorted(POOLS))
@pytest.mark.parametrize('conv', sorted(CONVS))
def test_padded_batch_gives_the_unpadded_results(conv, pool):
    torch.manual_seed(0)
    model = Net(conv, pool)
    pad = PadGraphs(graph_buckets(_batches(), num_batches=5))
    for plain in _batches()[:3]:
        G = plain.num_graphs
        padded = pad(copy.copy(plain))
        assert padded.bucket is not None and padded.num_graphs == padded.bucket.num_graphs > G
        want = model(plain.x, plain.edge_index, plain.batch)
        out = model(padded.x, padded.edge_index, padded.batch, padded.num_graphs)
        torch.testing.assert_close(out[:G], want, atol=1e-5, rtol=1e-5)
        want_loss, loss = F.cross_entropy(want, plain.y), graph_loss(out, padded)
        torch.testing.assert_close(loss, want_loss)
        g_want = torch.autograd.grad(want_loss, list(model.parameters()))
        g_out = torch.autograd.grad(loss, list(model.parameters()))
        for a, b in zip(g_out, g_want):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_where_the_padding_goes():
    plain = _batches()[0]
    G, n, E = plain.num_graphs, plain.num_nodes, plain.edge_index.size(1)
    bucket = GraphBucket(G + 3, n + 10, E + 20)
    b = PadGraphs([bucket])(copy.copy(plain))
    assert (b.num_graphs, b.num_nodes, b.edge_index.size(1)) == tuple(bucket)
    assert b.x.shape == (n + 10, 8) and bool((b.x[n:] == 0).all())
    assert b.batch[:n].tolist() == plain.batch.tolist() and bool((b.batch[n:] == G + 2).all())
    assert b.y.tolist() == plain.y.tolist() + [0, 0, 0]
    assert b.ptr.tolist() == plain.ptr.tolist() + [n, n, n + 10]
    assert b.graph_mask.tolist() == [True] * G + [False] * 3 and int(b.node_mask.sum()) == n
    assert b.edge_attr.shape == (E + 20, 2) and bool((b.edge_attr[E:] == 0).all())
    ei = b.edge_index.as_tensor()
    assert bool((ei[:, E:] == n + 9).all())  # padding edges: loops of the last padded row
    assert bool((ei[1, 1:E] >= ei[1, : E - 1]).all())  # real edges in CSR order ...
    key = lambda s, d, a: (int(s), int(d), tuple(a.tolist()))  # noqa: E731
    assert sorted(map(key, *ei[:, :E], b.edge_attr[:E])) == sorted(map(key, *plain.edge_index, plain.edge_attr))
    assert has_graph(b.edge_index) and (b.num_real_graphs, b.num_real_nodes, b.num_real_edges) == (G, n, E)


def test_a_batch_larger_than_every_bucket_comes_unpadded_with_its_csr():
    plain = _batches()[0]
    b = PadGraphs([GraphBucket(2, 8, 8)])(copy.copy(plain))
    assert b.get("bucket") is None and b.num_nodes == plain.num_nodes and has_graph(b.edge_index)
    torch.testing.assert_close(step_loss(torch.randn(b.num_graphs, 3), b).shape, torch.Size([]))


def test_buckets_bound_the_batches_seen():
    batches = _batches()
    buckets = graph_buckets(batches, num_batches=len(batches), levels=2)
    assert len(buckets) >= 1 and buckets == sorted(buckets)
    assert all(any(bk.fits(b.num_graphs, b.num_nodes, b.edge_index.size(1)) for bk in buckets) for b in batches)
    with pytest.raises(ValueError, match='at least 2'):
        graph_buckets(batches[:1])


@pytest.mark.parametrize('workers', [0, 2])
def test_graph_loader_pads_in_its_collate_function(workers):
    data = _molecules()
    buckets = graph_buckets(DataLoader(data, batch_size=8), num_batches=5)
    loader = GraphLoader(data, batch_size=8, pad=PadGraphs(buckets), num_workers=workers)
    plain = list(DataLoader(data, batch_size=8))
    got = list(loader)
    assert len(got) == len(plain)
    for a, b in zip(got, plain):
        assert a.get('bucket') is not None and has_graph(a.edge_index), 'padded, CSR attached'
        assert a.num_real_graphs == b.num_graphs and torch.equal(a.y[: b.num_graphs], b.y)
    unpadded = next(iter(GraphLoader(data, batch_size=8)))
    assert unpadded.get('bucket') is None and has_graph(unpadded.edge_index)
    ei = unpadded.edge_index.as_tensor()
    assert bool((ei[1, 1:] >= ei[1, :-1]).all()), 'the edges are in the CSR order of the graph they carry'
    torch.manual_seed(0)
    conv = pyg_tc.nn.GCNConv(8, 4)
    want = torch_geometric_gcn(conv)(unpadded.x, ei)
    torch.testing.assert_close(conv(unpadded.x, unpadded.edge_index), want, atol=1e-5, rtol=1e-5)


def torch_geometric_gcn(conv):
    import torch_geometric.nn as pyg_nn

    ref = pyg_nn.GCNConv(8, 4)
    ref.load_state_dict(conv.state_dict())
    return ref


def test_step_loss_is_the_graph_loss_on_graph_batches():
    b = PadGraphs(graph_buckets(_batches(), num_batches=5))(copy.copy(_batches()[0]))
    out = torch.randn(b.num_graphs, 3)
    torch.testing.assert_close(step_loss(out, b), graph_loss(out, b))
    G = b.num_real_graphs
    torch.testing.assert_close(graph_loss(out, b), F.cross_entropy(out[:G], b.y[:G]))


def test_refuses_what_it_cannot_pad():
    with pytest.raises(TypeError, match='DataLoader batches'):
        PadGraphs([GraphBucket(4, 64, 64)])(Data(x=torch.randn(3, 2), edge_index=torch.zeros(2, 0, dtype=torch.long)))
    with pytest.raises(ValueError, match='padding slot'):
        PadGraphs([GraphBucket(1, 64, 64)])


@pytest.mark.cuda
@pytest.mark.parametrize('conv', sorted(CONVS) + ['gin_mlp_batch_norm'])
def test_captured_graph_classification_equals_the_eager_loop(conv):
    """Two epochs over padded batches (two buckets): CapturedStep's losses and
    final parameters are the eager loop's on the same batches (batch norms
    over the real rows in both)."""
    data = _molecules(64)
    buckets = graph_buckets(DataLoader(data, batch_size=8), num_batches=8, levels=2)
    loader = GraphLoader(data, batch_size=8, pad=PadGraphs(buckets))
    batches = [b.to('cuda') for b in loader]
    torch.manual_seed(0)
    m1 = pyg_tc.capture.padding_aware((MLPNet() if conv == 'gin_mlp_batch_norm' else Net(conv, 'add')).cuda())
    m2 = copy.deepcopy(m1)
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-2, capturable=True)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-2, capturable=True)

    def forward(model, b):
        return model(b.x, b.edge_index, b.batch, b.num_graphs)

    step = pyg_tc.capture.CapturedStep(m2, o2, forward=forward)
    eager, captured = [], []
    for _ in range(2):
        for b in batches:
            o1.zero_grad(set_to_none=True)
            with pyg_tc.capture.padding(b):
                loss = graph_loss(forward(m1, b), b)
            loss.backward()
            o1.step()
            eager.append(loss.detach())
            captured.append(step(b))
    torch.testing.assert_close(torch.stack(captured), torch.stack(eager), atol=1e-4, rtol=1e-4)
    assert step.replays > 0 and 1 <= len(step.graphs) <= len(buckets)
    for (name, p1), p2 in zip(m1.named_parameters(), m2.parameters()):
        if name not in _BEFORE_A_NORM:  # (see _BEFORE_A_NORM)
            torch.testing.assert_close(p2, p1, atol=1e-4, rtol=1e-3, msg=name)
    with torch.no_grad(), pyg_tc.capture.padding(batches[0]):  # (training mode: the norms take the batch's statistics)
        out1, out2 = forward(m1, batches[0]), forward(m2, batches[0])
    torch.testing.assert_close(out2, out1, atol=1e-4, rtol=1e-3)


#: MLPNet's biases of the Linear layers a batch norm follows: the norm
#: subtracts them again, so their exact gradient is zero and what reaches
#: them is round-off, which Adam scales to steps of ``lr``; two runs differ
#: there by design (the outputs compared after training do not)
_BEFORE_A_NORM = {f'convs.{i}.nn.lins.0.bias' for i in range(2)}


class MLPNet(torch.nn.Module):
    """Tutorial 5's GIN: PyG's MLP (with batch norm) in every layer, sum pooling."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import MLP

        self.convs = torch.nn.ModuleList(pyg_tc.nn.GINConv(MLP([8 if i == 0 else 16, 16, 16])) for i in range(2))
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x, edge_index, batch, size=None):
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        return self.head(global_add_pool(x, batch, size))


def test_batch_norm_over_the_real_rows_of_a_padded_batch():
    torch.manual_seed(0)
    ref = MLPNet()
    model = pyg_tc.capture.padding_aware(copy.deepcopy(ref))
    assert model.state_dict().keys() == ref.state_dict().keys()
    pad = PadGraphs(graph_buckets(_batches(), num_batches=5))
    for plain in _batches()[:3]:
        padded = pad(copy.copy(plain))
        G = plain.num_graphs
        want = ref(plain.x, plain.edge_index, plain.batch)
        with pyg_tc.capture.padding(padded):
            out = model(padded.x, padded.edge_index, padded.batch, padded.num_graphs)
        torch.testing.assert_close(out[:G], want, atol=1e-4, rtol=1e-4)
        g_want = torch.autograd.grad(F.cross_entropy(want, plain.y), list(ref.parameters()))
        g_out = torch.autograd.grad(graph_loss(out, padded), list(model.parameters()))
        for a, b in zip(g_out, g_want):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
    for (k, a), b in zip(model.state_dict().items(), ref.state_dict().values()):  # running statistics too
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=k)
    # outside padding() (or in eval mode) it is PyG's batch norm
    plain = _batches()[0]
    torch.testing.assert_close(
        model(plain.x, plain.edge_index, plain.batch), ref(plain.x, plain.edge_index, plain.batch), atol=1e-5, rtol=1e-5
    )


@pytest.mark.cuda
def test_captured_forward_on_padded_graph_batches():
    """Inference per bucket: CapturedForward's real rows are the eager model's on the unpadded batches."""
    data = _molecules(48)
    buckets = graph_buckets(DataLoader(data, batch_size=8), num_batches=6, levels=2)
    torch.manual_seed(0)
    model = pyg_tc.capture.padding_aware(MLPNet().cuda()).eval()
    infer = pyg_tc.capture.CapturedForward(model, forward=lambda m, b: m(b.x, b.edge_index, b.batch, b.num_graphs))
    plain = [b.to('cuda') for b in DataLoader(data, batch_size=8)]
    padded = [b.to('cuda') for b in GraphLoader(data, batch_size=8, pad=PadGraphs(buckets))]
    for _ in range(2):
        for p, b in zip(plain, padded):
            with torch.no_grad():
                want = model(p.x, p.edge_index, p.batch)
            torch.testing.assert_close(infer(b)[: p.num_graphs], want, atol=1e-4, rtol=1e-4)
    assert infer.replays > 0 and 1 <= len(infer.graphs) <= len(buckets)
