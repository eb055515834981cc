"""MaxK-GNN suite (the CBSR family): the paper's Figure 8 (SpGEMM forward and SSpMM backward at
width 256 over k, against ``torch.sparse.mm`` and pyg_tc's CSR SpMM at width
256), the selection kernel against ``torch.topk``, and the full-batch
MaxK-SAGE training epoch against the ReLU model (pyg_tc's CSR kernels and
PyG's SAGEConv). ``python -m benchmarks.suites.cbsr --out DIR [--graphs ...] [--ks
2,4,...] [--no-train] [--tf32] [--profile] [--device cpu]`` writes
``cbsr.jsonl``, ``cbsr.md`` and ``cbsr.png``; method and results of record:
``docs/cbsr.md``.
"""

from __future__ import annotations

import argparse
from typing import Iterator, List, Optional, Sequence

import torch
import torch.nn.functional as Fn

from pyg_tc.bench.graphs import default_device, load_graph, resolve_names
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment, log
from pyg_tc.bench.timing import free, kernel_time_note, measure, rel_errors, speedups, warm_up

from .common import sparse_baseline, train_case

KS = (2, 4, 8, 16, 32, 64, 96, 128, 192)
WIDTH = 256
GRAPHS = ['reddit', 'products', 'arxiv', 'tolokers', 'proteins', 'blogcatalog', 'cornell5']
IMPL_NAMES = {'pyg': ' (PyG SAGEConv, edge_index)', 'pyg_adj_t': ' (PyG SAGEConv, sparse adj_t)', 'pyg_tc': ' (pyg_tc)'}


@torch.no_grad()
def bench_kernels(name: str, ks: Sequence[int], device=None, rep: int = 20, log=log) -> Iterator[dict]:
    """One 'maxk_kernel' record per k on graph ``name``."""
    from pyg_tc.formats import CSRGraph
    from pyg_tc.ops import cbsr_spmm_graph, maxk, spmm_graph

    dev = torch.device(device) if device is not None else default_device()
    bg = load_graph(name, dev)
    N, E = bg.num_nodes, bg.num_edges
    g = CSRGraph.from_coo(bg.edge_index[0], bg.edge_index[1], N, N)
    bg = None
    free(dev)
    torch.manual_seed(0)
    x = torch.randn(N, WIDTH, device=dev)
    G = torch.randn(N, WIDTH, device=dev)
    bkey = sparse_baseline(dev)[0]
    A = torch.sparse_csr_tensor(g.rowptr, g.col, torch.ones(E, device=dev), size=(N, N), check_invariants=False)
    dense = measure({}, {bkey: lambda: torch.sparse.mm(A, x), 'csr': lambda: spmm_graph(g, x)}, dev, rep=rep)
    spmm_bytes = E * (WIDTH * 4 + 4) + N * WIDTH * 4
    s = g.sched
    for k in ks:
        c = maxk(x, k)
        ib = c.indices.element_size()
        rec = measure(
            dict(kind='maxk_kernel', graph=name, nodes=N, edges=E, F=WIDTH, k=k, **dense),
            {
                'spgemm': lambda: cbsr_spmm_graph(g, c),
                'sspmm': lambda: torch.ops.pyg_tc.cbsr_sspmm(
                    g.rowptr, g.col, None, G, c.indices, s.units, s.heavy_rows, s.heavy_ptr, s.num_slots, None, 'sum'
                ),
                'select': lambda: maxk(x, k),
                'topk': lambda: torch.topk(x, k, dim=1),
            },
            dev,
            rep=rep,
        )
        for op in ('spgemm', 'sspmm'):
            speedups(rec, op, (bkey, 'csr'))
        speedups(rec, 'select', ('topk',))
        spg, ssp, csr = rec.get('spgemm_ms'), rec.get('sspmm_ms'), rec.get('csr_ms')
        if spg:
            rec['select_share_of_spgemm'] = rec['select_ms'] / spg if rec.get('select_ms') else None
            rec['spgemm_gbps'] = (E * (k * (4 + ib) + 4) + N * WIDTH * 4) / spg / 1e6
        if ssp:
            rec['sspmm_gbps'] = (N * WIDTH * 4 + E * (k * (ib + 4) + 4)) / ssp / 1e6
        if csr:
            rec['spmm_gbps'] = spmm_bytes / csr / 1e6
        # exactness against the dense SpMM of the same (sparsified) features
        rec['spgemm_rel_err'] = rel_errors(cbsr_spmm_graph(g, c), spmm_graph(g, c.to_dense()))['rel_err']
        yield rec
        c = None
    x = G = A = g = None
    free(dev)


