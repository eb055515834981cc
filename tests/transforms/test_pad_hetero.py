"""Static-shape heterogeneous mini-batches (PadToBuckets and PadHops on
HeteroData, HeteroBucket, HeteroHopBucket, padding.pad and
pad_hops_bipartite of a bipartite graph): the padded batch's layout,
each edge type's padded CSR against its real one, a heterogeneous model's
seed outputs and gradients on a padded batch equal to the unpadded batch's,
no host synchronisation in its forward + backward, the seed loss, bucket
choice and errors."""

from __future__ import annotations

import copy

import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_tc
from pyg_tc.bench.graphs import igbh_shaped
from pyg_tc.bench.models import RGAT
from pyg_tc.capture import seed_loss, trimmed_forward
from pyg_tc.formats import CSRGraph, padding
from pyg_tc.formats.carrier import graph_of
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import (
    Bucket,
    HeteroBucket,
    HeteroHopBucket,
    PadHops,
    PadToBuckets,
    buckets_from_batches,
)

from ..conftest import DEVICES
from .test_pad import NoHostSync

B = 32


def _loader(device, papers=600, fanout=(4, 3)):
    data = igbh_shaped(papers, 12, torch.float32, 5)
    data = copy.copy(data).to(device) if device != 'cpu' else data
    return NeighborLoader(
        data, list(fanout), batch_size=B, input_nodes=('paper', torch.arange(8 * B)), device=device, shuffle=True
    )


def _padded_pairs(device, levels=1, per_hop=False, fanout=(4, 3)):
    """The padder and (unpadded, padded) copies of the loader's batches:
    ``PadToBuckets``, or ``PadHops`` with ``per_hop``."""
    loader = _loader(device, fanout=fanout)
    torch.manual_seed(0)
    kw = dict(per_hop=True, node_multiple=32, edge_multiple=64) if per_hop else dict(levels=levels, node_multiple=64)
    pad = (PadHops if per_hop else PadToBuckets)(buckets_from_batches(loader, num_batches=6, **kw), B)
    torch.manual_seed(1)
    return pad, [(b, pad(copy.copy(b))) for b in loader]


@pytest.mark.parametrize('device', DEVICES)
def test_padded_batch_layout(device):
    pad, pairs = _padded_pairs(device)
    assert all(isinstance(b, HeteroBucket) for b in pad.buckets)
    for b, p in pairs:
        if p.get('bucket') is None:
            continue
        N, P = p.bucket.nodes, p.bucket.edges
        for t in b.node_types:
            n = b[t].num_nodes
            assert p[t].num_nodes == N[t] > n and p[t].num_real_nodes == n
            assert p[t].x.shape == (N[t], 12)
            torch.testing.assert_close(p[t].x[:n], b[t].x)
            assert not p[t].x[n:].any() and not p[t].n_id[n:].any()
            assert p[t].node_mask.tolist() == [True] * n + [False] * (N[t] - n)
        assert p['paper'].seed_capacity == B and p['paper'].input_id.numel() == B
        assert p['paper'].seed_mask.sum().item() == b['paper'].batch_size == p['paper'].batch_size
        for e in b.edge_types:
            src, _, dst = e
            E = b[e].edge_index.size(1)
            ei = p[e].edge_index
            assert ei.shape == (2, P[e]) and p[e].num_real_edges == E and p[e].e_id.numel() == P[e]
            assert torch.equal(ei[:, :E].as_tensor(), b[e].edge_index.as_tensor())
            assert (ei[0, E:] == N[src] - 1).all() and (ei[1, E:] == N[dst] - 1).all()
            g, pg = graph_of(b[e].edge_index), graph_of(ei)
            pg.validate()
            assert (pg.num_rows, pg.num_cols, pg.num_edges) == (N[dst], N[src], P[e]) and pg.padded
            R, C = g.num_rows, g.num_cols
            assert torch.equal(pg.rowptr[: R + 1].long(), g.rowptr.long())
            assert (pg.rowptr[R:] == E).all() and (pg.t_rowptr[C:] == E).all()
            assert torch.equal(pg.col[:E].long(), g.col.long())
            assert torch.equal(pg.t_rowptr[: C + 1].long(), g.t_rowptr.long())
            assert torch.equal(pg.t_col[:E].long(), g.t_col.long())
            assert torch.equal(pg.t_perm[:E].long(), g.t_perm.long())


