"""The writing half of the benchmark harness (``timing.py`` measures): the
environment record, progress lines, and the :class:`Reporter` every suite uses.

A suite declares its outputs (markdown :class:`Table` / :class:`Text`
sections, PNG :class:`Figure` s of :class:`Panel` s) and hands the Reporter
its items (:meth:`Reporter.run`). Each record is appended to the JSON-lines
file and logged as it arrives; all outputs are rewritten after every item, so
a run cut short still leaves a complete report. A failing item becomes a
``kind: 'skipped'`` record with its reason. Panels without data are left out,
a figure without panels is not written, and without matplotlib no PNG is.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from .timing import free, short_error


#: the progress bars on screen (innermost last; :meth:`Reporter.run`): log lines go above them
_BARS: List[Any] = []


def log(msg: str) -> None:
    """Prints one progress line at once (the device logs are tee-d); above the
    progress bar while one is shown, so neither garbles the other."""
    if _BARS:
        type(_BARS[-1]).write(msg, file=sys.stdout)
        sys.stdout.flush()
    else:
        print(msg, flush=True)


def progress_bar(total: int, tag: str):
    """A tqdm bar over a run's items on stderr, or None. Shown only when both
    stdout and stderr are a terminal: the per-record log lines stay the
    record of a run, and logs that are redirected or tee-d (the device runs:
    ``2>&1 | tee``; ``| tee`` would race the bar on the terminal) get no bar
    frames, only the ``(i/n, elapsed)`` line of each item. tqdm comes with
    torch_geometric; without it, no bar."""
    interactive = all(getattr(f, 'isatty', lambda: False)() for f in (sys.stdout, sys.stderr))
    if not interactive or total < 1:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=tag, unit='item', file=sys.stderr, dynamic_ncols=True, leave=True)


def now() -> str:
    """UTC time, ISO format, seconds."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')


def environment(device=None, **extra) -> dict:
    """Device, GPU, versions, host and start time (plus ``extra``)."""
    import torch_geometric

    import pyg_tc

    dev = torch.device(device if device is not None else 'cuda' if torch.cuda.is_available() else 'cpu')
    return dict(
        device=dev.type,
        gpu=torch.cuda.get_device_name(dev) if dev.type == 'cuda' else None,
        driver=_driver() if dev.type == 'cuda' else None,
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        torch_geometric=torch_geometric.__version__,
        pyg_tc_version=pyg_tc.__version__,
        commit=_commit(),
        python=platform.python_version(),
        host=platform.node(),
        started=now(),
        **extra,
    )


def _run(cmd: List[str], cwd: Optional[str] = None) -> Optional[str]:
    import subprocess

    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _driver() -> Optional[str]:
    """The NVIDIA driver's version (``nvidia-smi``; torch does not report it)."""
    v = _run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'])
    return v.splitlines()[0].strip() if v else None


def _commit() -> Optional[str]:
    """The checkout's commit (``-dirty`` with uncommitted changes), None outside a git checkout."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    head = _run(['git', 'rev-parse', '--short=12', 'HEAD'], cwd=root)
    if head is None:
        return None
    return head + ('-dirty' if _run(['git', 'status', '--porcelain', '--untracked-files=no'], cwd=root) else '')


def _date(started: Optional[str]) -> str:
    """``'2026-11-26 09:39 UTC'`` of an ISO time (``now()``)."""
    if not started:
        return 'not recorded'
    try:
        t = datetime.datetime.fromisoformat(started).astimezone(datetime.timezone.utc)
    except ValueError:
        return started
    return t.strftime('%Y-%m-%d %H:%M UTC')


def run_block(env: dict) -> List[str]:
    """The table that opens a results page: where and when it was measured."""

    def v(key):
        return env.get(key) or 'not recorded'

    gpu = env.get('gpu') or ('CPU (no GPU)' if env.get('device') == 'cpu' else None)
    cuda = f"{env['torch_cuda']} (torch's build)" if env.get('torch_cuda') else 'none'
    return [
        '| run | |',
        '|---|---|',
        f'| GPU | {gpu or "not recorded"} |',
        f"| driver | {v('driver')} |",
        f"| torch | {v('torch')} |",
        f'| CUDA | {cuda} |',
        f'| date | {_date(env.get("started"))} |',
        f"| commit | {v('commit')} |",
        '',
    ]


def jsonable(v):
    """Non-finite floats as strings (strict JSON), also inside dicts."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return {k: jsonable(x) for k, x in v.items()} if isinstance(v, dict) else v


