"""pyg_tc.loader: the neighbour sampler's semantics (PyG's), its uniformity,
reproducibility and errors, on the CPU reference; the GPU kernel against the
reference bit for bit (``cuda``)."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.sampler import NodeSamplerInput
from torch_geometric.data import Data

import pyg_tc.ops  # noqa: F401 (defines the ops)
from pyg_tc.formats.carrier import TCEdgeIndex
from pyg_tc.loader.sampler import SampledBatch
from pyg_tc.loader import LinkNeighborLoader, NeighborLoader, NeighborSampler

from ..conftest import DEVICES, cuda_only


def graph(kind: str, seed: int = 0):
    """(edge_index, num_nodes) of shapes the sampler treats specially."""
    g = torch.Generator().manual_seed(seed)
    if kind == 'random':
        N = 200
        return torch.randint(0, N, (2, 1500), generator=g), N
    if kind == 'sparse':  # isolated nodes, empty rows, self loops, repeated edges
        N = 60
        ei = torch.randint(0, 30, (2, 80), generator=g)
        loops = torch.arange(0, 30, 3).repeat(2, 1)
        return torch.cat([ei, loops, ei[:, :10]], 1), N
    if kind == 'hub':  # one row of 3,000 in-edges
        N = 500
        hub = torch.stack([torch.randint(0, N, (3000,), generator=g), torch.zeros(3000, dtype=torch.long)])
        return torch.cat([hub, torch.randint(0, N, (2, 2000), generator=g)], 1), N
    raise ValueError(kind)


def bfs_oracle(edge_index, N, seeds, hops):
    """PyG's batch when every fan-out covers every degree: all in-edges of each
    hop's new nodes, in edge order per target; nodes in order of first
    appearance (plain Python, independent of pyg_tc)."""
    src, dst = edge_index.tolist()
    nbrs = [[] for _ in range(N)]
    for e in sorted(range(len(dst)), key=lambda e: dst[e]):  # stable: edge order within a target
        nbrs[dst[e]].append((src[e], e))
    nodes = list(seeds)
    local = {}
    for i, s in enumerate(nodes):
        local.setdefault(s, i)
    rows, cols, eids, nn, ne = [], [], [], [len(nodes)], []
    begin, end = 0, len(nodes)
    for _ in range(hops):
        ne.append(0)
        for i in range(begin, end):
            for s, e in nbrs[nodes[i]]:
                if s not in local:
                    local[s] = len(nodes)
                    nodes.append(s)
                rows.append(local[s])
                cols.append(i)
                eids.append(e)
                ne[-1] += 1
        begin, end = end, len(nodes)
        nn.append(end - begin)
    return nodes, [rows, cols], eids, nn, ne


def sample(edge_index, N, seeds, fanouts, replace=False, device='cpu', rng=7):
    s = NeighborSampler(
        Data(edge_index=edge_index, num_nodes=N),
        fanouts,
        replace=replace,
        device=device,
        cpu_sampler='reference' if device == 'cpu' else 'auto',
    )
    torch.manual_seed(rng)
    return s._sample(torch.as_tensor(seeds))


# ---------------------------------------------------------------------------
# semantics


@pytest.mark.parametrize('kind', ['random', 'sparse', 'hub'])
@pytest.mark.parametrize('fanouts', [[-1], [-1, -1], [10_000, -1, 10_000]])
def test_full_fanout_equals_bfs(kind, fanouts):
    ei, N = graph(kind)
    seeds = torch.randperm(N, generator=torch.Generator().manual_seed(1))[:7].tolist()
    out = sample(ei, N, seeds, fanouts)
    nodes, (rows, cols), eids, nn, ne = bfs_oracle(ei, N, seeds, len(fanouts))
    assert out.node.tolist() == nodes
    assert out.row.tolist() == rows and out.col.tolist() == cols
    assert out.edge.tolist() == eids
    assert out.num_sampled_nodes == nn and out.num_sampled_edges == ne


def _pyg_backend():
    import torch_geometric.typing as t

    if not (t.WITH_PYG_LIB or t.WITH_TORCH_SPARSE):
        pytest.skip("PyG's sampler needs pyg-lib or torch_sparse (optional)")


@pytest.mark.parametrize('kind', ['random', 'sparse', 'hub'])
def test_batches_equal_pygs_sampler(kind):
    """Where every fan-out covers the degrees, PyG's NeighborLoader (pyg-lib or
    torch_sparse) and pyg_tc's give the same batch: nodes in the same order,
    same edges, e_id, features, labels, edge attributes and hop counts."""
    _pyg_backend()
    from torch_geometric.loader import NeighborLoader as PyGLoader

    ei, N = graph(kind)
    ei = ei[:, torch.argsort(ei[1] * N + ei[0])]  # sorted by target, is_sorted=True: one CSC order for both
    g = torch.Generator().manual_seed(3)
    data = Data(
        edge_index=ei,
        num_nodes=N,
        x=torch.randn(N, 5, generator=g),
        y=torch.randint(0, 4, (N,), generator=g),
        edge_attr=torch.randn(ei.size(1), 3, generator=g),
    )
    seeds = torch.randperm(N, generator=g)[:20]
    kw = dict(num_neighbors=[5000, 5000], input_nodes=seeds, batch_size=8, is_sorted=True)
    ours, ref = list(NeighborLoader(data, **kw, device='cpu')), list(PyGLoader(data, **kw))
    assert len(ours) == len(ref) == 3
    for a, b in zip(ours, ref):
        assert torch.equal(a.n_id, b.n_id)
        assert torch.equal(a.edge_index.as_tensor(), b.edge_index)
        assert torch.equal(a.e_id, b.e_id)
        for key in ('x', 'y', 'edge_attr', 'input_id'):
            assert torch.equal(a[key], b[key]), key
        assert a.batch_size == b.batch_size
        if getattr(b, 'num_sampled_nodes', None) is not None:  # (torch_sparse's path sets none)
            assert a.num_sampled_nodes == b.num_sampled_nodes and a.num_sampled_edges == b.num_sampled_edges


def test_partial_fanout_invariants():
    """Fan-out below the degree: k distinct in-edges per target, each a real
    edge of the graph into that target; new nodes in order of first
    appearance; the batch's CSR is its edge list."""
    ei, N = graph('random')
    out = sample(ei, N, list(range(0, 200, 10)), [4, 3])
    n_id, row, col, e = out.node, out.row, out.col, out.edge
    assert torch.equal(ei[0, e], n_id[row]) and torch.equal(ei[1, e], n_id[col])
    deg = torch.bincount(ei[1], minlength=N)
    assert len(set(n_id.tolist())) == n_id.numel()
    for hop, (k, base, count) in enumerate(zip([4, 3], [0, 20], out.num_sampled_nodes[:2])):
        targets = torch.arange(base, base + count)
        for t in targets.tolist():
            mine = e[col == t]
            assert mine.numel() == min(k, int(deg[n_id[t]])) and mine.unique().numel() == mine.numel()
    first = {}
    for v in row.tolist():
        first.setdefault(v, len(first))
    new = [v for v in first if v >= 20]
    assert new == sorted(new)  # ids given in order of first appearance
    (graph_,) = [out.graph]
    assert torch.equal(graph_.col.long(), row) and graph_.num_rows == n_id.numel()
    graph_.validate()


