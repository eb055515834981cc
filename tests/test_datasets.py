"""pyg_tc.datasets: the synthetic stand-ins have the real datasets' shape and learnable labels,
``load`` returns them without a root, the real PyG dataset with one, and one clear error when
the real one can be neither read nor downloaded."""

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.datasets
from torch_geometric.data import HeteroData
from torch_geometric.nn import GCNConv
from torch_geometric.utils import contains_self_loops, is_undirected

from pyg_tc.datasets import NAMES, DatasetUnavailableError, SyntheticDataset, load, synthetic

from .conftest import writable_copy


@pytest.fixture(scope='module', autouse=True)
def _one_thread():
    """Small tensors: one intra-op thread (OpenMP spin-waits on a loaded 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope='module')
def made():
    return {name: synthetic(name) for name in NAMES}


def _simple_undirected(ei, n):
    assert is_undirected(ei, num_nodes=n) and not contains_self_loops(ei)
    key = ei[0] * n + ei[1]
    assert key.unique().numel() == key.numel()  # no repeated edge


def test_cora_shape(made):
    ds = made['Cora']
    assert isinstance(ds, SyntheticDataset) and len(ds) == 1 and ds.num_features == 1433 and ds.num_classes == 7
    d = ds[0]
    assert (d.num_nodes, d.num_edges) == (2708, 10556)
    _simple_undirected(d.edge_index, d.num_nodes)
    assert torch.bincount(d.edge_index[1], minlength=d.num_nodes).min() >= 1  # no isolated node, as Cora
    assert set(d.x.unique().tolist()) == {0.0, 1.0}  # binary bag of words
    assert torch.bincount(d.y).tolist() == [351, 217, 418, 818, 426, 298, 180]  # Cora's class sizes
    masks = torch.stack([d.train_mask, d.val_mask, d.test_mask])
    assert masks.sum(1).tolist() == [140, 500, 1000] and masks.sum(0).max() == 1  # disjoint
    assert torch.bincount(d.y[d.train_mask]).tolist() == [20] * 7  # Planetoid's public split


def test_tolokers_shape(made):
    d = made['Tolokers'][0]
    assert (d.num_nodes, d.num_edges, d.num_features) == (11758, 1038000, 10)
    _simple_undirected(d.edge_index, d.num_nodes)
    deg = torch.bincount(d.edge_index[1], minlength=d.num_nodes)
    assert deg.max() > 1000 and deg.float().median() < 88  # heavy-tailed around a mean of 88
    assert abs(d.y.float().mean().item() - 0.218) < 0.01
    for m, share in ((d.train_mask, 0.5), (d.val_mask, 0.25), (d.test_mask, 0.25)):
        assert m.shape == (11758, 10) and (m.float().mean(0) - share).abs().max() < 1e-3
    assert (d.train_mask.int() + d.val_mask.int() + d.test_mask.int() == 1).all()  # each split covers all once


@pytest.mark.parametrize(
    'name,graphs,classes,nodes,edges',
    [('PROTEINS_full', 1113, [663, 450], 43471, 162088), ('ENZYMES', 600, [100] * 6, 19580, 74564)],
)
def test_tu_shape(made, name, graphs, classes, nodes, edges):
    ds = made[name]
    assert len(ds) == graphs and ds.num_features == 3 and torch.bincount(ds.y).tolist() == classes
    n = [g.num_nodes for g in ds]
    e = [g.num_edges for g in ds]
    assert abs(sum(n) / nodes - 1) < 0.1 and abs(sum(e) / edges - 1) < 0.15 and min(n) >= 4
    for g in ds[:50]:
        _simple_undirected(g.edge_index, g.num_nodes)
        assert (g.x.sum(1) == 1).all()  # one-hot node types


def test_seeded():
    a, b, c = synthetic('Cora', seed=0)[0], synthetic('Cora', seed=0)[0], synthetic('Cora', seed=1)[0]
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert not torch.equal(a.edge_index, c.edge_index)


def test_cora_labels_are_learned_better_with_the_graph(made):
    """A 2-layer GCN learns the synthetic labels, and the graph helps (as on Cora)."""
    d = made['Cora'][0]
    torch.manual_seed(0)

    def accuracy(edge_index):
        c1, c2 = GCNConv(1433, 16), GCNConv(16, 7)
        opt = torch.optim.Adam([*c1.parameters(), *c2.parameters()], lr=0.01, weight_decay=5e-4)
        x = d.x / d.x.sum(1, keepdim=True)
        for _ in range(100):
            opt.zero_grad()
            F.cross_entropy(c2(c1(x, edge_index).relu(), edge_index)[d.train_mask], d.y[d.train_mask]).backward()
            opt.step()
        with torch.no_grad():
            pred = c2(c1(x, edge_index).relu(), edge_index).argmax(1)
        return float((pred[d.test_mask] == d.y[d.test_mask]).float().mean())

    with_graph, without = accuracy(d.edge_index), accuracy(torch.empty(2, 0, dtype=torch.long))
    assert with_graph > 0.7 and with_graph > without + 0.15, (with_graph, without)


def test_tu_and_tolokers_labels_carry_signal(made):
    """Graph classes differ in their node-type mix; Tolokers' labels follow features and neighbours."""
    for name in ('PROTEINS_full', 'ENZYMES'):
        ds = made[name]
        mix = torch.stack([g.x.mean(0) for g in ds])
        centroid = torch.stack([mix[ds.y == c].mean(0) for c in range(ds.num_classes)])
        pred = torch.cdist(mix, centroid).argmin(1)
        chance = torch.bincount(ds.y).max().item() / len(ds)
        assert (pred == ds.y).float().mean() > chance + 0.1, name
    d = made['Tolokers'][0]
    nbr = torch.zeros_like(d.x).index_add_(0, d.edge_index[1], d.x[d.edge_index[0]])
    z = torch.cat([d.x, nbr / torch.bincount(d.edge_index[1], minlength=d.num_nodes).unsqueeze(1)], 1)
    w = torch.linalg.lstsq(torch.cat([z, torch.ones(len(z), 1)], 1), d.y.float().unsqueeze(1)).solution
    score = torch.cat([z, torch.ones(len(z), 1)], 1) @ w
    pos, neg = score[d.y == 1].view(-1), score[d.y == 0].view(-1)
    auc = (pos.unsqueeze(1) > neg[torch.randperm(neg.numel())[:2000]]).float().mean()
    assert auc > 0.8


