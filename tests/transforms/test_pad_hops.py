"""Per-hop padding (pyg_tc.transforms.PadHops, CSRGraph.pad_hops): the layout
(blocks, shifted ids, sink rows, masks, counts), the graph (valid, equal to
a build from the padded edges), PyG's models with ``trim_to_layer`` on the
padded batch (the seeds' outputs and gradients of the unpadded batch), no
format build and no device read in the padding or the trimmed step, and the
step (eager on the CPU; captured == eager on CUDA)."""

from __future__ import annotations

import copy
from itertools import accumulate

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.data import Data

import pyg_tc.nn
from pyg_tc.formats.csr import CSRGraph
from pyg_tc.capture import CapturedStep, seed_loss, trimmed_forward
from pyg_tc.transforms import HopBucket, PadHops, buckets_from_batches
from pyg_tc.loader import NeighborLoader
from pyg_tc.formats import padding

from ..conftest import forbid_device_reads
from ..capture.test_step import _train
from ..loader.test_trim import MODELS, batch, close, count_builds, models, run

FANOUT = {'random': (5, 4, 3), 'hub': (-1, 3, 2)}


def bucket_of(b, extra_nodes=(1, 3, 2, 5), extra_edges=(7, 0, 11)) -> HopBucket:
    """A bucket ``extra`` above the batch's hop counts (a hop with no edge
    padding included)."""
    return HopBucket(
        tuple(n + x for n, x in zip(b.num_sampled_nodes, extra_nodes)),
        tuple(e + x for e, x in zip(b.num_sampled_edges, extra_edges)),
    )


def padded(data='random', self_loops=False, **kw):
    """(the unpadded batch, the same batch padded per hop, its bucket)."""
    fanout = FANOUT[data]
    ref = batch(data, fanout=fanout)
    b = batch(data, fanout=fanout)
    bk = bucket_of(b, **kw)
    b.y = torch.arange(b.num_nodes) % 5
    ref.y = torch.arange(ref.num_nodes) % 5
    b.edge_attr = torch.randn(b.edge_index.size(1), 2, generator=torch.Generator().manual_seed(1))
    ref.edge_attr = b.edge_attr.clone()
    return ref, PadHops([bk], ref.batch_size, self_loops=self_loops)(b), bk


@pytest.mark.parametrize('data', ['random', 'hub'])
def test_layout(data):
    ref, b, bk = padded(data)
    ns, es = ref.num_sampled_nodes, ref.num_sampled_edges
    N, P = bk
    O = [0, *accumulate(N)]
    Q, base = [0, *accumulate(P)], [0, *accumulate(es)]
    assert b.bucket == bk and b.num_nodes == sum(N) and b.edge_index.size(1) == sum(P)
    assert b.num_sampled_nodes == list(N) and b.num_sampled_edges == list(P)
    assert b.num_real_sampled_nodes == list(ns) and b.num_real_sampled_edges == list(es)
    assert (b.num_real_nodes, b.num_real_edges, b.seed_capacity) == (ref.num_nodes, ref.edge_index.size(1), 16)
    assert b.batch_size == ref.batch_size and torch.equal(b.seed_mask, torch.arange(16) < ref.batch_size)
    new_id = torch.cat([torch.arange(O[h], O[h] + ns[h]) for h in range(len(ns))])
    mask = torch.zeros(sum(N), dtype=torch.bool)
    mask[new_id] = True
    assert torch.equal(b.node_mask, mask)
    for key in ('x', 'n_id', 'y'):  # real rows moved to their block, padded rows zero
        assert torch.equal(b[key][new_id], ref[key]) and not b[key][~mask].any()
    ei, rei = b.edge_index.as_tensor(), ref.edge_index.as_tensor()
    for h in range(1, len(ns)):
        real, pad = slice(Q[h - 1], Q[h - 1] + es[h - 1]), slice(Q[h - 1] + es[h - 1], Q[h])
        r = slice(base[h - 1], base[h])
        assert torch.equal(ei[:, real], new_id[rei[:, r]])  # real edges in order, ids shifted
        for key in ('e_id', 'edge_attr'):
            assert torch.equal(b[key][real], ref[key][r]) and not b[key][pad].any()
        # padding: from node block h's last (padded) row to block h - 1's last (its sink)
        assert (ei[0, pad] == O[h + 1] - 1).all() and (ei[1, pad] == O[h] - 1).all()
        assert not mask[O[h] - 1] and not mask[O[h + 1] - 1]
    assert mask[ei[0][mask[ei[1]]]].all()  # real rows have real neighbours only
    assert torch.equal(b.input_id[: ref.batch_size], ref.input_id)


