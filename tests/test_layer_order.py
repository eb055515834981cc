"""The package's layer order, read from the source with ``ast`` (nothing is
imported, so imports made inside functions count too): a module may import
from its own package and from the layers below its package, never from the
same layer's other packages or from above.

======  ==============================================================
layer   packages / modules of ``pyg_tc``
======  ==============================================================
0       ``_kernels`` (the build), ``_philox``, ``_cuda_graph``, ``_lazy``
1       ``_library`` (the op framework)
2       ``formats``, ``datasets``, ``_info``
3       ``ops`` (the ops, their references and the one dispatch point)
4       ``nn``, ``transforms``
5       ``loader``
6       ``pyg_tc`` itself (``__init__``: the lazy public namespace)
7       ``bench`` (the benchmark harness)
8       ``cli``, then ``__main__``
======  ==============================================================

Importing a name defined in ``pyg_tc/__init__.py`` (``from . import
__version__``) is not an import of a layer.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import pytest

from .conftest import REPO_ROOT
from .test_architecture import _package_of, imported_modules

PACKAGE = REPO_ROOT / 'pyg_tc'
ROOT = '(root)'
LAYERS = {'_kernels': 0, '_philox': 0, '_cuda_graph': 0, '_lazy': 0, '_library': 1,
          'formats': 2, 'datasets': 2, '_info': 2, 'ops': 3, 'nn': 4, 'transforms': 4, 'loader': 5,
          ROOT: 6, 'bench': 7, 'cli': 8, '__main__': 9}


def _part(module: str) -> Optional[str]:
    """The layer entry of a ``pyg_tc`` module name (None: not pyg_tc, or a
    name defined in the package's ``__init__``)."""
    parts = module.split('.')
    if parts[0] != 'pyg_tc':
        return None
    if len(parts) == 1:
        return ROOT
    return parts[1] if parts[1] in LAYERS else None


def _own_part(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix('').parts
    return ROOT if rel == ('__init__',) else rel[0]


def order_violations(source: str, package: str, own: str) -> List[str]:
    """What in ``source`` (a module of layer entry ``own``) imports from the
    same layer's other packages or from above."""
    out = []
    found = list(imported_modules(source, package))
    # ``from .. import x`` lists 'pyg_tc' itself beside 'pyg_tc.x' (checked on its own); ``import pyg_tc`` counts
    from_root = {line for line, mod in found if mod.startswith('pyg_tc.')}
    for line, mod in found:
        part = _part(mod)
        if part is None or part == own or mod == 'pyg_tc' and line in from_root:
            continue
        if LAYERS[part] >= LAYERS[own]:
            out.append(f'line {line}: {own} (layer {LAYERS[own]}) imports {mod} (layer {LAYERS[part]})')
    return out


def _sources() -> List[Path]:
    return sorted(p for p in PACKAGE.rglob('*.py') if '__pycache__' not in p.parts)


def test_every_module_has_a_layer():
    assert {_own_part(p) for p in _sources()} <= set(LAYERS), 'a new top-level module: give it a layer here'


@pytest.mark.parametrize('path', _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_the_layers(path):
    if _own_part(path) == ROOT:
        return  # the namespace imports its subpackages lazily, on attribute access
    bad = order_violations(path.read_text(), _package_of(path), _own_part(path))
    assert not bad, f'{path.relative_to(REPO_ROOT)}:\n' + '\n'.join(bad)


@pytest.mark.parametrize('own,package,code', [
    ('ops', 'pyg_tc.ops', 'def f():\n    from ..nn import GCNConv\n'),  # function level, upwards
    ('formats', 'pyg_tc.formats', 'import pyg_tc.ops.csr\n'),
    ('nn', 'pyg_tc.nn', 'from ..transforms import DegreeBucketTransform\n'),  # same layer, other package
    ('loader', 'pyg_tc.loader', 'from pyg_tc import bench\n'),
    ('_library', 'pyg_tc', 'from . import _info\n'),
    ('formats', 'pyg_tc.formats', 'def f():\n    import pyg_tc\n    return pyg_tc.nn\n'),
])
def test_order_check_catches(own, package, code):
    assert order_violations(code, package, own)


@pytest.mark.parametrize('own,package,code', [
    ('nn', 'pyg_tc.nn', 'from ..ops import dispatch\nfrom ..formats import CSRGraph\nfrom . import gat\n'),
    ('_info', 'pyg_tc', 'from . import __version__, _kernels\n'),
    ('bench', 'pyg_tc.bench', 'import pyg_tc\n'),
])
def test_order_check_allows(own, package, code):
    assert not order_violations(code, package, own)
