"""The format builders' GPU ops (``csr_transpose``, ``csr_schedules``) give
the pure-PyTorch builders' tensors bit for bit; on the CPU the ops run those
builders (their references)."""
import pytest
import torch

import pyg_tc.ops  # noqa: F401 (defines the ops)
from pyg_tc import _library
from pyg_tc.formats.csr import CSRGraph, build_schedules_torch, transpose_torch

from ..conftest import DEVICES, GRAPH_KINDS, make_graph, sizes


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
