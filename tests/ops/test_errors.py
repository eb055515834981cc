"""Bad input gives clear errors, before any kernel runs."""

from __future__ import annotations

import pytest
import torch

from pyg_tc.formats import CSRGraph, attach
from pyg_tc.ops import sddmm, spmm

from ..conftest import DEVICES, cuda_only, features, make_graph


@pytest.fixture
def graph():
    ei, n = make_graph('random')
    return ei, n, features(n, 8)


@cuda_only
@pytest.mark.parametrize('adj_kind', ['edge_index', 'TCEdgeIndex', 'CSRGraph'])
def test_x_on_other_device(adj_kind):
    ei, n = make_graph('random')
    adj = {
        'edge_index': lambda: ei,
        'TCEdgeIndex': lambda: attach(ei, n),
        'CSRGraph': lambda: CSRGraph.from_coo(ei[0], ei[1], n, n),
    }[adj_kind]()
    with pytest.raises(ValueError, match='is on cuda.*graph metadata is on cpu'):
        spmm(features(n, 8, device='cuda'), adj)
    with pytest.raises((ValueError, RuntimeError), match='is on|device'):
        spmm(features(n, 8), ei, torch.ones(ei.size(1), device='cuda'))
    with pytest.raises(ValueError, match='is on cuda'):
        sddmm(features(n, 8, device='cuda'), features(n, 8, device='cuda'), adj)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', [torch.int64, torch.int32, torch.bool])
def test_non_float_x(dtype, device):
    ei, n = make_graph('random', device)
    x = torch.ones(n, 8, dtype=dtype, device=device)
    with pytest.raises(TypeError, match='x must be float16, bfloat16, float32 or float64'):
        spmm(x, ei)
    with pytest.raises(TypeError, match='must be float16, bfloat16, float32 or float64'):
        sddmm(x, x, ei)


@pytest.mark.parametrize('shape', [(300,), (300, 2, 4)])
def test_x_not_2d(graph, shape):
    ei, n, _ = graph
    with pytest.raises(ValueError, match='2-D'):
        spmm(torch.randn(*shape), ei, size=(n, n))
    with pytest.raises(ValueError, match='2-D'):
        spmm(torch.randn(*shape), ei)


@pytest.mark.parametrize('adj_kind', ['CSRGraph', 'TCEdgeIndex'])
@pytest.mark.parametrize('rows', [299, 301, 600])
def test_stale_metadata(adj_kind, rows):
    """A format built for another node count is refused, not silently misread."""
    ei, n = make_graph('random')
    adj = CSRGraph.from_coo(ei[0], ei[1], n, n) if adj_kind == 'CSRGraph' else attach(ei, n)
    # the error names what changed (and only that)
    with pytest.raises(ValueError, match=rf'stale graph metadata.*source nodes[^;]*{n} -> {rows}') as err:
        spmm(features(rows, 8), adj)
    assert 'device' not in str(err.value)
    if adj_kind == 'CSRGraph':  # b has one row per source node
        with pytest.raises(ValueError, match='stale'):
            sddmm(features(n, 8), features(rows, 8), adj)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('where', ['negative_src', 'negative_dst', 'big_src', 'big_dst'])
@pytest.mark.parametrize('dtype', [torch.int64, torch.int32])
def test_edge_index_out_of_range(where, dtype, device):
    ei, n = make_graph('random', device)
    ei = ei.to(dtype)
    row, val = {'negative_src': (0, -1), 'negative_dst': (1, -3), 'big_src': (0, n), 'big_dst': (1, n + 10)}[where]
    ei[row, 17] = val
    x = features(n, 8, device=device)
    with pytest.raises(IndexError, match='out of range'):
        spmm(x, ei, size=(n, n))
    with pytest.raises(IndexError, match='out of range'):
        spmm(x, ei)  # default size: x.size(0) nodes
    with pytest.raises(IndexError, match='out of range'):
        sddmm(x, x, ei)
    with pytest.raises(IndexError, match='out of range'):
        attach(ei, n)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.int16, torch.uint8])
def test_bad_edge_index_dtype(graph, dtype):
    ei, n, x = graph
    with pytest.raises(TypeError, match='int32 or int64'):
        spmm(x, ei.to(dtype))
    with pytest.raises(TypeError, match='int32 or int64'):
        sddmm(x, x, ei.to(dtype))


@pytest.mark.parametrize('shape', ['short', 'long', '2d'])
@pytest.mark.parametrize('adj_kind', ['edge_index', 'CSRGraph'])
def test_edge_weight_wrong_length(graph, shape, adj_kind):
    ei, n, x = graph
    E = ei.size(1)
    w = {'short': torch.rand(E - 1), 'long': torch.rand(E + 1), '2d': torch.rand(E, 2)}[shape]
    adj = ei if adj_kind == 'edge_index' else CSRGraph.from_coo(ei[0], ei[1], n, n)
    with pytest.raises(ValueError, match='one entry per edge'):
        spmm(x, adj, w)


