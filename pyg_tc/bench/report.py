"""Benchmark output: JSON lines (written as cases finish), markdown, PNG.

Three files in the output directory, rewritten after every graph so that a run
cut short by a time limit still leaves a complete report of what finished:

* ``results.jsonl``: one object per case (``kind``: 'build', 'spmm', 'train'),
  each with the environment (GPU name, torch version, timestamp, ...); the
  last line is the summary (``kind``: 'summary').
* ``report.md``: environment, summary and per-case tables.
* ``speedup.png``: speedup vs cuSPARSE per graph and width, bars by dtype.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
from typing import Dict, List, Optional

import torch

from .spmm import DTYPES, summarize


def environment(info: Optional[dict] = None, copy: Optional[dict] = None) -> dict:
    import torch_geometric
    info = info or {}
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        'gpu': gpu, 'torch': torch.__version__, 'torch_cuda': torch.version.cuda,
        'torch_geometric': torch_geometric.__version__, 'pyg_tc_version': info.get('pyg_tc'),
        'python': platform.python_version(), 'host': platform.node(),
        'kernels': info.get('kernels'), 'kernels_reason': info.get('kernels_reason'),
        'backend': info.get('backend'),
        'baseline': 'cuSPARSE via torch.sparse.mm (CSR)' if gpu else
                    'torch.sparse.mm on the CPU (not cuSPARSE)',
        'copy_gbps': (copy or {}).get('copy_gbps'),
        'started': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
    }


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


class Reporter:
    """Collects records, appends each to ``results.jsonl`` at once, and
    (re)writes the full set of outputs on :meth:`write`."""

    def __init__(self, out_dir: str, env: dict):
        self.out_dir, self.env, self.records = out_dir, env, []
        os.makedirs(out_dir, exist_ok=True)
        self.jsonl = os.path.join(out_dir, 'results.jsonl')
        open(self.jsonl, 'w').close()

    def add(self, rec: dict) -> None:
        rec = dict(rec, timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec='seconds'))
        self.records.append(rec)
        with open(self.jsonl, 'a') as f:
            f.write(json.dumps({k: _jsonable(v) for k, v in {**self.env, **rec}.items()}) + '\n')

    def of(self, kind: str) -> List[dict]:
        return [r for r in self.records if r.get('kind') == kind]

    def write(self, notes: List[str] = ()) -> Dict[str, str]:
        summary = summarize(self.records)
        with open(self.jsonl, 'w') as f:
            for r in self.records + [{'kind': 'summary', 'summary': summary}]:
                f.write(json.dumps({k: _jsonable(v) for k, v in {**self.env, **r}.items()}) + '\n')
        paths = {'jsonl': self.jsonl,
                 'markdown': os.path.join(self.out_dir, 'report.md'),
                 'png': os.path.join(self.out_dir, 'speedup.png')}
        with open(paths['markdown'], 'w') as f:
            f.write(markdown(self.env, summary, self.records, notes))
        try:
            plot(self.of('spmm'), paths['png'], title=self.env.get('gpu') or 'CPU (reference path)',
                 baseline='cuSPARSE' if self.env.get('gpu') else 'torch.sparse (CPU)')
        except ImportError:  # matplotlib is in the 'bench' extra
            print('[warn] matplotlib is not installed (pip install "pyg_tc[bench]"): no PNG plot',
                  flush=True)
            del paths['png']
        return paths


# -- markdown -----------------------------------------------------------------

def _c(v, spec='.3f') -> str:
    if v is None:
        return '-'
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def _err(e: Optional[str]) -> str:
    """Short table cell for an implementation that did not run (full text in the JSON)."""
    if not e:
        return '-'
    if e == 'oom':
        return 'oom'
    if 'NotImplemented' in e or 'not implemented' in e or 'not supported' in e:
        return 'unsupported'
    return 'error'


def _table(header: List[str], rows: List[List[str]]) -> str:
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(r) + ' |' for r in rows]
    return '\n'.join(lines) + '\n'


def markdown(env: dict, summary: dict, records: List[dict], notes: List[str] = ()) -> str:
    s = ['# pyg_tc benchmark\n']
    s.append(f'- GPU: {env.get("gpu") or "none"}; torch {env["torch"]} (CUDA {env["torch_cuda"]}), '
             f'PyG {env["torch_geometric"]}, pyg_tc {env.get("pyg_tc_version")}; started {env["started"]}')
    s.append(f'- pyg_tc backend: {env.get("backend")} (kernels {env.get("kernels")}'
             + (f': {env["kernels_reason"]}' if env.get('kernels_reason') else '') + ')')
    s.append(f'- baseline: {env.get("baseline")}')
    if env.get('copy_gbps'):
        s.append(f'- measured device copy bandwidth (read + write): {env["copy_gbps"]:.0f} GB/s')
    s += [f'- {n}' for n in notes]
    s.append('- times: median over the repetitions after warm-up ('
             + ('CUDA events' if env.get('gpu') else 'time.perf_counter') + '); '
             'all implementations in the same run on the same inputs. '
             'GB/s: compulsory bytes (col + rowptr + x read once + out written once) and '
             'gather bytes (every edge gathers its source row; an upper bound) over the median time.\n')

    base = 'cuSPARSE' if env.get('gpu') else 'torch.sparse'
    s.append('## Summary (speedups over F in 32, 64, 128, 256)\n')
    if not summary:
        s.append('No SpMM case with F in 32, 64, 128, 256.\n')
    else:
        s.append('"large" = synthetic + larger real graphs (the speed targets).\n')
        s.append('Per call: median time of one eager call from Python (what a user sees; '
                 'includes host overhead). Kernel-only: the same calls captured in a CUDA '
                 'graph and replayed (no host overhead), for both implementations.\n')
        rows = [[v['group'], v['dtype'], str(v['cases']), _c(v['geomean_vs_cusparse'], '.2f'),
                 _c(v['min_vs_cusparse'], '.2f'), _c(v.get('kernel_geomean_vs_cusparse'), '.2f'),
                 _c(v.get('kernel_min_vs_cusparse'), '.2f'), _c(v['geomean_vs_pyg_tc_fp32'], '.2f'),
                 _c(v['max_rel_err'], '.1e'), ', '.join(v['graphs'])] for v in summary.values()]
        s.append(_table(['graphs', 'dtype', 'cases', f'per call: geomean vs {base}',
                         f'min vs {base}', 'kernel-only: geomean', 'min',
                         'geomean vs pyg_tc fp32', 'max rel err', 'graph set'], rows))

    spmm = [r for r in records if r.get('kind') == 'spmm']
    if spmm:
        s.append('\n## SpMM cases\n')
        impls = [n for n in ('pyg_tc', 'cusparse', 'torch_sparse')
                 if any(f'{n}_ms' in r or f'{n}_error' in r for r in spmm)]
        rows = []
        for r in spmm:
            row = [r['graph'], f'{r["nodes"]:,}', f'{r["edges"]:,}', str(r['F']), r['dtype']]
            row += [_c(r.get(f'{n}_ms'), '.4f') if f'{n}_ms' in r else _err(r.get(f'{n}_error'))
                    for n in impls]
            row += [_c(r.get('speedup_vs_cusparse'), '.2f'), _c(r.get('speedup_vs_pyg_tc_fp32'), '.2f'),
                    _c(r.get('gbps_compulsory'), '.0f'), _c(r.get('gbps_gather'), '.0f'),
                    _c(r.get('frac_copy_gather'), '.2f'), _c(r.get('pyg_tc_rel_err'), '.1e'),
                    _c(r.get('pyg_tc_spread'), '.2f')]
            rows.append(row)
        s.append(_table(['graph', 'N', 'E', 'F', 'dtype'] + [f'{n} ms' for n in impls]
                        + [f'x {base}', 'x pyg_tc fp32', 'GB/s compulsory', 'GB/s gather',
                           'gather / copy BW', 'rel err', 'spread'], rows))

    build = [r for r in records if r.get('kind') == 'build']
    if build:
        s.append('\n## Graph build (CSRGraph.from_coo, both directions + schedules)\n')
        s.append(_table(['graph', 'N', 'E', 'max degree', 'build ms'],
                        [[r['graph'], f'{r["nodes"]:,}', f'{r["edges"]:,}', f'{r["max_degree"]:,}',
                          _c(r['build_ms'], '.2f')] for r in build]))

    train = [r for r in records if r.get('kind') == 'train']
    if train:
        s.append('\n## Training step (forward + backward + Adam), 2 layers\n')
        rows = [[r['graph'], r['model'], r['impl'], r.get('status', 'ok'), _c(r.get('step_ms'), '.2f'),
                 _c(r.get('speedup_vs_pyg'), '.2f'), _c(r.get('peak_mb'), '.0f'),
                 _c(r.get('resident_mb'), '.0f'), _c(r.get('extra_mb'), '.0f'),
                 _c(r.get('loss_first'), '.4f'), _c(r.get('loss_last'), '.4f'),
                 _c(r.get('loss_max_abs_diff_vs_pyg'), '.1e')] for r in train]
        s.append(_table(['graph', 'model', 'impl', 'status', 'step ms', 'x PyG', 'peak MiB',
                         'resident MiB', 'peak - resident MiB', 'loss[0]', 'loss[-1]',
                         'max abs loss diff vs PyG'], rows))
    return '\n'.join(s) + '\n'


# -- plot -----------------------------------------------------------------------

def plot(spmm: List[dict], path: str, title: str = '', baseline: str = 'cuSPARSE') -> None:
    """One panel per dtype: graphs on the x axis, one bar per feature width,
    height = speedup over the baseline in the same dtype (dashed line = 1)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    graphs: List[str] = []
    widths: List[int] = []
    for r in spmm:
        if r['graph'] not in graphs:
            graphs.append(r['graph'])
        if r['F'] not in widths:
            widths.append(r['F'])
    widths.sort()
    dnames = [d for d in DTYPES if any(r['dtype'] == d for r in spmm)] or ['fp32']
    fig, axes = plt.subplots(len(dnames), 1, figsize=(max(7.0, 1.1 * len(graphs) + 2),
                                                      2.6 * len(dnames) + 0.6),
                             sharex=True, squeeze=False)
    w = 0.8 / max(1, len(widths))
    for ax, d in zip(axes[:, 0], dnames):
        val = {(r['graph'], r['F']): r.get('speedup_vs_cusparse', float('nan'))
               for r in spmm if r['dtype'] == d}
        for i, F in enumerate(widths):
            xs = [j + (i - (len(widths) - 1) / 2) * w for j in range(len(graphs))]
            ys = [val.get((g, F), float('nan')) for g in graphs]
            ax.bar(xs, ys, w, label=f'F={F}')
            for xv, yv in zip(xs, ys):
                if math.isnan(yv):
                    ax.text(xv, 0.02, 'n/a', ha='center', va='bottom', fontsize=6, rotation=90,
                            transform=ax.get_xaxis_transform())
        ax.axhline(1.0, color='k', lw=0.8, ls='--')
        ax.set_ylabel(f'{d}: x {baseline}', fontsize=9)
        ax.grid(axis='y', alpha=0.3)
    axes[0, 0].set_title(f'pyg_tc SpMM speedup over {baseline} (same dtype), {title}', fontsize=10)
    axes[0, 0].legend(fontsize=8, ncol=len(widths), loc='upper right')
    ax = axes[-1, 0]
    ax.set_xlim(-0.5, len(graphs) - 0.5)
    ax.set_xticks(range(len(graphs)))
    ax.set_xticklabels(graphs, fontsize=8)
    if not graphs:
        ax.text(0.5, 0.5, 'no SpMM cases', ha='center', va='center', transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