def test_bipartite_pad_against_the_unpadded_graph():
    g = CSRGraph.from_coo(torch.tensor([0, 2, 2, 4, 1]), torch.tensor([1, 1, 0, 2, 2]), 5, 3)
    pg = padding.pad(g, 6, 9, num_cols=7)
    assert (pg.num_rows, pg.num_cols, pg.num_edges, pg.real_size) == (6, 7, 9, (3, 5))
    assert pg.rowptr.tolist() == g.rowptr.tolist() + [5] * 3
    assert pg.t_rowptr.tolist() == g.t_rowptr.tolist() + [5] * 2
    assert pg.col[5:].tolist() == [6] * 4 and pg.t_col[5:].tolist() == [5] * 4
    with pytest.raises(ValueError, match='num_cols given'):
        padding.pad(g, 6, 9)
    with pytest.raises(ValueError, match='cannot pad'):
        padding.pad(g, 6, 9, num_cols=4)


def _model(lib, edge_types, kind):
    torch.manual_seed(0)
    if kind == 'rgat':
        return RGAT(lib, edge_types, 12, 8, 2, 5)
    conv = {e: lib.SAGEConv((-1, -1), 8) for e in edge_types}
    return _Head(lib.HeteroConv(conv, aggr='sum'))


class _Head(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv, self.lin = conv, torch.nn.Linear(8, 5)

    def forward(self, x_dict, edge_index_dict):
        return self.lin(self.conv(x_dict, edge_index_dict)['paper'].relu())


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['rgat', 'sage'])
def test_seed_outputs_and_gradients_equal_the_unpadded_batch(device, kind):
    _, pairs = _padded_pairs(device)
    b, p = next((b, p) for b, p in pairs if p.get('bucket') is not None)
    m1 = _model(pyg_tc.nn, b.edge_types, kind).to(device)
    m1(b.x_dict, b.edge_index_dict)  # (lazy shapes)
    m2 = copy.deepcopy(m1)
    _assert_same_step(m1, m2, b, p, m1(b.x_dict, b.edge_index_dict), m2(p.x_dict, p.edge_index_dict))


def _assert_same_step(m1, m2, b, p, out1, out2):
    """The seeds' outputs, the seed loss and every parameter's gradient of
    ``m2`` on padded batch ``p`` equal ``m1``'s on ``b``."""
    n = b['paper'].batch_size
    torch.testing.assert_close(out2[:n], out1[:n], atol=1e-5, rtol=1e-5)
    l1, l2 = seed_loss(out1, b), seed_loss(out2, p)
    torch.testing.assert_close(l2, l1, atol=1e-6, rtol=1e-5)
    l1.backward()
    l2.backward()
    for a, c in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(c.grad, a.grad, atol=1e-5, rtol=1e-4)


def test_padded_step_reads_nothing_from_the_device():
    _, pairs = _padded_pairs('cpu')
    b, p = next((b, p) for b, p in pairs if p.get('bucket') is not None)
    m = _model(pyg_tc.nn, b.edge_types, 'rgat')
    m(b.x_dict, b.edge_index_dict)
    with NoHostSync():
        seed_loss(m(p.x_dict, p.edge_index_dict), p).backward()


def test_pyg_layers_on_padded_batches_match_too():
    """Padding keeps PyG's own layers right as well (they read edge_index)."""
    _, pairs = _padded_pairs('cpu')
    b, p = next((b, p) for b, p in pairs if p.get('bucket') is not None)
    m = _model(pyg_nn, b.edge_types, 'rgat')
    n = b['paper'].batch_size
    torch.testing.assert_close(m(p.x_dict, p.edge_index_dict)[:n], m(b.x_dict, b.edge_index_dict)[:n])


