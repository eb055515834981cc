"""Static-shape mini-batches (pyg_tc.transforms.pad, CSRGraph.pad): the padded
graph's invariants, bucket choice, every layer's result and gradients on the
real rows of a padded batch equal to the unpadded batch's, no host
synchronisation in a layer's forward + backward on a padded batch (on the
CPU a dispatch mode that rejects every data-dependent op; on CUDA
``torch.cuda.set_sync_debug_mode('error')``), and the seed loss."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric.data import Data

import pyg_tc
from pyg_tc.formats import CSRGraph
from pyg_tc.formats.csr import _without_fillers, build_schedules
from pyg_tc.ops.attn import edge_softmax
from pyg_tc.testing import emulate_attention, emulate_csr_spmm
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import Bucket, PadToBuckets, buckets_from_batches, buckets_from_fanouts
from pyg_tc.capture import seed_loss
from pyg_tc.nn.models import MaxKGNN
from pyg_tc.formats import padding

from ..conftest import DEVICES
from ..loader.test_sampler import graph

aten = torch.ops.aten


class NoHostSync(TorchDispatchMode):
    """Rejects every op that reads a device value on the host or whose output
    size depends on the data: what a CUDA-graph capture cannot contain (on
    the CPU, where ``set_sync_debug_mode`` sees nothing). pyg_tc's ops are
    seen as one call each (their own implementations are the kernels)."""

    BAD = {
        aten._local_scalar_dense.default,
        aten.nonzero.default,
        aten.masked_select.default,
        aten._unique2.default,
        aten.unique_dim.default,
        aten.bincount.default,
        aten.unique_consecutive.default,
    }

    def __enter__(self):
        self._tolist = torch.Tensor.tolist  # (reads CPU memory without a dispatch)

        def tolist(t):
            raise AssertionError('host synchronisation: tolist')

        torch.Tensor.tolist = tolist
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._tolist
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.BAD:
            raise AssertionError(f'host synchronisation: {func}')
        if (
            func in (aten.repeat_interleave.Tensor, aten.repeat_interleave.self_Tensor)
            and kwargs.get('output_size') is None
        ):
            raise AssertionError(f'{func} without output_size (data-dependent size)')
        if func is aten.index.Tensor and any(t is not None and t.dtype == torch.bool for t in args[1]):
            raise AssertionError('boolean-mask indexing (data-dependent size)')
        return func(*args, **kwargs)


def test_no_host_sync_mode_catches_what_it_should():
    t = torch.arange(5)
    for bad in (
        lambda: int(t.sum()),
        lambda: t.nonzero(),
        lambda: t[t > 2],
        lambda: t.tolist(),
        lambda: torch.repeat_interleave(t, t),
    ):
        with pytest.raises(AssertionError), NoHostSync():
            bad()


@pytest.mark.parametrize('kind', ['random', 'sparse', 'hub'])
@pytest.mark.parametrize('extra', [(1, 0), (7, 33)])
def test_pad_graph_invariants(kind, extra):
    ei, N = graph(kind)
    g = CSRGraph.from_coo(ei[0], ei[1], N, N)
    R, E = N + extra[0], ei.size(1) + extra[1]
    p = padding.pad(g, R, E).validate()
    assert (p.num_rows, p.num_cols, p.num_edges, p.padded, p.real_size) == (R, R, E, True, (N, ei.size(1)))
    assert torch.equal(p.rowptr[: N + 1], g.rowptr) and bool((p.rowptr[N:] == ei.size(1)).all())
    assert torch.equal(p.degree()[:N], g.degree()) and not bool(p.degree()[N:].any())
    q = -(-E // p.chunk)
    for s, rp in ((p.sched, p.rowptr), (p.t_sched, p.t_rowptr)):
        # sizes fixed by the bucket; the real part is the ordinary schedule of the padded rowptr
        assert (s.units.size(0), s.heavy_rows.numel(), s.num_slots) == (R + q, q, 3 * q)
        real, ref = _without_fillers(s), build_schedules([rp], p.chunk)[0]
        assert torch.equal(real.units, ref.units) and torch.equal(real.heavy_rows, ref.heavy_rows)
        assert torch.equal(real.heavy_ptr, ref.heavy_ptr) and real.num_slots == ref.num_slots
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(R, 5, generator=gen)
    x[N:] = 0
    out = pyg_tc.ops.spmm(x, p)
    assert torch.allclose(out[:N], pyg_tc.ops.spmm(x[:N], g), atol=1e-5) and not bool(out[N:].any())
    # the kernels' schedule walk (CPU emulation: unwritten rows would be NaN), both directions; the
    # emulation sums a hub's chunks in another order than the reference (fp32: atol for the hub's sums)
    for t in (False, True):
        for reduce in ('sum', 'mean', 'max'):
            torch.testing.assert_close(
                emulate_csr_spmm(p, x, reduce=reduce, transpose=t),
                pyg_tc.ops.spmm(x, p.transpose() if t else p, reduce=reduce),
                atol=1e-4,
                rtol=1e-5,
            )
    logits, xh = torch.randn(E, 2, generator=gen), torch.randn(R, 2, 3, generator=gen)
    emu, _ = emulate_attention(p, xh, logits)
    alpha, n = edge_softmax(p, logits), ei.size(1)  # (padding slots: 0)
    agg = torch.zeros(R, 2, 3).index_add_(0, p.row().long()[:n], alpha[:n].unsqueeze(-1) * xh[p.col.long()[:n]])
    torch.testing.assert_close(emu, agg, atol=1e-5, rtol=1e-5)
    assert p.transpose().real_size == p.real_size and p.transpose().padded and p.transpose().validate()
    with pytest.raises(ValueError, match='cannot pad'):
        padding.pad(g, N - 1, E)
    with pytest.raises(ValueError, match='padded already'):
        padding.pad(p, R + 1, E)


def _data(seed=0, N=300, E=2000, loops=True):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, N, (2, E), generator=g)
    if loops:  # self loops and a repeated edge, as real graphs have
        ei = torch.cat([ei, torch.tensor([[5, 7, 9, 9], [5, 7, 3, 3]])], 1)
    return Data(
        x=torch.randn(N, 13, generator=g),
        y=torch.randint(0, 5, (N,), generator=g),
        edge_index=ei,
        edge_attr=torch.randn(ei.size(1), 3, generator=g),
        edge_weight=torch.rand(ei.size(1), generator=g),
    )


def _batches(device, n=3, self_loops=True, **kw):
    data = _data()
    loader = NeighborLoader(data, [5, 3], batch_size=16, device=device, **kw)
    pad = PadToBuckets(buckets_from_batches(loader, num_batches=5), 16, self_loops=self_loops)
    out = []
    for i, b in enumerate(loader):
        if i == n:
            break
        out.append((b, pad(copy.copy(b))))
    return out


def test_buckets():
    data = _data()
    loader = NeighborLoader(data, [5, 3], batch_size=16, device='cpu')
    sizes = [(b.num_nodes, b.edge_index.size(1)) for b in loader]
    (b,) = buckets_from_batches(loader, num_batches=len(sizes), sigma=5.0)
    assert b.num_nodes % 256 == 0 and b.num_edges % 1024 == 0
    assert all(b.fits(n, e) for n, e in sizes)
    many = buckets_from_batches(loader, num_batches=len(sizes), levels=3, node_multiple=8, edge_multiple=8)
    assert many == sorted(many) and 1 <= len(many) <= 3 and all(many[-1].fits(n, e) for n, e in sizes)
    (top,) = buckets_from_fanouts(16, [5, 3], num_nodes=300)
    assert top.num_nodes >= 16 * (1 + 5 + 15) + 1 or top.num_nodes >= 301
    assert top.num_edges >= 16 * 5 + 16 * 5 * 3
    with pytest.raises(ValueError, match='-1'):
        buckets_from_fanouts(16, [-1], num_nodes=300)
    with pytest.raises(ValueError, match='at least 2'):
        buckets_from_batches(loader, num_batches=1)


def test_padded_batch_fields():
    ((b, p),) = _batches('cpu', n=1)
    n, E = b.num_nodes, b.edge_index.size(1)
    N, P = p.bucket
    assert (p.num_nodes, p.x.size(0), p.y.size(0), p.n_id.size(0)) == (N, N, N, N)
    assert (p.edge_index.size(1), p.edge_attr.size(0), p.e_id.size(0)) == (P, P, P)
    assert (p.num_real_nodes, p.num_real_edges, p.batch_size, p.seed_capacity) == (n, E, b.batch_size, 16)
    assert torch.equal(p.x[:n], b.x) and not bool(p.x[n:].any())
    assert torch.equal(p.edge_index[:, :E], b.edge_index.as_tensor()) and bool((p.edge_index[:, E:] == N - 1).all())
    assert int(p.node_mask.sum()) == n and bool(p.node_mask[:n].all())
    assert int(p.seed_mask.sum()) == b.batch_size
    assert p.num_sampled_nodes == b.num_sampled_nodes
    # a batch larger than every bucket comes back as it was
    big = PadToBuckets([Bucket(20, 10)], 16)(copy.copy(b))
    assert big.get('bucket') is None and big.num_nodes == n and 'seed_mask' not in big


LAYERS = {
    'sage': lambda: pyg_tc.nn.SAGEConv(13, 7),
    'sage_max': lambda: pyg_tc.nn.SAGEConv(13, 7, aggr='max'),
    'gcn': lambda: pyg_tc.nn.GCNConv(13, 7),
    'gcn_mean': lambda: pyg_tc.nn.GCNConv(13, 7, aggr='mean'),
    'gin': lambda: pyg_tc.nn.GINConv(torch.nn.Linear(13, 7), train_eps=True),
    'gat': lambda: pyg_tc.nn.GATConv(13, 7, heads=2),
    'gat_edge': lambda: pyg_tc.nn.GATConv(13, 7, heads=2, edge_dim=3),
    'gatv2_edge': lambda: pyg_tc.nn.GATv2Conv(13, 7, heads=2, edge_dim=3),
}


def _call(name, layer, b):
    if name.endswith('_edge'):
        return layer(b.x, b.edge_index, edge_attr=b.edge_attr)
    if name.startswith('gcn') and 'mean' not in name:
        return layer(b.x, b.edge_index, b.edge_weight)
    return layer(b.x, b.edge_index)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('name', sorted(LAYERS))
def test_layers_equal_on_real_rows(name, device):
    """Outputs on the real rows and parameter gradients of a loss over the
    seeds: padded batch == unpadded batch; padded rows finite."""
    torch.manual_seed(0)
    layer = LAYERS[name]().to(device)
    for b, p in _batches(device):
        n = b.num_nodes
        out = _call(name, layer, b)
        grads = torch.autograd.grad(seed_loss(out, b), list(layer.parameters()))
        pout = _call(name, layer, p)
        pgrads = torch.autograd.grad(seed_loss(pout, p), list(layer.parameters()))
        assert bool(torch.isfinite(pout).all())
        torch.testing.assert_close(pout[:n], out, atol=1e-5, rtol=1e-5)
        for a, c in zip(pgrads, grads):
            torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('conv', ['sage', 'gin'])
def test_maxk_models_equal_on_real_rows(conv, device):
    torch.manual_seed(1)
    model = MaxKGNN(conv, 13, 32, 5, num_layers=3, k=8, dropout=0.0).to(device)
    for b, p in _batches(device, self_loops=False):
        out, pout = model(b.x, b.edge_index), model(p.x, p.edge_index)
        torch.testing.assert_close(pout[: b.num_nodes], out, atol=1e-5, rtol=1e-5)
        g1 = torch.autograd.grad(seed_loss(out, b), list(model.parameters()))
        g2 = torch.autograd.grad(seed_loss(pout, p), list(model.parameters()))
        for a, c in zip(g2, g1):
            torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('name', sorted(LAYERS))
def test_no_host_sync_on_padded_batches(name):
    """Forward + seed loss + backward of each layer on a fresh padded batch
    (nothing memoised but what padding built; GAT also without its padded
    self-loop graph) does nothing data-dependent."""
    torch.manual_seed(0)
    layer = LAYERS[name]()
    for _, p in _batches('cpu', n=2):
        with NoHostSync():
            seed_loss(_call(name, layer, p), p).backward()
    # without the prebuilt self-loop graph GAT derives the same one inside the step, also without a sync
    b, bare = _batches('cpu', n=1, self_loops=False)[0]
    with NoHostSync():
        out = _call(name, layer, bare)
        seed_loss(out, bare).backward()
    torch.testing.assert_close(out[: b.num_nodes], _call(name, layer, b))  # the real rows: the unpadded batch's


@pytest.mark.cuda
@pytest.mark.parametrize('name', sorted(LAYERS))
def test_no_host_sync_on_padded_batches_cuda(name):
    torch.manual_seed(0)
    layer = LAYERS[name]().cuda()
    batches = _batches('cuda', n=2)
    torch.cuda.synchronize()
    try:
        torch.cuda.set_sync_debug_mode('error')
        for _, p in batches:
            seed_loss(_call(name, layer, p), p).backward()
    finally:
        torch.cuda.set_sync_debug_mode(0)


def test_seed_loss_is_pygs_loss():
    ((b, p),) = _batches('cpu', n=1)
    out = torch.randn(p.num_nodes, 5)
    ref = torch.nn.functional.cross_entropy(out[: b.batch_size], b.y[: b.batch_size])
    torch.testing.assert_close(seed_loss(out, p), ref)
    torch.testing.assert_close(seed_loss(out[: b.num_nodes], b), ref)
    p.seed_mask[3:] = False  # a short last batch: only its real seeds count
    torch.testing.assert_close(seed_loss(out, p), torch.nn.functional.cross_entropy(out[:3], b.y[:3]))


@pytest.mark.parametrize('kind', ['random', 'hub'])
def test_agnn_graph_without_loops_of_a_padded_graph(kind):
    """AGNN's unfused path drops existing self loops: on a padded graph the
    same real edges remain (not none: every position is listed there, loops
    by their row), and no padding slot becomes an edge."""
    from pyg_tc.nn.agnn import _without_loops

    ei, N = graph(kind)
    ei = torch.cat([ei, torch.arange(0, N, 3).repeat(2, 1)], 1)  # some self loops
    g = CSRGraph.from_coo(ei[0], ei[1], N, N)
    p = padding.pad(g, N + 5, ei.size(1) + 40)

    def edges(h):
        return sorted(zip(h.row().tolist(), h.col.tolist()))

    want = edges(_without_loops(g))
    assert want and len(want) < g.num_edges
    got = _without_loops(p)
    assert edges(got) == want and got.num_rows == p.num_rows
