"""Heterogeneous neighbour sampling (``pyg_tc.ops.hetero_neighbor``: the
reference and its CUDA kernel; ``HeteroNeighborSampler``): pyg-lib's batches
where the fan-outs cover the degrees, the homogeneous op's batches for a
graph of one edge type, uniform inclusion per relation below the degrees,
the kernel's batches equal to the reference's, clear errors."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.sampler import NodeSamplerInput

from pyg_tc.loader.hetero import HeteroNeighborSampler
from pyg_tc.loader.sampler import _csc
from pyg_tc.ops.hetero_neighbor import hetero_neighbor_sample_reference
from pyg_tc.ops.neighbor import neighbor_sample_reference

SIZES = {'paper': 80, 'author': 50, 'institute': 6, 'lonely': 3}


def hetero_graph(seed: int = 0, sort: bool = True) -> HeteroData:
    """Papers citing papers (self loops and repeated edges included), authors
    writing papers and their reverses, a few institutes, an edge type with
    no edges and a node type no edge reaches; features per type and an edge
    attribute per edge type."""
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    for t, n in SIZES.items():
        data[t].num_nodes = n
        data[t].x = torch.randn(n, 3, generator=g)
    data['paper'].y = torch.randint(0, 4, (SIZES['paper'],), generator=g)

    def rel(src, name, dst, E):
        ei = torch.stack(
            [torch.randint(0, SIZES[src], (E,), generator=g), torch.randint(0, SIZES[dst], (E,), generator=g)]
        )
        if src == dst:
            ei = torch.cat([ei, torch.tensor([[5, 5], [5, 5]])], 1)  # a self loop, twice
        if sort:  # by target, then source: one CSC order for both samplers (is_sorted=True)
            ei = ei[:, torch.argsort(ei[1] * SIZES[src] + ei[0])]
        data[src, name, dst].edge_index = ei
        data[src, name, dst].edge_attr = torch.randn(ei.size(1), 2, generator=g)

    rel('paper', 'cites', 'paper', 300)
    rel('author', 'writes', 'paper', 160)
    rel('paper', 'written_by', 'author', 160)
    rel('author', 'affiliated_with', 'institute', 45)
    rel('institute', 'employs', 'author', 45)
    data['institute', 'cites', 'paper'].edge_index = torch.zeros(2, 0, dtype=torch.long)
    data['institute', 'cites', 'paper'].edge_attr = torch.zeros(0, 2)
    return data


def _pyg_lib():
    import torch_geometric.typing as t

    if not t.WITH_PYG_LIB:
        pytest.skip("pyg-lib (PyG's default sampler, optional) is not installed")


@pytest.mark.parametrize(
    'num_neighbors',
    [[-1, -1], [1000, 1000, 1000], {'default': [-1, 50]}],
    ids=['all', 'covering-3-hops', 'dict'],
)
def test_batches_equal_pyg_lib(num_neighbors):
    """Fan-outs covering the degrees: PyG's NeighborLoader on pyg-lib and on
    this sampler give the same batches: nodes per type in the same order,
    edges per type, e_id, features, labels, edge attributes, hop counts."""
    _pyg_lib()
    from torch_geometric.loader import NeighborLoader

    data = hetero_graph()
    if isinstance(num_neighbors, dict):  # one fan-out list per edge type
        num_neighbors = {e: num_neighbors['default'] for e in data.edge_types}
    kw = dict(num_neighbors=num_neighbors, input_nodes=('paper', torch.arange(0, 80, 3)), batch_size=9)
    ours = HeteroNeighborSampler(data, num_neighbors, is_sorted=True)
    a_batches = list(NeighborLoader(data, **kw, neighbor_sampler=ours))
    b_batches = list(NeighborLoader(data, **kw, is_sorted=True))
    assert len(a_batches) == len(b_batches) == 3
    for a, b in zip(a_batches, b_batches):
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id), t
            assert torch.equal(a[t].x, b[t].x), t
            assert a[t].num_sampled_nodes == b[t].num_sampled_nodes, t
        assert torch.equal(a['paper'].y, b['paper'].y) and a['paper'].batch_size == b['paper'].batch_size
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index), e
            assert torch.equal(a[e].e_id, b[e].e_id), e
            assert torch.equal(a[e].edge_attr, b[e].edge_attr), e
            assert a[e].num_sampled_edges == b[e].num_sampled_edges, e


def _global_edges(batch, e):
    src, _, dst = e
    ei = batch[e].edge_index
    return set(zip(batch[src].n_id[ei[0]].tolist(), batch[dst].n_id[ei[1]].tolist(), batch[e].e_id.tolist()))


def test_unsorted_graph_equals_pyg_lib_as_sets():
    """Edges in no order (no ``is_sorted``): pyg-lib's sort by target does not
    keep the edges' order within a target, so the batches are equal as sets
    of nodes per type and of edges (with their ids) per edge type."""
    _pyg_lib()
    from torch_geometric.loader import NeighborLoader

    data = hetero_graph(1, sort=False)
    kw = dict(num_neighbors=[-1, -1], input_nodes=('author', torch.arange(0, 50, 4)), batch_size=5)
    ours = HeteroNeighborSampler(data, [-1, -1])
    for a, b in zip(NeighborLoader(data, **kw, neighbor_sampler=ours), NeighborLoader(data, **kw)):
        for t in data.node_types:
            assert set(a[t].n_id.tolist()) == set(b[t].n_id.tolist()), t
            assert a[t].num_sampled_nodes == b[t].num_sampled_nodes, t
        for e in data.edge_types:
            assert _global_edges(a, e) == _global_edges(b, e), e


@pytest.mark.parametrize('replace', [False, True])
def test_one_edge_type_is_the_homogeneous_op(replace):
    """A graph of one edge type: the homogeneous op's batch bit for bit, with
    fan-outs below the degrees (the same draws) and a repeated seed."""
    g = torch.Generator().manual_seed(4)
    ei = torch.randint(0, 60, (2, 700), generator=g)
    colptr, row, _ = _csc(ei, 60, False)
    seeds = torch.tensor([7, 3, 7, 41])
    e = ('v', 'to', 'v')
    a = neighbor_sample_reference(colptr, row, seeds, [4, 3, 2], replace, 2024)
    node, src, dst, eid, nsn, nse = hetero_neighbor_sample_reference(
        {e: colptr}, {e: row}, {'v': seeds}, {e: [4, 3, 2]}, {'v': 60}, replace, 2024
    )
    assert torch.equal(a[0], node['v'])
    assert torch.equal(a[1][0], src[e]) and torch.equal(a[1][1], dst[e])
    assert torch.equal(a[4], eid[e])
    assert a[5].tolist() == nsn['v'] + nse[e]


def test_partial_fanouts_invariants():
    """Fan-outs below the degrees: every sampled edge is a real edge of its
    type into its target; a target takes min(k, degree) distinct in-edges;
    nodes are distinct per type; each type's targets of a hop are the nodes
    the previous hop added; every edge type's edges are sorted by target."""
    data = hetero_graph(2)
    s = HeteroNeighborSampler(data, [3, 2], is_sorted=True)
    out = s.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.arange(10), input_type='paper'), seed=5)
    for t, n in out.node.items():
        assert len(set(n.tolist())) == n.numel()
        assert sum(out.num_sampled_nodes[t]) == n.numel()
    for e in data.edge_types:
        src, _, dst = e
        ei = data[e].edge_index
        eid = out.edge[e]
        assert torch.equal(ei[0, eid], out.node[src][out.row[e]]) and torch.equal(ei[1, eid], out.node[dst][out.col[e]])
        assert bool((out.col[e][1:] >= out.col[e][:-1]).all())
        deg = torch.bincount(ei[1], minlength=SIZES[dst])
        k = 3
        first_hop = out.col[e] < out.num_sampled_nodes[dst][0]  # targets of hop 0: the seeds of dst
        for target in out.col[e][first_hop].unique().tolist():
            mine = eid[out.col[e] == target]
            assert mine.numel() == min(k, int(deg[out.node[dst][target]]))
            assert mine.unique().numel() == mine.numel()


