"""SGT metadata: hand-checked statistics, validate() catches corruption,
SGTTransform attaches / carries / reports it."""

from __future__ import annotations

import io

import pytest
import torch
from torch_geometric.data import Data

from pyg_tc.formats import CSRGraph
from pyg_tc.formats.sgt import SGT
from pyg_tc.transforms import SGTTransform

from ..conftest import DEVICES, GRAPH_KINDS, make_graph, sizes


def test_stats_by_hand():
    """16 rows, each linked to columns {0, 100, 200}: one window whose 3
    distinct columns fit one 16 x 8 block (48 nonzeros) after SGT, against 3
    nonzero 16 x 8 tiles of the untranslated matrix (Figure 4 of the paper)."""
    rows = torch.arange(16).repeat_interleave(3)
    cols = torch.tensor([0, 100, 200]).repeat(16)
    g = CSRGraph.from_coo(cols, rows, 201, 16)
    st = SGT.build(g).validate(g).stats(g)
    assert st['blocks'] == 1 and st['blocks_without_sgt'] == 3
    assert st['nnz_per_block'] == 48.0 and st['tiles16'] == 1 and st['tiles16_without_sgt'] == 3
    # 9 distinct columns in one window need two blocks
    rows = torch.zeros(9, dtype=torch.long)
    g = CSRGraph.from_coo(torch.arange(9) * 10, rows, 90, 1)
    s = SGT.build(g).validate(g)
    assert s.stats()['blocks'] == 2
    assert s.fwd.cols.tolist() == [0, 10, 20, 30, 40, 50, 60, 70, 80, -1, -1, -1, -1, -1, -1, -1]


@pytest.mark.parametrize('kind', GRAPH_KINDS)
def test_validate_all_kinds(kind):
    ei, n = make_graph(kind)
    ns, nd = sizes(n)
    g = CSRGraph.from_coo(ei[0], ei[1], ns, nd)
    for ub in (1, 2, None):
        s = SGT.build(g, ub).validate(g)
        assert s.num_cells <= g.num_edges
        assert (s.dup_ptr is None) == (s.num_cells == g.num_edges)


def _corrupt(s: SGT, what: str) -> None:
    if what == 'mask':
        s.fwd.mask[0, 0] ^= 1 << 5
    elif what == 'cols':
        s.fwd.cols[0], s.fwd.cols[1] = s.fwd.cols[1].clone(), s.fwd.cols[0].clone()
    elif what == 'edge_cell':
        s.edge_cell[0] = (s.edge_cell[0] + 1) % s.num_cells
    elif what == 't_cell':
        s.t_cell[0], s.t_cell[1] = s.t_cell[1].clone(), s.t_cell[0].clone()
    elif what == 'cell_ptr':
        s.bwd.cell_ptr[1] += 1


@pytest.mark.parametrize('what', ['mask', 'cols', 'edge_cell', 't_cell', 'cell_ptr'])
def test_validate_catches_corruption(what):
    ei, n = make_graph('random')
    g = CSRGraph.from_coo(ei[0], ei[1], n, n)
    s = SGT.build(g)
    _corrupt(s, what)
    with pytest.raises(ValueError):
        s.validate(g)


def test_validate_stale():
    ei, n = make_graph('random')
    g = CSRGraph.from_coo(ei[0], ei[1], n, n)
    other = CSRGraph.from_coo(ei[0, :100], ei[1, :100], n, n)
    with pytest.raises(ValueError, match='stale'):
        SGT.build(other).validate(g)


@pytest.mark.parametrize('device', DEVICES)
def test_transform_attaches_and_travels(device):
    ei, n = make_graph('hub', device)
    data = Data(edge_index=ei, num_nodes=n)
    data = SGTTransform(validate=True)(data)
    st = SGTTransform.stats(data)
    assert {'blocks', 'blocks_without_sgt', 'nnz_per_block'} <= set(st)
    assert st['blocks'] < st['blocks_without_sgt']
    assert torch.equal(data.edge_index.as_subclass(torch.Tensor), ei)  # edge order kept
    moved = data.to('cpu')
    SGTTransform.validate(moved)
    buf = io.BytesIO()
    torch.save(moved, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert SGTTransform.stats(loaded) == SGTTransform.stats(moved)
    SGTTransform.validate(loaded)


def test_transform_errors():
    with pytest.raises(ValueError, match='window'):
        SGTTransform(window=8)
    with pytest.raises(ValueError, match='apply SGTTransform'):
        SGTTransform.stats(Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=3))
