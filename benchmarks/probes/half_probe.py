"""HalfGNN probe: kernel-only times of the CSR SpMM and SDDMM in
fp32 / fp16 / bf16, the half SpMM with and without the two-level half2 sum
(spmm_two_level) and over every (lanes, vectors) config
(spmm_config), the SDDMM with 4 and 8 edges in flight per lane
(sddmm_inflight; pyg_tc.testing.kernel_overrides), to choose the half rules in kernels/csr/csr_host.cpp.

    python benchmarks/probes/half_probe.py [--graphs reddit,products,arxiv,tolokers] [--widths 32,64,128,256]
        [--out probe.jsonl] [--no-sweep] [--accuracy GRAPH] [--casts]

--accuracy GRAPH: relative error (2-norm over F = 64) of the half SpMM on the
graph's 10 highest in-degree rows with GCN weights, against fp64, for the
two-level sum and for fp32 products (the hub-row error bound).
--casts: the CUDA kernels of one forward + backward of each pyg_tc layer
under torch.autocast(fp16) on Cora-sized random data, by name (cast count).
"""

import argparse
import json
import sys
import time

import torch

from pyg_tc.bench.graphs import load_graph
from pyg_tc.bench.timing import kernel_time, warm_up
from pyg_tc.formats import CSRGraph
from pyg_tc.ops import sddmm_graph, spmm_graph
from pyg_tc.testing import kernel_overrides

CONFIGS = [(4, 1), (8, 1), (16, 1), (32, 1), (8, 2), (16, 2), (32, 2)]
DT = {'fp32': torch.float32, 'fp16': torch.float16, 'bf16': torch.bfloat16}


def timed(fn, **overrides):
    """Median kernel time of fn with the launch overrides (pyg_tc.testing.kernel_overrides)."""
    with kernel_overrides(**overrides):
        fn()
        return kernel_time(fn, 'cuda', rep=20, warmup=3).median_ms


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--graphs', default='reddit,products,arxiv,tolokers')
    ap.add_argument('--widths', default='32,64,128,256')
    ap.add_argument('--out', default='half_probe.jsonl')
    ap.add_argument('--no-sweep', action='store_true')
    ap.add_argument('--accuracy', default=None, metavar='GRAPH')
    ap.add_argument('--casts', action='store_true')
    a = ap.parse_args(argv)
    warm_up('cuda')
    t0 = time.time()
    with open(a.out, 'w') as fh:
        if a.accuracy:
            for rec in hub_accuracy(a.accuracy):
                fh.write(json.dumps(rec) + '\n')
                print(rec, flush=True)
        if a.casts:
            for rec in layer_kernels():
                fh.write(json.dumps(rec) + '\n')
                print(rec, flush=True)
        for name in filter(None, a.graphs.split(',')):
            bg = load_graph(name, device='cuda')
            ei, n = bg.edge_index, bg.num_nodes
            g = CSRGraph.from_coo(ei[0], ei[1], n, n)
            w = torch.rand(g.num_edges, device='cuda')
            for F in map(int, a.widths.split(',')):
                rec = {'graph': name, 'E': g.num_edges, 'F': F}
                x32 = torch.randn(n, F, device='cuda')
                rec['spmm_fp32'] = timed(lambda: spmm_graph(g, x32, w))
                rec['sddmm_fp32'] = timed(lambda: sddmm_graph(g, x32, x32))
                rec['sddmm_fp32_u8'] = timed(lambda: sddmm_graph(g, x32, x32), sddmm_inflight=8)
                for dn in ('fp16', 'bf16'):
                    x = x32.to(DT[dn])
                    rec[f'spmm_{dn}'] = timed(lambda: spmm_graph(g, x, w))
                    rec[f'spmm_{dn}_fp32products'] = timed(lambda: spmm_graph(g, x, w), spmm_two_level=False)
                    rec[f'sddmm_{dn}'] = timed(lambda: sddmm_graph(g, x, x))
                    for u in (4, 8):
                        rec[f'sddmm_{dn}_u{u}'] = timed(lambda: sddmm_graph(g, x, x), sddmm_inflight=u)
                    if not a.no_sweep and dn == 'fp16':
                        for c in CONFIGS:
                            for tl in (0, 1):
                                rec[f'spmm_{dn}_{c[0]},{c[1]}_tl{tl}'] = timed(
                                    lambda: spmm_graph(g, x, w), spmm_config=c, spmm_two_level=bool(tl)
                                )
                        for c in CONFIGS:
                            rec[f'spmm_fp32_{c[0]},{c[1]}'] = timed(lambda: spmm_graph(g, x32, w), spmm_config=c)
                fh.write(json.dumps(rec) + '\n')
                fh.flush()
                s = {k: v for k, v in rec.items() if isinstance(v, float)}
                best = min((v, k) for k, v in s.items() if k.startswith('spmm_fp16'))
                print(
                    f'[{time.time() - t0:.0f}s] {name} F={F}: spmm fp32 {rec["spmm_fp32"]:.4f} '
                    f'fp16 {rec["spmm_fp16"]:.4f} (fp32 products {rec["spmm_fp16_fp32products"]:.4f}) '
                    f'bf16 {rec["spmm_bf16"]:.4f} (fp32 products {rec["spmm_bf16_fp32products"]:.4f}); '
                    f'best fp16 {best[1]} {best[0]:.4f}; sddmm fp32 {rec["sddmm_fp32"]:.4f} '
                    f'fp16 {rec["sddmm_fp16"]:.4f} (u4 {rec["sddmm_fp16_u4"]:.4f} u8 {rec["sddmm_fp16_u8"]:.4f}) '
                    f'bf16 {rec["sddmm_bf16"]:.4f} (u4 {rec["sddmm_bf16_u4"]:.4f} u8 {rec["sddmm_bf16_u8"]:.4f})',
                    flush=True,
                )
            torch.cuda.empty_cache()


