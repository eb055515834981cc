"""The benchmark harness (pyg_tc.bench.timing + report) on the CPU: timing
gives positive numbers, the Reporter writes the declared columns to JSON lines,
markdown and PNG, a declared suite runs end to end with a skipped baseline and a
failing item, and the `pyg-tc bench` / MaxK suites degrade cleanly without CUDA."""

from __future__ import annotations

import json
import math
import sys
import time

import pytest
import torch

from benchmarks.suites import cbsr, spmm
from benchmarks.suites.common import sparse_baseline
from pyg_tc.bench.report import Col, Figure, Panel, Reporter, Table, Text, ms_col
from pyg_tc.bench.timing import (
    Impl,
    Skip,
    Stopwatch,
    Timing,
    bench,
    copy_bandwidth,
    kernel_time,
    measure,
    speedups,
    track_memory,
)


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_timing_is_positive_and_counts_repetitions():
    x = torch.randn(256, 256)
    t = bench(lambda: x @ x, warmup=2, rep=7, device='cpu')
    assert isinstance(t, Timing) and t.reps == 7
    assert 0 < t.min_ms <= t.median_ms <= t.max_ms and t.spread >= 0
    d = t.as_dict('mm')
    assert (
        d['mm_ms'] == t.median_ms
        and d['mm_reps'] == 7
        and set(d) == {'mm_ms', 'mm_min_ms', 'mm_max_ms', 'mm_spread', 'mm_reps'}
    )
    wall = bench(lambda: x @ x, warmup=1, rep=3, device='cpu', wall=True)
    assert wall.reps == 3 and wall.median_ms > 0
    # max_time_s lowers the repetitions (to no fewer than 3) for slow calls
    slow = bench(
        lambda: torch.randn(300, 300) @ torch.randn(300, 300), warmup=1, rep=1000, device='cpu', max_time_s=1e-6
    )
    assert slow.reps == 3
    # on the CPU the kernel-only time is the per-call time; a list of calls rotates
    calls = []
    kt = kernel_time([lambda: calls.append(0), lambda: calls.append(1)], 'cpu', rep=4)
    assert kt.median_ms > 0 and kt.reps == 4 and set(calls) == {0, 1}
    sw = Stopwatch('cpu')
    for _ in range(3):
        sw.start()
        x @ x
        sw.stop()
    assert len(sw.times_ms()) == 3 and all(v > 0 for v in sw.times_ms())
    with track_memory('cpu') as mem:
        x @ x
    assert mem == {'resident_mb': None, 'peak_mb': None, 'extra_mb': None}
    bw = copy_bandwidth('cpu', nbytes=2**20)
    assert bw['copy_gbps'] > 0 and bw['copy_bytes'] == 2**20


def test_measure_records_times_errors_and_skip_reasons():
    logs = []
    x = torch.randn(64, 8)
    ref = (2 * x).double()

    def half():
        raise NotImplementedError('"addmm" not implemented for \'Half\'\nmore text')

    def broken():
        raise RuntimeError('boom')

    rec = measure(
        {'case': 1},
        {
            'ours': lambda: 2 * x,
            'base': Skip('needs a CUDA GPU'),
            'half': half,
            'broken': broken,
            'post': Impl(lambda: (x, 2 * x), post=lambda o: o[1]),
        },
        'cpu',
        rep=3,
        ref=ref,
        log=logs.append,
    )
    assert rec['ours_ms'] > 0 and rec['ours_rel_err'] < 1e-6 and rec['ours_rel_err_fro'] < 1e-6
    assert rec['post_ms'] > 0 and rec['post_rel_err'] < 1e-6
    assert rec['base_skipped'] == 'needs a CUDA GPU' and 'base_ms' not in rec
    assert rec['half_skipped'] == '"addmm" not implemented for \'Half\''  # one line
    assert rec['broken_error'] == 'RuntimeError: boom' and 'broken_ms' not in rec
    assert any('base: needs a CUDA GPU' in m for m in logs)
    # per call: the Timing fields (no kernel-only time without a GPU); rotating inputs
    seen = []
    rec = measure({}, {'ours': lambda v: seen.append(v) or v}, 'cpu', rep=4, warmup=1, per_call=True, inputs=['a', 'b'])
    assert rec['ours_ms'] > 0 and rec['ours_reps'] == 4 and 'ours_graph_ms' not in rec and set(seen) == {'a', 'b'}
    assert speedups({'a_ms': 2.0, 'b_ms': 6.0, 'c_ms': None}, 'a', ('b', 'c')) == {
        'a_ms': 2.0,
        'b_ms': 6.0,
        'c_ms': None,
        'a_vs_b': 3.0,
    }
    assert sparse_baseline('cpu')[0] == 'cpu_sparse' and 'cuSPARSE' not in sparse_baseline('cpu')[1]


