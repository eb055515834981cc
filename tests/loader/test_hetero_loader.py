"""``pyg_tc.loader.NeighborLoader`` on ``HeteroData``: PyG's batches (every
field of PyG's ``NeighborLoader`` with the same sampler), attributes
gathered on the sampler's device, pyg-lib's batches where the fan-outs cover
the degrees, a heterogeneous model trains on them, clear errors."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader

from pyg_tc.loader import FeatureStorage, NeighborLoader, quantize_fp8
from pyg_tc.loader.hetero import HeteroNeighborSampler
from pyg_tc.ops.neighbor import FP8

from .test_hetero_sampler import SIZES, _pyg_lib, hetero_graph

DEVICES = ['cpu', pytest.param('cuda', marks=pytest.mark.cuda)]


def _assert_same(a, b, data):
    """Batches ``a`` (pyg_tc's) and ``b`` equal, field by field (``b`` moved to ``a``'s device)."""
    assert set(a.node_types) == set(b.node_types) and set(a.edge_types) == set(b.edge_types)
    for t in data.node_types:
        for key in ('n_id', 'x'):
            assert torch.equal(a[t][key].cpu(), b[t][key].cpu()), (t, key)
        assert a[t].num_nodes == b[t].num_nodes, t
        assert a[t].num_sampled_nodes == b[t].num_sampled_nodes, t
    assert torch.equal(a['paper'].y.cpu(), b['paper'].y.cpu())
    assert torch.equal(a['paper'].input_id.cpu(), b['paper'].input_id.cpu())
    assert a['paper'].batch_size == b['paper'].batch_size
    for e in data.edge_types:
        for key in ('edge_index', 'e_id', 'edge_attr'):
            assert torch.equal(a[e][key].cpu(), b[e][key].cpu()), (e, key)
        assert a[e].num_sampled_edges == b[e].num_sampled_edges, e


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('num_neighbors', [[3, 2], {'default': [4, -1]}], ids=['list', 'dict'])
def test_batches_equal_pyg_loader_with_the_same_sampler(device, num_neighbors):
    """pyg_tc's loader (sampling and gathering on ``device``, the graph on the
    CPU) gives the batches of PyG's loader driven by pyg_tc's sampler on the
    CPU under the same torch seed, every field; on a GPU the attributes come
    from pinned host memory over UVA."""
    data = hetero_graph(5)
    if isinstance(num_neighbors, dict):
        num_neighbors = {e: num_neighbors['default'] for e in data.edge_types}
    kw = dict(input_nodes=('paper', torch.arange(0, 80, 3)), batch_size=9, shuffle=True)
    torch.manual_seed(0)
    ours = list(NeighborLoader(data, num_neighbors, device=device, **kw))
    torch.manual_seed(0)
    ref = list(
        PyGNeighborLoader(data, num_neighbors, neighbor_sampler=HeteroNeighborSampler(data, num_neighbors), **kw)
    )
    assert len(ours) == len(ref) == 3
    for a, b in zip(ours, ref):
        assert a['paper'].x.device.type == device and a['author', 'writes', 'paper'].edge_index.device.type == device
        _assert_same(a, b, data)


@pytest.mark.cuda
def test_graph_on_the_gpu_gives_the_same_batches():
    """The graph on the GPU (gathers from GPU memory): the CPU reference's batches."""
    data = hetero_graph(6)
    gpu = data.clone().to('cuda')  # (PyG's to() moves the stores in place)
    kw = dict(num_neighbors=[3, 3], input_nodes=('author', torch.arange(50)), batch_size=16)
    torch.manual_seed(1)
    a_batches = list(NeighborLoader(gpu, **kw))
    torch.manual_seed(1)
    b_batches = list(NeighborLoader(data, device='cpu', **kw))
    for a, b in zip(a_batches, b_batches):
        for t in data.node_types:
            assert torch.equal(a[t].n_id.cpu(), b[t].n_id) and torch.equal(a[t].x.cpu(), b[t].x), t
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index.cpu(), b[e].edge_index), e


def test_batches_equal_pyg_lib_where_fanouts_cover_the_degrees():
    """With fan-outs covering the degrees, pyg_tc's loader gives PyG's default
    loader's batches (pyg-lib), edges sorted so both read one CSC order."""
    _pyg_lib()
    data = hetero_graph(7)
    kw = dict(input_nodes=('paper', torch.arange(0, 80, 2)), batch_size=10, is_sorted=True)
    for a, b in zip(
        NeighborLoader(data, [1000, 1000], device='cpu', **kw), PyGNeighborLoader(data, [1000, 1000], **kw)
    ):
        _assert_same(a, b, data)


