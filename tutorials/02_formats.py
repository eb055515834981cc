"""Tutorial 2: choosing formats: what each transform precomputes, and what it costs.

pyg_tc's kernels do not read ``edge_index`` as it is: they read a format built from it. Layers
build the default one on first use and cache it on the adjacency tensor, so every format here is
optional. A transform builds it once per graph, ahead of time (a dataset ``transform``, once per
mini-batch, or before ``torch.compile``):

* ``DegreeBucketTransform()``: the CSR graph (target-sorted, plus its transpose for the backward
  pass) with the degree-bucket schedule: light rows packed many per warp, heavy rows split into
  chunks reduced in order. It is what the layers build on their own; attach it once per graph
  and inspect it with ``DegreeBucketTransform.graph(data).stats()``.
* ``ReorderTransform('rcm')``: reverse Cuthill-McKee numbering (neighbours get nearby ids). It
  permutes ``data.x``, ``data.y``, the masks and ``edge_index``, so from then on use the
  *reordered* ``data.x``, and map results back to the original node order with
  ``out.new_empty(out.shape).index_copy_(0, data.node_perm, out)``.
* ``SGTTransform()`` (after the reorder): TC-GNN's Sparse Graph Translation, 16-row windows of
  16 x 8 tensor-core blocks (docs/sgt.md). ``SGTTransform.stats(data)`` counts the blocks
  with and without the translation; RCM makes them fewer and denser.
* ``CBSRTransform()``: MaxK-GNN's edge groups, for features that went through ``MaxK(k)`` (k
  kept entries per row, a ``CBSR``; docs/cbsr.md). Dense features use the same graph.

Which kernel runs is chosen per call by ``backend=``, on a layer
(``pyg_tc.nn.GCNConv(cin, cout, backend='csr'|'sgt'|'auto'|'reference')``) or on an op
(``pyg_tc.ops.spmm(x, edge_index, backend=...)``). ``'auto'`` (the default) is ``'csr'`` on the
CPU, without the kernels, or for a graph without SGT metadata; on a GPU with SGT metadata its
first call per (graph, op, width, dtype) times both kernels and keeps the faster
(``pyg_tc.ops.choose_backend``). ``'reference'`` is the pure-PyTorch oracle.

The script checks that a GCN layer on the RCM + SGT graph, with every backend, gives the same
predictions (mapped back) as on the original graph, then ends with one row per format: what it
is for, the time to build it on this device (a transform's own work: the SGT row builds the CSR
graph and the SGT of the already reordered graph), the median time of one aggregation
(``pyg_tc.ops.spmm``, sum, 32 features) and its largest absolute difference from the plain ``edge_index``
result (all ~0: formats change speed, never results). On a CPU-only machine pyg_tc runs its
pure-PyTorch reference (the header says so): every format gives the same numbers there (up to
fp32 rounding), and the times say nothing about the kernels. Run on a GPU for those.

Data: ``--root DIR`` (default: ``$PYG_TC_DATA``) is where the real Cora lives, as
``DIR/planetoid/Cora`` (PyG downloads it there if it is missing). Without a root the script runs
on synthetic data of Cora's shape (``pyg_tc.datasets.synthetic('Cora')``), so it also runs
offline; its random graph has less locality for RCM to find, so the bandwidth falls less than on
Cora (about 2x instead of 3.6x).
"""

import argparse
import os
import statistics
import time

import torch
import torch_geometric.transforms as T
from tqdm import tqdm

import pyg_tc
import pyg_tc.nn
from pyg_tc.datasets import load_or_exit
from pyg_tc.ops import spmm
from pyg_tc.transforms import CBSRTransform, DegreeBucketTransform, ReorderTransform, SGTTransform


def timed(fn, reps: int, device: str):
    """(result of ``fn()``, median ms over ``reps`` calls after one warm-up call)."""
    sync = torch.cuda.synchronize if device.startswith('cuda') else (lambda: None)
    out = fn()  # warm-up: first-use caches, 'auto' tuning
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(1e3 * (time.perf_counter() - t0))
    return out, statistics.median(times)


