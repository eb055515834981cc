"""Tutorial 6: memory-efficient GAT on a large graph.

PyG's ``GATConv`` is a ``MessagePassing`` layer, and its memory grows with E x heads x channels.
Per layer it replaces the self loops by one per node (E' = about E + N edges), computes one
attention logit per edge and head (``leaky_relu(a_src[j] + a_dst[i])``, a softmax over each
target's edges, dropout: several ``[E', heads]`` tensors), gathers the source features of every
edge (``x_j``, ``[E', heads, C]``), multiplies them by the coefficients (another
``[E', heads, C]``) and sums the messages into the targets. Autograd keeps ``x_j``, the
coefficients and the softmax's inputs for the backward, which then builds gradients of the same
shapes. On the Reddit-shaped graph of pyg_tc's benchmarks (233K nodes, 96.9M edges with the
loops) one ``[E', 64]`` fp32 tensor is 23.1 GiB: the 2-layer GAT below keeps about 630 bytes per
edge for its backward (the ``--small`` run measures it), 57 GiB there before the backward
allocates anything. docs/results/gat.md (Reddit-shaped re-run) measures PyG at 110 GiB for one
``GATConv(256, 8, heads=8)`` forward + backward on an H200, and the 2-layer training step does
not fit in the H200's 141 GB at all (docs/results/gat.md, section 3).

pyg_tc's ``GATConv`` (and ``GATv2Conv``) subclasses PyG's: same constructor, weights and
``state_dict``, so ``import pyg_tc.nn as nn`` instead of ``torch_geometric.nn`` swaps it in,
and a PyG checkpoint loads as is. On a GPU it never builds an E x heads x channels tensor: one
fused kernel walks each target's edges, computes the logits, keeps a running maximum and sum
per head (online softmax) and accumulates ``alpha * x_j`` in registers; the backward keeps only
the log-sum-exp ``[N, heads]`` and recomputes the coefficients edge by edge, and attention
dropout comes from a counter-based generator that the backward replays instead of a stored
mask. What stays is ``[N, heads, C]`` per layer plus the graph format, built once and cached on
``edge_index`` (16 bytes per edge). Measured on that graph (H200): one layer 22.8 ms vs PyG's
647 ms, its own memory 2.9% of PyG's; the 2-layer training step (with Adam) 80 ms and 11,584 MiB
peak, where PyG runs out of memory.

On a CPU-only machine pyg_tc runs its pure-PyTorch reference of the same op
(``pyg_tc.info()['backend']``, printed above the table), which is neither fast nor
memory-efficient: it gathers the E x heads x C messages like PyG (one layer at a time, freed
before the next) and recomputes them in the backward. What it shares with the kernels is what
autograd keeps, the last memory column below.

The script builds the 2-layer GAT of PyG's ``examples/gat.py`` (8 heads x 8 channels, ELU, then
1 head x classes, dropout 0.6 on features and attention) with PyG's layers and with pyg_tc's
from the same initial weights, on R-MAT graphs with Reddit's shape (602 input features, 41
classes, random features and labels): full size, the Reddit-shaped graph with a tenth of its
edges (PyG's step should fit on an 80 GB GPU there), then the whole graph; ``--small``: 4,000 nodes with
40K and then 400K edges (CPU, seconds). Per graph and implementation:

1. in eval mode (no dropout: both compute the same function) a forward + backward of the
   cross-entropy loss: the largest differences of the outputs and of the weight gradients from
   PyG's (in train mode they would differ anyway: pyg_tc draws its own attention-dropout masks);
2. training steps in train mode (forward + backward, no optimizer step): ``ms / step`` (median,
   after a warm-up step that also builds pyg_tc's format), ``peak MiB`` on CUDA
   (``torch.cuda.max_memory_allocated`` over the timed steps after ``reset_peak_memory_stats``;
   absolute: features, graph, weights and pyg_tc's cached format included; ``n/a (CPU)`` on a
   CPU), ``resident MiB`` (what was allocated when the timed steps began: the peak less this is
   the step's own memory), and ``kept for backward MiB``: the tensors autograd saves during one step's forward,
   each storage counted once (``torch.autograd.graph.saved_tensors_hooks``, on any device),
   the input features and the weights included. Between the two graphs of a run PyG's grows
   by about 630 bytes per edge, pyg_tc's by 12: its graph format's int32 index arrays, which
   the op refers to and which stay cached on ``edge_index`` anyway; the rest is per node.

A run that does not fit on the GPU (``torch.cuda.OutOfMemoryError``) reads ``out of memory``
in the table; the script frees what it allocated and goes on. At full size on one GPU expect
that for PyG on the whole graph: that is the point of the fused layer. Full size needs a GPU;
on an H100 (80 GB, docs/results/gat.md, tutorial 6) it gave 13.2 ms against PyG's 87.8 ms per
step and 2,116 against 12,937 MiB peak with a tenth of the edges, and on the whole graph 81.2 ms
and 6,064 MiB where PyG ran out of memory.
"""