def fmt(v, spec: str = '', bold: bool = False) -> str:
    """A table cell: '-' for missing / NaN, numbers by ``spec``."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return '-'
    s = format(v, spec) if spec and isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
    return f'**{s}**' if bold else s


IDS = ('graph', 'dataset', 'order', 'model', 'impl', 'nonlinear', 'matmul', 'F', 'k', 'dtype', 'dbw', 'seed', 'status')


def record_line(tag: str, r: dict) -> str:
    """One progress line for a record: its ids, times in ms (or why none),
    speedups, errors."""
    ids = ' '.join(f'{k}={r[k]}' for k in IDS if r.get(k) is not None)
    num = lambda v: isinstance(v, float) and math.isfinite(v)  # noqa: E731
    ms = [
        f'{k[:-3]} {v:.4f}' + ' (noisy)' * bool(r.get(f'{k[:-3]}_noisy'))
        for k, v in r.items()
        if k.endswith('_ms') and not k.endswith(('_min_ms', '_max_ms')) and num(v)
    ]
    ms += [f'{k.rsplit("_", 1)[0]} [{status(r, k.rsplit("_", 1)[0])}]' for k in r if k.endswith(('_skipped', '_error'))]
    err = lambda k: k.endswith('_err') or 'diff' in k  # noqa: E731
    more = [f'{k} {v:.2f}' for k, v in r.items() if ('_vs_' in k or k.startswith('speedup')) and not err(k) and num(v)]
    more += [f'{k} {v:.1e}' for k, v in r.items() if err(k) and num(v)]
    more += [
        f'{k} {fmt(r[k], ".4f" if k in ("val", "test") else ".2f")}'
        for k in ('nnz_per_block', 'auto', 'val', 'test')
        if k in r
    ]
    return f'[{tag}] {r.get("kind", "")} {ids}: '.replace('  ', ' ') + '; '.join(
        p for p in (' | '.join(ms) + ' ms' * bool(ms), ', '.join(more)) if p
    )


# -- declarations ----------------------------------------------------------------

Rows = Union[str, Callable[[List[dict]], List[dict]]]  # a record kind, or records -> rows


def _rows(spec: Rows, records: List[dict]) -> List[dict]:
    return [r for r in records if r.get('kind') == spec] if isinstance(spec, str) else spec(records)


@dataclass
class Col:
    """A table column: ``get`` is a record key or a function of the record."""

    header: str
    get: Union[str, Callable[[dict], Any]]
    spec: str = ''
    bold: bool = False

    def cell(self, r: dict) -> str:
        """This column's cell of record ``r``."""
        return fmt(r.get(self.get) if isinstance(self.get, str) else self.get(r), self.spec, self.bold)


def status(r: dict, impl: str) -> str:
    """Why ``impl`` has no time in ``r``: 'skipped', 'oom', 'error' or '-'."""
    e = r.get(f'{impl}_error')
    return 'skipped' if f'{impl}_skipped' in r else '-' if e is None else 'oom' if e == 'oom' else 'error'


def ms_cell(r: dict, impl: str, spec: str = '.4f') -> str:
    """``impl``'s time in ``r`` (with its confidence interval ``±x%`` and
    ``noisy`` when it was timed until stable: ``_ci`` / ``_noisy``), or why it
    has none."""
    t = r.get(f'{impl}_ms')
    if t is None:
        return status(r, impl)
    ci = r.get(f'{impl}_ci')
    ci = f' ±{ci:.0%}' if _finite(ci) else ''
    return fmt(t, spec) + ci + (' noisy' if r.get(f'{impl}_noisy') else '')


def ms_col(impl: str, header: Optional[str] = None, spec: str = '.4f') -> Col:
    """``impl``'s time (:func:`ms_cell`), or why it has none."""
    return Col(header or f'{impl} ms', lambda r: ms_cell(r, impl, spec))


