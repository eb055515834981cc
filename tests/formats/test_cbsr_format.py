"""CBSR format: the CPU emulation of the SpGEMM / SSpMM kernels (same units,
slots and reduction order) against the reference, and CBSRTransform."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from pyg_tc.formats import CBSR, CSRGraph
from pyg_tc.testing import emulate_cbsr_spmm, emulate_cbsr_sspmm
from pyg_tc.ops import cbsr_sspmm_reference
from pyg_tc.ops import maxk, spmm_graph
from pyg_tc.transforms import CBSRTransform, DegreeBucketTransform

from ..conftest import DEVICES, GRAPH_KINDS, edge_weights, features, make_graph, sizes


@pytest.mark.parametrize('kind', GRAPH_KINDS)
@pytest.mark.parametrize('chunk', [1, 3, 32, 256])
@pytest.mark.parametrize('F,k', [(10, 2), (64, 16), (300, 9)])
def test_emulation_matches_reference(kind, chunk, F, k):
    ei, n = make_graph(kind)
    ns, nd = sizes(n)
    g = CSRGraph.from_coo(ei[0], ei[1], ns, nd, chunk)
    x = maxk(features(ns, F, seed=k), k)
    w = edge_weights(g.num_edges)
    dense = x.to_dense()
    for reduce in ('sum', 'mean'):
        for value in (None, w):
            out = emulate_cbsr_spmm(g, x, value, reduce)
            ref = spmm_graph(g, dense, value, reduce)
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
            G = features(nd, F, seed=5)
            s_out = emulate_cbsr_sspmm(g, G, x.indices, value, reduce)
            s_ref = cbsr_sspmm_reference(g.rowptr, g.col, value, G, x.indices, None, reduce)
            torch.testing.assert_close(s_out, s_ref, rtol=1e-5, atol=1e-5)
    if ns == nd:
        d = torch.rand(nd)
        out = emulate_cbsr_spmm(g, x, w, 'sum', diag=d)
        torch.testing.assert_close(out, spmm_graph(g, dense, w, 'sum', diag=d), rtol=1e-5, atol=1e-5)
        G = features(nd, F, seed=6)
        torch.testing.assert_close(
            emulate_cbsr_sspmm(g, G, x.indices, w, 'sum', diag=d),
            cbsr_sspmm_reference(g.rowptr, g.col, w, G, x.indices, d, 'sum'),
            rtol=1e-5,
            atol=1e-5,
        )


def test_emulation_exposes_a_broken_schedule():
    """A unit dropped from the schedule leaves its row unwritten (NaN)."""
    ei, n = make_graph('hub')
    g = CSRGraph.from_coo(ei[0], ei[1], n, n, 64)
    x = maxk(features(n, 32), 4)
    s = g.sched
    g = g.replace(sched=s._replace(units=s.units[1:]))
    assert torch.isnan(emulate_cbsr_spmm(g, x)).any()


@pytest.mark.parametrize('device', DEVICES)
def test_cbsr_transform_attaches_groups(device):
    ei, n = make_graph('hub', device)
    data = Data(edge_index=ei, num_nodes=n)
    data = CBSRTransform(group_size=32, validate=True)(data)
    g = DegreeBucketTransform.graph(data)
    assert g.chunk == 32 and g.device.type == device
    lens = g.sched.units[:, 2] - g.sched.units[:, 1]
    assert int(lens.max()) <= 32
    st = CBSRTransform.stats(data)
    assert st['group_size'] == 32 and st['max_group'] == 32
    assert st['edge_groups'] == g.sched.units.size(0) and st['split_groups'] > 0
    # another group size rebuilds; the same one keeps the attached graph
    data = CBSRTransform(group_size=128)(data)
    g2 = DegreeBucketTransform.graph(data)
    assert g2.chunk == 128 and g2 is not g
    assert DegreeBucketTransform.graph(CBSRTransform(group_size=128)(data)) is g2
    # the edge order is untouched
    assert torch.equal(data.edge_index.as_subclass(torch.Tensor), ei)


def test_cbsr_transform_validate_rejects_bad_groups():
    ei, n = make_graph('random')
    data = CBSRTransform(group_size=8)(Data(edge_index=ei, num_nodes=n))
    g = DegreeBucketTransform.graph(data)
    u = g.sched.units.clone()
    i = int(((u[:, 2] - u[:, 1]) > 1).nonzero()[0])
    u[i, 2] -= 1  # an edge left out
    with pytest.raises(ValueError, match='exactly once'):
        CBSRTransform.validate(g.replace(sched=g.sched._replace(units=u)))
    g2 = CSRGraph.from_coo(ei[0], ei[1], n, n, 64).replace(chunk=4)  # units longer than the declared group size
    with pytest.raises(ValueError, match='longer than chunk'):
        CBSRTransform.validate(g2)


def test_cbsr_transform_stats_needs_the_transform():
    ei, n = make_graph('random')
    with pytest.raises(ValueError, match='apply CBSRTransform first'):
        CBSRTransform.stats(Data(edge_index=ei, num_nodes=n))


def test_cbsr_dense_roundtrip_and_surface():
    x = features(6, 20)
    c = maxk(x, 5)
    assert c.shape == (6, 20) and c.size(1) == 20 and c.dim() == 2 and c.dtype == x.dtype
    d = c.to_dense()
    kept = d != 0
    assert torch.equal(kept.sum(1), torch.full((6,), 5))
    assert torch.equal(d[kept], x[kept])
    assert (x[~kept].view(6, 15).max(1)[0] <= d.masked_fill(~kept, float('inf')).min(1)[0]).all()
    h = c.to(torch.float16)
    assert isinstance(h, CBSR) and h.dtype == torch.float16 and h.indices is c.indices
    assert 'CBSR' in repr(c)