def _toy_reporter(out, figures=()):
    cols = [
        Col('graph', 'graph'),
        Col('F', 'F'),
        ms_col('ours'),
        ms_col('base', 'baseline ms'),
        ms_col('gpu_only'),
        Col('x base', 'speedup', '.2f', bold=True),
        Col('empty', 'never_set'),
    ]
    return Reporter(
        str(out),
        'toy.jsonl',
        'toy.md',
        'Toy suite',
        {'device': 'cpu', 'gpu': None},
        'first',
        [
            Table('## Cases', 'case', cols, note='a note'),
            Text('## Totals', lambda recs: [f'- {len([r for r in recs if r["kind"] == "case"])} cases']),
        ],
        figures,
        header=lambda env, recs: [f'- device {env["device"]}'],
        tag='toy',
    )


def test_declared_suite_runs_end_to_end_with_a_skipped_baseline(tmp_path):
    def cases(graph):
        for F in (4, 8):
            x = torch.randn(32, F)
            base = Skip('the baseline needs cuSPARSE (no CUDA here)') if F == 4 else (lambda: x + x)
            rec = measure(
                dict(kind='case', graph=graph, F=F),
                {'ours': lambda: x * 2, 'base': base, 'gpu_only': Skip('needs a GPU')},
                'cpu',
                rep=3,
            )
            rec['speedup'] = 1.5
            yield rec

    def missing():
        raise FileNotFoundError('no such dataset')
        yield  # pragma: no cover

    fig = Figure(
        'toy.png',
        [Panel('case', 'graph', 'speedup', series='F', label='F={}', hline=1.0), Panel('case', 'graph', 'never_set')],
    )  # no data: left out
    rep = _toy_reporter(tmp_path, [fig])
    paths = rep.run([('cases', 'g1', lambda: cases('g1')), ('cases', 'gone', missing)], 'cpu')
    recs = _lines(tmp_path / 'toy.jsonl')
    assert recs[0] == {'kind': 'env', 'device': 'cpu', 'gpu': None}
    cs = [r for r in recs if r['kind'] == 'case']
    assert [(r['graph'], r['F']) for r in cs] == [('g1', 4), ('g1', 8)]
    assert all(r['ours_ms'] > 0 for r in cs) and cs[1]['base_ms'] > 0 and 'base_skipped' not in cs[1]
    assert cs[0]['base_skipped'] == 'the baseline needs cuSPARSE (no CUDA here)' and 'base_ms' not in cs[0]
    (sk,) = [r for r in recs if r['kind'] == 'skipped']
    assert sk['section'] == 'cases' and sk['item'] == 'gone' and sk['status'] == 'FileNotFoundError: no such dataset'
    md = (tmp_path / 'toy.md').read_text()
    assert md.startswith('# Toy suite\n') and '- device cpu' in md
    assert '- skipped: base (the baseline needs cuSPARSE (no CUDA here))' in md
    assert '- cases gone: skipped (FileNotFoundError: no such dataset)' in md
    assert '## Cases\n\na note\n\n| graph | F | ours ms | baseline ms | x base |\n|---|---|---|---|---|' in md
    assert '| g1 | 4 | ' in md and '| skipped | **1.50** |' in md and 'empty' not in md  # empty column dropped
    assert '- skipped: gpu_only (needs a GPU)' in md and 'gpu_only ms' not in md  # never ran: no column
    assert '## Totals\n\n- 2 cases' in md
    assert paths['markdown'].endswith('toy.md')
    pytest.importorskip('matplotlib')
    assert paths['toy.png'].endswith('toy.png') and (tmp_path / 'toy.png').stat().st_size > 0