@pytest.mark.parametrize('replace', [False, True])
def test_inclusion_frequencies_are_uniform_per_relation(replace):
    """One paper cited by 30 papers and written by 12 authors, fan-out 4 per
    relation, 5,000 draws: every in-neighbour's count matches 5000 * 4 / d for
    each relation (chi-square below the 0.1% critical value for d - 1 degrees
    of freedom); a sampler that favours four neighbours by 20% fails."""
    from scipy.stats import chi2

    data = HeteroData()
    data['paper'].num_nodes, data['author'].num_nodes = 31, 12
    data['paper', 'cites', 'paper'].edge_index = torch.stack([torch.arange(1, 31), torch.zeros(30, dtype=torch.long)])
    data['author', 'writes', 'paper'].edge_index = torch.stack([torch.arange(12), torch.zeros(12, dtype=torch.long)])
    s = HeteroNeighborSampler(data, [4], replace=replace)
    out = s.sample_from_nodes(
        NodeSamplerInput(input_id=None, node=torch.zeros(5000, dtype=torch.long), input_type='paper')
    )
    for e, d in ((('paper', 'cites', 'paper'), 30), (('author', 'writes', 'paper'), 12)):
        assert out.num_sampled_edges[e] == [20000]
        picks = out.edge[e].view(5000, 4)
        if not replace:
            ordered = picks.sort(1)[0]
            assert bool((ordered[:, 1:] != ordered[:, :-1]).all())
        counts = torch.bincount(out.edge[e], minlength=d).double()
        want = 20000 / d
        assert float(((counts - want) ** 2 / want).sum()) < chi2.ppf(0.999, d - 1), e
        biased = counts.clone()
        biased[:4] *= 0.8
        assert float(((biased - want) ** 2 / want).sum()) > chi2.ppf(0.999, d - 1)