def hub_accuracy(name, F=64, hubs=10):
    bg = load_graph(name, device='cuda')
    ei, n = bg.edge_index, bg.num_nodes
    g = CSRGraph.from_coo(ei[0], ei[1], n, n)
    deg = (g.rowptr[1:] - g.rowptr[:-1]).double()
    dsrc = torch.bincount(g.col.long(), minlength=n).double().clamp(min=1)
    rows = torch.repeat_interleave(torch.arange(n, device='cuda'), (g.rowptr[1:] - g.rowptr[:-1]).long())
    w = (1 / torch.sqrt(deg.clamp(min=1)[rows] * dsrc[g.col.long()])).float()
    top = torch.topk(deg, hubs).indices
    x32 = torch.randn(n, F, device='cuda')
    for dn in ('fp16', 'bf16'):
        x = x32.to(DT[dn])
        ref = torch.zeros(hubs, F, dtype=torch.float64, device='cuda')
        for i, r in enumerate(top.tolist()):
            a, b = int(g.rowptr[r]), int(g.rowptr[r + 1])
            ref[i] = (w[a:b].double().unsqueeze(1) * x[g.col[a:b].long()].double()).sum(0)
        rec = {'kind': 'hub_accuracy', 'graph': name, 'dtype': dn, 'F': F, 'hub_degrees': deg[top].long().tolist()}
        for mode, two_level in (('two_level', True), ('fp32_products', False)):
            with kernel_overrides(spmm_two_level=two_level):
                out = spmm_graph(g, x, w)[top].double()
            errs = ((out - ref).norm(dim=1) / ref.norm(dim=1)).tolist()
            rec[f'{mode}_rel_err_max'] = max(errs)
            rec[f'{mode}_rel_err'] = errs
        own = (ref.to(DT[dn]).double() - ref).norm(dim=1) / ref.norm(dim=1)
        rec['output_rounding_rel_err_max'] = float(own.max())
        yield rec


def layer_kernels():
    import torch_geometric.nn as pyg_nn  # noqa: F401 (PyG present)

    import pyg_tc.nn as tnn

    n, F, H = 2708, 128, 64
    ei = torch.randint(0, n, (2, 10556), device='cuda')
    x = torch.randn(n, F, device='cuda')
    layers = {
        'GCNConv': lambda: tnn.GCNConv(F, H),
        'SAGEConv': lambda: tnn.SAGEConv(F, H),
        'GINConv': lambda: tnn.GINConv(
            torch.nn.Sequential(torch.nn.Linear(F, H), torch.nn.ReLU(), torch.nn.Linear(H, H))
        ),
        'GATConv': lambda: tnn.GATConv(F, 8, heads=8),
        'AGNNConv': lambda: tnn.AGNNConv(),
    }
    for name, make in layers.items():
        m = make().cuda()
        for _ in range(2):
            with torch.autocast('cuda', dtype=torch.float16):
                out = m(x, ei)
            out.float().sum().backward()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            with torch.autocast('cuda', dtype=torch.float16):
                out = m(x, ei)
            torch.cuda.synchronize()
            fwd_dtype = str(out.dtype)
            out.float().sum().backward()
            torch.cuda.synchronize()
        names = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                names[ev.name[:90]] = names.get(ev.name[:90], 0) + 1
        yield {'kind': 'layer_kernels', 'layer': name, 'out_dtype': fwd_dtype, 'kernels': names}


if __name__ == '__main__':
    sys.exit(main())
