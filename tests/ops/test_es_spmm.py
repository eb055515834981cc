"""ES-SpMM's sampling specification (pyg_tc/ops/es_spmm.py) on the
CPU: distinct samples, a pure function of (row, slot, seed), the paper's
Bucket / FastRand, exactness when nothing is capped, and unbiased sums and
means over seeds (with edge weights)."""

import pytest
import torch

from pyg_tc.bench.graphs import rmat
from pyg_tc.ops import spmm_reference
from pyg_tc.ops.es_spmm import (
    FASTRAND_PRIME,
    SAMPLINGS,
    kept_capped,
    row_order,
    sample_csr,
    sampled_spmm_reference,
    uniform_index,
)


def csr_of(ei, n):
    """(rowptr, col) of edges src -> dst, rows = targets, sorted by target then source."""
    src, dst = ei
    order = torch.argsort(dst * n + src)
    col = src[order]
    rowptr = torch.zeros(n + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
    return rowptr, col


def degrees_graph():
    """Rows of degree 0, 1, S-1, S, S+1, a power of two and one above, primes, a 20K hub."""
    degs = [0, 1, 7, 8, 9, 16, 17, 64, 65, 97, 577, 1154, 20011]
    rowptr = torch.zeros(len(degs) + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.tensor(degs), 0)
    g = torch.Generator().manual_seed(0)
    col = torch.randint(0, 50, (int(rowptr[-1]),), generator=g)
    return rowptr, col


@pytest.mark.parametrize('S', [1, 8, 32, 128])
def test_uniform_has_no_duplicates_on_rmat(S):
    ei = rmat(20_000, 600_000, seed=1, device='cpu')  # hubs of several thousand edges
    rowptr, _ = csr_of(ei, 20_000)
    rs, edge, scale = sample_csr(rowptr, S, 'uniform', seed=3)
    deg = rowptr[1:] - rowptr[:-1]
    assert torch.equal(rs[1:] - rs[:-1], deg.clamp(max=S))
    row = torch.repeat_interleave(torch.arange(deg.numel()), rs[1:] - rs[:-1])
    assert bool(((edge >= rowptr[:-1][row]) & (edge < rowptr[1:][row])).all())  # inside its row
    assert edge.unique().numel() == edge.numel()  # zero duplicates
    assert torch.equal(scale, torch.where(deg > S, deg.double() / S, torch.ones_like(scale)))


def test_uniform_is_a_bijection_of_the_row():
    for d in [2, 3, 5, 8, 9, 31, 32, 33, 1000, 4097]:
        k = torch.arange(d)
        idx = uniform_index(k, torch.full_like(k, d), torch.full_like(k, 11), 5)
        assert torch.equal(torch.sort(idx)[0], k), d


def test_pure_function_of_row_slot_seed():
    rowptr, _ = degrees_graph()
    a = sample_csr(rowptr, 8, 'uniform', seed=7)[1]
    assert torch.equal(a, sample_csr(rowptr, 8, 'uniform', seed=7)[1])
    assert not torch.equal(a, sample_csr(rowptr, 8, 'uniform', seed=8)[1])
    # a slot does not depend on the other rows: sampling one row alone gives its slots
    k = torch.arange(8)
    d = torch.full_like(k, 577)
    alone = uniform_index(k, d, torch.full_like(k, 10), 7)
    assert torch.equal(a[a >= rowptr[10]][:8] - rowptr[10], alone)


def test_bucket_and_fastrand_are_the_papers():
    rowptr, _ = degrees_graph()
    deg = rowptr[1:] - rowptr[:-1]
    for sampling, f in (('bucket', lambda k, d: k), ('fastrand', lambda k, d: (k * FASTRAND_PRIME) % d)):
        rs, edge, _ = sample_csr(rowptr, 8, sampling, seed=123)
        assert torch.equal(edge, sample_csr(rowptr, 8, sampling, seed=0)[1])  # no seed
        for i in range(deg.numel()):
            k = torch.arange(int(rs[i + 1] - rs[i]))
            want = f(k, int(deg[i])) if deg[i] > 8 else k
            assert torch.equal(edge[rs[i] : rs[i + 1]] - rowptr[i], want)


@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max'])
@pytest.mark.parametrize('sampling', SAMPLINGS)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_no_cap_is_the_exact_op_bitwise(reduce, sampling, dtype):
    rowptr, col = degrees_graph()
    x = torch.randn(50, 13, dtype=dtype)
    w = torch.rand(col.numel(), dtype=dtype)
    exact = spmm_reference(rowptr, col, w, x, reduce=reduce)
    out = sampled_spmm_reference(rowptr, col, w, x, 20011, sampling, seed=4, reduce=reduce)
    assert torch.equal(out, exact)


def test_estimators():
    """sum: capped rows scaled by deg / S; mean: over the kept edges; uncapped rows exact."""
    rowptr, col = degrees_graph()
    x = torch.rand(50, 6, dtype=torch.float64)
    S = 8
    rs, edge, _ = sample_csr(rowptr, S, 'uniform', seed=9)
    out_sum = sampled_spmm_reference(rowptr, col, None, x, S, 'uniform', 9, 'sum')
    out_mean = sampled_spmm_reference(rowptr, col, None, x, S, 'uniform', 9, 'mean')
    deg = rowptr[1:] - rowptr[:-1]
    for i in range(deg.numel()):
        kept = x[col[edge[rs[i] : rs[i + 1]]]]
        d = int(deg[i])
        want = kept.sum(0) * (d / S if d > S else 1.0)
        torch.testing.assert_close(out_sum[i], want)
        torch.testing.assert_close(out_mean[i], kept.mean(0) if d else torch.zeros(6, dtype=torch.float64))


@pytest.mark.parametrize('reduce', ['sum', 'mean'])
def test_unbiased_over_1000_seeds(reduce):
    """The mean over 1000 seeds of the sampled result on capped rows is within
    1% of the exact one (edge weights honoured); per row, summed over F."""
    g = torch.Generator().manual_seed(2)
    degs = torch.tensor([40, 97, 200, 577])
    rowptr = torch.zeros(5, dtype=torch.long)
    rowptr[1:] = torch.cumsum(degs, 0)
    col = torch.randint(0, 300, (int(rowptr[-1]),), generator=g)
    w = 0.5 + torch.rand(col.numel(), generator=g, dtype=torch.float64)
    x = 1 + torch.rand(300, 16, generator=g, dtype=torch.float64)
    exact = spmm_reference(rowptr, col, w, x, reduce=reduce).sum(1)
    acc = torch.zeros(4, dtype=torch.float64)
    for seed in range(1000):
        acc += sampled_spmm_reference(rowptr, col, w, x, 8, 'uniform', seed, reduce).sum(1)
    rel = (acc / 1000 - exact).abs() / exact
    assert float(rel.max()) < 0.01, rel
    # the paper's fixed subsets are biased on these rows (a control that the test can fail)
    bucket = sampled_spmm_reference(rowptr, col, w, x, 8, 'bucket', 0, reduce).sum(1)
    assert float(((bucket - exact).abs() / exact).max()) > 0.01


def test_bad_arguments():
    rowptr, col = degrees_graph()
    x = torch.randn(50, 3)
    for S in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match='max_neighbors'):
            sample_csr(rowptr, S)
    with pytest.raises(ValueError, match='sampling'):
        sample_csr(rowptr, 4, 'reservoir')
    with pytest.raises(ValueError, match='reduce'):
        sampled_spmm_reference(rowptr, col, None, x, 4, reduce='min')