@pytest.mark.parametrize('replace', [False, True])
def test_inclusion_frequencies_are_uniform(replace):
    """One node with 40 in-neighbours, fan-out 4, 6,000 draws: every neighbour's
    count matches 6000 * 4 / 40 (chi-square over 39 degrees of freedom below
    its 0.1% critical value, 72.1); without replacement no draw repeats a
    neighbour. A sampler that favours some neighbours fails: torch_sparse's
    gives 172."""
    from scipy.stats import chi2

    src = torch.arange(1, 41)
    ei = torch.stack([src, torch.zeros(40, dtype=torch.long)])
    out = sample(ei, 41, [0] * 6000, [4], replace=replace)  # each repeated seed draws on its own
    assert out.num_sampled_edges == [24000]
    picks = out.edge.view(6000, 4)
    if not replace:
        assert (picks.sort(1)[0][:, 1:] != picks.sort(1)[0][:, :-1]).all()
    counts = torch.bincount(out.edge, minlength=40).double()
    stat = float(((counts - 600) ** 2 / 600).sum())
    assert stat < chi2.ppf(0.999, 39), stat
    biased = counts.clone()
    biased[:4] *= 0.8  # what the test must catch: four neighbours drawn 20% less often
    assert float(((biased - 600) ** 2 / 600).sum()) > chi2.ppf(0.999, 39)