def test_plots_are_page_wide_and_mark_flagged_bars(tmp_path):
    pytest.importorskip('matplotlib')
    from PIL import Image

    from pyg_tc.bench import report

    rows = [
        dict(kind='case', graph=g, impl=i, ms=t, ci_ms=0.1 * t, noisy=g == 'b')
        for g, t in (('a', 1.0), ('b', 2.0))
        for i in ('ours', 'base')
    ] + [dict(kind='line', k=k, v=k**0.5, s='x', bad=k == 4) for k in (2, 4, 8)]
    fig = Figure(
        'f.png',
        [
            Panel('case', 'graph', 'ms', 'impl', yerr='ci_ms', flag='noisy', logy=10, title='t'),
            Panel('line', 'k', 'v', 's', style='line', flag='bad', logx=2),
        ]
        * 2,
        ncols=4,
        title='a title long enough to be wrapped onto two lines at the width of the page, as it is here',
    )
    path = report.plot(fig, rows, str(tmp_path / 'f.png'))
    with Image.open(path) as im:
        assert im.size[0] == report.FIG_WIDTH * report.DPI  # 4 panels: 2 x 2, as wide as one panel alone
        width, height = im.size
    one = report.plot(Figure('g.png', [Panel('case', 'graph', 'ms', 'impl')]), rows, str(tmp_path / 'g.png'))
    with Image.open(one) as im:
        assert im.size[0] == width and im.size[1] < height / 1.5


def test_reporter_skips_plots_without_data_or_matplotlib(tmp_path, monkeypatch, capsys):
    empty = Figure('empty.png', [Panel('case', 'graph', 'never_set')])
    rep = _toy_reporter(tmp_path, [empty])
    rep.add(dict(kind='case', graph='g', F=1, ours_ms=1.0))
    paths = rep.write()
    assert 'empty.png' not in paths and not (tmp_path / 'empty.png').exists()
    assert _lines(tmp_path / 'toy.jsonl')[-1] == dict(kind='case', graph='g', F=1, ours_ms=1.0)
    monkeypatch.setitem(sys.modules, 'matplotlib', None)  # import fails
    rep.figures = [Figure('some.png', [Panel('case', 'graph', 'ours_ms')])]
    paths = rep.write()
    assert 'some.png' not in paths and not (tmp_path / 'some.png').exists()
    assert 'matplotlib is not installed' in capsys.readouterr().out
    assert (tmp_path / 'toy.md').exists()


