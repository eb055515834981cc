"""rcm_order and ReorderTransform: valid permutations, bandwidth reduction
(against SciPy's RCM where available), and isomorphism of the relabelled Data."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch_geometric import EdgeIndex
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

from pyg_tc.transforms import ReorderTransform, rcm_order

from ..conftest import DEVICES, make_graph, random_graph

bandwidth = ReorderTransform.bandwidth


def relabel(ei: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    return inv[ei]


def assert_perm(perm: torch.Tensor, n: int) -> None:
    assert perm.dtype == torch.long and perm.shape == (n,)
    assert torch.equal(perm.sort()[0].cpu(), torch.arange(n))


def shuffled(ei: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """``ei`` under a random relabelling of its nodes."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[ei]


def path(n: int) -> torch.Tensor:
    return torch.stack([torch.arange(n - 1), torch.arange(1, n)])


def grid(a: int, b: int) -> torch.Tensor:
    idx = torch.arange(a * b).view(a, b)
    return torch.cat(
        [
            torch.stack([idx[:, :-1].flatten(), idx[:, 1:].flatten()]),
            torch.stack([idx[:-1].flatten(), idx[1:].flatten()]),
        ],
        1,
    )


def banded(n: int, k: int) -> torch.Tensor:
    """Every node linked to the next ``k`` nodes (bandwidth ``k``)."""
    src = torch.arange(n).repeat_interleave(k)
    dst = src + torch.arange(1, k + 1).repeat(n)
    keep = dst < n
    return torch.stack([src[keep], dst[keep]])


# ---------------------------------------------------------------------------
# rcm_order


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize(
    'kind', ['random', 'empty', 'isolated', 'self_loops', 'duplicates', 'hub', 'not_tile_multiple']
)
def test_rcm_is_permutation(kind, device):
    ei, n = make_graph(kind, device)
    perm = rcm_order(ei, n)
    assert perm.device == ei.device
    assert_perm(perm, n)


def test_rcm_trivial_graphs():
    assert_perm(rcm_order(torch.empty(2, 0, dtype=torch.long), 0), 0)
    # no edges / only self loops: every node its own component, in id order
    assert torch.equal(rcm_order(torch.empty(2, 0, dtype=torch.long), 5), torch.arange(5))
    loops = torch.arange(4).repeat(2, 1)
    assert torch.equal(rcm_order(loops, 4), torch.arange(4))
    # int32 and EdgeIndex input
    assert_perm(rcm_order(path(6).int(), 6), 6)
    assert_perm(rcm_order(EdgeIndex(path(6), sparse_size=(6, 6)), 6), 6)


def test_rcm_ignores_direction_self_loops_and_duplicates():
    ei = shuffled(grid(6, 7), 42, seed=1)
    ref = rcm_order(ei, 42)
    noisy = torch.cat([ei.flip(0)[:, ::2], ei[:, 1::2], ei[:, :9], torch.arange(42).repeat(2, 1)], 1)
    assert torch.equal(rcm_order(noisy, 42), ref)
    assert torch.equal(rcm_order(torch.cat([ei, ei.flip(0)], 1), 42), ref)


def test_rcm_known_order():
    # star with centre 0 and leaves 1..3, then a path 3-4-5: seed 1 (degree 1,
    # smallest id), CM order 1 0 2 3 4 5, reversed
    ei = torch.tensor([[0, 0, 0, 3, 4], [1, 2, 3, 4, 5]])
    assert rcm_order(ei, 6).tolist() == [5, 4, 3, 2, 0, 1]
    # children of a parent by increasing degree: 0's children 1 (degree 3) and
    # 2 (degree 2); leaves 3, 4 hang off 1 and 5 off 2
    ei = torch.tensor([[0, 0, 1, 1, 2], [1, 2, 3, 4, 5]])
    # seed 3 (degree 1), then 1, then its children by degree (4, then 0), 2, 5
    assert rcm_order(ei, 6).tolist() == [5, 2, 0, 4, 1, 3]


def test_rcm_components():
    # two shuffled paths and three isolated nodes: every component one
    # contiguous block (itself of bandwidth 1), blocks in order of their
    # smallest node id
    r = torch.randperm(20, generator=torch.Generator().manual_seed(3))
    ei = r[torch.cat([path(10), path(7) + 10], 1)]
    comp = torch.empty(20, dtype=torch.long)
    comp[r] = torch.tensor([0] * 10 + [1] * 7 + [2, 3, 4])
    perm = rcm_order(ei, 20)
    assert_perm(perm, 20)
    assert bandwidth(relabel(ei, perm)) == 1
    blocks = comp[perm].unique_consecutive()
    assert blocks.numel() == 5
    smallest = torch.full((5,), 20).scatter_reduce(0, comp, torch.arange(20), 'amin')[blocks]
    assert torch.equal(smallest, smallest.sort()[0])


@pytest.mark.parametrize(
    'name, ei, n, bound',
    [
        ('path', path(500), 500, 1),
        ('grid', grid(20, 30), 600, 21),
        ('banded', banded(400, 3), 400, 6),
    ],
)
def test_rcm_reduces_bandwidth(name, ei, n, bound):
    ei = shuffled(ei, n)
    assert bandwidth(ei) > 10 * bound
    assert bandwidth(relabel(ei, rcm_order(ei, n))) <= bound