def test_replace_draws_k_even_above_degree():
    ei = torch.tensor([[1, 2], [0, 0]])
    out = sample(ei, 3, [0], [5], replace=True)
    assert out.num_sampled_edges == [5] and set(out.edge.tolist()) <= {0, 1}
    assert sample(ei, 3, [0], [0]).num_sampled_edges == [0]


def test_reproducible_and_new_each_batch():
    ei, N = graph('random')
    data = Data(edge_index=ei, num_nodes=N, x=torch.randn(N, 4))

    def epoch(seed):
        torch.manual_seed(seed)
        return [b.n_id for b in NeighborLoader(data, [3, 2], batch_size=50, shuffle=True, device='cpu')]

    a, b, c = epoch(0), epoch(0), epoch(1)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    s = NeighborSampler(data, [3, 2], device='cpu', cpu_sampler='reference')
    one, two = s._sample(torch.arange(50)), s._sample(torch.arange(50))
    assert not torch.equal(one.edge, two.edge)  # the same seeds, a new draw
    # the draw as an argument (what a prefetching loader hands over): the same draw, the same batch
    inputs = NodeSamplerInput(input_id=None, node=torch.arange(50))
    x, y, z = (s.sample_from_nodes(inputs, seed=d) for d in (5, 5, 6))
    assert isinstance(x, SampledBatch) and x.graph is not None and x.edge_index is not None
    assert torch.equal(x.edge, y.edge) and not torch.equal(x.edge, z.edge)


def test_repeated_seeds_keep_their_places():
    ei, N = graph('random')
    out = sample(ei, N, [5, 9, 5], [-1])
    assert out.node[:3].tolist() == [5, 9, 5]
    assert torch.equal(out.node[out.col], ei[1, out.edge]) and torch.equal(out.node[out.row], ei[0, out.edge])


# ---------------------------------------------------------------------------
# loaders


def test_loader_batch_fields_and_format():
    """PyG's fields, the CSR attached (sorted by target), PyG's layer and
    pyg_tc's give the same output on it, trim_to_layer works."""
    from torch_geometric.nn import SAGEConv
    from torch_geometric.utils import trim_to_layer

    import pyg_tc.nn

    ei, N = graph('random')
    data = Data(edge_index=ei, num_nodes=N, x=torch.randn(N, 6), y=torch.arange(N))
    b = next(iter(NeighborLoader(data, [4, 3], batch_size=16, device='cpu')))
    assert set(b.keys()) == {
        'x',
        'y',
        'edge_index',
        'num_nodes',
        'n_id',
        'e_id',
        'num_sampled_nodes',
        'num_sampled_edges',
        'input_id',
        'batch_size',
    }
    assert isinstance(b.edge_index, TCEdgeIndex) and b.edge_index.sort_order == 'col'
    assert torch.equal(b.y, b.n_id) and b.batch_size == 16
    torch.manual_seed(0)
    ref = SAGEConv(6, 5)
    ours = pyg_tc.nn.SAGEConv(6, 5)
    ours.load_state_dict(ref.state_dict())
    plain = b.edge_index.as_tensor().clone()
    torch.testing.assert_close(ours(b.x, b.edge_index), ref(b.x, plain))
    torch.testing.assert_close(ref(b.x, b.edge_index), ref(b.x, plain))
    x, ei1, _ = trim_to_layer(1, b.num_sampled_nodes, b.num_sampled_edges, b.x, b.edge_index)
    assert x.size(0) == sum(b.num_sampled_nodes[:2]) and ei1.size(1) == b.num_sampled_edges[0]