@dataclass
class Table:
    """A markdown table of ``rows`` (left out when empty); ``cols`` may be a
    function of the rows. ``note`` (text, or rows -> text) goes under the title,
    ``after`` (rows -> lines) under the table; columns without any value are dropped."""

    title: str
    rows: Rows
    cols: Union[Sequence[Col], Callable[[List[dict]], Sequence[Col]]]
    note: Union[str, Callable[[List[dict]], str], None] = None
    after: Optional[Callable[[List[dict]], List[str]]] = None

    def render(self, records: List[dict]) -> List[str]:
        """The markdown lines of this table."""
        rows = _rows(self.rows, records)
        if not rows:
            return []
        cols = self.cols(rows) if callable(self.cols) else self.cols
        cells = [[c.cell(r) for c in cols] for r in rows]
        keep = [j for j in range(len(cols)) if any(row[j] not in ('-', 'skipped') for row in cells)]
        note = self.note(rows) if callable(self.note) else self.note
        return (
            [self.title + '\n']
            + ([note + '\n'] if note else [])
            + table([cols[j].header for j in keep], [[row[j] for j in keep] for row in cells])
            + (self.after(rows) if self.after else [])
        )


@dataclass
class Text:
    """Free text: ``lines(records)``; nothing when it returns no lines."""

    title: str
    lines: Callable[[List[dict]], List[str]]

    def render(self, records: List[dict]) -> List[str]:
        """The markdown lines of this section."""
        body = self.lines(records)
        return [self.title + '\n'] + body + [''] if body else []


def table(header: List[str], rows: List[List[str]]) -> List[str]:
    """A markdown table."""
    return (
        ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
        + ['| ' + ' | '.join(r) + ' |' for r in rows]
        + ['']
    )


@dataclass
class Panel:
    """A plot of ``rows``: ``style`` 'bar' (categorical x, one bar per ``series``
    value, 'n/a' where missing) or 'line' (numeric x); ``yerr`` a row key with
    error bars (both styles); ``flag`` a row key whose true rows are drawn
    hatched (bars) or hollow (points) and counted in the legend;
    ``hline`` a dashed reference line, ``band`` a shaded (low, high) range."""

    rows: Rows
    x: str
    y: str
    series: Optional[str] = None
    style: str = 'bar'
    label: str = '{}'
    yerr: Optional[str] = None
    hline: Optional[float] = None
    hline_label: Optional[str] = None
    band: Optional[Tuple[float, float]] = None
    logx: Optional[int] = None
    logy: Optional[int] = None
    xticks: Optional[Sequence] = None
    title: str = ''
    xlabel: str = ''
    ylabel: str = ''
    flag: Optional[str] = None


@dataclass
class Figure:
    """A PNG of panels (a list, or records -> list), ``ncols`` per row (at
    most 3, or 2 with more than 4 bar categories, so that text stays legible
    at page width)."""

    file: str
    panels: Union[Sequence[Panel], Callable[[List[dict]], Sequence[Panel]]]
    ncols: int = 1
    title: str = ''


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


#: figure width in inches: a figure is shown at about page width (some 800
#: pixels), so the font sizes below stay legible there
FIG_WIDTH = 10.0
#: matplotlib settings of every figure
STYLE = {
    'font.size': 13,
    'axes.titlesize': 13,
    'axes.labelsize': 13,
    'xtick.labelsize': 12,
    'ytick.labelsize': 12,
    'legend.fontsize': 11,
    'figure.titlesize': 14,
    'hatch.linewidth': 1.0,
}
DPI = 120