def test_relations_draw_independently():
    """Two relations with the same CSC (the same edges): their picks differ
    (the edge type's number is part of every draw's counter)."""
    data = HeteroData()
    data['a'].num_nodes = 41
    ei = torch.stack([torch.arange(1, 41), torch.zeros(40, dtype=torch.long)])
    data['a', 'r1', 'a'].edge_index = ei
    data['a', 'r2', 'a'].edge_index = ei.clone()
    s = HeteroNeighborSampler(data, [4])
    out = s.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.zeros(50, dtype=torch.long), input_type='a'))
    assert not torch.equal(out.edge['a', 'r1', 'a'], out.edge['a', 'r2', 'a'])


def test_reproducible_under_a_seed():
    data = hetero_graph(3)
    s = HeteroNeighborSampler(data, [3, 3])
    inputs = NodeSamplerInput(input_id=None, node=torch.arange(20), input_type='paper')
    a, b = s.sample_from_nodes(inputs, seed=9), s.sample_from_nodes(inputs, seed=9)
    c = s.sample_from_nodes(inputs, seed=10)
    assert all(torch.equal(a.node[t], b.node[t]) for t in a.node)
    assert any(not torch.equal(a.edge[e], c.edge[e]) for e in a.edge)


def test_errors():
    data = hetero_graph()
    with pytest.raises(TypeError, match='HeteroData'):
        HeteroNeighborSampler(data.to_homogeneous(), [2])
    for kw in (dict(disjoint=True), dict(time_attr='time'), dict(weight_attr='w'), dict(subgraph_type='induced')):
        with pytest.raises(NotImplementedError):
            HeteroNeighborSampler(data, [2], **kw)
    with pytest.raises(ValueError, match='Missing number of neighbors'):
        HeteroNeighborSampler(data, {('paper', 'cites', 'paper'): [2]})
    with pytest.raises(ValueError, match='>= 0 or -1'):
        HeteroNeighborSampler(data, [2, -3])
    bad = hetero_graph()
    bad['author', 'writes', 'paper'].edge_index[1, 0] = 500
    with pytest.raises(IndexError, match='targets'):
        HeteroNeighborSampler(bad, [2])
    s = HeteroNeighborSampler(data, [2])
    with pytest.raises(IndexError, match="type 'author'"):
        s.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.tensor([50]), input_type='author'))
    with pytest.raises(ValueError, match='not a node type'):
        s.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.tensor([0]), input_type='venue'))
    with pytest.raises(ValueError, match='one node type'):
        s.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.tensor([0])))