def test_layers_build_no_format(monkeypatch):
    """pyg_tc's layers use the attached CSR: no format is built for the batch
    beyond the transpose and schedules its graph defers (GAT and GATv2 build
    the self-loop graph they aggregate over, as PyG's add_self_loops does)."""
    import pyg_tc.nn
    from pyg_tc.formats.csr import CSRGraph

    ei, N = graph('random')
    data = Data(edge_index=ei, num_nodes=N, x=torch.randn(N, 6))
    b = next(iter(NeighborLoader(data, [4, 3], batch_size=16, device='cpu')))
    b.edge_index._pyg_tc_graph[1].complete()

    def boom(*a, **k):
        raise AssertionError('a format was built')

    for name in ('from_coo', 'from_csr', '_finish'):
        monkeypatch.setattr(CSRGraph, name, classmethod(boom))
    for conv in (pyg_tc.nn.SAGEConv(6, 4), pyg_tc.nn.GCNConv(6, 4), pyg_tc.nn.GINConv(torch.nn.Linear(6, 4))):
        conv(b.x, b.edge_index).sum().backward()


def test_pyg_loader_with_our_sampler():
    """``torch_geometric.loader.NeighborLoader(..., neighbor_sampler=...)``:
    PyG's loader makes the batch (on the CPU here), from our samples."""
    from torch_geometric.loader import NeighborLoader as PyGLoader

    ei, N = graph('random')
    data = Data(edge_index=ei, num_nodes=N, x=torch.randn(N, 6), edge_attr=torch.randn(ei.size(1), 2))
    s = NeighborSampler(data, [4, 3], device='cpu', cpu_sampler='reference')
    torch.manual_seed(5)
    b = next(iter(PyGLoader(data, [4, 3], batch_size=16, neighbor_sampler=s)))
    torch.manual_seed(5)
    c = next(iter(NeighborLoader(data, [4, 3], batch_size=16, neighbor_sampler=s)))
    assert torch.equal(b.n_id, c.n_id) and torch.equal(b.edge_index, c.edge_index.as_tensor())
    assert torch.equal(b.edge_attr, c.edge_attr) and torch.equal(b.edge_attr, data.edge_attr[b.e_id])


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('mode', ['binary', 'triplet'])
def test_link_loader(mode, device):
    """PyG's link fields, on the device of the rest of the batch."""
    ei, N = graph('random')
    data = Data(edge_index=ei, num_nodes=N, x=torch.randn(N, 3))
    label_index = ei[:, :40]
    loader = LinkNeighborLoader(
        data, [3, 2], edge_label_index=label_index, batch_size=10, neg_sampling=dict(mode=mode, amount=2), device=device
    )
    b = next(iter(loader))
    assert isinstance(b.edge_index, TCEdgeIndex)
    fields = ['input_id'] + (
        ['edge_label_index', 'edge_label'] if mode == 'binary' else ['src_index', 'dst_pos_index', 'dst_neg_index']
    )
    for key in fields:
        assert b[key].device == b.n_id.device == b.x.device and b.n_id.device.type == device, key
    n_id, ids = b.n_id.cpu(), b.input_id.cpu()
    if mode == 'binary':
        assert b.edge_label_index.shape == (2, 30) and b.edge_label.tolist() == [1.0] * 10 + [0.0] * 20
        assert torch.equal(n_id[b.edge_label_index[:, :10].cpu()], label_index[:, ids])
    else:
        assert b.dst_neg_index.shape == (10, 2)
        assert torch.equal(n_id[b.src_index.cpu()], label_index[0, ids])
        assert torch.equal(n_id[b.dst_pos_index.cpu()], label_index[1, ids])


# ---------------------------------------------------------------------------
# errors


def test_errors():
    ei, N = graph('random')
    data = Data(edge_index=ei, num_nodes=N)
    with pytest.raises(ValueError, match='num_neighbors'):
        NeighborSampler(data, [3, -2], device='cpu', cpu_sampler='reference')
    with pytest.raises(TypeError, match='num_neighbors'):
        NeighborSampler(data, [3.5], device='cpu', cpu_sampler='reference')
    s = NeighborSampler(data, [3], device='cpu', cpu_sampler='reference')
    with pytest.raises(IndexError, match=r'\[0, 200\)'):
        s._sample(torch.tensor([0, 200]))
    with pytest.raises(IndexError, match=r'\[0, 200\)'):
        s._sample(torch.tensor([-1]))
    with pytest.raises(TypeError, match='integer'):
        s._sample(torch.tensor([0.5]))
    with pytest.raises(ValueError, match='empty'):
        NeighborLoader(data, [3], input_nodes=torch.tensor([], dtype=torch.long), device='cpu')
    with pytest.raises(NotImplementedError, match='disjoint'):
        NeighborSampler(data, [3], disjoint=True, device='cpu', cpu_sampler='reference')
    with pytest.raises(NotImplementedError, match="PyG"):
        from torch_geometric.data import HeteroData

        NeighborSampler(HeteroData(), [3], device='cpu')
    with pytest.raises(IndexError, match='edge_index'):
        NeighborSampler(Data(edge_index=torch.tensor([[0], [5]]), num_nodes=3), [2], device='cpu')
    data.edge_index[0, 0] = 1  # changed behind the sampler's back
    with pytest.raises(RuntimeError, match='changed'):
        s._sample(torch.tensor([0]))
    with pytest.warns(UserWarning, match='num_workers'):
        NeighborLoader(Data(edge_index=ei, num_nodes=N), [3], num_workers=2, device='cpu')


