"""The format builders' GPU ops (``csr_transpose``, ``csr_schedules``,
``csr_padded_schedules``, ``csr_pad_hops``) give
the pure-PyTorch builders' tensors bit for bit; on the CPU the ops run those
builders (their references)."""

import pytest
import torch

import pyg_tc.ops  # noqa: F401 (defines the ops)
from pyg_tc import _library
from pyg_tc.formats.csr import CSRGraph, build_schedules_torch, transpose_torch
from pyg_tc.formats.padding import padded_schedule, padded_schedules

from ..conftest import DEVICES, GRAPH_KINDS, cuda_only, make_graph, sizes


def _graph(kind):
    ei, n = make_graph(kind)
    num_src, num_dst = sizes(n)
    return CSRGraph.from_coo(ei[0], ei[1], num_src, num_dst)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', GRAPH_KINDS)
def test_transpose_op(kind, device):
    g = _graph(kind)
    col, rows = g.col.to(device), g.row().to(device)
    out = _library.op('csr_transpose')(col, rows, g.num_cols)
    ref = transpose_torch(g.col, g.row(), g.num_cols)
    for a, b, name in zip(out, ref, ('t_rowptr', 't_col', 't_perm')):
        assert a.dtype == torch.int32 and torch.equal(a.cpu(), b), name


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('chunk', [1, 4, 32, 256])
def test_schedules_op(chunk, device):
    graphs = [_graph(k) for k in GRAPH_KINDS]
    rowptrs = [p for g in graphs for p in (g.rowptr, g.t_rowptr)]
    flat = _library.op('csr_schedules')([p.to(device) for p in rowptrs], chunk)
    ref = build_schedules_torch(rowptrs, chunk)
    assert flat[-1].tolist() == [s.num_slots for s in ref]
    for i, s in enumerate(ref):
        for a, b, name in zip(
            flat[3 * i : 3 * i + 3], (s.units, s.heavy_rows, s.heavy_ptr), ('units', 'heavy_rows', 'heavy_ptr')
        ):
            assert torch.equal(a.cpu(), b), (i, name)


@pytest.mark.parametrize('device', DEVICES)
def test_empty(device):
    rp = torch.zeros(1, dtype=torch.int32, device=device)
    units, heavy_rows, heavy_ptr, slots = _library.op('csr_schedules')([rp], 8)
    assert units.shape == (0, 4) and heavy_rows.numel() == 0 and heavy_ptr.tolist() == [0] and slots.tolist() == [0]
    t_rowptr, t_col, t_perm = _library.op('csr_transpose')(rp[:0], rp[:0], 3)
    assert t_rowptr.tolist() == [0, 0, 0, 0] and t_col.numel() == t_perm.numel() == 0