def test_link_batches_equal_pyg_lib():
    """Link prediction on one edge type (PyG's LinkNeighborLoader, no
    negatives), covering fan-outs: the same batches as on pyg-lib."""
    _pyg_lib()
    from torch_geometric.loader import LinkNeighborLoader

    data = hetero_graph(5)
    e = ('author', 'writes', 'paper')
    kw = dict(num_neighbors=[-1, -1], edge_label_index=(e, data[e].edge_index[:, :30]), batch_size=10)
    ours = HeteroNeighborSampler(data, [-1, -1], is_sorted=True)
    a_batches = list(LinkNeighborLoader(data, **kw, neighbor_sampler=ours))
    b_batches = list(LinkNeighborLoader(data, **kw, is_sorted=True))
    assert len(a_batches) == len(b_batches) == 3
    for a, b in zip(a_batches, b_batches):
        assert torch.equal(a[e].edge_label_index, b[e].edge_label_index)
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id), t
        for et in data.edge_types:
            assert torch.equal(a[et].edge_index, b[et].edge_index) and torch.equal(a[et].e_id, b[et].e_id), et


@pytest.mark.parametrize('name,target', [('imdb', 'movie'), ('dblp_hencex', 'author')])
def test_real_heterogeneous_batches_equal_pyg_lib(tmp_path_factory, name, target):
    """IMDB and DBLP (``$PYG_TC_DATA/hetero``; skipped without them or
    without pyg-lib): three batches of 64 seeds, two hops of every
    neighbour, the same as on pyg-lib, node for node and edge for edge."""
    _pyg_lib()
    from torch_geometric.datasets import DBLP, IMDB
    from torch_geometric.loader import NeighborLoader

    from ..conftest import writable_copy

    root = writable_copy(tmp_path_factory, f'hetero/{name}')
    data = (IMDB if name == 'imdb' else DBLP)(str(root / name))[0]
    for e in data.edge_types:  # by target, then source: one CSC order for both samplers
        ei = data[e].edge_index
        data[e].edge_index = ei[:, torch.argsort(ei[1] * data[e[0]].num_nodes + ei[0])]
    seeds = torch.arange(0, 192)
    kw = dict(num_neighbors=[-1, -1], input_nodes=(target, seeds), batch_size=64)
    ours = HeteroNeighborSampler(data, [-1, -1], is_sorted=True)
    for a, b in zip(NeighborLoader(data, **kw, neighbor_sampler=ours), NeighborLoader(data, **kw, is_sorted=True)):
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id), t
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index) and torch.equal(a[e].e_id, b[e].e_id), e


# -- the CUDA kernel (hetero_neighbor_sample) against its reference ---------------------------------

_INT32_MAX = 2**31 - 1


def _op_args(data: HeteroData, fanouts: dict, seeds: dict, device: str):
    types = list(data.node_types)
    ets = list(data.edge_types)
    cps, rws = [], []
    for e in ets:
        cp, rw, _ = _csc(data[e].edge_index, data[e[2]].num_nodes, False)
        cps.append(cp.to(device))
        rws.append(rw.to(device))
    H = len(next(iter(fanouts.values())))
    return (
        cps,
        rws,
        [types.index(e[0]) for e in ets],
        [types.index(e[2]) for e in ets],
        [seeds.get(t, torch.zeros(0, dtype=torch.long)).to(device) for t in types],
        [k for e in ets for k in fanouts[e]],
        H,
    )


FANOUTS = {
    'below-degrees': lambda ets: {e: [3, 2] for e in ets},
    'covering': lambda ets: {e: [1000, 1000] for e in ets},
    'all': lambda ets: {e: [-1, -1] for e in ets},
    'mixed': lambda ets: {e: [[2, -1], [0, 4], [-1, 1], [5, 0], [1, 1], [3, 3]][i % 6] for i, e in enumerate(ets)},
    'three-hops': lambda ets: {e: [4, 3, 2] for e in ets},
}


