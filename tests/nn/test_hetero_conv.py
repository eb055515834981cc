"""pyg_tc.nn.HeteroConv against PyG's HeteroConv with the same layers and
weights: outputs and gradients for every aggregation, pyg_tc and PyG layers
mixed, edge-level and node-level keyword arguments, an edge type without
edges in the input (skipped, as PyG does), the keyword-name error; under
CUDA autocast, one half copy of a node type's features for its GAT layers
and fp32 features for a node type that another kind of layer reads."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_tc.nn

from ..conftest import DEVICES, assert_hetero_match

N = {'paper': 40, 'author': 30, 'venue': 5}
EDGE_TYPES = [
    ('paper', 'cites', 'paper'),
    ('author', 'writes', 'paper'),
    ('paper', 'rev_writes', 'author'),
    ('venue', 'hosts', 'paper'),
]
F = 12


def _graph(device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = {t: torch.randn(n, F, generator=g).to(device) for t, n in N.items()}
    ei = {}
    for s, r, d in EDGE_TYPES:
        m = 3 * N[d]
        ei[s, r, d] = torch.stack(
            [torch.randint(0, N[s], (m,), generator=g), torch.randint(0, N[d], (m,), generator=g)]
        )
        ei[s, r, d] = ei[s, r, d].to(device)
    ei['paper', 'cites', 'paper'][:, :4] = torch.tensor([[7] * 4, [7] * 4])  # self loops and duplicates
    return x, ei


def _convs(lib, mixed: bool, heads: int = 2):
    """A GAT per edge type from ``lib``; ``mixed``: PyG's SAGE for one of them."""
    convs = {e: lib.GATConv((F, F), 5, heads=heads, add_self_loops=False) for e in EDGE_TYPES}
    if mixed:
        convs['venue', 'hosts', 'paper'] = pyg_nn.SAGEConv((F, F), 5 * heads)
    return convs


def _pair(aggr, mixed=False, device='cpu'):
    torch.manual_seed(0)
    ref = pyg_nn.HeteroConv(_convs(pyg_nn, mixed), aggr=aggr).to(device)
    ours = pyg_tc.nn.HeteroConv(_convs(pyg_tc.nn, mixed), aggr=aggr).to(device)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('aggr', ['sum', 'mean', 'max', 'min', 'cat', None])
@pytest.mark.parametrize('mixed', [False, True])
def test_matches_pyg(device, aggr, mixed):
    x, ei = _graph(device)
    ref, ours = _pair(aggr, mixed, device)
    got = assert_hetero_match(ours, ref, x, ei)
    assert set(got) == {'paper', 'author'}


def test_sum_is_pairwise_additions():
    """'sum' adds the edge types' outputs pairwise, in edge-type order (no
    stacked copy: the result's last operation is an addition, not PyG's
    reduction over a stack)."""
    x, ei = _graph('cpu')
    _, ours = _pair('sum')
    out = ours(x, ei)['paper']
    assert type(out.grad_fn).__name__ == 'AddBackward0'
    parts = [ours.convs[e]((x[e[0]], x[e[2]]), ei[e]) for e in EDGE_TYPES if e[2] == 'paper']
    torch.testing.assert_close(out, parts[0] + parts[1] + parts[2], atol=1e-6, rtol=1e-6)


