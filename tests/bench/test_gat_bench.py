"""The fuseGNN benchmark (benchmarks/suites/gat.py) end to end on the CPU: every
section with --quick on the 'tiny' synthetic graph (pyg_tc's ops run their
PyTorch references: a code-path check, not a measurement) and the accuracy
section for 3 epochs on Cora (synthetic, and the real one with $PYG_TC_DATA);
the JSON lines, the markdown sections and the PNG."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.suites import gat

from ..conftest import real_data


@pytest.fixture(autouse=True)
def _one_thread():
    """Small tensors: one intra-op thread avoids OpenMP spin-waits on a loaded machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _has(cls: str) -> bool:
    import pyg_tc.nn

    return hasattr(pyg_tc.nn, cls)


def test_quick_cpu_run_writes_every_section(tmp_path):
    out = tmp_path / 'out'
    assert gat.main(['--out', str(out), '--device', 'cpu', '--quick', '--part', 'bench']) == 0
    recs = [json.loads(line) for line in (out / 'gat.jsonl').read_text().splitlines()]
    assert recs[0]['kind'] == 'env' and recs[0]['device'] == 'cpu'
    assert not [r for r in recs if r['kind'] == 'skipped'], [r for r in recs if r['kind'] == 'skipped']
    by = lambda k: [r for r in recs if r['kind'] == k]  # noqa: E731

    (b,) = by('build')
    assert b['graph'] == 'tiny' and b['csr_build_ms'] > 0 and b['loops_build_ms'] > 0
    ei = gat.load_graph('tiny', 'cpu').edge_index
    assert b['edges_with_loops'] == 20_000 - int((ei[0] == ei[1]).sum()) + 2_000  # PyG's loops: removed, one added

    ly = by('layer')
    assert [r['layer'] for r in ly] == [lab for lab, *_ in gat.LAYERS]
    for r in ly:
        cls = 'GATConv' if r['conv'] == 'gat' else 'GATv2Conv'
        for impl in ('pyg', 'unfused'):
            assert r[f'{impl}_ms'] > 0 and r[f'{impl}_fwd_ms'] > 0, (impl, r.get(f'{impl}_error'))
        assert r['err_ref'] == 'pyg' and r['unfused_err'] < 1e-5  # same weights as PyG
        if _has(cls):
            assert r['pyg_tc_ms'] > 0 and r['pyg_tc_first_ms'] > 0, r.get('pyg_tc_error')
            assert r['pyg_tc_err'] < 1e-4 and r['pyg_tc_vs_pyg'] > 0 and r['pyg_tc_vs_unfused'] > 0
        else:
            assert 'pyg_tc_skipped' in r

    fu = by('fused')
    assert [(r['op'], r['heads'], r['channels']) for r in fu] == [('gat', 8, 8), ('gatv2', 8, 8)]
    for r in fu:
        assert r['fused_ms'] > 0 and r['spmm_ms'] > 0 and r['spmm_w_ms'] > 0
        assert r['fused_over_spmm'] > 0 and r['timing'] == 'per call' and 'within_target' in r

    tr = by('train')
    assert [r['impl'] for r in tr] == list(gat.IMPLS)
    for r in tr:
        if r['impl'] == 'pyg_tc' and not _has('GATConv'):
            assert r['status'].startswith('skipped')
            continue
        assert r['status'] == 'ok', r
        assert r['step_ms'] > 0 and r['first_step_ms'] > 0 and r['loss_first'] > 0
    assert tr[2].get('speedup_vs_pyg', 1) > 0

    t3 = by('table3')
    assert [(r['model'], r['hidden']) for r in t3] == [(m, h) for m in ('gcn', 'gat') for h in (16, 64)]
    for r in t3:
        assert r['pyg_ms'] > 0
        if r['model'] == 'gcn' or _has('GATConv'):
            assert r['pyg_tc_ms'] > 0 and r['pyg_tc_vs_pyg'] > 0, r.get('pyg_tc_error')

    md = (out / 'gat.md').read_text()
    titles = [
        '## Targets',
        '## Graph formats',
        '## 1. Layer forward + backward',
        '## 2. Fused attention forward',
        '## 3. 2-layer GAT training step',
        '## 4. fuseGNN Table 3',
    ]
    for t in titles:
        assert t in md, t
    pytest.importorskip('matplotlib')
    assert (out / 'gat.png').stat().st_size > 0