def test_bench_suite_on_the_cpu_names_its_baseline_and_skips_what_cannot_run(tmp_path):
    """On the CPU pyg_tc runs its reference path: times (each with its
    confidence interval, noisy or not) and errors, no speed-up ratios."""
    out = tmp_path / 'b'
    cfg = spmm.make_config(graphs='tiny', widths='32', dtypes='fp32,fp16', out=str(out), training=False, cuda=False)
    cfg.max_total_s = 0.5
    paths = spmm.run(cfg)
    assert set(paths) >= {'jsonl', 'markdown'}
    recs = _lines(out / 'results.jsonl')
    assert recs[-1]['kind'] == 'summary' and 'all/fp32' in recs[-1]['summary']
    assert recs[-1]['summary']['all/fp32']['noisy_timings'] == sum(  # every timed implementation's flag
        v is True
        for r in recs
        if r['kind'] == 'spmm' and r['dtype'] == 'fp32'
        for k, v in r.items()
        if k.endswith('_noisy')
    )
    assert all(r['baseline'].startswith('torch.sparse.mm on the CPU') for r in recs)
    sp = {r['dtype']: r for r in recs if r['kind'] == 'spmm'}
    assert not [k for r in recs for k in r if 'cusparse' in k]  # the CPU baseline is not called cuSPARSE
    assert not [k for r in recs for k in r if 'speedup' in k or '_vs_' in k]  # no ratio of the reference path
    assert sp['fp32']['pyg_tc_ms'] > 0 and sp['fp32']['cpu_sparse_ms'] > 0 and sp['fp16']['pyg_tc_ms'] > 0
    for r, i in ((sp['fp32'], 'pyg_tc'), (sp['fp32'], 'cpu_sparse'), (sp['fp16'], 'pyg_tc')):
        assert r[f'{i}_reps'] >= 10 and r[f'{i}_noisy'] == (float(r[f'{i}_ci']) > cfg.target_ci)
    assert sp['fp32']['pyg_tc_rel_err'] < 1e-5 and sp['fp16']['pyg_tc_rel_err'] < 1e-2
    assert 'not implemented' in sp['fp16']['cpu_sparse_skipped'] and 'cpu_sparse_error' not in sp['fp16']
    md = (out / 'report.md').read_text()
    assert '| pyg_tc (reference) ms | cpu_sparse ms |' in md and 'NotImplementedError' not in md
    assert '- skipped: cpu_sparse (' in md and 'no speed-up is computed' in md
    cell = md.split('| tiny | 2,000 | 20,000 | 32 | fp32 | ')[1].split(' |')[0]
    assert cell.startswith(f'{sp["fp32"]["pyg_tc_ms"]:.4f} ±') and cell.endswith('noisy') == sp['fp32']['pyg_tc_noisy']
    pytest.importorskip('matplotlib')
    assert (out / 'spmm_times.png').stat().st_size > 0 and not (out / 'speedup.png').exists()


def test_median_ci_and_timing_until_stable(monkeypatch):
    from pyg_tc.bench import timing

    assert timing.median_ci([1.0] * 5) == math.inf  # too few for an interval
    assert timing.median_ci([1.0] * 50) == 0.0
    # 100 times 1..100: the order statistics of ranks floor(50 - 9.8) = 40 and ceil(51 + 9.8) = 61
    assert timing.median_ci([float(v) for v in range(1, 101)]) == pytest.approx((61 - 40) / (2 * 50.5))
    # repeats (doubling) until the CI of the median is within the target
    rounds = []

    def fake(fn, rep, device, wall, sync):
        rounds.append(rep)
        noise = 0.5 if len(rounds) == 1 else 0.001  # a noisy first round, then steady times
        return [1.0 + noise * (-1) ** k * (k % 7) / 7 for k in range(rep)]

    monkeypatch.setattr(timing, '_timed', fake)
    t = timing.bench(lambda: None, warmup=0, rep=10, device='cpu', target=0.05, max_total_s=60)
    assert not t.noisy and t.ci <= 0.05 and rounds[:2] == [10, 10] and t.reps == sum(rounds) > 10
    d = t.as_dict('x')
    assert d['x_ci'] == round(t.ci, 4) and d['x_noisy'] is False and d['x_reps'] == t.reps
    # no time left: stops and says so
    rounds.clear()
    t = timing.bench(lambda: None, warmup=0, rep=3, device='cpu', target=0.05, max_total_s=0.0)
    assert rounds == [10] and t.noisy and t.ci > 0.05
    # without a target: as before (no CI fields)
    assert set(timing.bench(lambda: None, warmup=0, rep=3, device='cpu').as_dict('x')) == {
        'x_ms',
        'x_min_ms',
        'x_max_ms',
        'x_spread',
        'x_reps',
    }