@pytest.mark.parametrize('data', ['random', 'hub'])
def test_graph_is_valid_and_equals_a_build(data):
    _, b, bk = padded(data)
    g = b.edge_index._pyg_tc_graph[1]
    g.validate()
    assert not g.padded and g.static_shapes and g.perm is None
    assert g.sampled_hops == (bk.num_nodes, bk.num_edges, None, None)
    ei = b.edge_index.as_tensor()
    ref = CSRGraph.from_coo(ei[0], ei[1], b.num_nodes, b.num_nodes)
    assert ref.perm is None  # the padded edges are in CSR order
    for name in ('rowptr', 'col', 't_rowptr', 't_col', 't_perm'):
        assert torch.equal(getattr(g, name), getattr(ref, name)), name
    # every trimmed layer's graph derives (padded hop boundaries), with static shapes
    ends, nodes = [0, *accumulate(bk.num_edges)], list(accumulate(bk.num_nodes))
    for j in range(1, len(ends) - 1):
        t = padding.trimmed(g, ends[j], nodes[j], nodes[j])
        assert t is not None and t.static_shapes
        t.validate()
        r = CSRGraph.from_coo(ei[0, : ends[j]], ei[1, : ends[j]], nodes[j], nodes[j])
        for name in ('rowptr', 'col', 't_rowptr', 't_col', 't_perm'):
            assert torch.equal(getattr(t, name), getattr(r, name)), name


@pytest.mark.parametrize('kind', ['sage', 'gcn', 'gat', 'gatv2'])
@pytest.mark.parametrize('data', ['random', 'hub'])
def test_trimmed_models_match_the_unpadded_batch(kind, data, monkeypatch):
    """PyG's GraphSAGE / GCN / GAT (v1, v2) with pyg_tc's layers and trim_to_layer
    on the per-hop padded batch: the seeds' outputs and the gradients of
    the unpadded batch (trimmed; SAGE also untrimmed). No graph is built for
    a trimmed slice of the padded batch; GAT's self-loop graphs come with
    the batch (``PadHops(self_loops=True)``)."""
    ref, b, _ = padded(data, self_loops=kind.startswith('gat'))
    ours, _ = models(kind)
    want = run(ours, ref, ref.edge_index, trim=True)
    built = count_builds(monkeypatch)
    got = run(ours, b, b.edge_index, trim=True)
    monkeypatch.undo()
    assert not built, 'a format was built for the padded batch'
    close(got, want)
    if kind == 'sage':
        close(got, run(ours, ref, ref.edge_index, trim=False))
        close(run(ours, b, b.edge_index, trim=False), want)  # untrimmed on the padded batch too
    g = b.edge_index._pyg_tc_graph[1]
    assert len([k for k in g.cache.keys() if k[0] == 'trimmed']) == 2  # layers 2 and 3


@pytest.mark.parametrize('data', ['random', 'hub'])
def test_gat_with_edge_features_on_per_hop_batches(data, monkeypatch):
    """GAT with edge features (``edge_dim``; its loops' features filled with
    the mean of the node's edges) on the per-hop padded batch, trimmed: the
    seeds' outputs and gradients of the unpadded batch, and a step that
    reads nothing from the device."""
    ref, b, _ = padded(data, self_loops=True)
    torch.manual_seed(0)
    model = pyg_nn.models.GAT(8, 16, num_layers=3, out_channels=5, edge_dim=2)
    model.convs = torch.nn.ModuleList(pyg_tc.nn.GATConv(c.in_channels, c.out_channels, edge_dim=2) for c in model.convs)
    for c in model.convs:
        torch.nn.init.normal_(c.lin_edge.weight)

    def go(x):
        model.zero_grad()
        out = model(
            x.x,
            x.edge_index,
            edge_attr=x.edge_attr,
            num_sampled_nodes_per_hop=x.num_sampled_nodes,
            num_sampled_edges_per_hop=x.num_sampled_edges,
        )[: ref.batch_size]
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters()]

    want = go(ref)
    forbid_device_reads(monkeypatch)
    got = go(b)
    monkeypatch.undo()
    close(got, want)


@pytest.mark.parametrize('kind', ['sage', 'gcn', 'gat'])
@pytest.mark.parametrize('data', ['random', 'hub'])
def test_padding_and_trimmed_step_read_nothing_from_the_device(kind, data, monkeypatch):
    """The padding (given the batch's host-side hop counts) and a trimmed
    forward + backward on the padded batch make none of the calls that
    synchronise with a GPU (``.item()``, ``.tolist()``, ``int()`` /
    ``bool()`` of a tensor, ``nonzero``). GAT's padding builds its self-loop
    graphs with such calls (in the loader, outside the step): there only the
    step is checked."""
    b = batch(data, fanout=FANOUT[data])
    b.y = torch.arange(b.num_nodes) % 5
    pad = PadHops([bucket_of(b)], b.batch_size, self_loops=kind == 'gat')
    ours, _ = models(kind)
    if kind == 'gat':
        b = pad(b)
    forbid_device_reads(monkeypatch)
    if kind != 'gat':
        b = pad(b)
    out = trimmed_forward(ours, b)
    seed_loss(out, b).backward()
    monkeypatch.undo()
    assert b.bucket is not None and all(p.grad is not None for p in ours.parameters())