def test_buckets_and_bucket_choice():
    loader = _loader('cpu')
    torch.manual_seed(0)
    buckets = buckets_from_batches(loader, num_batches=6, levels=3, node_multiple=16, edge_multiple=64)
    assert 2 <= len(buckets) <= 3
    assert [b.total_edges for b in buckets] == sorted(b.total_edges for b in buckets)
    top = buckets[-1]
    assert all(n % 16 == 0 for n in top.nodes.values()) and all(e % 64 == 0 for e in top.edges.values())
    pad = PadToBuckets(buckets, B)
    for b in loader:
        ns = {t: b[t].num_nodes for t in b.node_types}
        es = {e: b[e].edge_index.size(1) for e in b.edge_types}
        chosen = pad.bucket_for(ns, es)
        fitting = [k for k in buckets if k.fits(ns, es)]
        assert chosen == (fitting[0] if fitting else None)
    # a batch larger than every bucket comes back as it was, with its real counts
    tiny = HeteroBucket(tuple((t, 2) for t in top.nodes), tuple((e, 1) for e in top.edges))
    b = next(iter(loader))
    n = b['paper'].num_nodes
    out = PadToBuckets([tiny], B)(copy.copy(b))
    assert out.get('bucket') is None and out['paper'].num_nodes == n and out['paper'].num_real_nodes == n


def test_errors():
    loader = _loader('cpu')
    b = next(iter(loader))
    buckets = buckets_from_batches(loader, num_batches=3)
    with pytest.raises(TypeError, match='HeteroData batches'):
        PadToBuckets(buckets, B)(b.to_homogeneous())
    with pytest.raises(TypeError, match='pads Data'):
        PadToBuckets([Bucket(4096, 8192)], B)(b)
    with pytest.raises(ValueError, match='one kind'):
        PadToBuckets([buckets[0], Bucket(4096, 8192)], B)
    with pytest.raises(ValueError, match='seed_capacity'):
        PadToBuckets(buckets, B - 1)(copy.copy(b))
    with pytest.raises(ValueError, match='no more seed rows'):
        PadToBuckets(buckets, 10**6)(copy.copy(b))


# -- per-hop padding (PadHops on HeteroData) ----------------------------------------------------


def _hop_pairs(device, fanout=(4, 3, 2)):
    return _padded_pairs(device, per_hop=True, fanout=fanout)


