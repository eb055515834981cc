"""TCEdgeIndex (the adjacency carrying its format) and get_graph caching."""

from __future__ import annotations

import io

import pytest
import torch
from torch_geometric import EdgeIndex
from torch_geometric.data import Batch, Data

from pyg_tc.formats import CSRGraph, TCEdgeIndex, attach, clear_graph, get_graph
from pyg_tc.formats.carrier import _ATTR
from pyg_tc.ops import sddmm, spmm

from ..conftest import (
    DEVICES,
    to_adj_t,
    assert_close_ref,
    cuda_only,
    edge_weights,
    features,
    make_graph,
    random_graph,
    sddmm_oracle,
    spmm_magnitude,
    spmm_oracle,
)


def carried(t) -> CSRGraph:
    entry = getattr(t, _ATTR, None)
    assert entry is not None, 'no graph attached'
    return entry.value


def same_graph(a: CSRGraph, b: CSRGraph) -> None:
    assert (a.num_rows, a.num_cols, a.chunk) == (b.num_rows, b.num_cols, b.chunk)
    for name in ('rowptr', 'col', 'perm', 't_rowptr', 't_col', 't_perm'):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert torch.equal(x.cpu(), y.cpu()), name
    assert torch.equal(a.sched.units.cpu(), b.sched.units.cpu())
    assert torch.equal(a.t_sched.units.cpu(), b.t_sched.units.cpu())


def check_spmm(adj, ei, n, device, reduce='sum'):
    x = features(n, 8, device=device)
    w = edge_weights(ei.size(1), device=device)
    out = spmm(x, adj, w, reduce)
    ref = spmm_oracle(x, ei, n, w, reduce)
    assert_close_ref(out, ref, spmm_magnitude(x, ei, n, w, reduce), x.dtype)


@pytest.mark.parametrize('device', DEVICES)
def test_attach(device):
    ei, n = make_graph('isolated', device)
    t = attach(ei, n)
    assert isinstance(t, TCEdgeIndex) and isinstance(t, EdgeIndex)
    assert torch.equal(t.as_subclass(torch.Tensor), ei)  # edge order unchanged
    assert t.sparse_size() == (n, n)
    g = carried(t).validate()
    assert g.device == ei.device
    same_graph(g, CSRGraph.from_coo(ei[0], ei[1], n, n))
    assert get_graph(t, size=(n, n))[0] is g
    check_spmm(t, ei, n, device)
    # an explicit graph is used as is
    g2 = CSRGraph.from_coo(ei[0], ei[1], n, n, chunk=4)
    assert carried(attach(ei, n, graph=g2)) is g2
    # num_nodes defaults to max index + 1; EdgeIndex input is accepted
    assert attach(ei).sparse_size() == (int(ei.max()) + 1,) * 2
    assert isinstance(attach(EdgeIndex(ei, sparse_size=(n, n)), n), TCEdgeIndex)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('how', ['to_copy', 'clone', 'save_load', 'data_to'])
def test_graph_survives(how, device):
    ei, n = make_graph('hub', device)
    t = attach(ei, n, chunk=16)
    g = carried(t)
    if how == 'to_copy':
        u = t.to(device, copy=True)
    elif how == 'clone':
        u = t.clone()
    elif how == 'save_load':
        buf = io.BytesIO()
        torch.save(t, buf)
        buf.seek(0)
        u = torch.load(buf, weights_only=False)
    else:
        u = Data(edge_index=t, num_nodes=n).to(device).edge_index
    assert isinstance(u, TCEdgeIndex)
    h = carried(u)
    assert h.device == u.device
    same_graph(h, g)
    assert h.chunk == 16  # the carried graph, not a rebuilt default one
    assert get_graph(u, size=(n, n))[0] is h
    check_spmm(u, ei, n, device)


@cuda_only
@pytest.mark.parametrize('how', ['cuda', 'to', 'data_to'])
def test_graph_moves_to_gpu(how):
    ei, n = make_graph('hub')
    t = attach(ei, n, chunk=16)
    if how == 'cuda':
        u = t.cuda()
    elif how == 'to':
        u = t.to('cuda')
    else:
        u = Data(edge_index=t, num_nodes=n).to('cuda').edge_index
    assert isinstance(u, TCEdgeIndex) and u.is_cuda
    h = carried(u)
    assert h.device.type == 'cuda' and h.sched.units.is_cuda and h.t_sched.units.is_cuda
    same_graph(h, carried(t))
    assert get_graph(u, size=(n, n))[0] is h
    check_spmm(u, ei.cuda(), n, 'cuda')
    back = u.cpu()
    assert carried(back).device.type == 'cpu'