def test_dblp_shape(made):
    """DBLP's node and edge types, counts, widths and author split; binary keywords and
    words; a reverse for every relation; an author's area predictable from its papers'."""
    d = made['DBLP'][0]
    assert isinstance(d, HeteroData)
    assert {t: d[t].num_nodes for t in d.node_types} == {'author': 4057, 'paper': 14328, 'term': 7723, 'conference': 20}
    assert {t: d[t].x.shape[1] for t in ('author', 'paper', 'term')} == {'author': 451, 'paper': 4233, 'term': 50}
    assert 'x' not in d['conference']
    edges = {e: d[e].edge_index.size(1) for e in d.edge_types}
    assert edges == {
        ('author', 'to', 'paper'): 19645,
        ('paper', 'to', 'author'): 19645,
        ('paper', 'to', 'term'): 85810,
        ('paper', 'to', 'conference'): 14328,
        ('term', 'to', 'paper'): 85810,
        ('conference', 'to', 'paper'): 14328,
    }
    for s_, d_ in (('author', 'paper'), ('paper', 'term'), ('paper', 'conference')):
        fwd, rev = d[s_, 'to', d_].edge_index, d[d_, 'to', s_].edge_index
        assert torch.equal(fwd.flip(0), rev)
        key = fwd[0] * d[d_].num_nodes + fwd[1]
        assert key.unique().numel() == key.numel()  # no repeated edge
    assert torch.bincount(d['author', 'to', 'paper'].edge_index[0], minlength=4057).min() >= 1  # every author writes
    for t in ('author', 'paper'):
        assert set(d[t].x.unique().tolist()) == {0.0, 1.0}
    a = d['author']
    assert torch.bincount(a.y).tolist() == [1197, 745, 1109, 1006]
    masks = torch.stack([a.train_mask, a.val_mask, a.test_mask])
    assert masks.sum(1).tolist() == [400, 400, 3257] and masks.sum(0).max() == 1
    # the majority conference area (conference k is area k % 4) of an author's papers is its label
    src, dst = d['author', 'to', 'paper'].edge_index
    conf = torch.empty(14328, dtype=torch.long)
    conf[d['paper', 'to', 'conference'].edge_index[0]] = d['paper', 'to', 'conference'].edge_index[1]
    votes = torch.zeros(4057, 4).index_add_(0, src, F.one_hot(conf[dst] % 4, 4).float())
    assert float((votes.argmax(1) == a.y).float().mean()) > 0.7
    assert torch.equal(synthetic('DBLP')[0]['paper', 'to', 'term'].edge_index, d['paper', 'to', 'term'].edge_index)


def test_load_without_root_is_synthetic():
    ds = load('ENZYMES')
    assert isinstance(ds, SyntheticDataset) and len(ds) == 600 and repr(ds) == "SyntheticDataset('ENZYMES', 600)"
    with pytest.raises(ValueError, match="unknown dataset 'Pubmed'; known: Cora, "):
        load('Pubmed')