def test_accuracy_section_on_cora(tmp_path, cora_root):
    out = tmp_path / 'out'
    assert (
        gat.main(
            [
                '--out',
                str(out),
                '--device',
                'cpu',
                '--quick',
                '--part',
                'accuracy',
                '--datasets',
                'cora',
                '--data-root',
                str(cora_root),
                '--cache-dir',
                str(tmp_path / 'cache'),
            ]
        )
        == 0
    )
    recs = [json.loads(line) for line in (out / 'gat_accuracy.jsonl').read_text().splitlines()]
    assert not [r for r in recs if r['kind'] == 'skipped'], [r for r in recs if r['kind'] == 'skipped']
    ac = [r for r in recs if r['kind'] == 'accuracy']
    assert [(r['dataset'], r['impl'], r['seed']) for r in ac] == [('cora', 'pyg', 0), ('cora', 'pyg_tc', 0)]
    for r in ac:
        if r['impl'] == 'pyg_tc' and not _has('GATConv'):
            continue
        assert r['status'] == 'ok', r
        assert r['epochs'] == 3 and 0 <= r['test'] <= 1 and r['epoch_ms'] > 0
    assert '## 5. Accuracy: examples/gat.py (3 epochs' in (out / 'gat_accuracy.md').read_text()
    assert not (cora_root / 'planetoid' / 'Cora' / 'processed').exists()


def test_parts_names_and_graphs():
    a = gat.parse_args(['--device', 'cpu'])  # the CPU: --quick settings unless --full
    assert a.quick and a.epochs == 3 and all(v == ['tiny'] for v in a.section_graphs.values())
    a = gat.parse_args(['--part', 'accuracy', '--device', 'cpu', '--full'])
    assert a.sections == ['accuracy'] and a.name == 'gat_accuracy' and a.seeds is None and a.epochs == 200
    a = gat.parse_args(['--device', 'cpu', '--full'])
    assert a.sections == list(gat.BENCH) and a.name == 'gat' and a.budget == 360
    assert a.section_graphs['table3'] == gat.TABLE3_GRAPHS and a.section_graphs['fused'] == gat.LAYER_GRAPHS
    names = [n for s, n, _ in gat.items(a)]
    assert names.index('cora') < names.index('arxiv') < names.index('reddit') < names.index('products')
    a = gat.parse_args(['--device', 'cpu', '--graphs', 'reddit@0.5,cora', '--part', 'layer,train'])
    assert a.quick
    assert [(s, n) for s, n, _ in gat.items(a)] == [
        ('layer', 'cora'),
        ('train', 'cora'),
        ('layer', 'reddit@0.5'),
        ('train', 'reddit@0.5'),
    ]
    with pytest.raises(SystemExit):
        gat.parse_args(['--part', 'nosuch'])
    with pytest.raises(SystemExit):
        gat.parse_args(['--graphs', 'nosuch'])


def test_pubmed_topology():
    real_data('planetoid_incomplete/PubMed')
    bg = gat.pubmed_graph('cpu')
    assert bg.num_nodes == 19_717 and bg.num_edges == 88_648
    assert not bool((bg.edge_index[0] == bg.edge_index[1]).any())


def test_out_of_memory_is_reported_and_the_run_goes_on(tmp_path, monkeypatch):
    """A PyG layer that runs out of memory: 'OOM' in its cells, the unfused
    output becomes the reference, the other implementations still run."""
    real = gat.layer_class

    def layer_class(impl, cls):
        base = real(impl, cls)
        if impl != 'pyg':
            return base

        class Boom(base):
            def forward(self, *args, **kwargs):
                raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 24.00 GiB')

        return Boom

    monkeypatch.setattr(gat, 'layer_class', layer_class)
    out = tmp_path / 'out'
    assert gat.main(['--out', str(out), '--device', 'cpu', '--quick', '--part', 'layer']) == 0
    recs = [json.loads(line) for line in (out / 'gat.jsonl').read_text().splitlines()]
    ly = [r for r in recs if r['kind'] == 'layer']
    assert len(ly) == len(gat.LAYERS)
    for r in ly:
        assert r['pyg_error'] == 'oom' and 'pyg_ms' not in r and r['unfused_ms'] > 0
        assert r['err_ref'] == 'unfused'
    assert '| OOM / ' in (out / 'gat.md').read_text()

    def build():
        raise torch.OutOfMemoryError('CUDA out of memory')

    rec = gat.train_step({}, build, None, None, None, 1, 1, 'cpu')
    assert rec['status'] == 'oom' and gat._status(rec) == 'OOM'

    rec = {}
    assert not gat.time_case(rec, 'x', lambda: layer_class('pyg', 'GATConv')(4, 2)(None, None), 'cpu', 1, 2, 0)
    assert rec == {'x_error': 'oom'} and gat.cell(rec, 'x_ms', ('x',)) == 'OOM'