@pytest.mark.cuda
@pytest.mark.parametrize('S', [32, 128])
def test_uniform_no_duplicates_reddit_shaped_cuda(S):
    """Requirement 3 on the Reddit-shaped graph (233K nodes, 96.7M edges), on the GPU."""
    from pyg_tc.bench.graphs import load_graph

    bg = load_graph('reddit', 'cuda')
    g = bg.csr()
    rs, edge, _ = sample_csr(g.rowptr, S, 'uniform', seed=1)
    deg = (g.rowptr[1:] - g.rowptr[:-1]).long()
    assert torch.equal(rs[1:] - rs[:-1], deg.clamp(max=S))
    assert torch.unique(edge).numel() == edge.numel()
    # the same slots on the CPU (integer arithmetic only: the spec is device-independent)
    cpu = sample_csr(g.rowptr[:2001].cpu(), S, 'uniform', seed=1)[1]
    assert torch.equal(edge[: cpu.numel()].cpu(), cpu)


# ---------------------------------------------------------------------------
# The op (pyg_tc.ops.spmm(max_neighbors=...)) and the layers' switch


def _graph(seed=0, n=120, e=4000):
    from pyg_tc.formats import CSRGraph

    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei = torch.cat([ei, torch.stack([torch.arange(600) % n, torch.zeros(600, dtype=torch.long)])], 1)  # a hub
    rowptr, col = csr_of(ei, n)
    return CSRGraph.from_csr(rowptr, col, n), rowptr, col, ei