# ---------------------------------------------------------------------------
# the GPU kernel


@cuda_only
@pytest.mark.parametrize('kind', ['random', 'sparse', 'hub'])
@pytest.mark.parametrize(
    'fanouts,replace',
    [
        ([4, 3], False),
        ([4, 3], True),
        ([-1, 2], False),
        ([0, 5], False),
        ([25, 10, 5], False),
        ([3000], False),
        ([3, -1], True),
    ],
)
@pytest.mark.parametrize('memory', ['device', 'pinned'])
def test_gpu_equals_reference(kind, fanouts, replace, memory):
    ei, N = graph(kind)
    seeds = torch.randint(0, N, (40,), generator=torch.Generator().manual_seed(2))
    cpu = sample(ei, N, seeds, fanouts, replace)
    s = NeighborSampler(Data(edge_index=ei, num_nodes=N), fanouts, replace=replace, device='cuda', graph_memory=memory)
    assert s.graph_memory == ('pinned' if memory == 'pinned' else 'cuda')
    for _ in range(2):  # the state arrays are left clean: a second call gives the same batch
        torch.manual_seed(7)
        gpu = s._sample(seeds)
        assert torch.equal(gpu.node.cpu(), cpu.node)
        assert torch.equal(gpu.row.cpu(), cpu.row) and torch.equal(gpu.col.cpu(), cpu.col)
        assert torch.equal(gpu.edge.cpu(), cpu.edge)
        assert gpu.num_sampled_nodes == cpu.num_sampled_nodes and gpu.num_sampled_edges == cpu.num_sampled_edges
        g_gpu, g_cpu = gpu.graph, cpu.graph
        for name in ('rowptr', 'col', 't_rowptr', 't_col', 't_perm'):
            assert torch.equal(getattr(g_gpu, name).cpu(), getattr(g_cpu, name)), name
        g_gpu.validate()


@cuda_only
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.int64, torch.uint8])
@pytest.mark.parametrize('width', [1, 3, 8, 33])
@pytest.mark.parametrize('where', ['cuda', 'pinned'])
def test_gather_rows(dtype, width, where):
    from pyg_tc.ops.neighbor import gather_rows

    x = (torch.randn(300, width) * 100).to(dtype)
    place = (lambda t: t.cuda()) if where == 'cuda' else (lambda t: t.contiguous().pin_memory())
    idx = torch.randint(0, 300, (77,), device='cuda')
    out = gather_rows(place(x), idx)
    assert out.is_cuda and torch.equal(out.cpu(), x[idx.cpu()])
    col = gather_rows(place(x[:, 0]), idx)  # 1-D
    assert col.shape == (77,) and torch.equal(col.cpu(), x[idx.cpu(), 0])
    with pytest.raises(RuntimeError, match='pinned'):
        gather_rows(x, idx)  # ordinary host memory