def _padded_rowptrs():
    """Both directions of every graph kind (empty rows, a hub row heavier
    than the chunks below, rows of zero degree), and a padded batch's shape:
    one sink row owning many padding slots."""
    rowptrs = [p for k in GRAPH_KINDS for p in (_graph(k).rowptr, _graph(k).t_rowptr)]
    sink = torch.tensor([0, 2, 2, 5, 5, 5, 90], dtype=torch.int32)
    return [rp for rp in rowptrs if rp.numel() > 1] + [sink]


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('chunk', [1, 4, 32, 256])
@pytest.mark.parametrize('extra', [0, 7, 300])
def test_padded_schedules_op(chunk, extra, device):
    """``csr_padded_schedules`` gives ``padded_schedule``'s tensors bit for
    bit, fillers included, for ``num_edges`` at and above the rowptr's edges."""
    for rp in _padded_rowptrs():
        E = int(rp[-1]) + extra
        flat = _library.op('csr_padded_schedules')([rp.to(device), rp.to(device)], chunk, E)
        ref = padded_schedule(rp, chunk, E)
        assert len(flat) == 6
        for a, b, name in zip(
            flat, (ref.units, ref.heavy_rows, ref.heavy_ptr) * 2, ('units', 'heavy_rows', 'heavy_ptr') * 2
        ):
            assert a.dtype == torch.int32 and torch.equal(a.cpu(), b), (rp.tolist()[:8], E, name)
        got = padded_schedules([rp.to(device)], chunk, E)[0]
        assert got.num_slots == ref.num_slots == 3 * (-(-E // chunk))


@pytest.mark.parametrize('device', DEVICES)
def test_padded_schedules_opcheck(device):
    """Schema, fake (static sizes) and the CPU / CUDA implementations agree."""
    rp = torch.tensor([0, 3, 3, 40], dtype=torch.int32, device=device)
    torch.library.opcheck(torch.ops.pyg_tc.csr_padded_schedules.default, ([rp, rp.clone()], 8, 50))


@cuda_only
def test_padded_schedules_capture_without_synchronisation():
    """On CUDA the op synchronises nothing and replays inside a CUDA graph
    with the graph's own rowptr edited in place."""
    rp = torch.tensor([0, 2, 2, 5, 5, 5, 90], dtype=torch.int32, device='cuda')
    other = torch.tensor([0, 40, 41, 41, 60, 60, 90], dtype=torch.int32, device='cuda')
    op = _library.op('csr_padded_schedules')
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode('error')
    try:
        op([rp], 8, 100)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        op([rp], 8, 100)  # warm-up (cub's temporary sizes)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = op([rp], 8, 100)
    rp.copy_(other)
    g.replay()
    torch.cuda.synchronize()
    ref = padded_schedule(other.cpu(), 8, 100)
    for a, b in zip(out, (ref.units, ref.heavy_rows, ref.heavy_ptr)):
        assert torch.equal(a.cpu(), b)


def _hop_batch(nodes, edges, seed=0):
    """A sampled batch's CSR with these per-hop node and edge counts: the
    edges of hop h + 1 target node block h (random rows, empty ones too) and
    come from node block h + 1, in CSR order."""
    g = torch.Generator().manual_seed(seed)
    off = [0]
    for n in nodes:
        off.append(off[-1] + n)
    rows, cols = [], []
    for h, e in enumerate(edges):
        if e:
            rows.append(torch.randint(off[h], off[h + 1], (e,), generator=g).sort().values)
            cols.append(torch.randint(off[h + 1], off[h + 2], (e,), generator=g))
    rows = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)
    cols = torch.cat(cols) if cols else torch.zeros(0, dtype=torch.long)
    rowptr = torch.zeros(off[-1] + 1, dtype=torch.int32)
    rowptr[1:] = torch.bincount(rows, minlength=off[-1]).cumsum(0)
    return rowptr, cols.to(torch.int32)


#: (real nodes per hop, real edges per hop, padded nodes, padded edges)
HOP_CASES = [
    ([4, 9, 20], [12, 30], [6, 10, 33], [12, 41]),  # a full edge block
    ([3, 0, 0], [0, 0], [4, 1, 2], [5, 0]),  # empty hops
    ([5], [], [8], []),  # seeds only
    ([64, 300, 900, 1500], [700, 2400, 3000], [80, 400, 1000, 1600], [1024, 2560, 4096]),
]


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('case', range(len(HOP_CASES)))
def test_pad_hops_op(case, device):
    """``csr_pad_hops`` gives ``pad_hops_reference``'s tensors bit for bit,
    and the padded CSR keeps every real row's neighbours (renumbered)."""
    from pyg_tc.formats.padding import pad_hops_reference

    n, e, N, P = HOP_CASES[case]
    rowptr, col = _hop_batch(n, e, seed=case)
    got = _library.op('csr_pad_hops')(rowptr.to(device), col.to(device), n, e, N, P)
    ref = pad_hops_reference(rowptr, col, n, e, N, P)
    names = ('rowptr', 'col', 'rows', 'node_index', 'edge_index', 'node_mask')
    for a, b, name in zip(got, ref, names):
        assert a.dtype == b.dtype and torch.equal(a.cpu(), b), name
    out_ptr, out_col, out_rows, node_index, edge_index, node_mask = ref
    assert out_ptr.numel() == sum(N) + 1 and out_col.numel() == sum(P) and int(node_mask.sum()) == sum(n)
    for v in range(sum(n)):  # each real row: its neighbours, renumbered, in order
        w = int(node_index[v])
        nb = node_index[col[rowptr[v] : rowptr[v + 1]].long()]
        assert torch.equal(out_col[out_ptr[w] : out_ptr[w + 1]].long(), nb)
        assert bool((out_rows[out_ptr[w] : out_ptr[w + 1]] == w).all())
    assert torch.equal(out_col[edge_index].long(), node_index[col.long()])


@pytest.mark.parametrize('device', DEVICES)
def test_pad_hops_opcheck(device):
    rowptr, col = _hop_batch([4, 9, 20], [12, 30])
    torch.library.opcheck(
        torch.ops.pyg_tc.csr_pad_hops.default,
        (rowptr.to(device), col.to(device), [4, 9, 20], [12, 30], [6, 10, 33], [12, 41]),
    )


def test_pad_hops_op_errors():
    rowptr, col = _hop_batch([4, 9, 20], [12, 30])
    op = _library.op('csr_pad_hops')
    with pytest.raises((RuntimeError, ValueError)):
        op(rowptr, col, [4, 9, 20], [12, 30], [4, 10, 33], [12, 41])  # no padded row in block 0
    with pytest.raises((RuntimeError, ValueError)):
        op(rowptr, col, [4, 9, 20], [12, 30], [6, 10, 33], [11, 41])  # fewer slots than edges


@cuda_only
def test_pad_hops_op_errors_on_gpu():
    rowptr, col = _hop_batch([4, 9, 20], [12, 30])
    op = _library.op('csr_pad_hops')
    for args in (
        ([4, 9, 20], [12, 30], [4, 10, 33], [12, 41]),
        ([4, 9, 20], [12, 30], [6, 10, 33], [11, 41]),
        ([4, 9], [12, 30], [6, 10], [12, 41]),
        ([4, 9, 21], [12, 30], [6, 10, 33], [12, 41]),
    ):
        with pytest.raises(RuntimeError, match='csr_pad_hops'):
            op(rowptr.cuda(), col.cuda(), *args)


@cuda_only
def test_pad_hops_op_without_synchronisation():
    rowptr, col = _hop_batch([64, 300, 900], [700, 2400])
    rowptr, col = rowptr.cuda(), col.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode('error')
    try:
        _library.op('csr_pad_hops')(rowptr, col, [64, 300, 900], [700, 2400], [80, 400, 1000], [1024, 2560])
    finally:
        torch.cuda.set_sync_debug_mode(0)
