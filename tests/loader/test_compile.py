"""``torch.compile`` of a model of pyg_tc layers on padded batches: one graph
per bucket, none after the buckets are seen (Dynamo's counters), outputs
and gradients equal to the eager model's; on CUDA also with
``mode='reduce-overhead'`` (CUDA graphs)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch._dynamo.utils import counters
from torch_geometric.data import Data

import pyg_tc
from pyg_tc.formats import get_graph
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import PadToBuckets, buckets_from_batches
from pyg_tc.capture import seed_loss


MAKE = {
    'sage': lambda i, o: pyg_tc.nn.SAGEConv(i, o),
    'gcn': lambda i, o: pyg_tc.nn.GCNConv(i, o),
    'gin': lambda i, o: pyg_tc.nn.GINConv(torch.nn.Linear(i, o)),
    'gat': lambda i, o: pyg_tc.nn.GATConv(i, o, heads=2, concat=False),
}


class Net(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.c1, self.c2 = MAKE[conv](16, 32), MAKE[conv](32, 4)

    def forward(self, x, adj):
        return self.c2(self.c1(x, adj).relu(), adj)


def _loader(device):
    g = torch.Generator().manual_seed(0)
    N = 400
    data = Data(
        x=torch.randn(N, 16, generator=g),
        y=torch.randint(0, 4, (N,), generator=g),
        edge_index=torch.randint(0, N, (2, 3000), generator=g),
    )
    loader = NeighborLoader(data, [5, 3], batch_size=32, device=device, shuffle=True)
    torch.manual_seed(1)
    buckets = buckets_from_batches(loader, num_batches=6, levels=2, node_multiple=64, edge_multiple=256)
    loader.transform = PadToBuckets(buckets, 32, self_loops=True)
    return loader, buckets


def _run(conv, device, **compile_kw):
    torch.manual_seed(0)
    model = Net(conv).to(device)
    loader, buckets = _loader(device)
    first = next(iter(loader))
    model(first.x, get_graph(first.edge_index)[0])  # eager once: the ops' kernels are loaded
    eager = copy.deepcopy(model)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, dynamic=False, **compile_kw)
    seen = set()
    for epoch in range(2):
        for b in loader:
            g, _ = get_graph(b.edge_index)
            out = compiled(b.x, g)
            ref = eager(b.x, g)
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
            grads = torch.autograd.grad(seed_loss(out, b), list(model.parameters()))
            refs = torch.autograd.grad(seed_loss(ref, b), list(eager.parameters()))
            for a, c in zip(grads, refs):
                torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-4)
            seen.add(b.get('bucket'))
            if epoch == 0:
                after_first = counters['stats']['unique_graphs']
    assert None not in seen
    # one graph per bucket (each with its backward), none in the second epoch
    assert 1 <= counters['stats']['unique_graphs'] <= len(buckets)
    assert counters['stats']['unique_graphs'] == after_first


@pytest.mark.parametrize('conv', sorted(MAKE))
def test_compiled_model_on_padded_batches_compiles_once_per_bucket(conv):
    _run(conv, 'cpu', backend='aot_eager')


@pytest.mark.cuda
@pytest.mark.parametrize('conv', sorted(MAKE))
def test_compiled_reduce_overhead_cuda(conv):
    _run(conv, 'cuda', mode='reduce-overhead')


FULL = {
    'sage': lambda i, o: pyg_tc.nn.SAGEConv(i, o),
    'gcn': lambda i, o: pyg_tc.nn.GCNConv(i, o, cached=True),
    'gin': lambda i, o: pyg_tc.nn.GINConv(torch.nn.Linear(i, o)),
    'gat': lambda i, o: pyg_tc.nn.GATConv(i, o, heads=2, concat=False),
    'gatv2': lambda i, o: pyg_tc.nn.GATv2Conv(i, o, heads=2, concat=False),
    'agnn': lambda i, o: torch.nn.Sequential(torch.nn.Linear(i, o), pyg_tc.nn.AGNNConv(requires_grad=True)),
}


class FullNet(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.c1, self.c2 = FULL[conv](16, 32), FULL[conv](32, 4)

    def forward(self, x, edge_index):
        return _call(self.c2, _call(self.c1, x, edge_index).relu(), edge_index)


def _call(layer, x, edge_index):
    return layer[1](layer[0](x), edge_index) if isinstance(layer, torch.nn.Sequential) else layer(x, edge_index)


def _full(conv, device, **compile_kw):
    """A compiled model on a full graph with a plain ``edge_index`` equals the
    eager model (outputs and gradients) on every call, compiled once."""
    g = torch.Generator().manual_seed(0)
    N = 500
    x = torch.randn(N, 16, generator=g).to(device)
    ei = torch.randint(0, N, (2, 4000), generator=g).to(device)
    torch.manual_seed(0)
    model = FullNet(conv).to(device)
    eager = copy.deepcopy(model)
    eager(x, ei)  # the ops' kernels are loaded, the CSR attached to ei
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, **compile_kw)
    w = torch.randn(N, 4, generator=g).to(device)
    for _ in range(3):
        out, ref = compiled(x, ei), eager(x, ei)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        grads = torch.autograd.grad((out * w).sum(), list(model.parameters()))
        refs = torch.autograd.grad((ref * w).sum(), list(eager.parameters()))
        for a, c in zip(grads, refs):
            torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-4)
    assert counters['stats']['unique_graphs'] >= 1


@pytest.mark.parametrize('conv', sorted(FULL))
def test_compiled_model_on_a_full_graph(conv):
    _full(conv, 'cpu', backend='aot_eager')


@pytest.mark.cuda
@pytest.mark.parametrize('conv', sorted(FULL))
def test_compiled_reduce_overhead_on_a_full_graph_cuda(conv):
    _full(conv, 'cuda', mode='reduce-overhead')