@pytest.mark.cuda
@pytest.mark.parametrize('fanouts', list(FANOUTS))
@pytest.mark.parametrize('replace', [False, True])
def test_cuda_kernel_equals_reference(fanouts, replace):
    """The kernel's batch is the reference's bit for bit: nodes per type,
    local sources and targets and CSC positions per edge type, counts; seeds
    of two types with a repeated seed; the state arrays left as found."""
    from pyg_tc.ops.hetero_neighbor import hetero_neighbor_sample

    data = hetero_graph(2)
    fo = FANOUTS[fanouts](data.edge_types)
    seeds = {'paper': torch.tensor([3, 7, 3, 40, 79]), 'author': torch.tensor([0, 49])}
    outs = {}
    for dev in ('cpu', 'cuda'):
        cps, rws, es, ed, sd, flat, _ = _op_args(data, fo, seeds, dev)
        maps = [torch.full((data[t].num_nodes,), -1, dtype=torch.int32, device=dev) for t in data.node_types]
        firsts = [torch.full((data[t].num_nodes,), _INT32_MAX, dtype=torch.int32, device=dev) for t in data.node_types]
        outs[dev] = [hetero_neighbor_sample(cps, rws, es, ed, sd, flat, replace, seed, maps, firsts) for seed in (1, 2)]
        assert all(bool((m == -1).all()) for m in maps) and all(bool((f == _INT32_MAX).all()) for f in firsts)
    for ref, got in zip(outs['cpu'], outs['cuda']):
        for a, b in zip(ref[:4], got[:4]):
            assert len(a) == len(b)
            for x, y in zip(a, b):
                assert y.is_cuda and y.dtype == torch.long
                assert torch.equal(x, y.cpu())
        assert torch.equal(ref[4], got[4])


@pytest.mark.cuda
def test_cuda_kernel_no_seeds_and_no_edge_types():
    """No seeds of any type, and a graph of node types only: empty batches."""
    from pyg_tc.ops.hetero_neighbor import hetero_neighbor_sample

    data = hetero_graph(3)
    fo = FANOUTS['below-degrees'](data.edge_types)
    cps, rws, es, ed, sd, flat, _ = _op_args(data, fo, {}, 'cuda')
    maps = [torch.full((data[t].num_nodes,), -1, dtype=torch.int32, device='cuda') for t in data.node_types]
    firsts = [torch.full((data[t].num_nodes,), _INT32_MAX, dtype=torch.int32, device='cuda') for t in data.node_types]
    nodes, src, dst, eid, counts = hetero_neighbor_sample(cps, rws, es, ed, sd, flat, False, 0, maps, firsts)
    assert all(n.numel() == 0 for n in nodes) and all(e.numel() == 0 for e in eid)
    assert int(counts.sum()) == 0
    seeds = [torch.tensor([1, 1, 2], device='cuda')]
    m1 = [torch.full((4,), -1, dtype=torch.int32, device='cuda')]
    f1 = [torch.full((4,), _INT32_MAX, dtype=torch.int32, device='cuda')]
    nodes, src, dst, eid, counts = hetero_neighbor_sample([], [], [], [], seeds, [], False, 0, m1, f1)
    assert nodes[0].tolist() == [1, 1, 2] and counts.tolist() == [3]


@pytest.mark.cuda
@pytest.mark.parametrize('num_neighbors', [[3, 2], [-1, -1]])
def test_cuda_loader_batches_equal_cpu_sampler(num_neighbors):
    """PyG's NeighborLoader over the graph on the GPU with this sampler (the
    kernel) gives the CPU sampler's batches under the same torch seed."""
    from torch_geometric.loader import NeighborLoader

    data = hetero_graph(4)
    kw = dict(num_neighbors=num_neighbors, input_nodes=('paper', torch.arange(0, 80, 3)), batch_size=9)
    gpu = data.clone().to('cuda')  # (PyG's to() moves the stores in place)
    batches = {}
    for dev, graph in (('cpu', data), ('cuda', gpu)):
        sampler = HeteroNeighborSampler(graph, num_neighbors)
        assert sampler.device.type == dev
        torch.manual_seed(5)
        batches[dev] = list(NeighborLoader(graph, **kw, neighbor_sampler=sampler))
    for a, b in zip(batches['cpu'], batches['cuda']):
        for t in data.node_types:
            assert b[t].n_id.is_cuda and torch.equal(a[t].n_id, b[t].n_id.cpu()), t
            assert torch.equal(a[t].x, b[t].x.cpu()) and a[t].num_sampled_nodes == b[t].num_sampled_nodes, t
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index.cpu()), e
            assert torch.equal(a[e].e_id, b[e].e_id.cpu()) and torch.equal(a[e].edge_attr, b[e].edge_attr.cpu()), e