def test_cpu_sampler_pyg_gives_pyg_loaders_batches():
    """``cpu_sampler='pyg'``: PyG's own sampler (shuffled seeds; all
    neighbours, so that pyg-lib's own random stream plays no part): PyG's
    batches under the same seed."""
    _pyg_lib()
    data = hetero_graph(8)
    kw = dict(input_nodes=('paper', torch.arange(0, 80, 2)), batch_size=10, shuffle=True)
    torch.manual_seed(3)
    ours = list(NeighborLoader(data, [-1, -1], device='cpu', cpu_sampler='pyg', **kw))
    torch.manual_seed(3)
    for a, b in zip(ours, PyGNeighborLoader(data, [-1, -1], **kw)):
        _assert_same(a, b, data)


def test_hetero_model_trains_on_the_batches():
    """A ``to_hetero`` model of pyg_tc layers trains on the loader's batches
    (its loss falls over a few epochs on a learnable label)."""
    from torch_geometric.nn import to_hetero

    import pyg_tc.nn as tcnn

    data = hetero_graph(9)
    del data['lonely']  # (to_hetero needs every node type to be some edge type's target)
    data['paper'].y = (data['paper'].x[:, 0] > 0).long()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = tcnn.SAGEConv((-1, -1), 16)
            self.conv2 = tcnn.SAGEConv((-1, -1), 2)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    torch.manual_seed(0)
    model = to_hetero(Net(), data.metadata(), aggr='sum')
    loader = NeighborLoader(data, [5, 5], input_nodes=('paper', torch.arange(80)), batch_size=20, device='cpu')
    b = next(iter(loader))
    model(b.x_dict, b.edge_index_dict)  # (lazy shapes)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(15):
        total = 0.0
        for b in loader:
            opt.zero_grad()
            out = model(b.x_dict, b.edge_index_dict)['paper'][: b['paper'].batch_size]
            loss = torch.nn.functional.cross_entropy(out, b['paper'].y[: b['paper'].batch_size])
            loss.backward()
            opt.step()
            total += loss.item()
        losses.append(total)
    assert losses[-1] < 0.7 * losses[0]


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize(
    'storage',
    [torch.bfloat16, FeatureStorage(FP8), FeatureStorage(torch.float16, memory='device')],
    ids=['bf16', 'fp8', 'fp16-device'],
)
def test_feature_storage_per_node_type(device, storage):
    """``feature_storage`` stores every node type's features (fp8: with its
    own scales per type) and gathers them in the batch dtype; every other
    field is the batch of the loader without it."""
    data = hetero_graph(6)
    kw = dict(input_nodes=('paper', torch.arange(0, 60, 2)), batch_size=10, device=device)
    torch.manual_seed(0)
    plain = list(NeighborLoader(data, [3, 2], **kw))
    torch.manual_seed(0)
    ours = list(NeighborLoader(data, [3, 2], feature_storage=storage, **kw))
    st = storage if isinstance(storage, FeatureStorage) else FeatureStorage(storage)
    assert len(plain) == len(ours) == 3
    for a, b in zip(plain, ours):
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id)
            full = data[t].x
            if st.dtype == FP8:
                q, s = quantize_fp8(full, st.scale)
                want = (q.float() * s)[a[t].n_id.cpu()].to(st.batch_dtype)
            else:
                want = full[a[t].n_id.cpu()].to(st.dtype)
            assert b[t].x.dtype == st.batch_dtype and b[t].x.device == a[t].x.device
            assert torch.equal(b[t].x.cpu(), want), t
        for e in data.edge_types:
            assert torch.equal(a[e].edge_attr, b[e].edge_attr)  # (edge attributes as stored)
            assert torch.equal(a[e].edge_index.as_tensor(), b[e].edge_index.as_tensor())


def test_errors():
    data = hetero_graph(10)
    with pytest.raises(ValueError, match='no node type has'):
        NeighborLoader(
            data, [2], input_nodes=('paper', None), feature_storage=FeatureStorage(torch.bfloat16, attrs=('h',))
        )
    data['paper'].w = torch.arange(SIZES['paper'])
    loader = NeighborLoader(
        data,
        [2],
        input_nodes=('paper', None),
        feature_storage=FeatureStorage(torch.bfloat16, attrs=('w',)),
        device='cpu',
    )
    with pytest.raises(ValueError, match=r"data\['paper'\].w is torch.int64"):
        next(iter(loader))
    del data['paper'].w
    with pytest.raises(NotImplementedError, match='disjoint'):
        NeighborLoader(data, [2], input_nodes=('paper', None), disjoint=True, device='cpu')
    with pytest.raises(NotImplementedError, match='graph_memory'):
        NeighborLoader(data, [2], input_nodes=('paper', None), graph_memory='pinned', device='cpu')
    loader = NeighborLoader(
        data, [2], input_nodes=('paper', torch.tensor([1, SIZES['paper'] + 3])), batch_size=2, device='cpu'
    )
    with pytest.raises(IndexError, match='seed nodes'):
        next(iter(loader))