import argparse
import gc
import statistics
import time

import torch
import torch.nn.functional as F
import torch_geometric.nn
from tqdm import tqdm

import pyg_tc
import pyg_tc.nn
from pyg_tc.bench.graphs import rmat

MIB = 2.0**20
IN, CLASSES = 602, 41  # Reddit's features and classes


class GAT(torch.nn.Module):
    """PyG's examples/gat.py; ``layers`` is the module ``GATConv`` comes from."""

    def __init__(self, layers, cin: int, cout: int, hidden: int = 8, heads: int = 8, dropout: float = 0.6):
        super().__init__()
        self.dropout = dropout
        self.conv1 = layers.GATConv(cin, hidden, heads, dropout=dropout)
        self.conv2 = layers.GATConv(hidden * heads, cout, heads=1, concat=False, dropout=dropout)

    def forward(self, x, edge_index):
        x = F.dropout(x, self.dropout, self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, self.dropout, self.training)
        return self.conv2(x, edge_index)


def kept_for_backward(fn):
    """(result of ``fn()``, MiB of the tensors autograd saves while it runs; each storage once).
    The result is for measuring only, not for ``backward()``: the pack hook holds the storages
    until ``fn`` returns (so no address is reused and counted once for two) but gives autograd
    nothing to keep (a hook that returned the tensor itself would tie an output that its own
    ``grad_fn`` saves, as ``exp`` in PyG's softmax does, into a cycle autograd cannot free: every
    call leaked its graph)."""
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = s

    def unpack(_):
        raise RuntimeError('kept_for_backward: measured only, not for backward()')

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = fn()
    return out, sum(s.nbytes() for s in storages.values()) / MIB


def measure(model, x, y, edge_index, ref, reps: int, sync):
    """Steps 1 (eval: outputs and gradients vs ``ref``) and 2 (train: time, memory) of the
    docstring: (numbers, (output, gradients) of step 1)."""
    cuda = x.is_cuda
    model.eval()
    model.zero_grad(set_to_none=True)
    out = model(x, edge_index)
    F.cross_entropy(out, y).backward()
    outputs = out.detach(), [p.grad.clone() for p in model.parameters()]
    res = {}
    if ref is not None:
        res['out_diff'] = float((outputs[0] - ref[0]).abs().max())
        res['grad_diff'] = max(float((g - r).abs().max()) for g, r in zip(outputs[1], ref[1]))
    out = None

    model.train()

    def step():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x, edge_index), y).backward()

    torch.manual_seed(0)
    res['kept'] = kept_for_backward(lambda: F.cross_entropy(model(x, edge_index), y))[1]  # (loss dropped)
    step()  # warm-up
    if cuda:
        torch.cuda.reset_peak_memory_stats(x.device)
        res['resident'] = torch.cuda.memory_allocated(x.device) / MIB
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(1e3 * (time.perf_counter() - t0))
    res['ms'] = statistics.median(times)
    res['peak'] = torch.cuda.max_memory_allocated(x.device) / MIB if cuda else None
    model.zero_grad(set_to_none=True)
    return res, outputs