def _profile(model, x, y, edge_index, log) -> None:
    """Top kernels of one training step (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    cuda = x.is_cuda
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        opt.zero_grad(set_to_none=True)
        Fn.cross_entropy(model(x, edge_index), y).backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
    log(
        prof.key_averages().table(
            sort_by='cuda_time_total' if cuda else 'cpu_time_total', row_limit=18, max_name_column_width=70
        )
    )


def bench_training(
    name: str = 'reddit',
    k: int = 16,
    hidden: int = 256,
    layers: int = 3,
    in_channels: int = 256,
    classes: int = 41,
    epochs: int = 10,
    log=log,
    profile: bool = False,
    tf32: bool = False,
    device=None,
) -> List[dict]:
    """Full-batch training epoch (forward + backward + Adam step, dropout 0.5)
    of MaxKGNN('sage') with MaxK(k), the same model with ReLU on pyg_tc's CSR
    kernels, and the ReLU model with PyG's own SAGEConv layers: on the
    ``edge_index`` first (PyG's default gather/scatter path); if that runs out
    of memory, on PyG's sparse ``adj_t`` path (torch.sparse CSR, cuSPARSE),
    PyG's documented memory-efficient input for full-batch training.
    ``tf32=True`` runs every model's dense layers with TF32 matmuls (all
    variants alike; the default is PyTorch's fp32)."""
    import torch_geometric.nn as pyg_nn
    from torch_geometric.utils import to_torch_csr_tensor

    from pyg_tc.nn import MaxKGNN

    dev = torch.device(device) if device is not None else default_device()
    bg = load_graph(name, dev)
    N = bg.num_nodes
    torch.manual_seed(0)
    x = torch.randn(N, in_channels, device=dev)
    y = torch.randint(0, classes, (N,), device=dev)
    recs: List[dict] = []
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        for impl, nl in (('pyg_tc', 'maxk'), ('pyg_tc', 'relu'), ('pyg', 'relu'), ('pyg_adj_t', 'relu')):
            if impl == 'pyg_adj_t' and any(r['impl'] == 'pyg' and r['status'] == 'ok' for r in recs):
                continue
            ei = to_torch_csr_tensor(bg.edge_index.flip(0), size=(N, N)) if impl == 'pyg_adj_t' else bg.edge_index

            def build(impl=impl, nl=nl):
                torch.manual_seed(0)
                model = MaxKGNN('sage', in_channels, hidden, classes, layers, k, dropout=0.5, nonlinear=nl).to(dev)
                if impl != 'pyg_tc':  # the same model, PyG's own layers
                    convs = [pyg_nn.SAGEConv(hidden, hidden, aggr='mean').to(dev) for _ in model.convs]
                    for a, b in zip(convs, model.convs):
                        a.load_state_dict(b.state_dict())
                    model.convs = torch.nn.ModuleList(convs)
                return model

            recs.append(
                train_case(
                    dict(
                        kind='maxk_train',
                        graph=name,
                        nodes=N,
                        edges=bg.num_edges,
                        impl=impl,
                        nonlinear=nl,
                        k=k if nl == 'maxk' else None,
                        hidden=hidden,
                        layers=layers,
                        matmul='tf32' if tf32 else 'fp32',
                    ),
                    build,
                    x,
                    y,
                    ei,
                    3,
                    epochs,
                    'epoch',
                    after=(lambda m, ei=ei: _profile(m, x, y, ei, log)) if profile and impl == 'pyg_tc' else None,
                )
            )
            ei = None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    ok = {(r['impl'], r['nonlinear']): r for r in recs if r['status'] == 'ok'}
    mk = ok.get(('pyg_tc', 'maxk'))
    if mk:
        pyg = ('pyg', 'relu') if ('pyg', 'relu') in ok else ('pyg_adj_t', 'relu')
        for key, fld in ((('pyg_tc', 'relu'), 'speedup_vs_relu_csr'), (pyg, 'speedup_vs_relu_pyg')):
            if key in ok:
                mk[fld] = ok[key]['epoch_ms'] / mk['epoch_ms']
    x = y = bg = None
    free(dev)
    return recs


def reporter(out: str, env: dict) -> Reporter:
    """The suite's outputs: cbsr.jsonl, cbsr.md (kernels, training), cbsr.png (Figure 8)."""
    bkey, blabel, _ = sparse_baseline(env['device'])
    k = lambda key, spec='.3f', h=None, bold=False: Col(h or key, key, spec, bold)  # noqa: E731
    kernels = Table(
        '## Kernels (Figure 8)',
        'maxk_kernel',
        [
            k('graph', ''),
            k('k', ''),
            k('spgemm_ms', h='SpGEMM ms'),
            k('sspmm_ms', h='SSpMM ms'),
            k(f'{bkey}_ms', h=f'{blabel} F=256 ms'),
            k('csr_ms', h='pyg_tc CSR F=256 ms'),
            k(f'spgemm_vs_{bkey}', '.2f', f'SpGEMM vs {blabel}'),
            k(f'sspmm_vs_{bkey}', '.2f', f'SSpMM vs {blabel}'),
            k('spgemm_vs_csr', '.2f', 'SpGEMM vs CSR'),
            k('sspmm_vs_csr', '.2f', 'SSpMM vs CSR'),
            k('spgemm_gbps', '.0f', 'SpGEMM GB/s'),
            k('sspmm_gbps', '.0f', 'SSpMM GB/s'),
            k('select_ms', h='select ms'),
            k('topk_ms', h='topk ms'),
            k('select_share_of_spgemm', '.1%', 'select / SpGEMM'),
            k('spgemm_rel_err', '.1e', 'SpGEMM rel err'),
        ],
    )
    train = Table(
        '## Training epoch (3-layer SAGE, hidden 256, full batch, forward + backward + Adam)',
        'maxk_train',
        [
            k('graph', ''),
            Col(
                'model', lambda r: (f'MaxK k={r["k"]}' if r['nonlinear'] == 'maxk' else 'ReLU') + IMPL_NAMES[r['impl']]
            ),
            k('matmul', '', 'dense matmuls'),
            k('status', ''),
            k('epoch_ms', '.2f', 'epoch ms'),
            k('peak_mb', '.0f', 'peak MiB'),
            k('speedup_vs_relu_csr', '.2f', 'MaxK x ReLU pyg_tc'),
            k('speedup_vs_relu_pyg', '.2f', 'MaxK x ReLU PyG'),
        ],
    )
    panels = [
        Panel(
            'maxk_kernel',
            'k',
            f'{op}_vs_{bkey}',
            series='graph',
            style='line',
            hline=1.0,
            logx=2,
            logy=2,
            title=f'{title} vs {blabel} SpMM F=256',
            xlabel='k (of width 256)',
            ylabel='speedup (kernel-only)',
        )
        for op, title in (('spgemm', 'SpGEMM (forward)'), ('sspmm', 'SSpMM (backward)'))
    ]
    head = [
        f'- device {env["device"]} ({env.get("gpu") or "no GPU: CPU emulations, a code-path check only"}); '
        f'torch {env["torch"]}; width {WIDTH}, fp32; {kernel_time_note(env["device"])}, all '
        'implementations in the same run.'
    ]
    return Reporter(
        out,
        'cbsr.jsonl',
        'cbsr.md',
        'MaxK-GNN kernels (Figure 8) and training',
        env,
        None,
        [kernels, train],
        [Figure('cbsr.png', panels, ncols=2)],
        lambda env, recs: head,
        tag='cbsr',
    )


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Command line: see the module docstring; returns the exit code."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n\n')[0])
    p.add_argument('--out', default='bench_out')
    p.add_argument('--graphs', help=f'default {",".join(GRAPHS)} (tiny without CUDA)')
    p.add_argument('--ks', default=','.join(map(str, KS)))
    p.add_argument('--no-train', action='store_true')
    p.add_argument('--train-graph', help='default reddit (tiny without CUDA)')
    p.add_argument('--profile', action='store_true', help='print a kernel breakdown of the training steps')
    p.add_argument('--tf32', action='store_true', help='also run the training with TF32 matmuls')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    a = p.parse_args(argv)
    dev = torch.device(a.device)
    cpu = dev.type != 'cuda'
    if cpu:
        log('[warn] no CUDA device: a smoke run of the CPU emulations (times are not kernel times)')
    rep = reporter(a.out, environment(dev))
    warm_up(dev)
    tg = a.train_graph or ('tiny' if cpu else 'reddit')
    ks = [int(v) for v in a.ks.split(',')]
    items = (
        []
        if a.no_train
        else [('train', tg, lambda: bench_training(tg, profile=a.profile, device=dev))]
        + ([('train tf32', tg, lambda: bench_training(tg, tf32=True, device=dev))] if a.tf32 else [])
    )
    items += [
        ('kernels', n, lambda n=n: bench_kernels(n, ks, dev))
        for n in resolve_names(a.graphs, ['tiny'] if cpu else GRAPHS)
    ]
    paths = rep.run(items, dev)
    print(open(paths['markdown']).read())
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
