"""pyg_tc.nn.HGTConv against PyG's HGTConv with the same weights: outputs
and gradients on the fused path over heterogeneous graphs with isolated
nodes, a node type that receives no message, a hub and repeated edges, for
several head counts and widths (with and without the skip gate); float64
gradcheck; bf16 autocast on CUDA."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.data import HeteroData

from pyg_tc.nn import HGTConv

from ..conftest import DEVICES, assert_hetero_match


def _graph(device, width: int = 8, seed: int = 0) -> HeteroData:
    """Papers, authors and venues: a hub paper (300 citations), repeated
    edges, isolated authors, venues that only send."""
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    n = {'paper': 60, 'author': 40, 'venue': 4}
    for t, k in n.items():
        data[t].x = torch.randn(k, width, generator=g)
    cites = torch.randint(0, 60, (2, 200), generator=g)
    hub = torch.stack([torch.randint(0, 60, (300,), generator=g), torch.zeros(300, dtype=torch.long)])
    data['paper', 'cites', 'paper'].edge_index = torch.cat([cites, hub, cites[:, :20]], 1)
    writes = torch.stack([torch.randint(0, 30, (90,), generator=g), torch.randint(0, 60, (90,), generator=g)])
    data['author', 'writes', 'paper'].edge_index = writes  # authors 30..39: isolated
    data['paper', 'rev_writes', 'author'].edge_index = writes.flip(0)
    data['venue', 'hosts', 'paper'].edge_index = torch.stack(
        [torch.randint(0, 4, (60,), generator=g), torch.arange(60)]
    )
    return data.to(device)


def _pair(data, out_channels, heads, device):
    torch.manual_seed(0)
    ref = pyg_nn.HGTConv(data.x_dict['paper'].size(1), out_channels, data.metadata(), heads=heads).to(device)
    with torch.no_grad():  # (PyG initialises p_rel and skip to ones)
        for p in ref.parameters():
            p.add_(torch.rand_like(p) * 0.1)
    ours = HGTConv(data.x_dict['paper'].size(1), out_channels, data.metadata(), heads=heads).to(device)
    ours.load_state_dict(ref.state_dict())

    def fail(*args, **kwargs):
        raise AssertionError("PyG's path ran")

    ours._pyg_forward = fail
    return ours, ref


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('out_channels,heads', [(8, 1), (8, 2), (12, 4), (10, 5)])
def test_matches_pyg(device, out_channels, heads):
    """(out_channels 8 = the input width: the skip gate applies; else not.)"""
    data = _graph(device)
    ours, ref = _pair(data, out_channels, heads, device)
    assert_hetero_match(ours, ref, data.x_dict, data.edge_index_dict)


def test_gradcheck_float64():
    data = _graph('cpu', width=3)
    torch.manual_seed(0)
    layer = HGTConv(3, 4, data.metadata(), heads=2).double()
    names = [k for k, _ in layer.named_parameters()]
    ps = [p.detach().clone().requires_grad_() for p in layer.parameters()]
    xs = {t: v.double() for t, v in data.x_dict.items()}
    x_paper = xs['paper'].clone().requires_grad_()

    def fn(xp, *ps):
        out = torch.func.functional_call(layer, dict(zip(names, ps)), ({**xs, 'paper': xp}, data.edge_index_dict))
        return tuple(out[t] for t in sorted(out))

    assert torch.autograd.gradcheck(fn, (x_paper, *ps))


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_autocast_close_to_fp32(dtype):
    data = _graph('cuda', width=16)
    ours, _ = _pair(data, 16, 4, 'cuda')
    want = ours(data.x_dict, data.edge_index_dict)
    with torch.autocast('cuda', dtype=dtype):
        got = ours(data.x_dict, data.edge_index_dict)
    for t in want:
        assert (got[t].float() - want[t]).abs().max() <= 3e-2 * want[t].abs().max().clamp(min=1)
    sum(v.float().square().mean() for v in got.values()).backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in ours.parameters())