@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max'])
@pytest.mark.parametrize('sampling', SAMPLINGS)
def test_op_matches_reference(reduce, sampling):
    from pyg_tc.ops import spmm

    g, rowptr, col, _ = _graph()
    x = torch.randn(120, 7, dtype=torch.float64)
    w = torch.rand(col.numel(), dtype=torch.float64)
    out = spmm(x, g, w, reduce, max_neighbors=16, sampling=sampling, seed=5)
    ref = sampled_spmm_reference(rowptr, col, w, x, 16, sampling, 5, reduce)
    torch.testing.assert_close(out, ref)
    # S >= the largest degree: the exact op, bitwise
    assert torch.equal(spmm(x, g, w, reduce, max_neighbors=10_000, sampling=sampling), spmm(x, g, w, reduce))


def test_op_seed_none_draws_from_torch():
    from pyg_tc.ops import spmm

    g, *_ = _graph()
    x = torch.randn(120, 4)
    torch.manual_seed(0)
    a = spmm(x, g, max_neighbors=8)
    b = spmm(x, g, max_neighbors=8)
    torch.manual_seed(0)
    assert not torch.equal(a, b) and torch.equal(a, spmm(x, g, max_neighbors=8))


def test_gradients_are_the_samples_transpose():
    """gradcheck in float64: x, the edge weights and diag through the sampled op (fixed seed)."""
    from pyg_tc.ops import spmm

    g, *_ = _graph(n=40, e=600)
    x = torch.randn(40, 3, dtype=torch.float64, requires_grad=True)
    w = torch.rand(g.num_edges, dtype=torch.float64, requires_grad=True)
    d = torch.rand(40, dtype=torch.float64, requires_grad=True)
    for reduce in ('sum', 'mean'):
        assert torch.autograd.gradcheck(
            lambda x, w, d: spmm(x, g, w, reduce, diag=d, max_neighbors=6, seed=3), (x, w, d)
        )
    # edges that were not sampled get no gradient
    out = spmm(x, g, w, max_neighbors=6, seed=3)
    (gw,) = torch.autograd.grad(out.sum(), w)
    _, edge, _ = sample_csr(g.rowptr, 6, 'uniform', 3)
    kept = torch.zeros(g.num_edges, dtype=torch.bool)
    kept[edge] = True
    assert bool((gw[~kept] == 0).all()) and bool((gw[kept] != 0).all())


def _conv(kind: str) -> torch.nn.Module:
    """A pyg_tc layer of ``kind`` from 6 to 5 channels."""
    import pyg_tc.nn

    return {
        'gcn': lambda: pyg_tc.nn.GCNConv(6, 5),
        'sage': lambda: pyg_tc.nn.SAGEConv(6, 5),
        'gin': lambda: pyg_tc.nn.GINConv(torch.nn.Linear(6, 5)),
    }[kind]()


@pytest.mark.parametrize('kind', ['gcn', 'sage', 'gin'])
def test_layers_sampled_aggregation(kind):
    import pyg_tc

    _, _, _, ei = _graph(1)
    torch.manual_seed(0)
    conv = _conv(kind).double()
    x = torch.rand(120, 6, dtype=torch.float64)
    with torch.no_grad():
        exact = conv(x, ei)
        with pyg_tc.sampled_aggregation(10_000):
            assert torch.equal(conv(x, ei), exact)  # nothing capped: exact
        with pyg_tc.sampled_aggregation(8, seed=1) as spec:
            one = conv(x, ei)
            assert spec.max_neighbors == 8 and torch.equal(conv(x, ei), one)  # fixed seed
        assert torch.equal(conv(x, ei), exact)  # the switch is off after the block
        assert not torch.allclose(one, exact)
        # unbiased (the layers are linear in the aggregation): the mean over seeds -> exact
        acc = torch.zeros_like(exact)
        for s in range(300):
            with pyg_tc.sampled_aggregation(8, seed=s):
                acc += conv(x, ei)
    assert float((acc / 300 - exact).abs().max()) < 0.03 * float(exact.abs().max())


