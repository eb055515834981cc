"""``RGATConv``: PyG's layer against pyg_tc's (the same weights), forward +
backward on a random relational graph, per attention mechanism: ms per call
(the mean over ``--iters`` calls after a warm-up, synchronised at the ends; the peak includes the warm-up)
and peak memory. The outputs are checked equal first.

    python benchmarks/probes/rgat_conv_probe.py [--nodes 20000] [--edges 200000] [--relations 8]
        [--channels 64] [--heads 4] [--out F]
"""

import argparse
import json

import torch
import torch_geometric.nn as pyg_nn

import pyg_tc.nn
from pyg_tc.bench.timing import loop_ms, track_memory

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def _time(layer, x, ei, et, iters: int) -> tuple:
    """(ms per forward + backward after one warm-up call, peak GB)."""
    with track_memory(DEV) as mem:
        ms = loop_ms(lambda _: layer(x, ei, et).square().mean().backward(), range(iters + 1), DEV)
    return ms, None if mem['peak_mb'] is None else mem['peak_mb'] / 1024


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--nodes', type=int, default=20_000)
    p.add_argument('--edges', type=int, default=200_000)
    p.add_argument('--relations', type=int, default=8)
    p.add_argument('--channels', type=int, default=64, help='input width and heads x output channels')
    p.add_argument('--heads', type=int, default=4)
    p.add_argument('--iters', type=int, default=10)
    p.add_argument('--out', default='rgat_conv_probe.jsonl')
    a = p.parse_args()
    g = torch.Generator().manual_seed(0)
    N, E, R, F, H = a.nodes, a.edges, a.relations, a.channels, a.heads
    ei = torch.randint(0, N, (2, E), generator=g).to(DEV)
    et = torch.randint(0, R, (E,), generator=g).to(DEV)
    x = torch.randn(N, F, generator=g).to(DEV)
    with open(a.out, 'w') as out:
        for mech in ('across-relation', 'within-relation'):
            torch.manual_seed(0)
            ref = pyg_nn.RGATConv(F, F // H, R, heads=H, attention_mechanism=mech).to(DEV)
            ours = pyg_tc.nn.RGATConv(F, F // H, R, heads=H, attention_mechanism=mech).to(DEV)
            ours.load_state_dict(ref.state_dict())
            with torch.no_grad():
                torch.testing.assert_close(ours(x, ei, et), ref(x, ei, et), atol=1e-4, rtol=1e-4)
            pyg_ms, pyg_gb = _time(ref, x, ei, et, a.iters)
            ours_ms, ours_gb = _time(ours, x, ei, et, a.iters)
            rec = dict(
                mechanism=mech,
                nodes=N,
                edges=E,
                relations=R,
                channels=F,
                heads=H,
                pyg_ms=pyg_ms,
                pyg_tc_ms=ours_ms,
                x_pyg=pyg_ms / ours_ms,
                pyg_peak_gb=pyg_gb,
                pyg_tc_peak_gb=ours_gb,
                device=torch.cuda.get_device_name() if DEV.type == 'cuda' else 'cpu',
            )
            out.write(json.dumps(rec) + '\n')
            print(
                f'{mech}: PyG {pyg_ms:.2f} ms, pyg_tc {ours_ms:.2f} ms per forward + backward '
                f'({rec["x_pyg"]:.1f}x); peak GB {pyg_gb} vs {ours_gb}',
                flush=True,
            )


if __name__ == '__main__':
    main()
