"""End-to-end training step: a 2-layer GNN built from PyG's layers and from
pyg_tc's drop-in layers with identical initial weights, features and labels.

Per implementation: the first ``steps`` steps from the shared initial weights
give the loss curve (and serve as warm-up: the ``cached=True`` graph
preprocessing happens in step 1), then ``rep`` steps are timed with CUDA
events. Peak memory is reset before step 1 and read after the last timed step;
``resident_mb`` is what was allocated before (graph, features, labels, model).
"""
from __future__ import annotations

import gc
import importlib
from typing import Callable, Dict, List

import torch
import torch.nn.functional as Fn

from .graphs import BenchGraph
from .timing import bench, track_memory

MODELS = ('gcn', 'sage', 'gin')
IMPLS = {'pyg': 'torch_geometric.nn', 'pyg_tc': 'pyg_tc.nn'}


def _mib(v) -> str:
    return '- MiB' if v is None else f'{v:.0f} MiB'


def _conv(lib, kind: str, cin: int, cout: int):
    if kind == 'gcn':
        return lib.GCNConv(cin, cout, cached=True)
    if kind == 'sage':
        return lib.SAGEConv(cin, cout, aggr='mean')
    if kind == 'gin':
        return lib.GINConv(torch.nn.Sequential(torch.nn.Linear(cin, cout), torch.nn.ReLU(),
                                               torch.nn.Linear(cout, cout)))
    raise ValueError(f'unknown model {kind!r}; choose from {MODELS}')


class Net(torch.nn.Module):
    """conv(in, hidden) -> ReLU -> conv(hidden, out); no dropout (deterministic)."""

    def __init__(self, lib, kind: str, cin: int, hidden: int, cout: int):
        super().__init__()
        self.conv1 = _conv(lib, kind, cin, hidden)
        self.conv2 = _conv(lib, kind, hidden, cout)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def time_training(model, x, y, edge_index, steps: int, rep: int, lr: float = 0.01):
    """Full-batch cross-entropy training steps with Adam: the losses of the
    first ``steps`` steps (also the warm-up), then ``rep`` timed steps, with
    peak memory tracked over both. Returns (losses, Timing, memory dict)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = Fn.cross_entropy(model(x, edge_index), y)
        loss.backward()
        opt.step()
        return loss

    with track_memory(x.device) as mem:
        losses = [float(step().detach()) for _ in range(steps)]
        t = bench(step, warmup=0, rep=rep, device=x.device)
    return losses, t, mem


def _run_impl(impl: str, kind: str, state: dict, x, y, edge_index, dims, steps: int, rep: int,
              lr: float) -> dict:
    model = Net(importlib.import_module(IMPLS[impl]), kind, *dims).to(x.device)
    model.load_state_dict(state)
    losses, t, mem = time_training(model, x, y, edge_index, steps, rep, lr)
    return dict(status='ok', step_ms=t.median_ms, step_min_ms=t.min_ms, step_max_ms=t.max_ms,
                step_reps=t.reps, losses=losses, loss_first=losses[0] if losses else None,
                loss_last=losses[-1] if losses else None, **mem)


def bench_training(bg: BenchGraph, models=('gcn',), steps: int = 10, rep: int = 20,
                   in_channels: int = 256, hidden: int = 64, out_channels: int = 41,
                   lr: float = 0.01, seed: int = 0, log: Callable[[str], None] = print) -> List[dict]:
    """Records (kind 'train') for each model kind and implementation."""
    dev = bg.edge_index.device
    dims = (in_channels, hidden, out_channels)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    x = torch.randn(bg.num_nodes, in_channels, generator=gen, device=dev)
    y = torch.randint(0, out_channels, (bg.num_nodes,), generator=gen, device=dev)
    records: List[dict] = []
    for kind in models:
        torch.manual_seed(seed)
        state = {k: v.clone() for k, v in
                 Net(importlib.import_module(IMPLS['pyg']), kind, *dims).state_dict().items()}
        by_impl: Dict[str, dict] = {}
        for impl in IMPLS:
            rec = dict(kind='train', graph=bg.name, nodes=bg.num_nodes, edges=bg.num_edges,
                       model=kind, impl=impl, dims=list(dims), steps=steps)
            try:
                rec.update(_run_impl(impl, kind, state, x, y, bg.edge_index, dims, steps, rep, lr))
            except torch.OutOfMemoryError:
                rec['status'] = 'oom'
            except Exception as e:  # e.g. a layer not available yet
                rec['status'] = f'error: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ""}'
            gc.collect()
            if dev.type == 'cuda':
                torch.cuda.empty_cache()
            by_impl[impl] = rec
            records.append(rec)
        ref, tc = by_impl['pyg'], by_impl['pyg_tc']
        if ref.get('status') == 'ok' and tc.get('status') == 'ok':
            tc['speedup_vs_pyg'] = ref['step_ms'] / tc['step_ms']
            tc['loss_max_abs_diff_vs_pyg'] = max(abs(a - b) for a, b in zip(ref['losses'], tc['losses']))
            if ref.get('peak_mb'):
                tc['memory_ratio_vs_pyg'] = tc['peak_mb'] / ref['peak_mb']
        for rec in (ref, tc):
            log(f'[train] {bg.name} {kind} {rec["impl"]}: {rec.get("status")} '
                + (f'step {rec["step_ms"]:.2f} ms, peak {_mib(rec["peak_mb"])} '
                   f'(resident {_mib(rec["resident_mb"])}), loss {rec["loss_first"]:.4f} -> '
                   f'{rec["loss_last"]:.4f}' if rec.get('status') == 'ok' else '')
                + (f', x{rec["speedup_vs_pyg"]:.2f} vs PyG, max |dloss| '
                   f'{rec["loss_max_abs_diff_vs_pyg"]:.1e}' if 'speedup_vs_pyg' in rec else ''))
    del x, y
    return records
