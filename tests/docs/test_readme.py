"""The README's usage example runs as written (on the CPU reference here, on
the kernels on a GPU) and matches PyG's GCNConv with the same weights."""

import re

import torch

from ..conftest import REPO_ROOT


def test_readme_example_runs(tmp_path, monkeypatch, capsys):
    """As written: nothing injected, no network, no dataset files (a synthetic graph),
    run from an empty folder. It prints the backend that ran and, where the
    kernels are not used, why."""
    monkeypatch.chdir(tmp_path)
    readme = (REPO_ROOT / 'README.md').read_text()
    code = re.search(r'```python\n(.*?)```', readme, re.S).group(1)
    scope = {}
    exec(compile(code, 'README.md', 'exec'), scope)
    assert not any(tmp_path.iterdir())  # wrote nothing
    import pyg_tc

    info = pyg_tc.info(build=False)
    printed = capsys.readouterr().out
    assert printed.startswith(info['backend'])
    if info['kernels'] != 'loaded':
        assert info['kernels_reason'] and info['kernels_reason'] in printed
    out, data = scope['out'], scope['data']
    assert out.shape == (data.num_nodes, scope['dataset'].num_classes)
    import torch_geometric.nn as pyg_nn

    ref1 = pyg_nn.GCNConv(data.num_features, 16).to(data.x.device)
    ref2 = pyg_nn.GCNConv(16, scope['dataset'].num_classes).to(data.x.device)
    ref1.load_state_dict(scope['conv1'].state_dict())
    ref2.load_state_dict(scope['conv2'].state_dict())
    plain = data.edge_index.as_subclass(torch.Tensor)
    ref = ref2(ref1(data.x, plain).relu(), plain)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
