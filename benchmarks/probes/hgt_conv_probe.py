"""``HGTConv``: PyG's layer against pyg_tc's (the same weights), forward +
backward on a whole IGBH-shaped graph (``pyg_tc.bench.graphs.igbh_shaped``,
4 node types, 8 edge types) with ``--width``-wide fp32 features: ms per call
(the mean over ``--iters`` calls after a warm-up, synchronised at the ends; the peak includes the warm-up)
and peak memory. The outputs are checked equal first.

    python benchmarks/probes/hgt_conv_probe.py [--papers 20000] [--width 64] [--heads 4] [--out F]
"""

import argparse
import copy
import json

import torch
import torch_geometric.nn as pyg_nn

import pyg_tc.nn
from pyg_tc.bench.timing import loop_ms, track_memory
from pyg_tc.bench.graphs import igbh_shaped

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def _time(layer, x_dict, ei_dict, iters: int) -> tuple:
    """(ms per forward + backward after one warm-up call, peak GB)."""

    def step(_):
        out = layer(x_dict, ei_dict)
        sum(v.square().mean() for v in out.values()).backward()

    with track_memory(DEV) as mem:
        ms = loop_ms(step, range(iters + 1), DEV)
    return ms, None if mem['peak_mb'] is None else mem['peak_mb'] / 1024


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--papers', type=int, default=20_000)
    p.add_argument('--width', type=int, default=64)
    p.add_argument('--heads', type=int, default=4)
    p.add_argument('--iters', type=int, default=10)
    p.add_argument('--out', default='hgt_conv_probe.jsonl')
    a = p.parse_args()
    data = igbh_shaped(a.papers, a.width, torch.float32)
    data = copy.copy(data).to(DEV)
    x_dict, ei_dict = data.x_dict, data.edge_index_dict
    torch.manual_seed(0)
    ref = pyg_nn.HGTConv(a.width, a.width, data.metadata(), heads=a.heads).to(DEV)
    ours = pyg_tc.nn.HGTConv(a.width, a.width, data.metadata(), heads=a.heads).to(DEV)
    ours.load_state_dict(ref.state_dict())
    with torch.no_grad():
        want, got = ref(x_dict, ei_dict), ours(x_dict, ei_dict)
        for t in want:
            torch.testing.assert_close(got[t], want[t], atol=1e-4, rtol=1e-4)
    pyg_ms, pyg_gb = _time(ref, x_dict, ei_dict, a.iters)
    ours_ms, ours_gb = _time(ours, x_dict, ei_dict, a.iters)
    edges = sum(v.size(1) for v in ei_dict.values())
    rec = dict(
        papers=a.papers,
        edges=edges,
        width=a.width,
        heads=a.heads,
        pyg_ms=pyg_ms,
        pyg_tc_ms=ours_ms,
        x_pyg=pyg_ms / ours_ms,
        pyg_peak_gb=pyg_gb,
        pyg_tc_peak_gb=ours_gb,
        device=torch.cuda.get_device_name() if DEV.type == 'cuda' else 'cpu',
    )
    with open(a.out, 'w') as out:
        out.write(json.dumps(rec) + '\n')
    print(
        f'HGTConv, {edges:,} edges: PyG {pyg_ms:.2f} ms, pyg_tc {ours_ms:.2f} ms per forward + backward '
        f'({rec["x_pyg"]:.2f}x); peak GB {pyg_gb} vs {ours_gb}',
        flush=True,
    )


if __name__ == '__main__':
    main()