@pytest.mark.parametrize('device', DEVICES)
def test_each_edge_type_carries_its_csr(device):
    """Every edge type's ``edge_index`` is an ``EdgeIndex`` of the batch's
    (sources, targets) sizes, sorted by target, carrying pyg_tc's CSR of
    exactly its edges; pyg_tc's bipartite layers use it (no format built)
    and give PyG's outputs."""
    from torch_geometric.nn import SAGEConv

    import pyg_tc.nn
    from pyg_tc.formats import CSRGraph
    from pyg_tc.formats.carrier import graph_of

    data = hetero_graph(11)
    loader = NeighborLoader(data, [4, 3], input_nodes=('paper', torch.arange(40)), batch_size=20, device=device)
    b = next(iter(loader))
    for e in data.edge_types:
        src, _, dst = e
        ei = b[e].edge_index
        g = graph_of(ei)
        assert g is not None and ei.sparse_size() == (b[src].num_nodes, b[dst].num_nodes), e
        assert (g.num_rows, g.num_cols) == (b[dst].num_nodes, b[src].num_nodes), e
        plain = ei.as_tensor()
        ref = CSRGraph.from_coo(plain[0], plain[1], b[src].num_nodes, b[dst].num_nodes)
        assert torch.equal(g.rowptr.cpu(), ref.rowptr.cpu()) and torch.equal(g.col.cpu(), ref.col.cpu()), e
    e = ('author', 'writes', 'paper')
    torch.manual_seed(0)
    pyg, ours = SAGEConv((3, 3), 5).to(device), pyg_tc.nn.SAGEConv((3, 3), 5).to(device)
    ours.load_state_dict(pyg.state_dict())
    x = (b['author'].x, b['paper'].x)
    torch.testing.assert_close(ours(x, b[e].edge_index), pyg(x, b[e].edge_index.as_tensor().clone()))


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('neg', [None, 'binary', 'triplet'])
def test_link_loader_batches_equal_pyg_link_loader(device, neg):
    """``LinkNeighborLoader`` on ``HeteroData``: the batches of PyG's
    ``LinkNeighborLoader`` driven by pyg_tc's sampler under the same seed
    (nodes, edges, attributes; ``edge_label_index`` / ``edge_label``, or the
    triplet indices), on the sampler's device."""
    from torch_geometric.loader import LinkNeighborLoader as PyGLinkNeighborLoader

    from pyg_tc.loader import LinkNeighborLoader

    data = hetero_graph(12)
    e = ('author', 'writes', 'paper')
    kw = dict(edge_label_index=(e, data[e].edge_index[:, :30]), batch_size=10, shuffle=True)
    if neg is not None:
        kw['neg_sampling'] = dict(mode=neg, amount=1)
    torch.manual_seed(2)
    ours = list(LinkNeighborLoader(data, [3, 2], device=device, **kw))
    torch.manual_seed(2)
    ref = list(PyGLinkNeighborLoader(data, [3, 2], neighbor_sampler=HeteroNeighborSampler(data, [3, 2]), **kw))
    assert len(ours) == len(ref) == 3
    fields = {
        None: [(e, 'edge_label_index')],  # (no edge_label given: none, as PyG's)
        'binary': [(e, 'edge_label_index'), (e, 'edge_label')],
        'triplet': [('author', 'src_index'), ('paper', 'dst_pos_index'), ('paper', 'dst_neg_index')],
    }[neg]
    for a, b in zip(ours, ref):
        for t in data.node_types:
            assert torch.equal(a[t].n_id.cpu(), b[t].n_id) and torch.equal(a[t].x.cpu(), b[t].x), t
            assert a[t].n_id.device.type == device
        for et in data.edge_types:
            assert torch.equal(a[et].edge_index.cpu(), b[et].edge_index), et
            assert torch.equal(a[et].e_id.cpu(), b[et].e_id) and torch.equal(a[et].edge_attr.cpu(), b[et].edge_attr)
        assert torch.equal(a[e].input_id.cpu(), b[e].input_id)
        assert ('edge_label' in a[e]) == ('edge_label' in b[e])
        for store, key in fields:
            assert a[store][key].device.type == device, (store, key)
            assert torch.equal(a[store][key].cpu(), b[store][key].cpu()), (store, key)
