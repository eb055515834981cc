"""Every ```python block of docs/*.md runs (on the CPU reference here, on the
kernels on a GPU). Blocks are fragments of a user's program: each runs in a
fresh scope holding the names they assume (a small graph with a hub row,
features, a model), so a renamed argument or a removed function fails here."""

import re

import pytest
import torch

from ..conftest import REPO_ROOT

BLOCK = re.compile(r'```python\n(.*?)```', re.S)


def _blocks():
    for path in sorted((REPO_ROOT / 'docs').glob('*.md')):
        for i, m in enumerate(BLOCK.finditer(path.read_text())):
            yield pytest.param(path, m.group(1), id=f'{path.name}:{i}')


class _Net(torch.nn.Module):
    """The ``model`` the fragments call: two pyg_tc GCN layers."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        import pyg_tc

        self.c1, self.c2 = pyg_tc.nn.GCNConv(cin, 16), pyg_tc.nn.GCNConv(16, cout)

    def forward(self, x, edge_index):
        return self.c2(self.c1(x, edge_index).relu(), edge_index)


def _scope() -> dict:
    import torch.nn.functional as F
    from torch_geometric.data import Data
    import pyg_tc

    g = torch.Generator().manual_seed(0)
    n, cin, cout, classes = 60, 16, 8, 4
    ei = torch.randint(0, n, (2, 400), generator=g)
    ei = torch.cat([ei, torch.stack([torch.arange(1, n), torch.zeros(n - 1, dtype=torch.long)])], 1)  # a hub
    x = torch.randn(n, cin, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return dict(
        torch=torch,
        F=F,
        pyg_tc=pyg_tc,
        x=x,
        edge_index=ei,
        y=y,
        data=Data(x=x, edge_index=ei, y=y, num_nodes=n),
        in_channels=cin,
        out_channels=cout,
        in_ch=cin,
        out_ch=cout,
        classes=classes,
        a=torch.randn(n, 8, generator=g),
        b=torch.randn(n, 8, generator=g),
        h=torch.randn(n, 256, generator=g),
        lin=torch.nn.Linear(256, 256),
        model=_Net(cin, classes),
    )


@pytest.mark.filterwarnings('ignore::UserWarning')  # autocast / GradScaler on a CPU-only machine
@pytest.mark.parametrize('path, code', list(_blocks()))
def test_docs_snippet_runs(path, code):
    exec(compile(code, str(path.relative_to(REPO_ROOT)), 'exec'), _scope())


def test_reorder_snippet_maps_back():
    """docs/usage.md's reordering block: features follow the reorder and
    ``node_perm`` maps the rows of the result back to the original order."""
    path = REPO_ROOT / 'docs' / 'usage.md'
    code = next(m.group(1) for m in BLOCK.finditer(path.read_text()) if 'ReorderTransform' in m.group(1))
    scope = _scope()
    exact = scope['pyg_tc'].ops.spmm(scope['x'], scope['edge_index'])
    exec(compile(code, 'docs/usage.md', 'exec'), scope)
    torch.testing.assert_close(scope['out_orig'], exact, rtol=1e-5, atol=1e-5)