def test_edge_weight_not_float(graph):
    ei, n, x = graph
    with pytest.raises(TypeError, match='floating-point'):
        spmm(x, ei, torch.ones(ei.size(1), dtype=torch.long))


@pytest.mark.parametrize('reduce', ['median', 'min', 'mul', '', 'SUM'])
def test_bad_reduce(graph, reduce):
    ei, n, x = graph
    with pytest.raises(ValueError, match="reduce must be one of 'sum', 'mean', 'max'"):
        spmm(x, ei, reduce=reduce)


@pytest.mark.parametrize('diag', [0.5, 'node'])
def test_diag_with_max(graph, diag):
    ei, n, x = graph
    d = torch.rand(n) if diag == 'node' else diag
    with pytest.raises(ValueError, match="diag is not supported with reduce='max'"):
        spmm(x, ei, reduce='max', diag=d)


def test_diag_bad_shape(graph):
    ei, n, x = graph
    with pytest.raises(ValueError, match='diag must have 1 or 300 entries'):
        spmm(x, ei, diag=torch.rand(n - 1))
    src = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match='square'):
        spmm(features(5, 3), torch.stack([src, src]), size=(5, 3), diag=1.0)


def test_edge_weight_with_valued_sparse(graph):
    ei, n, x = graph
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.rand(ei.size(1)), (n, n)).coalesce()
    with pytest.raises(ValueError, match='either in the sparse tensor or as edge_weight'):
        spmm(x, adj_t, torch.rand(adj_t._nnz()))


def test_bad_adjacency(graph):
    ei, n, x = graph
    with pytest.raises(ValueError, match='adjacency must be'):
        spmm(x, ei[0])
    with pytest.raises(ValueError, match='adjacency must be'):
        spmm(x, [[0, 1], [1, 0]])


def test_sddmm_bad_shapes(graph):
    ei, n, x = graph
    with pytest.raises(ValueError, match='a must be'):
        sddmm(features(n + 1, 8), x, ei, size=(n, n))
    with pytest.raises(ValueError, match='share dtype, device and width'):
        sddmm(x.half(), x, ei)
    with pytest.raises(ValueError, match='share dtype, device and width'):
        sddmm(features(n, 4), x, ei)


@pytest.mark.parametrize('device', DEVICES)
def test_sort_int32_is_stable_and_matches_torch(device):
    from pyg_tc.formats.csr import sort_int32

    g = torch.Generator().manual_seed(0)
    for n, num_keys in ((0, 5), (1, 1), (1000, 7), (100_000, 70_000), (50_000, 2**20 + 3)):
        keys = torch.randint(0, num_keys, (n,), generator=g, dtype=torch.int32).to(device)
        values, perm = sort_int32(keys, num_keys)
        ref_v, ref_p = torch.sort(keys.cpu(), stable=True)
        assert perm.dtype == torch.int32 and values.dtype == torch.int32
        assert torch.equal(values.cpu(), ref_v) and torch.equal(perm.cpu().long(), ref_p)


_RAW_CALLS = r'''
import torch, pyg_tc.ops, pyg_tc._library as L
assert L.ensure(), 'kernels not loaded'
bad = torch.zeros(3, dtype=torch.float64, device='cuda')  # the wrong dtype for every op's tensors
for name, op in sorted(L.OPS.items()):
    if not op.cuda_kernel:  # its CUDA implementation is the pure-PyTorch reference
        continue
    schema = torch._C.parse_schema(f'pyg_tc::{op.schema}')
    args = []
    for a in schema.arguments:
        t = str(a.type)
        args.append({'Tensor': bad, 'Optional[Tensor]': None, 'int': 1, 'float': 0.5, 'bool': False,
                     'List[int]': [1], 'List[Tensor]': [bad], 'str': 'sum'}.get(t, None))
    try:
        getattr(torch.ops.pyg_tc, name).default(*args)
        print(name, 'no-error', flush=True)
    except RuntimeError:
        print(name, 'RuntimeError', flush=True)
    except Exception as e:
        print(name, type(e).__name__, flush=True)
print('DONE', flush=True)
'''


@cuda_only
def test_raw_ops_raise_on_bad_arguments():
    """Every raw ``torch.ops.pyg_tc`` op with a CUDA kernel, called with the
    wrong dtype everywhere, raises (no segfault: the C++ checks build their
    messages without streaming integers, which crashes on some toolchains).
    In a subprocess, so a crash fails this test only."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, '-c', _RAW_CALLS], capture_output=True, text=True, timeout=600)
    out = r.stdout.splitlines()
    assert r.returncode == 0 and out and out[-1] == 'DONE', (r.returncode, out[-5:], r.stderr[-2000:])
    results = dict(line.rsplit(' ', 1) for line in out[:-1])
    assert results and all(v in ('RuntimeError', 'ValueError', 'TypeError') for v in results.values()), results
