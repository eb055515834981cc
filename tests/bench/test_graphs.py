"""``pyg_tc.bench.graphs.igbh_shaped``: the IGBH-shaped heterogeneous graph of the MLPerf-shaped
runs has IGBH's node and edge types in the documented proportions, a reverse for every
relation, power-law sources, features in the asked dtype and labels on the papers; the same
seed gives the same graph, and the features do not change the structure."""

import torch

from pyg_tc.bench.graphs import igbh_shaped


def test_igbh_shaped_structure_and_features():
    d = igbh_shaped(3000, width=24, dtype=torch.float16, classes=7)
    assert {t: d[t].num_nodes for t in d.node_types} == {'paper': 3000, 'author': 3600, 'institute': 30, 'fos': 300}
    per_target = {'cites': 10, 'written_by': 3, 'affiliated_to': 1, 'topic': 5}
    assert len(d.edge_types) == 8
    for (src, name, dst), k in (((s, n, t), per_target[n]) for s, n, t in d.edge_types if not n.startswith('rev_')):
        ei = d[src, name, dst].edge_index
        assert ei.size(1) == d[dst].num_nodes * k
        assert torch.equal(d[dst, f'rev_{name}', src].edge_index, ei.flip(0))
        assert int(ei[0].max()) < d[src].num_nodes and int(ei[1].max()) < d[dst].num_nodes
    out = torch.bincount(d['paper', 'cites', 'paper'].edge_index[0], minlength=3000).float()
    assert out.max() > 20 * out.mean()  # power-law popularity of the cited papers
    for t in d.node_types:
        assert d[t].x.dtype == torch.float16 and d[t].x.shape == (d[t].num_nodes, 24)
        assert abs(float(d[t].x.float().std()) - 1) < 0.1
    assert d['paper'].y.shape == (3000,) and int(d['paper'].y.min()) >= 0 and int(d['paper'].y.max()) < 7
    plain = igbh_shaped(3000)
    assert 'x' not in plain['paper'] and 'y' not in plain['paper']
    for e in d.edge_types:  # (the features are drawn after the structure)
        assert torch.equal(plain[e].edge_index, d[e].edge_index)
    assert torch.equal(igbh_shaped(3000, width=24)['author'].x, d['author'].x)
