"""Half-precision mini-batch probe: where the captured, per-hop padded step's
GPU time goes in fp32 and under bf16, per model (products-shaped graph,
[15, 10, 5], 1,024 seeds, 3 layers of 256).

Variants: ``fp32``; ``amp`` (autocast bf16, fp32 features: today's recipe);
``amp-x16`` (autocast, features stored in bf16); ``bf16-model``
(``model.bfloat16()`` and bf16 features, no autocast: no cast at all, the
ceiling); ``amp-hw`` (autocast, bf16 features, ``half_weights=True``). Per variant: the captured step's wall ms over the batches (copy-in
included) and the top kernels of the eager step (``torch.profiler``).

    python benchmarks/probes/half_epoch_probe.py [--graph products] [--models sage,gcn,gat] [--out F]
"""

import argparse
import copy
import itertools
import json

import torch

import pyg_tc.nn
from pyg_tc.bench.models import Net
from pyg_tc.bench.timing import kernel_profile, loop_ms
from pyg_tc.capture import CapturedStep
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import PadHops, buckets_from_batches
from benchmarks.suites.sampling import SHAPES, make_data

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')  # the CPU: a dry run


def fwd(m, b):
    return m(b.x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--graph', default='products')
    p.add_argument('--models', default='sage,gcn,gat')
    p.add_argument('--variants', default='fp32,amp,amp-x16,bf16-model,amp-hw')
    p.add_argument('--batches', type=int, default=30)
    p.add_argument('--top', type=int, default=14)
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--out', default='half_epoch_probe.jsonl')
    a = p.parse_args()
    F, C, _ = SHAPES[a.graph]
    data, seeds, _ = make_data(a.graph)
    data = data.to(DEV)
    loader = NeighborLoader(data, [15, 10, 5], input_nodes=seeds, batch_size=a.batch_size, shuffle=True)
    torch.manual_seed(0)
    hb = buckets_from_batches(loader, num_batches=20, levels=2, per_hop=True)
    out = open(a.out, 'w')
    for kind in a.models.split(','):
        pad = PadHops(hb, a.batch_size, self_loops=kind == 'gat')
        torch.manual_seed(1)
        batches = [pad(copy.copy(b)) for b in itertools.islice(loader, a.batches)]
        torch.manual_seed(0)
        base = Net(pyg_tc.nn, kind, [F, 256, 256, C], trim=True).to(DEV)
        for v in a.variants.split(','):
            m = copy.deepcopy(base)
            bs = batches
            if v in ('amp-x16', 'bf16-model', 'amp-hw'):
                bs = [copy.copy(b) for b in batches]
                for b in bs:
                    b.x = b.x.bfloat16()
            if v == 'bf16-model':
                m = m.bfloat16()
            amp = torch.bfloat16 if v.startswith('amp') else None
            opt = torch.optim.Adam(m.parameters(), lr=1e-3, capturable=DEV.type == 'cuda')
            step = CapturedStep(m, opt, forward=fwd, autocast=amp, half_weights=v == 'amp-hw')
            cap_ms = loop_ms(step, itertools.chain(bs[:4], bs * 3), DEV, warmup=4)
            eager = step.eager  # the same step, not captured
            eager(bs[0])
            eager_ms = loop_ms(eager, bs, DEV, warmup=2)
            prof = kernel_profile(eager, bs[:8], DEV, a.top)
            if DEV.type == 'cuda':
                torch.cuda.reset_peak_memory_stats()
            loop_ms(step, bs[:10], DEV, warmup=1)
            rec = dict(
                graph=a.graph,
                model=kind,
                variant=v,
                captured_ms=cap_ms,
                eager_ms=eager_ms,
                peak_gb=torch.cuda.max_memory_allocated() / 2**30 if DEV.type == 'cuda' else 0.0,
                replays=step.replays,
                eager_steps=step.eager_steps,
                **prof,
            )
            print(
                f'{kind:5s} {v:11s} captured {cap_ms:7.3f} ms  eager {eager_ms:7.3f} ms  gpu {prof["gpu_ms"]:.3f}'
                f' dense {prof["dense_ms"]:.3f} launches {prof["launches"]:.0f} peak {rec["peak_gb"]:.2f} GB',
                flush=True,
            )
            for k, c, t in prof['kernels']:
                print(f'    {k:90s} {c:4d} {t:7.3f}')
            out.write(json.dumps(rec) + '\n')
            out.flush()
            step.close()


if __name__ == '__main__':
    main()