def test_a_batch_that_fits_no_bucket_comes_back_unpadded():
    b = batch()
    ns, es = list(b.num_sampled_nodes), list(b.num_sampled_edges)
    n, E = b.num_nodes, b.edge_index.size(1)
    small = [
        HopBucket(tuple(ns[:1]) + tuple(v + 1 for v in ns[1:]), tuple(es)),  # the seed block is full
        HopBucket(tuple(v + 1 for v in ns), tuple(es[:-1]) + (es[-1] - 1,)),  # one edge too many
        HopBucket(tuple(v + 1 for v in ns[:-1]), tuple(es[:-1])),
    ]  # fewer hops
    out = PadHops([bk for bk in small if bk.num_nodes[0] > 16], 16)(b)
    assert out.get('bucket') is None and out.num_nodes == n and out.edge_index.size(1) == E
    assert out.num_sampled_nodes == ns and out.num_real_sampled_nodes == ns
    assert out.seed_capacity == 16 and out.get('node_mask') is None
    assert not any(bk.fits(ns, es) for bk in small)
    assert bucket_of(b).fits(ns, es)


def test_smallest_fitting_bucket_and_errors():
    b = batch()
    big, small = bucket_of(b, extra_edges=(100, 100, 100)), bucket_of(b)
    pad = PadHops([big, small], 16)
    assert pad.buckets == [small, big] and pad.bucket_for(b.num_sampled_nodes, b.num_sampled_edges) == small
    with pytest.raises(ValueError, match='no more seed rows'):
        PadHops([small], small.num_nodes[0])
    with pytest.raises(ValueError, match='one more node count'):
        PadHops([((17, 10), (5, 5))], 16)
    g = b.edge_index._pyg_tc_graph[1]
    with pytest.raises(ValueError, match='cannot pad hops'):
        padding.pad_hops(g, b.num_sampled_nodes, b.num_sampled_edges)  # no padded row
    with pytest.raises(ValueError, match='node counts'):
        padding.pad_hops(g, small.num_nodes[:-1], small.num_edges)


