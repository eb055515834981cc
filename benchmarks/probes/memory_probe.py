"""Peak GPU memory of each stage of a cached 2-layer GCN training step on the
Reddit-shaped graph (where does pyg_tc's peak come from?).

    python benchmarks/probes/memory_probe.py
"""

import torch
import torch.nn.functional as Fn

import pyg_tc
from pyg_tc.bench.graphs import load_graph
from pyg_tc.formats import CSRGraph

MiB = 2**20


def stage(name, fn):
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    print(
        f'{name:28s} before {before / MiB:8.0f} MiB  peak {torch.cuda.max_memory_allocated() / MiB:8.0f} MiB'
        f'  (+{(torch.cuda.max_memory_allocated() - before) / MiB:6.0f})  after '
        f'{torch.cuda.memory_allocated() / MiB:8.0f} MiB',
        flush=True,
    )
    return out


def main():
    bg = load_graph('reddit', device='cuda')
    ei, n = bg.edge_index, bg.num_nodes
    x = torch.randn(n, 256, device='cuda')
    y = torch.randint(0, 41, (n,), device='cuda')
    g = stage('CSRGraph.from_coo', lambda: CSRGraph.from_coo(ei[0], ei[1], n, n))
    del g
    torch.cuda.empty_cache()
    conv1 = pyg_tc.nn.GCNConv(256, 64, cached=True).cuda()
    conv2 = pyg_tc.nn.GCNConv(64, 41, cached=True).cuda()
    stage('get_graph (build + attach)', lambda: pyg_tc.formats.get_graph(ei, size=(n, n)))
    stage('layer1 normalisation', lambda: conv1._normalized(ei, None, n))
    stage('layer2 normalisation', lambda: conv2._normalized(ei, None, n))
    opt = torch.optim.Adam(list(conv1.parameters()) + list(conv2.parameters()))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = Fn.cross_entropy(conv2(conv1(x, ei).relu(), ei), y)
        loss.backward()
        opt.step()

    stage('train step 1', step)
    stage('train step 2', step)


if __name__ == '__main__':
    main()