@pytest.mark.parametrize('device', DEVICES)
def test_batch_gives_plain_edge_index(device):
    graphs = []
    for i, (n, e) in enumerate([(20, 60), (13, 30), (25, 90)]):
        ei = random_graph(n, n, e, seed=60 + i, device=device)
        graphs.append(
            Data(
                x=features(n, 6, device=device, seed=i),
                edge_index=attach(ei, n),
                edge_weight=edge_weights(e, device=device, seed=i),
                num_nodes=n,
            )
        )
    b = Batch.from_data_list(graphs)
    assert type(b.edge_index) is EdgeIndex  # a batch is another graph
    assert getattr(b.edge_index, _ATTR, None) is None
    N = b.num_nodes
    assert N == 58
    plain = b.edge_index.as_subclass(torch.Tensor)
    for reduce in ('sum', 'mean', 'max'):
        out = spmm(b.x, b.edge_index, b.edge_weight, reduce)
        ref = spmm_oracle(b.x, plain, N, b.edge_weight, reduce)
        assert_close_ref(out, ref, spmm_magnitude(b.x, plain, N, b.edge_weight, reduce), b.x.dtype)
    # the batched graph is built once and cached on the batch's tensor
    g1 = get_graph(b.edge_index, size=(N, N))[0]
    assert get_graph(b.edge_index, size=(N, N))[0] is g1


@pytest.mark.parametrize('device', DEVICES)
def test_get_graph_caching(device):
    ei, n = make_graph('random', device)
    g1, v = get_graph(ei, size=(n, n))
    assert v is None
    assert get_graph(ei, size=(n, n))[0] is g1
    # spmm uses (and fills) the same cache
    x = features(n, 4, device=device)
    spmm(x, ei)
    assert get_graph(ei, size=(n, n))[0] is g1
    # another node count is another graph
    g2 = get_graph(ei, size=(n + 5, n + 5))[0]
    assert g2 is not g1 and g2.num_rows == n + 5
    check_spmm(ei, ei, n, device)


@pytest.mark.parametrize('device', DEVICES)
def test_in_place_edit_rebuilds(device):
    ei, n = make_graph('random', device)
    x = features(n, 4, device=device)
    w = edge_weights(ei.size(1), device=device)
    before = spmm(x, ei, w)
    g1 = get_graph(ei, size=(n, n))[0]
    ei[1, :100] = 7  # in place: bumps the version counter
    g2 = get_graph(ei, size=(n, n))[0]
    assert g2 is not g1
    assert int(g2.degree()[7]) == int((ei[1] == 7).sum())
    after = spmm(x, ei, w)
    assert not torch.allclose(before, after)
    assert_close_ref(after, spmm_oracle(x, ei, n, w), spmm_magnitude(x, ei, n, w), x.dtype)
    # an edit through a view is seen too (views share the version counter)
    ei[0][:50] = 3
    assert get_graph(ei, size=(n, n))[0] is not g2
    assert_close_ref(spmm(x, ei, w), spmm_oracle(x, ei, n, w), spmm_magnitude(x, ei, n, w), x.dtype)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('attached', [False, True])
def test_write_behind_version_counter_needs_clear_graph(attached, device):
    """The documented cache limitation: a write through ``.data`` is not seen
    (the old format is reused); ``clear_graph`` drops it."""
    ei, n = make_graph('random', device)
    adj = attach(ei, n) if attached else ei
    x = features(n, 4, device=device)
    before = spmm(x, adj)
    adj.data[1, :100] = 7  # behind the version counter
    assert torch.equal(spmm(x, adj), before)  # stale, as documented
    clear_graph(adj)
    assert not hasattr(adj, _ATTR) and type(adj) is not TCEdgeIndex
    plain = adj.as_tensor() if isinstance(adj, EdgeIndex) else adj
    after = spmm(x, adj)
    assert_close_ref(after, spmm_oracle(x, plain, n), spmm_magnitude(x, plain, n), x.dtype)


@pytest.mark.filterwarnings('ignore::UserWarning')
@pytest.mark.parametrize('device', DEVICES)
def test_sparse_adj_caching(device):
    ei, n = make_graph('random', device)
    adj_t = to_adj_t(ei, n)
    g1, v1 = get_graph(adj_t)
    g2, v2 = get_graph(adj_t)
    assert g1 is g2 and v2 is v1
    assert v1.numel() == g1.num_edges


@pytest.mark.parametrize('device', DEVICES)
def test_flows_do_not_clobber_attached_graph(device):
    """A target_to_source call on a TCEdgeIndex must not replace the attached
    graph: the next source_to_target call must still work (and agree)."""
    ei, n = make_graph('random', device)
    t = attach(ei, n)
    x = features(n, 4, device=device)
    first = spmm(x, t)
    rev = spmm(x, t, flow='target_to_source')
    assert_close_ref(rev, spmm_oracle(x, ei.flip(0), n), spmm_magnitude(x, ei.flip(0), n), x.dtype)
    again = spmm(x, t)
    assert torch.equal(first, again)


@pytest.mark.parametrize('device', DEVICES)
def test_sddmm_through_carrier(device):
    ei, n = make_graph('hub', device)
    t = attach(ei, n).clone()
    a = features(n, 8, device=device, seed=1)
    b = features(n, 8, device=device, seed=2)
    out = sddmm(a, b, t)
    ref = sddmm_oracle(a, b, ei)
    assert_close_ref(out, ref, sddmm_oracle(a.abs(), b.abs(), ei), a.dtype)


def test_get_graph_errors():
    ei, n = make_graph('random')
    with pytest.raises(ValueError, match='flow'):
        get_graph(ei, flow='sideways')
    with pytest.raises(ValueError, match=r'\[2, E\]'):
        get_graph(ei[0])
    with pytest.raises(ValueError, match=r'\[2, E\]'):
        attach(ei[0])
    g = CSRGraph.from_coo(ei[0], ei[1], n, n)
    assert get_graph(g) == (g, None)
