"""The sampling suite (benchmarks/suites/sampling.py) end to end on the CPU (a dry run of its code on a
tiny graph: the times mean nothing there), and its render-only mode."""

import importlib.util
import json

from ..conftest import REPO_ROOT


def _suite():
    from benchmarks.suites import sampling

    return sampling


def test_sampling_suite_runs_and_renders(tmp_path):
    suite = _suite()
    out = tmp_path / 'out'
    suite.main(
        [
            '--out',
            str(out),
            '--graphs',
            'tiny',
            '--batches',
            '2',
            '--workers',
            '1',
            '--split-batches',
            '1',
            '--fanout',
            '3,2',
            '--batch-size',
            '64',
            '--hidden',
            '8',
            '--models',
            'sage,gat',
            '--max-batches',
            '2',
            '--trim',
            '--prefetch',
            '2',
        ]
    )
    recs = [json.loads(line) for line in (out / 'sampling.jsonl').read_text().splitlines()]
    ours = [r for r in recs if r.get('sampler') == 'pyg_tc GPU']
    assert len(ours) == 1 and ours[0]['edges'] > 0 and ours[0]['ms'] > 0
    gat = [r for r in recs if r.get('kind') == 'epoch' and r['model'] == 'gat']
    assert {r['loader'] for r in gat} == {
        r['loader'] for r in recs if r.get('kind') == 'epoch' and r['model'] == 'sage'
    }
    recs = [r for r in recs if r.get('kind') != 'epoch' or r['model'] == 'sage']  # GAT's runs are SAGE's
    epoch = [r for r in recs if r.get('kind') == 'epoch' and r['loader'] == 'pyg_tc GPU loader']
    assert len(epoch) == 2 and {r['trim'] for r in epoch} == {False, True}  # --trim: the eager runs again, trimmed
    assert all(r['batches'] == 2 and r['step_ms'] > 0 for r in epoch)
    # the trimmed captured run: batches padded per hop (PadHops)
    hop = [r for r in recs if r.get('kind') == 'epoch' and r['trim'] and 'captured' in r['loader']]
    assert [r['loader'] for r in hop] == [suite.CAPTURED_HOPS, suite.CAPTURED_HOPS + suite.PREFETCH.format(2)]
    assert all(r['batches'] == 2 for r in hop)
    # --prefetch: every run of pyg_tc's loader again, its batches made ahead on the loader's thread
    ahead = [r for r in recs if r.get('kind') == 'epoch' and r['loader'].endswith(', prefetch 2')]
    assert len(ahead) == 4 and all(r['layers'] == 'pyg_tc' and r['batches'] == 2 for r in ahead)
    md = (out / 'sampling.md').read_text()
    assert md.startswith('# ') and '| run | |' in md and '## Epoch' in md
    again = tmp_path / 'again'
    suite.main(['--out', str(again), '--render', str(out / 'sampling.jsonl')])
    assert (again / 'sampling.md').read_text() == md


def test_hops_profile_runs_on_the_cpu(tmp_path):
    """The hops_profile probe's code path on a tiny graph (CPU: eager steps, no GPU times)."""
    spec = importlib.util.spec_from_file_location(
        'hops_profile', REPO_ROOT / 'benchmarks' / 'probes' / 'hops_profile.py'
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(['--graph', 'tiny', '--batch-size', '128', '--out', str(tmp_path / 'p.json')])
    out = json.loads((tmp_path / 'p.json').read_text())
    for key in (
        'prefetch0_loader_ms',
        'prefetch2_loader_padhops_ms',
        'replay_ms',
        'prefetch0_loop_ms',
        'prefetch2_loop_ms',
        'loader_padhops_gpu_busy_ms',
    ):
        assert key in out and out[key] >= 0, key
    assert out['eager_steps'] > 0 and out['replays'] == 0
