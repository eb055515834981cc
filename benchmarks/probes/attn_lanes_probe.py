"""Attention lane-layout probe: kernel time of GAT's fused attention,
forward and backward, with the lane layout's rule and with four 16-byte
vectors per lane forced on / off (``kernel_overrides(attn_nv4=...)``), per
dtype and head shape, on a products-shaped R-MAT graph; to choose the rule
in kernels/attn/attn_host.cpp (``layout``).

    python benchmarks/probes/attn_lanes_probe.py [--graph products] [--out F]
"""

import argparse
import json

import torch

from pyg_tc.bench.graphs import load_graph
from pyg_tc.bench.timing import kernel_time
from pyg_tc.ops import gat_attention
from pyg_tc.testing import kernel_overrides


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--graph', default='products')
    p.add_argument('--shapes', default='1x64,1x128,1x256,8x8,8x32,4x64')
    p.add_argument('--out', default='attn_lanes_probe.jsonl')
    a = p.parse_args()
    g = load_graph(a.graph, 'cuda').csr()
    out = open(a.out, 'w')
    for shape in a.shapes.split(','):
        H, C = map(int, shape.split('x'))
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            x = torch.randn(g.num_cols, H, C, device='cuda', dtype=dtype, requires_grad=True)
            a_src = torch.randn(g.num_cols, H, device='cuda', requires_grad=True)
            a_dst = torch.randn(g.num_rows, H, device='cuda', requires_grad=True)
            go = torch.randn(g.num_rows, H, C, device='cuda', dtype=dtype)

            def fwd():
                return gat_attention(g, x, a_src, a_dst)[0]

            def fwd_bwd():
                o = gat_attention(g, x, a_src, a_dst)[0]
                return torch.autograd.grad(o, (x, a_src, a_dst), go)

            rec = dict(graph=a.graph, H=H, C=C, dtype=str(dtype).replace('torch.', ''))
            for name, nv4 in (('rule', None), ('nv4', True), ('nv1', False)):
                with kernel_overrides(attn_nv4=nv4):
                    rec[f'{name}_fwd_ms'] = kernel_time(fwd, 'cuda', rep=20, warmup=3).median_ms
                    rec[f'{name}_fwdbwd_ms'] = kernel_time(fwd_bwd, 'cuda', rep=10, warmup=2).median_ms
            print(json.dumps(rec), flush=True)
            out.write(json.dumps(rec) + '\n')


if __name__ == '__main__':
    main()
