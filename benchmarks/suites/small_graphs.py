"""Full-graph training on small graphs, PyG against pyg_tc (JSON + markdown + PNG).

Per graph (Cora and CiteSeer: the real Planetoid graphs when ``$PYG_TC_DATA``
holds them, else random graphs of their shape; PubMed-shaped: 19,717 nodes,
88,648 edges, 500 features, 3 classes) and model (two layers: GCN 16 hidden
with ``cached=True``, SAGE 16, GIN 16 (two-layer MLPs), GAT and GATv2 8 heads
x 8 then 1 head with dropout 0.6, AGNN as PyG's example: linear, two AGNN
layers, linear), the training step (forward, cross-entropy over
``train_mask``, backward, Adam) of:

* ``PyG eager``: PyG's layers, the loss indexed by the mask (PyG's example);
  ``PyG eager, again``: the same step timed as a second run (its ratio to
  the first is the timing's noise);
* ``PyG compiled``: ``torch.compile`` of PyG's model (``--pyg-compile``;
  the default mode, then ``reduce-overhead``; the faster one that runs);
* ``PyG captured``: :class:`pyg_tc.capture.CapturedStep` around PyG's model
  (where PyG's layers can be captured);
* ``pyg_tc eager``: pyg_tc's layers, the same weights and loss
  (``backend='auto'``: PyG's own path where that is faster,
  :func:`pyg_tc.ops.dispatch.prefers_pyg`);
* ``pyg_tc eager, kernels only``: the same with pyg_tc's kernels in every
  layer (``dispatch.kernel_paths()``);
* ``pyg_tc captured``: :class:`pyg_tc.capture.CapturedStep` around them.

Each row gives the wall time per step (steps back to back, synchronised at
the ends: the host included; ``--steps`` steps in ``--rounds`` rounds that
time every run in turn, the order rotated each round, the median round),
the GPU time per step (the kernels' times summed, ``torch.profiler``), the
kernels per step, the peak memory (what the first steps allocate beyond what
was allocated before them, a capture included) and the test accuracy after
the run's steps (real graphs; random labels on the shaped ones), and the
ratio to PyG's eager step. On a CPU the captured rows are the eager step
(nothing to capture).
``pyg-tc bench small_graphs --out DIR [--pyg-compile]`` (or
``python -m benchmarks.suites.small_graphs``).

``--crossover`` instead sweeps random graphs of 16k to 1M edges (500
features, hidden 16 and 64) for SAGE, GCN and GIN: PyG's eager step,
pyg_tc's (``backend='auto'``) and pyg_tc's kernels; where the kernels
overtake PyG's path is ``pyg_tc.ops.dispatch.PYG_BELOW``.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
from typing import Optional

import torch
import torch.nn.functional as Fn
import torch_geometric.nn as pyg_nn
from torch_geometric.data import Data

import pyg_tc
from pyg_tc.bench.graphs import DATA_ENV, pyg_dataset
from pyg_tc.bench.models import Net
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, environment, log
from pyg_tc.bench.timing import kernel_profile, loop_ms, short_error
from pyg_tc.capture import CapturedStep, masked_loss
from pyg_tc.ops import dispatch

from .common import read_records, rerender

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
#: graph -> (nodes, edges, features, classes, Planetoid name or None)
SHAPES = {
    'cora': (2708, 10556, 1433, 7, 'Cora'),
    'citeseer': (3327, 9104, 3703, 6, 'CiteSeer'),
    'pubmed': (19717, 88648, 500, 3, None),
}
MODELS = ('gcn', 'sage', 'gin', 'gat', 'gatv2', 'agnn')


def random_graph(n: int, e: int, f: int, c: int, seed: int = 0) -> Data:
    """A random undirected graph of ``n`` nodes and ``e`` edges, sparse
    bag-of-words-like features of width ``f``, ``c`` classes, 20 training
    nodes per class."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, c, (n,), generator=g)
    perm = torch.randperm(n, generator=g)
    train, test = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    train[perm[: 20 * c]] = True
    test[perm[-min(1000, n // 2) :]] = True
    src, dst = torch.randint(0, n, (2, e // 2), generator=g)
    ei = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)  # undirected, as Planetoid
    x = (torch.rand(n, f, generator=g) < 0.01).float()
    return Data(x=x, y=y, edge_index=ei, train_mask=train, test_mask=test, real=False).to(DEV)


def graph(name: str) -> Data:
    """The real graph when ``$PYG_TC_DATA`` has it, else a random one of its shape (20 training nodes per class)."""
    n, e, f, c, real = SHAPES[name]
    if real and os.environ.get(DATA_ENV):
        try:
            d = pyg_dataset('Planetoid', 'planetoid', real, real)[0]
            d.real = True
            return d.to(DEV)
        except FileNotFoundError as err:
            log(f'[small] {name}: {err}; a random graph of its shape')
    return random_graph(n, e, f, c)


def make_model(lib, kind: str, cin: int, classes: int, hidden: int = 16) -> Net:
    """PyG's two-layer examples from ``lib`` (``torch_geometric.nn`` or
    ``pyg_tc.nn``): GCN (``cached=True``), SAGE and GIN (MLPs of width
    ``hidden``) with dropout 0.5; GAT / GATv2 with 8 heads x 8 then one head,
    ELU, dropout 0.6 on features and attention; AGNN: linear, two AGNN
    layers, linear (width 16), dropout 0.5."""
    if kind == 'agnn':
        return Net(lib, 'agnn', [cin, 16, 16, 16, classes], dropout=0.5)
    if kind in ('gat', 'gatv2'):
        return Net(lib, kind, [cin, 64, classes], dropout=0.6, heads=8, last_heads=1, att_dropout=0.6, act='elu')
    return Net(lib, kind, [cin, hidden, classes], dropout=0.5, cached=True, mlp_width=hidden)


def _eager(model, opt, data, compiled=False):
    def step(_):
        if compiled:  # torch.compile's CUDA graphs: a new step (its outputs may be overwritten)
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        out = model(data.x, data.edge_index)
        loss = Fn.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()
        return loss

    return step


def _kernels_only(step):
    """``step`` with pyg_tc's kernels on every layer (``backend='auto'`` takes
    PyG's path on small graphs where that is faster)."""

    def run(item):
        with dispatch.kernel_paths():
            return step(item)

    return run


def _accuracy(model, data) -> float:
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(-1)
    model.train()
    m = data.test_mask
    return float((pred[m] == data.y[m]).float().mean())


def _compiled_pyg(base, data, steps):
    """``torch.compile`` of PyG's model: the faster of the default mode and
    ``reduce-overhead`` that runs (mode, step, model) or the errors."""
    best, errors = None, []
    for mode in ('default', 'reduce-overhead'):
        m = copy.deepcopy(base)
        try:
            torch._dynamo.reset()
            cm = torch.compile(m, mode=mode)
            step = _eager(cm, torch.optim.Adam(m.parameters(), lr=0.01), data, compiled=True)
            ms = loop_ms(step, range(steps // 4 + 3), DEV, warmup=3)
            if best is None or ms < best[3]:
                best = (mode, step, m, ms)
        except Exception as e:  # noqa: BLE001 (a mode that does not run is reported, not fatal)
            errors.append(f'{mode}: {short_error(e)}')
    return best, errors


def step_records(name: str, a):
    data = graph(name)
    data.edge_index = data.edge_index.contiguous()
    C = int(data.y.max()) + 1
    for kind in a.models:
        torch.manual_seed(0)
        base_pyg = make_model(pyg_nn, kind, data.num_features, C).to(DEV)
        eager = lambda m: _eager(m, torch.optim.Adam(m.parameters(), lr=0.01), data)  # noqa: E731
        # the same PyG step twice: the spread between the two is the timing's noise
        runs = [('PyG eager', base_pyg, eager), ('PyG eager, again', base_pyg, eager)]
        compiled = None
        if a.pyg_compile:
            log(f'[small] {name} {kind}: compiling PyG\'s model')
            compiled, errors = _compiled_pyg(base_pyg, data, a.steps)
            if errors:
                log(f'[small] {name} {kind}: torch.compile: ' + '; '.join(errors))
        cap = lambda m: CapturedStep(
            m,
            torch.optim.Adam(m.parameters(), lr=0.01, capturable=DEV.type == 'cuda'),  # noqa: E731
            loss_fn=masked_loss,
        )
        tc = make_model(pyg_tc.nn, kind, data.num_features, C).to(DEV)
        tc.load_state_dict(base_pyg.state_dict())
        runs += [
            ('PyG captured', base_pyg, cap),
            ('pyg_tc eager', tc, lambda m: _eager(m, torch.optim.Adam(m.parameters(), lr=0.01), data)),
            (
                'pyg_tc eager, kernels only',
                tc,
                lambda m: _kernels_only(_eager(m, torch.optim.Adam(m.parameters(), lr=0.01), data)),
            ),
            ('pyg_tc captured', tc, cap),
        ]
        made = []  # (run, model, step, the CapturedStep or None)
        if compiled is not None:
            mode, step, m, _ = compiled
            made.append((f'PyG compiled ({mode})', m, step, None))
        first = {}  # run -> peak MB of its first steps, or the error it raised
        for run, base, make in runs:
            m = copy.deepcopy(base)
            torch.manual_seed(1)
            try:
                step = make(m)
                call = (lambda s: lambda _: s(data))(step) if isinstance(step, CapturedStep) else step
                first[run] = _first_steps(call)  # (a capture happens here)
                made.append((run, m, call, step if isinstance(step, CapturedStep) else None))
            except Exception as err:  # noqa: BLE001 (PyG's GAT cannot be captured: reported)
                log(f'[small] {name} {kind} {run}: {short_error(err)}')
                first[run] = short_error(err)
        walls = _interleaved([(run, step) for run, _, step, _ in made], a)
        recs = []
        for run, m, step, obj in made:
            prof = kernel_profile(step, range(a.profile_steps), DEV)
            peak = first.get(run)
            rec = dict(
                kind='step',
                graph=name,
                model=kind,
                run=run,
                wall_ms=walls[run],
                gpu_ms=prof['gpu_ms'],
                launches=prof['launches'],
                accuracy=_accuracy(m, data) if data.real else None,
                peak_mb=peak if isinstance(peak, float) else None,
            )
            if obj is not None:
                rec.update(replays=obj.replays, eager_steps=obj.eager_steps)
            recs.append(rec)
        recs += [
            dict(kind='step', graph=name, model=kind, run=run, error=e)
            for run, e in first.items()
            if isinstance(e, str)
        ]
        ref = next((r.get('wall_ms') for r in recs if r['run'] == 'PyG eager'), None)
        for r in recs:
            r.update(nodes=data.num_nodes, edges=data.edge_index.size(1), real=bool(data.real))
            if 'wall_ms' in r and ref:
                r['x_pyg_eager'] = ref / r['wall_ms']
            yield r


#: the crossover sweep: edge counts (nodes = edges / 5, 500 features, 3 classes) and hidden widths
CROSS_EDGES = (16384, 65536, 131072, 262144, 524288, 1048576)
CROSS_HIDDEN = (16, 64)


def crossover_records(model: str, a):
    """Where pyg_tc's kernels overtake PyG's path in an eager two-layer step
    (``dispatch.PYG_BELOW``): PyG's layers, pyg_tc with ``backend='auto'``,
    pyg_tc's kernels, on random graphs of growing size, per hidden width."""
    for E in CROSS_EDGES:
        data = random_graph(max(E // 5, 1000), E, 500, 3)
        for hidden in CROSS_HIDDEN:
            torch.manual_seed(0)
            base = make_model(pyg_nn, model, 500, 3, hidden).to(DEV)
            runs = []
            for run in ('PyG eager', 'pyg_tc eager', 'pyg_tc eager, kernels only'):
                m = copy.deepcopy(base) if run == 'PyG eager' else make_model(pyg_tc.nn, model, 500, 3, hidden).to(DEV)
                m.load_state_dict(base.state_dict())
                ei = data.edge_index.clone()  # each run its own tensor: no format shared
                d = Data(x=data.x, y=data.y, edge_index=ei, train_mask=data.train_mask)
                step = _eager(m, torch.optim.Adam(m.parameters(), lr=0.01), d)
                runs.append((run, _kernels_only(step) if run.endswith('kernels only') else step))
            for _, step in runs:
                for _ in range(dispatch.FRESH_GRAPH_CALLS + 3):
                    step(None)
            walls = _interleaved(runs, a)
            for run, wall in walls.items():
                yield dict(
                    kind='crossover',
                    model=model,
                    edges=E,
                    hidden=hidden,
                    run=run,
                    wall_ms=wall,
                    x_pyg_eager=walls['PyG eager'] / wall,
                )


def _first_steps(step, n: int = 5) -> Optional[float]:
    """Runs ``n`` steps (warm-up; a CapturedStep captures); the memory (MB)
    they reach above what was allocated before them (activations, gradients,
    optimizer state, a capture's pool)."""
    if DEV.type == 'cuda':
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    for _ in range(n):
        step(None)
    if DEV.type == 'cuda':
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / 2**20
    return None


def _interleaved(runs, a) -> dict:
    """Wall ms per step of each run: ``a.rounds`` rounds, each timing every
    run for ``a.steps // a.rounds`` steps in turn, the order rotated by one
    run per round; the median round (the host's speed drifts over a process,
    so runs measured one after the other would compare different hosts)."""
    per = max(a.steps // a.rounds, 1)
    times: dict = {run: [] for run, _ in runs}
    for r in range(a.rounds):
        k = r % len(runs)
        for run, step in runs[k:] + runs[:k]:
            times[run].append(loop_ms(step, range(per + 1), DEV, warmup=1))
    return {run: statistics.median(ts) for run, ts in times.items()}


def _case(r: dict) -> str:
    return f"{r['graph']} {r['model']}"


def main(argv=None, prog=None):
    """Command line: see the module docstring; returns the exit code."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split('\n')[0])
    p.add_argument('--out', default='small_graphs_out')
    p.add_argument('--name', default='small_graphs', help='the files\' name (NAME.jsonl, NAME.md, NAME.png)')
    p.add_argument('--graphs', default='cora,citeseer,pubmed')
    p.add_argument('--models', default=','.join(MODELS))
    p.add_argument('--steps', type=int, default=200, help='timed steps per run (over all rounds)')
    p.add_argument('--rounds', type=int, default=20, help='rounds the runs are timed in, in turn')
    p.add_argument('--profile-steps', type=int, default=10)
    p.add_argument('--pyg-compile', action='store_true', help="also torch.compile of PyG's model")
    p.add_argument(
        '--crossover',
        action='store_true',
        help='only the sweep of where the kernels overtake '
        "PyG's path (dispatch.PYG_BELOW), for --models (default sage,gcn,gin)",
    )
    p.add_argument(
        '--render',
        metavar='JSONL',
        nargs='+',
        help='only rewrite the markdown and PNG from these '
        "records (runs of other models appended; the run block from the first file's 'env' record)",
    )
    a = p.parse_args(argv)
    if a.crossover and a.models == ','.join(MODELS):
        a.models = 'sage,gcn,gin'
    a.models = a.models.split(',')
    if DEV.type != 'cuda':
        log('[small] no CUDA GPU: the CPU path (captured rows run eagerly)')
    env = environment(DEV, steps=a.steps, rounds=a.rounds)
    if a.render:
        records, env = read_records(a.render)
    title = 'Full-graph training on small graphs' + (' (CPU)' if env.get('device') == 'cpu' else '')
    rep = Reporter(
        a.out,
        f'{a.name}.jsonl',
        f'{a.name}.md',
        title,
        env=env,
        env_mode='first',
        sections=[
            Table(
                '## Per training step',
                'step',
                [
                    Col('graph', 'graph'),
                    Col('model', 'model'),
                    Col('run', 'run'),
                    Col('wall ms', 'wall_ms', '.3f'),
                    Col('GPU ms', 'gpu_ms', '.3f'),
                    Col('kernels', 'launches', ',.0f'),
                    Col('x PyG eager', 'x_pyg_eager', '.2f', bold=True),
                    Col('test accuracy', 'accuracy', '.3f'),
                    Col('peak MB', 'peak_mb', ',.0f'),
                    Col('error', 'error'),
                ],
            ),
            Table(
                '## Where the kernels overtake PyG\'s path (random graphs, 500 features, two layers)',
                'crossover',
                [
                    Col('model', 'model'),
                    Col('edges', 'edges', ',.0f'),
                    Col('hidden', 'hidden', '.0f'),
                    Col('run', 'run'),
                    Col('wall ms', 'wall_ms', '.3f'),
                    Col('x PyG eager', 'x_pyg_eager', '.2f', bold=True),
                ],
            ),
        ],
        figures=[
            Figure(
                f'{a.name}.png',
                [
                    Panel(
                        lambda rs: [dict(r, case=_case(r)) for r in rs if r.get('kind') == 'step'],
                        'case',
                        'x_pyg_eager',
                        series='run',
                        title="full-graph training step, speed-up over PyG's eager step (higher is better)",
                    )
                ],
            )
        ],
    )
    if a.render:
        for kind in ('step', 'crossover'):
            rerender(rep, records, kind)
        return 0
    # one-off allocations (cuBLAS's workspace) before the first run's memory is measured
    (torch.ones(8, 8, device=DEV) @ torch.ones(8, 8, device=DEV)).sum().item()
    if a.crossover:
        rep.run([('crossover', m, lambda m=m: crossover_records(m, a)) for m in a.models], device=DEV)
        return 0
    rep.run([('steps', g, lambda g=g: step_records(g, a)) for g in a.graphs.split(',')], device=DEV)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