def free(device):
    gc.collect()
    if torch.device(device).type == 'cuda':
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--root', help='unused: the graphs are generated')
    p.add_argument('--small', action='store_true', help='4,000 nodes, 40K / 400K edges (CI)')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    a = p.parse_args()
    # (label, nodes, edges): the R-MAT graph of pyg_tc.bench's 'reddit' (seed 0), a tenth of its edges first
    graphs = (
        [('small, 40K edges', 4_000, 40_000), ('small, 400K edges', 4_000, 400_000)]
        if a.small
        else [('Reddit-shaped, 1/10 of the edges', 233_000, 9_670_000), ('Reddit-shaped', 233_000, 96_700_000)]
    )
    reps = 3 if a.small else 10
    sync = torch.cuda.synchronize if a.device.startswith('cuda') else (lambda: None)
    backend = pyg_tc.info()['backend']  # (on a GPU this also builds the kernels, before any timing)

    torch.manual_seed(0)
    init = GAT(torch_geometric.nn, IN, CLASSES).state_dict()  # PyG's initial weights, for both
    rows = []
    progress = tqdm(total=2 * len(graphs), leave=False)
    for label, N, E in graphs:
        edge_index = rmat(N, E, seed=0, device=a.device)
        E_loops = N + int((edge_index[0] != edge_index[1]).sum())  # E': GATConv puts one loop per node
        gen = torch.Generator(a.device).manual_seed(0)
        x = torch.randn(N, IN, generator=gen, device=a.device)
        y = torch.randint(0, CLASSES, (N,), generator=gen, device=a.device)
        ref = None
        for name, layers in (('PyG', torch_geometric.nn), ('pyg_tc', pyg_tc.nn)):
            progress.set_description(f'{label}, {name}')
            model = GAT(layers, IN, CLASSES).to(a.device)
            model.load_state_dict(init)  # a PyG state_dict loads into pyg_tc's model as is
            ei = edge_index.clone()  # pyg_tc caches its format on the tensor: a fresh one each
            res = outputs = None
            try:
                res, outputs = measure(model, x, y, ei, ref, reps, sync)
            except torch.cuda.OutOfMemoryError:
                pass  # (reported below; the tensors of the failed step go with its frame)
            if name == 'PyG':
                ref = outputs  # PyG's output and gradients (None: out of memory)
            model = ei = outputs = None
            free(a.device)
            rows.append((label, N, E_loops, name, res))
            progress.update()
        edge_index = x = y = ref = None
        free(a.device)
    progress.close()

    print(
        f'\n2-layer GAT (examples/gat.py: 8 heads x 8, then 1 x {CLASSES}; {IN} input features), '
        f'forward + backward on {a.device} (pyg_tc backend: {backend})\n'
    )
    print(
        '| graph | nodes | edges + loops | layers | ms / step | peak MiB | resident MiB | kept for backward MiB '
        '| max abs out diff vs PyG | max abs grad diff vs PyG |'
    )
    print('|---|---|---|---|---|---|---|---|---|---|')
    for label, N, E_loops, name, r in rows:
        if r is None:
            cells = ['out of memory', 'out of memory', '-', '-', '-', '-']
        else:
            peak, resident = ('n/a (CPU)',) * 2 if r['peak'] is None else (f'{r["peak"]:,.0f}', f'{r["resident"]:,.0f}')
            diffs = (
                ['-', '-']
                if name == 'PyG'
                else [f'{r[k]:.1e}' if k in r else '- (no PyG result)' for k in ('out_diff', 'grad_diff')]
            )
            cells = [f'{r["ms"]:.1f}', peak, resident, f'{r["kept"]:,.1f}', *diffs]
        print(f'| {label} | {N:,} | {E_loops:,} | {name} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    main()