@pytest.mark.parametrize('device', DEVICES)
def test_per_hop_padded_layout(device):
    pad, pairs = _hop_pairs(device)
    assert all(isinstance(b, HeteroHopBucket) for b in pad.buckets)
    seen = 0
    for b, p in pairs:
        if p.get('bucket') is None:
            continue
        seen += 1
        N, P = p.bucket.nodes, p.bucket.edges
        for t in b.node_types:
            n = list(b[t].num_sampled_nodes)
            assert p[t].num_sampled_nodes == N[t] and p[t].num_real_sampled_nodes == n
            assert all(a > c for a, c in zip(N[t], n)) and p[t].x.size(0) == sum(N[t])
            start, real = 0, 0
            for h in range(len(n)):  # block h: the hop's real rows in order, then zeros
                torch.testing.assert_close(p[t].x[start : start + n[h]], b[t].x[real : real + n[h]])
                assert not p[t].x[start + n[h] : start + N[t][h]].any()
                assert p[t].node_mask[start : start + N[t][h]].tolist() == [True] * n[h] + [False] * (N[t][h] - n[h])
                start, real = start + N[t][h], real + n[h]
        for e in b.edge_types:
            src, _, dst = e
            pg = graph_of(p[e].edge_index)
            pg.validate()
            assert (pg.num_rows, pg.num_cols, pg.num_edges) == (sum(N[dst]), sum(N[src]), sum(P[e]))
            assert pg.sampled_hops.num_nodes == tuple(N[dst]) and pg.sampled_hops.src_nodes == tuple(N[src])
            # every real edge keeps its (renumbered) endpoints; padding edges join padded rows only
            ei, real_ei = p[e].edge_index.as_tensor(), b[e].edge_index.as_tensor()
            src_map = padding.block_index(b[src].num_sampled_nodes, N[src], ei.device)
            dst_map = padding.block_index(b[dst].num_sampled_nodes, N[dst], ei.device)
            moved = padding.block_index(b[e].num_sampled_edges, P[e], ei.device)
            assert torch.equal(ei[0, moved], src_map[real_ei[0]]) and torch.equal(ei[1, moved], dst_map[real_ei[1]])
            pad_slot = torch.ones(sum(P[e]), dtype=torch.bool, device=ei.device).index_fill_(0, moved, False)
            assert not p[src].node_mask[ei[0, pad_slot]].any() and not p[dst].node_mask[ei[1, pad_slot]].any()
            # the padded CSR is that of the padded edge_index
            ref = CSRGraph.from_coo(ei[0], ei[1], sum(N[src]), sum(N[dst]))
            assert torch.equal(pg.rowptr.long(), ref.rowptr.long())
            assert torch.equal(pg.t_rowptr.long(), ref.t_rowptr.long())
            assert torch.equal(pg.col.long(), ref.col.long()) and pg.perm is None and ref.perm is None
    assert seen


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('lib', [pyg_tc.nn, pyg_nn], ids=['pyg_tc', 'pyg'])
def test_trimmed_model_on_per_hop_padded_batches_equals_the_unpadded_batch(device, lib):
    """MLPerf's R-GAT trimmed by layer (PyG's trim_to_layer) on a per-hop
    padded batch: the seeds' scores and every gradient equal the untrimmed
    model's on the unpadded batch."""
    _, pairs = _hop_pairs(device)
    b, p = next((b, p) for b, p in pairs if p.get('bucket') is not None)
    torch.manual_seed(0)
    m1 = RGAT(lib, b.edge_types, 12, 8, 2, 5).to(device)
    m1(b.x_dict, b.edge_index_dict)
    m2 = copy.deepcopy(m1)
    out2 = trimmed_forward(m2, p)
    assert out2.size(0) == sum(p.bucket.nodes['paper'][:2])  # the seed block and the first hop's
    _assert_same_step(m1, m2, b, p, m1(b.x_dict, b.edge_index_dict), out2)


def test_trimmed_step_on_per_hop_padded_batches_reads_nothing_from_the_device():
    _, pairs = _hop_pairs('cpu')
    b, p = next((b, p) for b, p in pairs if p.get('bucket') is not None)
    m = _model(pyg_tc.nn, b.edge_types, 'rgat')
    m(b.x_dict, b.edge_index_dict)
    with NoHostSync():
        seed_loss(trimmed_forward(m, p), p).backward()


def _count_builds(monkeypatch) -> list:
    """The edge counts of the graphs ``CSRGraph.from_coo`` builds from now on."""
    built = []
    real = CSRGraph.from_coo.__func__
    monkeypatch.setattr(
        CSRGraph,
        'from_coo',
        classmethod(lambda cls, src, *a, **k: built.append(src.numel()) or real(cls, src, *a, **k)),
    )
    return built


def test_trimmed_graphs_of_an_unpadded_batch_are_derived_not_built(monkeypatch):
    """Each edge type's CSR carries its hop structure, so trim_to_layer's
    graphs are derived from it (no COO build, no sort)."""
    b = next(iter(_loader('cpu', fanout=(4, 3, 2))))
    for e in b.edge_types:
        hops = graph_of(b[e].edge_index).sampled_hops
        assert hops.num_nodes == tuple(b[e[-1]].num_sampled_nodes)
        assert hops.src_nodes == tuple(b[e[0]].num_sampled_nodes)
        assert hops.num_edges == tuple(b[e].num_sampled_edges)
    m = _model(pyg_tc.nn, b.edge_types, 'rgat')
    m(b.x_dict, b.edge_index_dict)
    built = _count_builds(monkeypatch)
    m(b.x_dict, b.edge_index_dict, b.num_sampled_nodes_dict, b.num_sampled_edges_dict).sum().backward()
    assert set(built) <= {0}  # (an edge type trimmed to no edges at all: an empty graph)


