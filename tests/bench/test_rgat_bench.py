"""The MLPerf-shaped R-GAT suite (benchmarks/suites/rgat.py) end to end on the CPU: quick
settings, a record per run (PyG's loader and layers, pyg_tc's eager and captured) with its rates, the report and
the plot; both models start from the same weights."""

import json

import torch_geometric.typing

from benchmarks.suites import rgat


def test_rgat_suite_quick(tmp_path):
    rgat.main(['--quick', '--out', str(tmp_path)])
    recs = [json.loads(line) for line in open(tmp_path / 'rgat.jsonl')]
    assert recs[0]['kind'] == 'env' and not [r for r in recs if r.get('kind') == 'skipped']
    rows = [r for r in recs if r.get('kind') == 'epoch']
    # PyG trims where its batches carry hop counts: not from torch_sparse's sampler (without pyg-lib)
    pyg_trims = torch_geometric.typing.WITH_PYG_LIB or not torch_geometric.typing.WITH_TORCH_SPARSE
    names = ['PyG, 0 workers'] + ['PyG trimmed, 0 workers'] * pyg_trims + ['pyg_tc', 'pyg_tc trimmed']
    assert [r['impl'] for r in rows] == names + ['pyg_tc captured', 'pyg_tc trimmed, captured']
    ours = rows[len(names) - 2 :]
    assert [(r['trimmed'], r['captured']) for r in ours] == [(False, False), (True, False), (False, True), (True, True)]
    # the captured rows' batches are padded to their buckets: more than the eager rows'
    for r in ours[2:]:
        assert r['batch_nodes'] > ours[0]['batch_nodes'] and r['batch_edges'] > ours[0]['batch_edges']
    for r in rows:
        assert r['papers'] == 2000 and r['edges'] == 2 * (2000 * 10 + 2000 * 3 + 2400 + 2000 * 5)
        assert r['seeds_per_s'] > 0 and abs(r['seeds_per_s'] * r['ms_per_batch'] / 1e3 - 64) < 1e-6
        assert r['loader_ms'] > 0 and r['loss'] > 0
    assert (tmp_path / 'rgat.png').exists() and '## Training: PyG against pyg_tc' in (tmp_path / 'rgat.md').read_text()