def _wrap(text: str, width_in: float, size: float) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``size`` points."""
    import textwrap

    return textwrap.fill(text, max(20, int(width_in * 72 / (0.55 * size)))) if text else text


def plot(fig: Figure, records: List[dict], path: str) -> Optional[str]:
    """Draws ``fig`` without its empty panels; None when no panel has data.
    Sized for page width (:data:`FIG_WIDTH`, :data:`STYLE`): long category
    labels are slanted, a legend that every panel shares is drawn once on
    top, and a category without any bar gets one 'n/a'."""
    data = [(p, _rows(p.rows, records)) for p in (fig.panels(records) if callable(fig.panels) else fig.panels)]
    data = [(p, rs) for p, rs in data if any(_finite(r.get(p.y)) for r in rs)]
    if not data:
        return None
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    with plt.rc_context(STYLE):
        return _draw(plt, fig, data, path)


def _draw(plt, fig: Figure, data: List[Tuple[Panel, List[dict]]], path: str) -> str:
    cats = list(dict.fromkeys(r[p.x] for p, rs in data if p.style == 'bar' for r in rs))
    nc = min(fig.ncols, len(data), 3 if len(cats) <= 4 else 2)  # wider panels for many bars
    nr = math.ceil(len(data) / nc)
    nc = math.ceil(len(data) / nr)  # balanced rows: 4 panels as 2 x 2, not 3 + 1
    width = FIG_WIDTH / nc  # of one panel, inches
    # a category label wider than its share of the axis is slanted
    longest = max((len(str(c)) for c in cats), default=0) * 0.55 * STYLE['xtick.labelsize'] / 72  # inches
    slant = bool(cats) and longest > 0.9 * 0.85 * width / len(cats)
    shared_x = nc == 1 and bool(cats)  # only the bottom panel has the category labels
    label_h = 0.5 * longest if slant else 0.0
    height = (2.8 if nc == 1 else 3.4) * nr + label_h * (1 if shared_x else nr) + 0.9
    f, axes = plt.subplots(nr, nc, squeeze=False, sharex=shared_x, figsize=(FIG_WIDTH, height), layout='constrained')
    legends = []
    for ax, (p, rs) in zip(axes.flat, data):
        _panel(ax, p, rs, cats, slant, 0.85 * width)
        legends.append(ax.get_legend_handles_labels())
    labels = [tuple(lab) for _, lab in legends if lab]
    shared = len(data) > 1 and len(labels) == len(data) and len(set(labels)) == 1
    for ax, (handles, lab) in zip(axes.flat, legends):
        if lab and not shared:
            ax.legend(framealpha=0.85)
    for ax in list(axes.flat)[len(data) :]:
        ax.set_visible(False)
    title = _wrap(fig.title, FIG_WIDTH, STYLE['figure.titlesize'])
    if shared:  # on top, under the figure's title (a suptitle would overlap it)
        f.legend(
            *legends[0],
            loc='outside upper center',
            ncols=min(len(labels[0]), 6),
            frameon=False,
            title=title or None,
            title_fontsize=STYLE['figure.titlesize'],
        )
    elif title:
        f.suptitle(title)
    f.savefig(path, dpi=DPI)
    plt.close(f)
    return path


def _panel(ax, p: Panel, rs: List[dict], cats: list, slant: bool, width: float) -> None:
    """Draws one panel on ``ax`` (about ``width`` inches wide)."""
    series = list(dict.fromkeys(r.get(p.series) for r in rs)) if p.series else [None]
    flagged = False
    missing: Dict[Any, List[float]] = {c: [] for c in cats}  # category -> x of its missing bars
    for i, s in enumerate(series):
        sr = [r for r in rs if p.series is None or r.get(p.series) == s]
        lab = p.label.format(s) if p.series else None if p.label == '{}' else p.label
        if p.style == 'bar':
            w, by = 0.8 / len(series), {r[p.x]: r for r in sr}
            xs = [j + (i - (len(series) - 1) / 2) * w for j in range(len(cats))]
            ys = [by[c].get(p.y) if c in by and _finite(by[c].get(p.y)) else math.nan for c in cats]
            err = [by[c].get(p.yerr) if c in by and _finite(by[c].get(p.yerr)) else 0 for c in cats] if p.yerr else None
            bars = ax.bar(xs, ys, w, yerr=err, capsize=3 if err else 0)
            if lab is not None and bars.patches:  # the legend entry: plain, even when the first bar is hatched
                ax.bar([0], [math.nan], 0, color=bars.patches[0].get_facecolor(), label=lab)
            for c, bar in zip(cats, bars):
                if p.flag and c in by and by[c].get(p.flag):
                    bar.set_hatch('//')
                    bar.set_edgecolor('k')
                    flagged = True
            for c, xv, yv in zip(cats, xs, ys):
                if math.isnan(yv):
                    missing[c].append(xv)
        else:
            sr = [r for r in sr if _finite(r.get(p.y))]
            line = ax.errorbar(
                [r[p.x] for r in sr],
                [r[p.y] for r in sr],
                marker='o',
                capsize=3,
                label=lab,
                yerr=[r.get(p.yerr) or 0 for r in sr] if p.yerr else None,
            )
            hollow = [r for r in sr if p.flag and r.get(p.flag)]
            if hollow:
                flagged = True
                ax.plot(
                    [r[p.x] for r in hollow], [r[p.y] for r in hollow], 'o', mfc='white', mec=line[0].get_color(), ms=8
                )
    room = len(cats) and 0.8 / len(series) * width / len(cats) > 0.15  # inches for a label in a bar's place
    for j, c in enumerate(cats):  # a category without any bar: one label, not one per series
        whole = len(missing[c]) == len(series)
        for xv in [j] if whole else missing[c] if room else []:
            ax.text(
                xv,
                0.02,
                'n/a',
                ha='center',
                va='bottom',
                fontsize=10,
                rotation=0 if whole else 90,
                transform=ax.get_xaxis_transform(),
            )
    if flagged and p.style == 'bar':  # a legend entry for the hatched bars / hollow points
        ax.bar([0], [math.nan], 0, color='white', edgecolor='k', hatch='//', label=p.flag.replace('_', ' '))
    elif flagged:
        ax.plot([], [], 'o', mfc='white', mec='k', ms=8, label=p.flag.replace('_', ' '))
    if p.hline is not None:
        ax.axhline(p.hline, color='k', lw=0.8, ls='--', label=p.hline_label)
    if p.band is not None:
        ax.axhspan(*p.band, color='k', alpha=0.1, lw=0)
    if p.logx:
        ax.set_xscale('log', base=p.logx)
    if p.logy:
        ax.set_yscale('log', base=p.logy)
    if p.style == 'bar':
        ax.set_xlim(-0.5, len(cats) - 0.5)
        ax.set_xticks(
            range(len(cats)),
            [str(c) for c in cats],
            rotation=30 if slant else 0,
            ha='right' if slant else 'center',
            rotation_mode='anchor',
        )
    elif p.xticks:
        ax.set_xticks(list(p.xticks), [str(k) for k in p.xticks])
    elif p.logx:  # a narrow log axis would drop some of a few measured x values
        xs = sorted({r[p.x] for r in rs if _finite(r.get(p.x)) and r[p.x] > 0})
        if 1 < len(xs) <= 8:
            ax.set_xticks(xs)
            ax.minorticks_off()
    ax.set(xlabel=p.xlabel, ylabel=p.ylabel)
    if p.title:
        ax.set_title(_wrap(p.title, width, STYLE['axes.titlesize']))
    ax.grid(axis='y', alpha=0.3)


# -- the reporter -------------------------------------------------------------------


@dataclass
class Reporter:
    """Records in; ``jsonl`` + ``markdown`` + the figures' PNGs out, in ``out_dir``.

    ``env_mode``: 'inline' (the environment and a timestamp in every line),
    'first' (one ``kind: 'env'`` record first) or None (records only).
    ``header(env, records)``: markdown lines under the title; ``summary(records)``:
    stored as a last ``kind: 'summary'`` line."""

    out_dir: str
    jsonl: str
    markdown: str
    title: str
    env: dict = field(default_factory=dict)
    env_mode: Optional[str] = None
    sections: Sequence[Union[Table, Text]] = ()
    figures: Sequence[Figure] = ()
    header: Optional[Callable[[dict, List[dict]], List[str]]] = None
    summary: Optional[Callable[[List[dict]], dict]] = None
    tag: str = 'bench'

    def __post_init__(self):
        os.makedirs(self.out_dir, exist_ok=True)
        self.records: List[dict] = []
        self.notes: List[str] = []
        self.path = os.path.join(self.out_dir, self.jsonl)
        self._no_mpl = False
        open(self.path, 'w').close()
        if self.env_mode == 'first':
            self.add(dict(kind='env', **self.env), quiet=True)

    def _line(self, rec: dict) -> str:
        return json.dumps(jsonable({**self.env, **rec} if self.env_mode == 'inline' else rec)) + '\n'

    def add(self, rec: dict, quiet: bool = False) -> None:
        """Keeps ``rec``, appends it to the JSON lines at once and logs it."""
        self.records.append(dict(rec, timestamp=now()) if self.env_mode == 'inline' else rec)
        with open(self.path, 'a') as f:
            f.write(self._line(self.records[-1]))
        if not quiet:
            log(record_line(self.tag, rec))

    def note(self, msg: str, level: str = 'warn') -> None:
        """A line in the log and in the markdown header."""
        log(f'[{level}] {msg}')
        self.notes.append(msg)

    def render(self) -> str:
        """The markdown report of the records so far."""
        skipped = dict.fromkeys((k[:-8], v) for r in self.records for k, v in r.items() if k.endswith('_skipped'))
        env = next((r for r in self.records if r.get('kind') == 'env'), None) or self.env
        s = (
            [f'# {self.title}\n']
            + run_block(env)
            + (self.header(self.env, self.records) if self.header else [])
            + [f'- {n}' for n in self.notes]
            + [f'- skipped: {i} ({why})' for i, why in skipped]
        )
        s[-1] += '\n'
        for sec in self.sections:
            s += sec.render(self.records)
        return '\n'.join(s) + '\n'

    def write(self) -> Dict[str, str]:
        """Rewrites every output from the records so far; returns their paths."""
        extra = [{'kind': 'summary', 'summary': self.summary(self.records)}] if self.summary else []
        with open(self.path, 'w') as f:
            f.writelines(self._line(r) for r in self.records + extra)
        paths = {'jsonl': self.path, 'markdown': os.path.join(self.out_dir, self.markdown)}
        with open(paths['markdown'], 'w') as f:
            f.write(self.render())
        for fig in self.figures:
            try:
                if plot(fig, self.records, os.path.join(self.out_dir, fig.file)):
                    paths[fig.file] = os.path.join(self.out_dir, fig.file)
            except ImportError:  # matplotlib is in the 'bench' extra
                if not self._no_mpl:
                    log('[warn] matplotlib is not installed (pip install "pyg_tc[bench]"): no PNG plots')
                self._no_mpl = True
            except Exception as e:  # a plot problem must not cost the measurements
                log(f'[warn] {fig.file} not written: {short_error(e)}')
        return paths

    def run(
        self,
        items: Iterable[Tuple[str, Any, Callable[[], Iterable[dict]]]],
        device=None,
        budget_s: Optional[float] = None,
        t0: Optional[float] = None,
    ) -> Dict[str, str]:
        """Runs ``(section, item, records())`` items in order with a progress
        line each (and a progress bar on a terminal: ``progress_bar``); a
        failure becomes a 'skipped' record (a traceback for unexpected errors).
        Memory is freed and the outputs are rewritten after each item;
        ``budget_s``: start no item after that many seconds."""
        items = list(items)
        t0 = time.perf_counter() if t0 is None else t0
        bar = progress_bar(len(items), self.tag)
        if bar is not None:
            _BARS.append(bar)
        try:
            for i, (section, item, fn) in enumerate(items):
                elapsed = time.perf_counter() - t0
                if budget_s is not None and elapsed > budget_s:
                    self.note(
                        f'time budget of {budget_s:.0f} s spent: skipped '
                        + ', '.join(f'{s} {it}' for s, it, _ in items[i:])
                    )
                    break
                log(f'[{self.tag}] ({i + 1}/{len(items)}, {elapsed:.0f} s) {section} {item}')
                if bar is not None:
                    bar.set_postfix_str(f'{section} {item}')
                try:
                    for r in fn():
                        self.add(r)
                except Exception as e:  # missing dataset, OOM outside a timed case, ...
                    self.note(f'{section} {item}: skipped ({short_error(e)})', 'skip')
                    if not isinstance(e, (FileNotFoundError, torch.OutOfMemoryError)):
                        if bar is not None:
                            with type(bar).external_write_mode(file=sys.stderr):
                                traceback.print_exc()
                        else:
                            traceback.print_exc()
                    self.add(dict(kind='skipped', section=section, item=item, status=short_error(e)), quiet=True)
                free(device)
                self.write()
                if bar is not None:
                    bar.update()
        finally:
            if bar is not None:
                bar.close()
                _BARS.remove(bar)
        paths = self.write()
        log(f'[done] {time.perf_counter() - t0:.1f} s; wrote ' + ', '.join(paths.values()))
        return paths