@cuda_only
def test_gpu_loader_matches_cpu_loader():
    """The same epoch on the GPU and on the CPU: identical batches (features
    gathered from device and from pinned memory), layers equal PyG's."""
    import pyg_tc.nn
    from torch_geometric.nn import SAGEConv

    ei, N = graph('random')
    data = Data(edge_index=ei, num_nodes=N, x=torch.randn(N, 6), y=torch.arange(N), edge_attr=torch.randn(ei.size(1)))
    batches = {}
    for dev, d in (('cpu', data), ('cuda', data), ('cuda-resident', data.to('cuda'))):
        torch.manual_seed(11)
        # (on the CPU the reference: pyg-lib, where installed, draws its own batches)
        kw = dict(cpu_sampler='reference') if dev == 'cpu' else {}
        batches[dev] = list(NeighborLoader(d, [4, 3], batch_size=32, shuffle=True, device=dev.split('-')[0], **kw))
    for a, b, c in zip(batches['cpu'], batches['cuda'], batches['cuda-resident']):
        for key in ('n_id', 'e_id', 'x', 'y', 'edge_attr'):
            assert torch.equal(a[key], b[key].cpu()) and torch.equal(a[key], c[key].cpu()), key
        assert torch.equal(a.edge_index.as_tensor(), b.edge_index.as_tensor().cpu())
    torch.manual_seed(0)
    ref = SAGEConv(6, 5).cuda()
    ours = pyg_tc.nn.SAGEConv(6, 5).cuda()
    ours.load_state_dict(ref.state_dict())
    b = batches['cuda'][0]
    torch.testing.assert_close(ours(b.x, b.edge_index), ref(b.x, b.edge_index.as_tensor().clone()))


@cuda_only
def test_seed_checks_on_gpu():
    ei, N = graph('random')
    s = NeighborSampler(Data(edge_index=ei, num_nodes=N), [3], device='cuda')
    with pytest.raises(IndexError):
        s._sample(torch.tensor([N], device='cuda'))
    if torch.cuda.device_count() > 1:
        with pytest.raises(ValueError, match='on cuda:1'):
            s._sample(torch.tensor([0], device='cuda:1'))


@pytest.mark.parametrize('device', DEVICES)
def test_deferred_format_is_built_once_and_only_when_needed(monkeypatch, device):
    """The sampler defers its batch graph's transpose and schedules: on a GPU
    the loader builds them for a batch it hands out as is (on the stream that
    makes the batch; the same tensors as a graph built at once), on the CPU
    the first layer that needs them does; never for a batch a transform pads
    hop by hop."""
    import pyg_tc.nn
    import copy

    from pyg_tc.formats.csr import CSRGraph
    from pyg_tc.transforms import PadHops, buckets_from_batches

    torch.manual_seed(0)
    ei, N = graph('random')
    data = Data(edge_index=ei, num_nodes=N, x=torch.randn(N, 4))
    s = NeighborSampler(data, [4, 3], device='cpu', cpu_sampler='reference')
    out = s._sample(torch.arange(20))
    g = out.graph
    assert '_deferred' in vars(g) and 't_rowptr' not in vars(g)
    rows = out.edge_index[1].to(torch.int32)
    full = CSRGraph.from_sampled(g.rowptr, g.col, rows, g.num_rows, max_degree=4)
    twin = copy.deepcopy(g)  # still deferred, builds on its own
    for name in ('t_rowptr', 't_col', 't_perm'):
        assert torch.equal(getattr(g, name), getattr(full, name)), name
    assert '_deferred' not in vars(g) and g.complete() is g
    assert torch.equal(g.sched.units, full.sched.units) and torch.equal(g.t_sched.units, full.t_sched.units)
    assert torch.equal(twin.t_col, full.t_col)
    with pytest.raises(AttributeError, match='no attribute'):
        g.not_an_attribute

    builds = []
    finish = CSRGraph._finish.__func__
    monkeypatch.setattr(CSRGraph, '_finish', classmethod(lambda cls, *a, **k: builds.append(1) or finish(cls, *a, **k)))
    loader = NeighborLoader(data, [4, 3], batch_size=25, device=device)
    batches = list(loader)
    assert len(batches) == 8
    if device == 'cuda':
        assert len(builds) == 8 and all('_deferred' not in vars(b.edge_index._pyg_tc_graph[1]) for b in batches)
    else:
        assert not builds and all('_deferred' in vars(b.edge_index._pyg_tc_graph[1]) for b in batches)
        pyg_tc.nn.GCNConv(4, 2)(batches[0].x, batches[0].edge_index).sum().backward()
        assert len(builds) == 1
    loader.transform = PadHops(buckets_from_batches(loader, num_batches=4, levels=1, per_hop=True), 25)
    builds.clear()
    assert len(list(loader)) == 8 and not builds  # padded: the sampler's format never built
