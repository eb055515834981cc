"""The format builders' GPU ops (``csr_transpose``, ``csr_schedules``,
``csr_padded_schedules``) give
the pure-PyTorch builders' tensors bit for bit; on the CPU the ops run those
builders (their references)."""
import pytest
import torch

import pyg_tc.ops  # noqa: F401 (defines the ops)
from pyg_tc import _library
from pyg_tc.formats.csr import CSRGraph, build_schedules_torch, padded_schedule, padded_schedules, transpose_torch

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
        for a, b, name in zip(flat[3 * i:3 * i + 3], (s.units, s.heavy_rows, s.heavy_ptr),
                              ('units', 'heavy_rows', 'heavy_ptr')):
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
        for a, b, name in zip(flat, (ref.units, ref.heavy_rows, ref.heavy_ptr) * 2, ('units', 'heavy_rows',
                                                                                     'heavy_ptr') * 2):
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