def _data(N=400, E=3000, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Data(
        x=torch.randn(N, 16, generator=g),
        y=torch.randint(0, 4, (N,), generator=g),
        edge_index=torch.randint(0, N, (2, E), generator=g),
    )


def test_buckets_from_batches_per_hop():
    loader = NeighborLoader(_data(), [5, 3], batch_size=32, device='cpu', shuffle=True)
    torch.manual_seed(0)
    seen = [(tuple(b.num_sampled_nodes), tuple(b.num_sampled_edges)) for b in loader]
    torch.manual_seed(0)
    (one,) = buckets_from_batches(loader, num_batches=8, per_hop=True, node_multiple=8, edge_multiple=16)
    assert len(one.num_nodes) == 3 and len(one.num_edges) == 2 and one.num_nodes[0] == 33
    assert all(n % 8 == 0 for n in one.num_nodes[1:]) and all(e % 16 == 0 for e in one.num_edges)
    t = torch.tensor([list(n) + list(e) for n, e in seen[:8]], dtype=torch.float64)
    assert all(v >= m for v, m in zip(one.num_nodes[1:] + one.num_edges, t.max(0).values[1:].tolist()))
    torch.manual_seed(0)
    three = buckets_from_batches(loader, num_batches=8, per_hop=True, levels=3, node_multiple=8, edge_multiple=16)
    assert three[-1] == one and 1 < len(three) <= 3
    assert [b.total_edges for b in three] == sorted(b.total_edges for b in three)
    pad = PadHops(three, 32)
    assert all(pad.bucket_for(n, e) is not None for n, e in seen[:8])


class Trimmed(torch.nn.Module):
    """PyG's GraphSAGE with pyg_tc's layers (trim_to_layer through BasicGNN)."""

    def __init__(self, kind='sage'):
        super().__init__()
        cls, make = MODELS[kind]
        self.net = cls(16, 32, num_layers=2, out_channels=4)
        self.net.convs = torch.nn.ModuleList(make(c) for c in self.net.convs)

    def forward(self, x, edge_index, **kw):
        return self.net(x, edge_index, **kw)


def _loader(device, pad=True, self_loops=False):
    loader = NeighborLoader(_data(), [5, 3], batch_size=32, device=device, shuffle=True)
    torch.manual_seed(123)
    buckets = buckets_from_batches(loader, num_batches=6, levels=2, node_multiple=16, edge_multiple=64, per_hop=True)
    if pad:
        loader.transform = PadHops(buckets, 32, self_loops=self_loops)
    return loader


def _eager(model, opt):
    def step(b):
        opt.zero_grad(set_to_none=True)
        loss = seed_loss(trimmed_forward(model, b), b)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def test_cpu_step_on_per_hop_batches_is_the_unpadded_trimmed_loop():
    """CapturedStep on the CPU (the eager step) over per-hop padded batches
    with a trimmed model trains as the eager trimmed loop on the unpadded
    batches."""
    torch.manual_seed(0)
    m1 = Trimmed()
    m2 = copy.deepcopy(m1)
    o1, o2 = torch.optim.Adam(m1.parameters(), lr=1e-2), torch.optim.Adam(m2.parameters(), lr=1e-2)
    step = CapturedStep(m2, o2, forward=trimmed_forward)
    a = _train(_eager(m1, o1), _loader('cpu', pad=False))
    loader = _loader('cpu')
    b = _train(step, loader)
    torch.testing.assert_close(a, b)
    assert step.replays == 0 and step.eager_steps == len(b)
    assert any(x.get('bucket') is not None for x in loader)


def test_bucket_key_survives_data_to():
    """``Data.to`` turns a HopBucket's per-hop tuples into lists; the
    CapturedStep's key for it is still hashable and the same as before."""
    from pyg_tc.capture.step import _key

    b = batch('hub', fanout=FANOUT['hub'])
    bk = bucket_of(b)
    moved = PadHops([bk], b.batch_size)(b).to('cpu')
    assert isinstance(moved.bucket, HopBucket) and isinstance(moved.bucket.num_nodes, list)
    assert _key(moved.bucket) == _key(bk) == tuple(bk) and hash(_key(moved.bucket)) == hash(bk)


@pytest.mark.cuda
@pytest.mark.parametrize('kind', ['sage', 'gcn', 'gat'])
def test_captured_trimmed_step_equals_eager(kind):
    """On CUDA, the captured step with a trimmed model over per-hop padded
    batches: the eager loop's losses and parameters, with one graph per
    bucket (the trimmed graphs are derived inside each replay)."""
    torch.manual_seed(0)
    m1 = Trimmed(kind).cuda()
    m2 = copy.deepcopy(m1)
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-2, capturable=True)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-2, capturable=True)
    step = CapturedStep(m2, o2, forward=trimmed_forward)
    loops = kind == 'gat'
    a = _train(_eager(m1, o1), _loader('cuda', self_loops=loops))
    b = _train(lambda x: step(x.to('cuda', non_blocking=True)), _loader('cuda', self_loops=loops))  # as a user's
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert step.replays > 0 and 1 <= len(step.graphs) <= 2
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=1e-4, rtol=1e-3)


@pytest.mark.cuda
def test_per_hop_padding_and_trimmed_step_do_not_synchronise():
    """On a GPU, the padding and a trimmed forward + backward run under
    ``torch.cuda.set_sync_debug_mode('error')``."""
    b = batch('hub', fanout=FANOUT['hub'], device='cuda')
    b.y = torch.arange(b.num_nodes, device='cuda') % 5
    pad = PadHops([bucket_of(b)], b.batch_size)
    ours, _ = models('sage', 'cuda')
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode('error')
    try:
        b = pad(b)
        seed_loss(trimmed_forward(ours, b), b).backward()
    finally:
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize('device', ['cpu', pytest.param('cuda', marks=pytest.mark.cuda)])
@pytest.mark.parametrize(
    'shape,dtype', [((4,), torch.float32), ((64,), torch.float16), ((3, 8), torch.float32), ((), torch.int64)]
)
def test_node_attributes_padded_by_block_copies(device, shape, dtype):
    """A node attribute padded hop by hop by one copy per block (rows of 64
    bytes or more) equals the indexed copy, padding rows zero."""
    from pyg_tc.transforms.pad import _pad_blocks, _pad_node_blocks

    real, padded = [3, 0, 17, 6], [4, 256, 20, 7]
    t = (torch.randn(sum(real), *shape) * 100).to(dtype).to(device)
    index = padding.block_index(real, padded, device)
    got = _pad_node_blocks(t, index, real, padded)
    assert torch.equal(got, _pad_blocks(t, index, sum(padded)))