def test_load_unusable_root_raises_one_line(tmp_path, monkeypatch):
    def offline(self):  # what PyG's download raises without network (aiohttp's errors are OSErrors)
        raise OSError('Cannot connect to host github.com:443 ssl:default [Name or service not known]')

    monkeypatch.setattr(torch_geometric.datasets.Planetoid, 'download', offline)
    with pytest.raises(DatasetUnavailableError) as e:
        load('Cora', tmp_path)
    msg = str(e.value)
    assert msg == (
        f'Cora is not in {tmp_path / "planetoid"} and could not be downloaded there (OSError: Cannot '
        'connect to host github.com:443 ssl:default [Name or service not known])'
    )
    assert e.value.__cause__ is None and e.value.__suppress_context__  # raised "from None": no chained traceback
    not_a_folder = tmp_path / 'file'
    not_a_folder.write_text('')
    with pytest.raises(DatasetUnavailableError, match='^Cora is not in .*file/planetoid and could not be'):
        load('Cora', not_a_folder)


@pytest.mark.parametrize(
    'name,rel',
    [
        ('Cora', 'planetoid/Cora'),
        ('PROTEINS_full', 'tu/PROTEINS_full'),
        ('ENZYMES', 'tu/ENZYMES'),
        ('Tolokers', 'heterophilous/tolokers'),
    ],
)
def test_real_and_synthetic_have_the_same_shape(made, name, rel, tmp_path_factory):
    """With ``$PYG_TC_DATA``: the real dataset through ``load`` and its stand-in agree in class,
    attributes, feature and class counts and, for one-graph datasets, sizes and mask shapes."""
    root = writable_copy(tmp_path_factory, rel)
    sub = rel.split('/')[0]
    (root / sub).mkdir()
    (root / rel.split('/')[1]).rename(root / rel)
    real, fake = load(name, root), made[name]
    cls = {'planetoid': 'Planetoid', 'tu': 'TUDataset', 'heterophilous': 'HeterophilousGraphDataset'}[sub]
    assert isinstance(real, getattr(torch_geometric.datasets, cls))
    assert (real.num_features, real.num_classes, len(real)) == (fake.num_features, fake.num_classes, len(fake))
    r, f = real[0], fake[0]
    assert sorted(r.keys()) == sorted(f.keys())
    for key in r.keys():
        assert r[key].dtype == f[key].dtype, key
    if len(real) == 1:
        assert r.num_nodes == f.num_nodes and abs(r.num_edges / f.num_edges - 1) < 0.01
        for key in ('x', 'y', 'train_mask', 'val_mask', 'test_mask'):
            assert r[key].shape == f[key].shape, key


def test_real_and_synthetic_dblp_have_the_same_shape(made, tmp_path_factory):
    """With ``$PYG_TC_DATA``: the real DBLP through ``load`` and its stand-in agree in node and
    edge types, counts, feature widths, dtypes and mask sizes."""
    root = writable_copy(tmp_path_factory, 'hetero/dblp_hencex')
    (root / 'hetero').mkdir()
    (root / 'dblp_hencex').rename(root / 'hetero' / 'dblp_hencex')
    real, fake = load('DBLP', root)[0], made['DBLP'][0]
    assert isinstance(load('DBLP', root), torch_geometric.datasets.DBLP)
    assert real.node_types == fake.node_types and real.edge_types == fake.edge_types
    for t in real.node_types:
        assert real[t].num_nodes == fake[t].num_nodes and sorted(real[t].keys()) == sorted(fake[t].keys()), t
        for key in real[t].keys():
            if key != 'num_nodes':
                assert real[t][key].shape == fake[t][key].shape and real[t][key].dtype == fake[t][key].dtype, (t, key)
    for e in real.edge_types:
        assert real[e].edge_index.shape == fake[e].edge_index.shape, e
    for m in ('train_mask', 'val_mask', 'test_mask'):
        assert int(real['author'][m].sum()) == int(fake['author'][m].sum())


def test_molecules_are_molecule_shaped():
    ds = synthetic('Molecules')
    sizes = torch.tensor([d.num_nodes for d in ds])
    degree = sum(d.num_edges for d in ds) / int(sizes.sum())
    assert len(ds) == 4000 and int(sizes.min()) >= 10 and int(sizes.max()) <= 40
    assert 1.9 < degree < 2.4 and ds.num_features == 9 and ds.num_classes == 2
    d = ds[0]
    assert torch.equal(d.x.sum(1), torch.ones(d.num_nodes))  # one-hot atom types
    fwd = set(map(tuple, d.edge_index.t().tolist()))
    assert fwd == {(j, i) for i, j in fwd}  # undirected
    y = torch.cat([g.y for g in ds])
    assert 0.2 < float(y.float().mean()) < 0.8
    assert torch.equal(synthetic('Molecules')[5].edge_index, ds[5].edge_index)  # the same seed, the same data
    assert type(load('Molecules', '/no/such/folder')).__name__ == 'SyntheticDataset'  # synthetic only