def test_switch_arguments():
    import pyg_tc

    with pytest.raises(ValueError, match='max_neighbors'):
        with pyg_tc.sampled_aggregation(0):
            pass
    with pytest.raises(ValueError, match='sampling'):
        with pyg_tc.sampled_aggregation(4, 'topk'):
            pass


@pytest.mark.parametrize('kind', ['gcn', 'sage', 'gin'])
def test_cap_neighbors_transform(kind):
    """The transform's prebuilt capped graph gives what the switch gives."""
    import pyg_tc
    from torch_geometric.data import Data
    from pyg_tc.transforms import CapNeighbors, DegreeBucketTransform

    _, _, _, ei = _graph(2)
    torch.manual_seed(0)
    conv = _conv(kind)
    x = torch.rand(120, 6)
    cap = CapNeighbors(8, 'uniform', seed=4)
    data = cap(Data(x=x, edge_index=ei.clone(), num_nodes=120))
    g = DegreeBucketTransform.graph(data)
    capped = kept_capped(g, 8, 'uniform', 4)
    assert capped is not None  # built once, by the transform
    with torch.no_grad():
        assert torch.equal(conv(x, data.edge_index), conv(x, ei))  # outside the block: exact
        with cap.sampled_aggregation():
            out = conv(x, data.edge_index)
            assert kept_capped(g, 8, 'uniform', 4) is capped  # the transform's graph, not another
        with pyg_tc.sampled_aggregation(8, 'uniform', seed=4):
            want = conv(x, ei)
        assert torch.equal(out, want)
        assert not torch.equal(out, conv(x, ei))
    assert repr(CapNeighbors(8)) == "CapNeighbors(max_neighbors=8, sampling='uniform', seed=0)"
    with pytest.raises(ValueError, match='seed'):
        CapNeighbors(8, seed=None)
    with pytest.raises(ValueError, match='max_neighbors'):
        CapNeighbors(0)


# ---------------------------------------------------------------------------
# The kernel op: on the CPU its reference, on CUDA csr_sampled.cu against it


def _op_args(g, value, x, S, sampling, seed, reduce, diag=None, order=None):
    return (g.rowptr, g.col, value, x, diag, order, S, SAMPLINGS.index(sampling), seed, reduce)


def test_kernel_op_reference_and_gradients_cpu():
    from pyg_tc.ops.es_spmm import sampled_spmm

    g, rowptr, col, _ = _graph(n=40, e=600)
    x = torch.randn(40, 5, dtype=torch.float64, requires_grad=True)
    w = torch.rand(g.num_edges, dtype=torch.float64, requires_grad=True)
    out = sampled_spmm(*_op_args(g, w, x, 6, 'uniform', 9, 'sum'))
    torch.testing.assert_close(out, sampled_spmm_reference(rowptr, col, w, x, 6, 'uniform', 9, 'sum'))
    for reduce in ('sum', 'mean'):
        assert torch.autograd.gradcheck(lambda x, w: sampled_spmm(*_op_args(g, w, x, 6, 'uniform', 9, reduce)), (x, w))
    torch.library.opcheck(
        torch.ops.pyg_tc.sampled_spmm.default, _op_args(g, w.detach(), x.detach(), 6, 'fastrand', 1, 'mean')
    )


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize('F', [1, 7, 32, 64, 129, 256])
@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max'])
@pytest.mark.parametrize('sampling', SAMPLINGS)
def test_kernel_matches_reference_cuda(dtype, F, reduce, sampling):
    from pyg_tc.ops.es_spmm import sampled_spmm

    g, rowptr, col, _ = _graph(3, n=300, e=20_000)
    gc = g.to('cuda')
    x = torch.randn(300, F).to(dtype)
    w = torch.rand(g.num_edges)
    order = row_order(gc)
    for S, value, o in ((8, w, None), (8, None, order), (64, w, order), (1, w, order)):
        out = sampled_spmm(
            *_op_args(gc, None if value is None else value.cuda(), x.cuda(), S, sampling, 11, reduce, order=o)
        ).cpu()
        ref = sampled_spmm_reference(rowptr, col, value, x.float(), S, sampling, 11, reduce)
        assert out.dtype == dtype
        tol = 1e-5 if dtype == torch.float32 else 1e-2 if dtype == torch.float16 else 4e-2
        torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol * float(ref.abs().max().clamp(min=1)))
    if reduce != 'max':  # the self term (GCN's self loop, GIN's 1 + eps), never sampled
        for diag in (torch.rand(300), torch.tensor([1.5])):
            out = sampled_spmm(*_op_args(gc, w.cuda(), x.cuda(), 8, sampling, 2, reduce, diag.cuda())).cpu()
            ref = sampled_spmm_reference(rowptr, col, w, x.float(), 8, sampling, 2, reduce, diag)
            torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol * float(ref.abs().max().clamp(min=1)))


