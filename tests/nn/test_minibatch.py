"""Formats per mini-batch: the transform applied to each sampled subgraph
(on the CPU, or on the GPU after moving the batch), and layers on the batch
matching PyG's on the same batch."""

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.data import Data
from torch_geometric.utils import k_hop_subgraph

import pyg_tc
from pyg_tc.transforms import DegreeBucketTransform

from ..conftest import DEVICES


def batches(data, seeds_per_batch=64, hops=2, count=3):
    g = torch.Generator().manual_seed(0)
    for _ in range(count):
        seeds = torch.randint(0, data.num_nodes, (seeds_per_batch,), generator=g)
        subset, ei, _, _ = k_hop_subgraph(seeds, hops, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes)
        yield Data(x=data.x[subset], edge_index=ei, num_nodes=subset.numel())


@pytest.mark.parametrize('device', DEVICES)
def test_transform_per_minibatch(cora, device):
    torch.manual_seed(0)
    ref = pyg_nn.SAGEConv(cora.num_features, 16).to(device)
    ours = pyg_tc.nn.SAGEConv(cora.num_features, 16).to(device)
    ours.load_state_dict(ref.state_dict())
    transform = DegreeBucketTransform(validate=True)
    for batch in batches(cora):
        batch = transform(batch.to(device))  # the GPU builder when device == 'cuda'
        graph = DegreeBucketTransform.graph(batch)
        assert graph is not None and graph.device.type == device
        assert graph.num_rows == batch.num_nodes
        plain = batch.edge_index.as_subclass(torch.Tensor)
        torch.testing.assert_close(ours(batch.x, batch.edge_index), ref(batch.x, plain))


def test_neighbor_loader_transform(cora):
    """The real loader, where neighbour sampling is available (pyg-lib or
    torch-sparse; neither is installed on the project's machines)."""
    from torch_geometric.loader import NeighborLoader

    loader = NeighborLoader(cora, num_neighbors=[5, 5], batch_size=64, transform=DegreeBucketTransform())
    try:
        batch = next(iter(loader))
    except ImportError as e:
        pytest.skip(f'neighbour sampling unavailable: {e}')
    assert isinstance(batch.edge_index, pyg_tc.formats.TCEdgeIndex)
    torch.manual_seed(0)
    ref = pyg_nn.GCNConv(cora.num_features, 8)
    ours = pyg_tc.nn.GCNConv(cora.num_features, 8)
    ours.load_state_dict(ref.state_dict())
    plain = batch.edge_index.as_subclass(torch.Tensor)
    torch.testing.assert_close(ours(batch.x, batch.edge_index), ref(batch.x, plain))
