"""The captured_step suite (benchmarks/suites/captured_step.py) end to end on the CPU (a dry run of its code
on a tiny graph: the times mean nothing there), with ``--trim``."""

import json

from benchmarks.suites import captured_step as suite


def test_captured_step_suite_runs_with_trim(tmp_path):
    out = tmp_path / 'out'
    suite.main(
        [
            '--out',
            str(out),
            '--graphs',
            'tiny',
            '--models',
            'sage,gat',
            '--fanout',
            '3,2',
            '--batch-size',
            '64',
            '--hidden',
            '8',
            '--layers',
            '2',
            '--batches',
            '2',
            '--bucket-batches',
            '2',
            '--levels',
            '1',
            '--steps',
            '2',
            '--profile-steps',
            '1',
            '--trim',
        ]
    )
    recs = [json.loads(line) for line in (out / 'captured_step.jsonl').read_text().splitlines()]
    runs = {r['run'] for r in recs if r.get('kind') == 'step' and r['model'] == 'sage'}
    assert runs == {r['run'] for r in recs if r.get('kind') == 'step' and r['model'] == 'gat'}  # GAT's too
    # --trim adds the eager rows with trim_to_layer, and the trimmed step on per-hop padded batches (eager, captured)
    assert runs == {
        'PyG eager',
        'pyg_tc eager',
        'PyG eager, trim_to_layer',
        'pyg_tc eager, trim_to_layer',
        'pyg_tc eager, padded',
        'pyg_tc captured',
        'pyg_tc eager, per-hop padded, trim_to_layer',
        'pyg_tc captured, trim_to_layer',
    }
    hop = [r for r in recs if r.get('run') == 'pyg_tc captured, trim_to_layer']
    assert hop and all(r['replays'] == 0 < r['eager_steps'] and r['nodes'] > 0 for r in hop)  # CPU: the eager step
    assert all(r['wall_ms'] > 0 for r in recs if r.get('kind') == 'step')
    assert 'trim_to_layer' in (out / 'captured_step.md').read_text()