@pytest.mark.cuda
def test_kernel_reddit_shaped_uniform_cuda():
    """The kernel's slots are the specification's on the Reddit-shaped graph:
    one-hot features of each row's kept edge positions would be too large, so
    compare sums of x = the column id (exact in fp32 for these magnitudes)."""
    from pyg_tc.bench.graphs import load_graph
    from pyg_tc.ops.es_spmm import sampled_spmm

    g = load_graph('reddit', 'cuda').csr()
    x = torch.arange(g.num_cols, device='cuda', dtype=torch.float32).unsqueeze(1) / g.num_cols
    for S in (32, 128):
        out = sampled_spmm(g.rowptr, g.col, None, x, None, row_order(g), S, 0, 1, 'mean')
        rs, edge, _ = sample_csr(g.rowptr, S, 'uniform', seed=1)
        ref = spmm_reference(rs, g.col.index_select(0, edge), None, x, reduce='mean')
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.parametrize('kind', ['gcn', 'sage', 'gin'])
def test_layers_kernel_path_cuda(kind):
    """Inference on CUDA runs the kernel (no capped graph built); with gradients
    the capped graph and the exact engine run: the same sample, equal results."""
    import pyg_tc
    from pyg_tc.formats import CSRGraph

    _, rowptr, col, ei = _graph(1)
    torch.manual_seed(0)
    conv = {
        'gcn': lambda: pyg_tc.nn.GCNConv(6, 5),
        'sage': lambda: pyg_tc.nn.SAGEConv(6, 5),
        'gin': lambda: pyg_tc.nn.GINConv(torch.nn.Linear(6, 5)),
    }[kind]().cuda()
    x, ei = torch.rand(120, 6, device='cuda'), ei.cuda()
    with pyg_tc.sampled_aggregation(8, seed=1):
        with torch.no_grad():
            fast = conv(x, ei)
        slow = conv(x.requires_grad_(), ei)
    torch.testing.assert_close(fast, slow.detach(), rtol=1e-5, atol=1e-6)
    g = CSRGraph.from_csr(rowptr, col, 120).to('cuda')
    xs = torch.rand(120, 16, device='cuda')
    out = pyg_tc.ops.spmm(xs, g, max_neighbors=8, seed=3)
    assert kept_capped(g, 8, 'uniform', 3) is None  # nothing built
    assert not any(k[0] == 'capped' for k in g.cache.keys() if isinstance(k, tuple))
    ref = sampled_spmm_reference(rowptr, col, None, xs.cpu(), 8, 'uniform', 3)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize('dtype, F', [(torch.float32, 128), (torch.bfloat16, 256)])
def test_kernel_feature_slices_cuda(dtype, F):
    """x over 256 MiB with rows over 256 bytes: the kernel splits the features
    into 256-byte slices over blockIdx.y (csr_host.cpp); same result."""
    from pyg_tc.formats import CSRGraph
    from pyg_tc.ops.es_spmm import sampled_spmm

    n = 600_000
    gen = torch.Generator(device='cuda').manual_seed(0)
    dst = torch.cat(
        [
            torch.randint(0, n, (2_000_000,), device='cuda', generator=gen),
            torch.zeros(5000, dtype=torch.long, device='cuda'),
        ]
    )  # a capped hub
    src = torch.randint(0, n, (dst.numel(),), device='cuda', generator=gen)
    g = CSRGraph.from_coo(src, dst, n, n)
    x = torch.randn(n, F, device='cuda', generator=gen).to(dtype)
    assert x.numel() * x.element_size() > 256 * 2**20
    w = torch.rand(g.num_edges, device='cuda', generator=gen)
    for S, reduce in ((4, 'sum'), (16, 'mean')):
        out = sampled_spmm(g.rowptr, g.col, w, x, None, row_order(g), S, 0, 5, reduce)
        ref = sampled_spmm_reference(g.rowptr, g.col, w, x.float(), S, 'uniform', 5, reduce)
        tol = 1e-5 if dtype == torch.float32 else 4e-2
        torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol * float(ref.abs().max()))