def back(out, data):
    """Rows of a result on reordered ``data`` in the original node order."""
    return out.new_empty(out.shape).index_copy_(0, data.node_perm, out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument(
        '--root',
        default=os.environ.get('PYG_TC_DATA'),
        help='folder of the real Cora (DIR/planetoid/Cora, downloaded there if missing); '
        'default $PYG_TC_DATA, else synthetic data of the same shape',
    )
    p.add_argument('--small', action='store_true', help='fewer timed calls (CI)')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    a = p.parse_args()
    reps = 5 if a.small else 50
    data = load_or_exit('Cora', a.root, transform=T.NormalizeFeatures())[0].to(a.device)
    graph = 'Cora' if a.root else 'Synthetic Cora'
    backend = pyg_tc.info()['backend']  # also builds the kernels on a GPU, before any timing
    torch.manual_seed(0)
    W = torch.randn(data.num_features, 32, device=a.device)  # 32 hidden features to aggregate

    # Build each format (median of a few builds; every build starts from plain edges).
    dbt, t_dbt = timed(lambda: DegreeBucketTransform()(data), reps, a.device)
    rcm, t_rcm = timed(lambda: ReorderTransform('rcm')(data), reps, a.device)
    sgt, t_sgt = timed(lambda: SGTTransform()(rcm), reps, a.device)
    cbsr, t_cbsr = timed(lambda: CBSRTransform()(data), reps, a.device)
    print(f'{graph} on {a.device} (pyg_tc backend: {backend})')
    print('DegreeBucketTransform.graph(data).stats():', DegreeBucketTransform.graph(dbt).stats())
    print(
        'bandwidth max|src - dst|: native',
        ReorderTransform.bandwidth(data.edge_index),
        '-> RCM',
        ReorderTransform.bandwidth(rcm.edge_index),
    )
    s = SGTTransform.stats(sgt)
    print(
        f"SGTTransform.stats(data): {s['blocks']} tensor-core blocks ({s['blocks_without_sgt']} "
        f"without SGT), {s['nnz_per_block']:.1f} nonzeros per block"
    )
    print('CBSRTransform.stats(data):', CBSRTransform.stats(cbsr))

    # A layer on the RCM + SGT graph: the reordered data.x in, the rows mapped back out.
    ref = pyg_tc.nn.GCNConv(data.num_features, 7).to(a.device)
    with torch.no_grad():
        out0 = ref(data.x, data.edge_index)  # the original order
        for b in ('csr', 'sgt', 'auto', 'reference'):
            conv = pyg_tc.nn.GCNConv(data.num_features, 7, backend=b).to(a.device)
            conv.load_state_dict(ref.state_dict())
            out = back(conv(sgt.x, sgt.edge_index), sgt)
            torch.testing.assert_close(out, out0, atol=1e-4, rtol=1e-3)
            assert torch.equal(out.argmax(1), out0.argmax(1))
    print(
        "GCNConv(backend='csr'|'sgt'|'auto'|'reference') on the RCM + SGT graph: "
        'predictions mapped back match the original order'
    )

    # One aggregation per format, against the plain edge_index result.
    h = data.x @ W  # original order
    h_rcm = sgt.x @ W  # reordered features for reordered graphs (never h itself)
    g = DegreeBucketTransform.graph(sgt)
    auto = pyg_tc.ops.dispatch.choose('spmm', 'auto', g, h_rcm)  # what 'auto' runs here
    hk = pyg_tc.nn.MaxK(8)(h)  # MaxK features: a CBSR (8 kept entries per row)
    base = spmm(h, data.edge_index)  # 1st call: builds the CSR format, caches it on edge_index
    base_k = spmm(hk.to_dense(), data.edge_index)  # the dense product of the same MaxK features
    cases = [  # (format, what it is for, build ms, one aggregation, the result it must equal)
        (
            '`edge_index` (no transform)',
            'baseline: the CSR format is built on the 1st call, cached',
            None,
            lambda: spmm(h, data.edge_index),
            base,
        ),
        (
            '`DegreeBucketTransform`',
            'CSR + degree-bucket schedule, attached once per graph',
            t_dbt,
            lambda: spmm(h, dbt.edge_index),
            base,
        ),
        (
            "`ReorderTransform('rcm')`",
            'RCM node order (locality); map back with `node_perm`',
            t_rcm,
            lambda: back(spmm(h_rcm, rcm.edge_index), rcm),
            base,
        ),
        (
            "`SGTTransform`, `backend='sgt'`",
            'TC-GNN tensor-core blocks (after RCM)',
            t_sgt,
            lambda: back(spmm(h_rcm, sgt.edge_index, backend='sgt'), sgt),
            base,
        ),
        (
            f"`SGTTransform`, `backend='auto'` (runs {auto!r})",
            'the faster of sgt / csr, timed once',
            t_sgt,
            lambda: back(spmm(h_rcm, sgt.edge_index), sgt),
            base,
        ),
        (
            '`CBSRTransform` + `MaxK(8)` features',
            'MaxK-GNN SpGEMM (vs the dense MaxK features)',
            t_cbsr,
            lambda: spmm(hk, cbsr.edge_index),
            base_k,
        ),
        (
            "`edge_index`, `backend='reference'`",
            'the pure-PyTorch oracle',
            None,
            lambda: spmm(h, data.edge_index, backend='reference'),
            base,
        ),
    ]

    print(
        f'\n{graph}, spmm of {h.size(1)} features, sum, median of {reps} calls on {a.device} '
        f'(pyg_tc backend: {backend})\n'
    )
    print('| format / transform | for | build ms | spmm ms | max abs diff vs `edge_index` |')
    print('|---|---|---|---|---|')
    for name, what, build, fn, want in tqdm(cases, 'timing spmm per format', leave=False):
        out, ms = timed(fn, reps, a.device)
        diff = float((out - want).abs().max())
        assert diff < 1e-3 * float(want.abs().max()), (name, diff)
        build = '-' if build is None else f'{build:.2f}'
        print(f'| {name} | {what} | {build} | {ms:.3f} | {diff:.1e} |')


if __name__ == '__main__':
    main()