def test_rcm_matches_scipy():
    sp = pytest.importorskip('scipy.sparse')
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    def scipy_bw(ei, n):
        a = sp.coo_matrix((torch.ones(ei.size(1)).numpy(), (ei[0].numpy(), ei[1].numpy())), shape=(n, n))
        a = (a + a.T).tocsr()
        return bandwidth(relabel(ei, torch.from_numpy(reverse_cuthill_mckee(a, symmetric_mode=True).astype('int64'))))

    ei = shuffled(path(300), 300)
    assert bandwidth(relabel(ei, rcm_order(ei, 300))) == scipy_bw(ei, 300) == 1
    for seed, (n, m) in enumerate([(500, 700), (800, 2400), (300, 1500)]):
        ei = random_graph(n, n, m, seed=seed)
        ours, ref = bandwidth(relabel(ei, rcm_order(ei, n))), scipy_bw(ei, n)
        assert ours <= 1.5 * ref, (n, m, ours, ref)


def test_rcm_cora(cora):
    n = cora.num_nodes
    perm = rcm_order(cora.edge_index, n)
    assert_perm(perm, n)
    before, after = bandwidth(cora.edge_index), bandwidth(relabel(cora.edge_index, perm))
    assert after < before / 2, (before, after)


# ---------------------------------------------------------------------------
# ReorderTransform


def toy_data(n: int = 60, m: int = 300, seed: int = 0) -> Data:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=g)
    return Data(
        x=torch.randn(n, 5, generator=g),
        y=torch.randint(0, 3, (n,), generator=g),
        train_mask=torch.rand(n, generator=g) < 0.5,
        edge_index=ei,
        edge_attr=torch.randn(m, 2, generator=g),
        names=[f'v{i}' for i in range(n)],
    )


def edge_multiset(ei, edge_attr, perm=None):
    if perm is not None:
        ei = perm[ei]
    return Counter(zip(ei[0].tolist(), ei[1].tolist(), map(tuple, edge_attr.tolist())))


@pytest.mark.parametrize('method', ['rcm', 'random', 'none'])
def test_transform_isomorphic(method):
    data = toy_data()
    out = ReorderTransform(method)(data)
    perm = out.node_perm
    assert_perm(perm, data.num_nodes)
    assert type(out.edge_index) is torch.Tensor
    assert torch.equal(out.x, data.x[perm])
    assert torch.equal(out.y, data.y[perm]) and torch.equal(out.train_mask, data.train_mask[perm])
    assert out.names == [data.names[i] for i in perm.tolist()]
    assert torch.equal(perm[out.edge_index], data.edge_index)  # same edge order
    assert torch.equal(out.edge_attr, data.edge_attr)
    assert edge_multiset(out.edge_index, out.edge_attr, perm) == edge_multiset(data.edge_index, data.edge_attr)
    if method == 'none':
        assert torch.equal(perm, torch.arange(data.num_nodes))
    if method == 'random':  # seeded: the same permutation every time
        assert torch.equal(ReorderTransform('random', seed=0)(data).node_perm, perm)
        assert not torch.equal(ReorderTransform('random', seed=1)(data).node_perm, perm)


def test_transform_gcn_equivariant():
    data = toy_data(seed=1)
    data.edge_weight = torch.rand(data.num_edges, generator=torch.Generator().manual_seed(2))
    out = ReorderTransform()(data)
    conv = GCNConv(5, 4)
    ref = conv(data.x, data.edge_index, data.edge_weight)
    got = conv(out.x, out.edge_index, out.edge_weight)
    torch.testing.assert_close(got, ref[out.node_perm], rtol=1e-5, atol=1e-6)


def test_transform_twice_composes():
    data = toy_data(seed=2)
    once = ReorderTransform('random', seed=3)(data)
    twice = ReorderTransform('rcm')(once)
    perm = twice.node_perm
    assert_perm(perm, data.num_nodes)
    assert torch.equal(twice.x, data.x[perm])
    assert torch.equal(perm[twice.edge_index], data.edge_index)
    # RCM is a function of the graph: the same order from either start
    assert bandwidth(twice.edge_index) == bandwidth(ReorderTransform()(data).edge_index)


def test_transform_batch_and_index_attrs():
    # two graphs of a mini-batch: RCM keeps the components in ascending order,
    # so the sorted batch vector stays the same; other node-index keys
    # (edge_label_index) are mapped too
    g = torch.Generator().manual_seed(4)
    r = torch.cat([torch.randperm(8, generator=g), torch.randperm(5, generator=g) + 8])
    ei = r[torch.cat([path(8), path(5) + 8], 1)]
    batch = torch.tensor([0] * 8 + [1] * 5)
    data = Data(edge_index=ei, batch=batch, num_nodes=13, edge_label_index=torch.tensor([[0, 9], [7, 12]]))
    out = ReorderTransform()(data)
    assert torch.equal(out.batch, batch)
    assert bandwidth(out.edge_index) == 1
    assert torch.equal(out.node_perm[out.edge_label_index], data.edge_label_index)


def test_transform_edge_index_subclass():
    ei = EdgeIndex(shuffled(path(20), 20), sparse_size=(20, 20))
    out = ReorderTransform()(Data(edge_index=ei, num_nodes=20))
    assert type(out.edge_index) is torch.Tensor
    assert bandwidth(out.edge_index) == 1


def test_transform_errors_and_helpers():
    with pytest.raises(ValueError, match='unknown method'):
        ReorderTransform('metis')
    with pytest.raises(ValueError, match='edge_index'):
        ReorderTransform()(Data(x=torch.randn(3, 2)))
    assert bandwidth(torch.empty(2, 0, dtype=torch.long), 4) == 0
    assert bandwidth(torch.tensor([[0, 5], [3, 1]]), 6) == 4
    assert repr(ReorderTransform('random', seed=7)) == "ReorderTransform(method='random', seed=7)"


@pytest.mark.parametrize('device', DEVICES)
def test_transform_device(device):
    data = toy_data().to(device)
    out = ReorderTransform()(data)
    assert out.edge_index.device == out.node_perm.device == data.x.device
    assert torch.equal(out.x, data.x[out.node_perm])