def test_hooked_layer_keeps_its_bias():
    """A layer with a forward hook returns its whole output (the hook sees
    the bias added), and the sum is the same as without the hook."""
    x, ei = _graph('cpu')
    _, ours = _pair('sum')
    want = ours(x, ei)
    seen = {}
    e = ('author', 'writes', 'paper')
    ours.convs[e].register_forward_hook(lambda m, a, out: seen.setdefault('out', out))
    got = ours(x, ei)
    torch.testing.assert_close(seen['out'], ours.convs[e]((x['author'], x['paper']), ei[e]), atol=0, rtol=0)
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=0, rtol=0)


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('aggr', ['sum', 'mean'])
def test_autocast_sum_and_biases_in_one_pass(dtype, aggr, monkeypatch):
    """Under autocast, the GAT layers leave their fp32 biases to the sum over
    edge types, which one ``bias_sum`` launch computes: the outputs equal the
    unfused additions bit for bit, and the gradients equal theirs."""
    x, ei = _graph('cuda')
    _, ours = _pair(aggr, device='cuda')

    def run():
        ours.zero_grad()
        xs = {k: v.clone().requires_grad_() for k, v in x.items()}
        with torch.autocast('cuda', dtype=dtype):
            out = ours(xs, ei)
        sum(v.float().pow(2).sum() for v in out.values()).backward()
        return out, {k: v.grad for k, v in xs.items()}, {n: p.grad.clone() for n, p in ours.named_parameters()}

    out, gx, gp = run()
    node = out['paper'].grad_fn
    if aggr == 'mean':
        node = node.next_functions[0][0]
    assert type(node).__name__ == '_BiasSumBackward'
    from pyg_tc.ops import dense

    monkeypatch.setattr(dense, '_fused', lambda terms: False)
    ref_out, ref_gx, ref_gp = run()
    for k in ref_out:
        assert out[k].dtype == ref_out[k].dtype == torch.float32
        assert torch.equal(out[k], ref_out[k])
    for got, want in ((gx, ref_gx), (gp, ref_gp)):
        for k in want:
            torch.testing.assert_close(got[k], want[k], atol=1e-5, rtol=1e-5)


def test_routes_arguments_as_pyg():
    """Edge-level keyword arguments reach their edge type only; an edge
    type absent from ``edge_index_dict`` is skipped, as PyG skips it."""
    torch.manual_seed(0)
    x, ei = _graph('cpu')
    dims = dict(edge_dim=3)
    kinds = {e: (pyg_nn, pyg_tc.nn) for e in EDGE_TYPES}
    ref = pyg_nn.HeteroConv(
        {e: k[0].GATConv((F, F), 4, heads=2, add_self_loops=False, **dims) for e, k in kinds.items()}
    )
    ours = pyg_tc.nn.HeteroConv(
        {e: k[1].GATConv((F, F), 4, heads=2, add_self_loops=False, **dims) for e, k in kinds.items()}
    )
    ours.load_state_dict(ref.state_dict())
    edge_attr = {e: torch.randn(v.size(1), 3) for e, v in ei.items()}
    del ei['venue', 'hosts', 'paper'], edge_attr['venue', 'hosts', 'paper']
    got = assert_hetero_match(ours, ref, x, ei, edge_attr_dict=edge_attr)
    assert set(got) == {'paper', 'author'}


def test_keyword_names_must_end_in_dict():
    x, ei = _graph('cpu')
    _, ours = _pair('sum')
    with pytest.raises(ValueError, match="need to end with '_dict'"):
        ours(x, ei, edge_attr={})


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_autocast_casts_a_node_type_once(dtype):
    """Under autocast, the GAT layers of a node type read one half copy of
    its features (the same object for every edge type); a node type that
    PyG's SAGE reads is passed in fp32. Outputs equal PyG's HeteroConv over
    the same pyg_tc layers (which cast per edge type)."""
    x, ei = _graph('cuda')
    torch.manual_seed(0)
    ours = pyg_tc.nn.HeteroConv(_convs(pyg_tc.nn, mixed=True)).cuda()
    ref = pyg_nn.HeteroConv(_convs(pyg_tc.nn, mixed=True)).cuda()
    ref.load_state_dict(ours.state_dict())
    seen = {}

    def record(name):
        def hook(module, args):
            seen[name] = args[0]

        return hook

    for e, conv in ours.convs.items():
        conv.register_forward_pre_hook(record(e))
    with torch.autocast('cuda', dtype=dtype):
        got, want = ours(x, ei), ref(x, ei)
    writes, rev = seen['author', 'writes', 'paper'], seen['paper', 'rev_writes', 'author']
    assert writes[0].dtype == dtype and writes[0] is rev[1]  # the authors' one half copy
    assert seen['venue', 'hosts', 'paper'][0].dtype == torch.float32  # read by PyG's SAGE: not cast
    assert seen['paper', 'cites', 'paper'][0].dtype == torch.float32  # papers: SAGE reads them too
    for k in want:
        assert got[k].dtype == want[k].dtype
        torch.testing.assert_close(got[k], want[k], atol=1e-3, rtol=1e-3)