def test_cbsr_suite_runs_on_the_cpu(tmp_path):
    out = tmp_path / 'm'
    assert cbsr.main(['--out', str(out), '--device', 'cpu', '--graphs', 'tiny', '--ks', '4', '--no-train']) == 0
    (r,) = _lines(out / 'cbsr.jsonl')
    assert r['kind'] == 'maxk_kernel' and r['k'] == 4 and r['F'] == cbsr.WIDTH
    for i in ('spgemm', 'sspmm', 'select', 'topk', 'csr', 'cpu_sparse'):
        assert r[f'{i}_ms'] > 0, i
    assert r['spgemm_rel_err'] < 1e-5 and r['spgemm_vs_cpu_sparse'] > 0 and r['select_vs_topk'] > 0
    assert '## Kernels (Figure 8)' in (out / 'cbsr.md').read_text()


class _Tty:
    """A text stream that says it is a terminal."""

    def __init__(self):
        self.parts = []

    def write(self, s):
        self.parts.append(s)
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return True

    def text(self):
        return ''.join(self.parts)


def test_progress_bar_on_a_terminal_only_and_log_lines_stay_whole(tmp_path, monkeypatch, capsys):
    pytest.importorskip('tqdm')
    from pyg_tc.bench import report

    def items():
        return [('cases', g, lambda g=g: iter([dict(kind='case', graph=g, F=1, ours_ms=1.0)])) for g in ('g1', 'g2')]

    _toy_reporter(tmp_path / 'a').run(items())  # captured output is no terminal: no bar
    out, err = capsys.readouterr()
    assert '[toy] (2/2, ' in out and '[toy] case graph=g2 F=1: ours 1.0000 ms' in out and '\r' not in out + err
    assert report.progress_bar(2, 'toy') is None
    out, err = _Tty(), _Tty()
    monkeypatch.setattr(sys, 'stdout', out)
    monkeypatch.setattr(sys, 'stderr', err)
    _toy_reporter(tmp_path / 'b').run(items())
    lines = out.text().splitlines()
    assert '[toy] (1/2, 0 s) cases g1' in lines and '[toy] case graph=g2 F=1: ours 1.0000 ms' in lines
    assert '2/2' in err.text() and 'cases g2' in err.text()  # the bar, with the current item, on stderr
    assert not report._BARS  # closed


def test_loop_time_times_every_item_after_the_warm_up():
    from pyg_tc.bench.timing import loop_ms, loop_time

    seen = []

    def fn(i):
        seen.append(i)
        time.sleep(0.002)

    seconds, n = loop_time(fn, range(6), 'cpu', warmup=2)
    assert seen == list(range(6)) and n == 4 and 0.008 <= seconds < 1.0
    assert 2.0 <= loop_ms(fn, range(3), 'cpu', warmup=1) < 500
    with pytest.raises(ValueError, match='no item left'):
        loop_ms(fn, range(1), 'cpu', warmup=1)


def test_phase_timer_splits_an_iteration():
    from pyg_tc.bench.timing import PhaseTimer

    pt = PhaseTimer('cpu')
    for _ in range(3):
        pt.start()
        time.sleep(0.003)
        pt.lap('slow')
        pt.lap('fast')
    mean = pt.mean_ms()
    assert set(mean) == {'slow_ms', 'fast_ms'} and len(pt.times['slow']) == 3
    assert mean['slow_ms'] >= 2.5 and mean['fast_ms'] < mean['slow_ms']


def test_kernel_profile_names_matrix_products():
    from pyg_tc.bench.timing import is_matrix_product, kernel_profile

    assert is_matrix_product('sm90_xmma_gemm_f32f32_tn') and is_matrix_product('cutlass_80_simt_sgemm_128x256')
    assert is_matrix_product('gemv2T_kernel') and is_matrix_product('splitKreduce_kernel')
    assert not is_matrix_product('pyg_tc::attn_forward_kernel') and not is_matrix_product('elementwise_kernel')
    cpu = kernel_profile(lambda i: None, range(2), 'cpu')
    assert math.isnan(cpu['gpu_ms']) and math.isnan(cpu['dense_ms']) and cpu['kernels'] == []