def test_per_hop_errors():
    loader = _loader('cpu', fanout=(4, 3))
    b = next(iter(loader))
    buckets = buckets_from_batches(loader, num_batches=3, per_hop=True)
    with pytest.raises(TypeError, match='HeteroData batches'):
        PadHops(buckets, B)(b.to_homogeneous())
    with pytest.raises(ValueError, match='one kind'):
        PadHops([buckets[0], ((64, 64), (64,))], B)
    with pytest.raises(NotImplementedError, match='self_loops'):
        PadHops(buckets, B, self_loops=True)
    with pytest.raises(ValueError, match='seed_capacity'):
        PadHops(buckets, B - 1)(copy.copy(b))
    other = buckets_from_batches(_loader('cpu', fanout=(4, 3, 2)), num_batches=3, per_hop=True)
    assert PadHops(other, B)(copy.copy(b)).get('bucket') is None  # other hops: fits no bucket


def test_an_edge_type_without_edges_builds_without_reading_the_device():
    """trim_to_layer can leave an edge type no edges (more layers than hops):
    its graph is built without a synchronisation, every row empty."""
    none = torch.zeros(0, dtype=torch.long)
    with NoHostSync():
        g = CSRGraph.from_coo(none, none, 5, 3)
    assert (g.num_rows, g.num_cols, g.num_edges) == (3, 5, 0)
    assert g.rowptr.tolist() == [0] * 4 and g.t_rowptr.tolist() == [0] * 6
    assert g.sched.units.shape == (3, 4) and g.t_sched.units.shape == (5, 4)
    x = torch.randn(5, 8)
    conv = pyg_tc.nn.GATConv((8, 8), 4, heads=2, add_self_loops=False)
    out = conv((x, torch.randn(3, 8)), torch.zeros(2, 0, dtype=torch.long))
    torch.testing.assert_close(out, conv.bias.expand(3, -1))


def test_trimmed_graphs_of_a_per_hop_padded_batch_are_derived_not_built(monkeypatch):
    _, pairs = _hop_pairs('cpu')
    b, p = next((b, p) for b, p in pairs if p.get('bucket') is not None)
    m = _model(pyg_tc.nn, b.edge_types, 'rgat')
    m(b.x_dict, b.edge_index_dict)
    built = _count_builds(monkeypatch)
    # and no schedule is built from the degrees (on a GPU that reads them on the host)
    import pyg_tc.formats.csr as csr

    def no_schedules(*a, **k):
        raise AssertionError('a schedule was built inside the step')

    monkeypatch.setattr(csr, 'build_schedules', no_schedules)
    seed_loss(trimmed_forward(m, p), p).backward()
    assert set(built) <= {0}


def test_padding_aware_norms_read_the_node_types_masks():
    from pyg_tc.capture import padding, padding_aware

    _, pairs = _padded_pairs('cpu')
    b, p = next((b, p) for b, p in pairs if p.get('bucket') is not None)
    norm = padding_aware(torch.nn.BatchNorm1d(12))
    counts = [p[t].num_nodes for t in p.node_types]  # (distinct here)
    t = next(t for t in p.node_types if counts.count(p[t].num_nodes) == 1)
    with padding(p):
        got = norm(p[t].x)[: b[t].num_nodes]
    want = torch.nn.functional.batch_norm(b[t].x, None, None, training=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    # two node types padded to as many rows: which mask a norm needs is unknown
    rows = max(p.bucket.nodes.values())
    same = HeteroBucket(tuple((k, rows if k != 'paper' else n) for k, n in p.bucket.num_nodes), p.bucket.num_edges)
    q = PadToBuckets([same], B)(copy.copy(b))
    assert q['author'].num_nodes == q['fos'].num_nodes == rows
    with padding(q), pytest.raises(ValueError, match='ambiguous'):
        norm(q['fos'].x)
