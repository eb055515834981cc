"""The package's layering, read from the source with ``ast`` (nothing is
imported, so an import made only inside a function counts too):

* ``pyg_tc.formats`` sits below the ops and the layers: no module of it
  imports ``pyg_tc.ops``, ``pyg_tc.nn``, ``pyg_tc.loader``,
  ``pyg_tc.transforms`` or ``pyg_tc.bench`` (absolute or relative, at module
  or function level, nor through ``importlib``), nor looks an op up by name
  (``_library.op``): the ops it needs are defined below it;
* the objects derived from a graph live in one store of
  :class:`~pyg_tc.formats.CSRGraph` that only ``pyg_tc.formats`` reads
  directly: no other module touches ``_memo`` (they use the named accessors).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from .conftest import REPO_ROOT

PACKAGE = REPO_ROOT / 'pyg_tc'
FORMATS = PACKAGE / 'formats'
#: the packages above the formats
ABOVE_FORMATS = ('pyg_tc.ops', 'pyg_tc.nn', 'pyg_tc.loader', 'pyg_tc.transforms', 'pyg_tc.bench')


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def _package_of(path: Path) -> str:
    """The package relative imports in ``path`` start from."""
    name = _module_name(path)
    return name if path.name == '__init__.py' else name.rpartition('.')[0]


def _resolve(package: str, level: int, module: Optional[str]) -> str:
    base = package.split('.')
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return '.'.join(base + ([module] if module else []))


def imported_modules(source: str, package: str) -> Iterator[tuple]:
    """``(line, module)`` of every import in ``source`` (module of package
    ``package``), wherever it stands: ``import a.b``, ``from a import b``
    (both ``a`` and ``a.b``: ``b`` may be a submodule), relative imports
    resolved, and ``importlib.import_module`` / ``__import__`` of a string."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(package, node.level, node.module) if node.level else node.module
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f'{base}.{alias.name}'
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, 'id', None)
            if name in ('import_module', '__import__'):
                target = node.args[0].value
                if target.startswith('.') and len(node.args) > 1:  # import_module('.x', 'pkg')
                    continue  # (not used in pyg_tc; would need the package argument)
                yield node.lineno, target


def op_lookups(source: str) -> Iterator[int]:
    """Lines that look an op up by name: ``_library.op`` or ``op`` imported
    from ``_library``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == 'op' and \
                isinstance(node.value, ast.Name) and node.value.id == '_library':
            yield node.lineno
        elif isinstance(node, ast.ImportFrom) and (node.module or '').endswith('_library') and \
                any(a.name == 'op' for a in node.names):
            yield node.lineno


def layer_violations(source: str, package: str) -> List[str]:
    """What in ``source`` reaches a package above the formats."""
    bad = [f'line {line}: imports {mod}' for line, mod in imported_modules(source, package)
           if any(mod == p or mod.startswith(p + '.') for p in ABOVE_FORMATS)]
    return bad + [f'line {line}: looks an op up by name (_library.op)' for line in op_lookups(source)]


def memo_accesses(source: str) -> List[int]:
    """Lines of ``source`` that touch an attribute ``_memo`` (``x._memo``,
    or by name through ``getattr`` / ``setattr`` / ``hasattr`` / ``delattr``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == '_memo':
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, 'id', None) in ('getattr', 'setattr', 'hasattr',
                                                                               'delattr') \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value == '_memo':
            lines.append(node.lineno)
    return lines


def _sources(root: Path) -> List[Path]:
    return sorted(p for p in root.rglob('*.py') if '__pycache__' not in p.parts)


@pytest.mark.parametrize('path', _sources(FORMATS), ids=lambda p: p.name)
def test_formats_import_nothing_above_them(path):
    bad = layer_violations(path.read_text(), _package_of(path))
    assert not bad, f'{path.relative_to(REPO_ROOT)}: {bad}'


def test_no_module_outside_formats_touches_the_memo():
    roots = [PACKAGE] + [REPO_ROOT / d for d in ('benchmarks', 'tutorials') if (REPO_ROOT / d).is_dir()]
    found = [f'{p.relative_to(REPO_ROOT)}:{line}' for root in roots for p in _sources(root)
             if FORMATS not in p.parents for line in memo_accesses(p.read_text())]
    assert not found, f'read or write CSRGraph._memo through its accessors instead: {found}'


# -- the checks themselves catch what they are for ---------------------------

@pytest.mark.parametrize('code,what', [
    ('from ..ops import dispatch', 'pyg_tc.ops'),
    ('from .. import ops', 'pyg_tc.ops'),
    ('from ..ops.sample import capped_graph', 'pyg_tc.ops'),
    ('from ..nn.gat import LoopGraph', 'pyg_tc.nn'),
    ('import pyg_tc.loader', 'pyg_tc.loader'),
    ('from pyg_tc import nn', 'pyg_tc.nn'),
    ('def f():\n    from ..transforms import CapNeighbors\n    return CapNeighbors', 'pyg_tc.transforms'),
    ('class A:\n    def m(self):\n        import pyg_tc.ops.sort as s\n        return s', 'pyg_tc.ops'),
    ("import importlib\nimportlib.import_module('pyg_tc.ops')", 'pyg_tc.ops'),
    ("from .. import _library\nx = _library.op('sort_int32')", '_library.op'),
    ('from .._library import op', '_library.op'),
])
def test_layer_check_catches(code, what):
    bad = layer_violations(code, 'pyg_tc.formats')
    assert bad and what in ' '.join(bad), bad


@pytest.mark.parametrize('code', [
    'from . import _build_ops', 'from .csr import CSRGraph', 'from .. import _library',
    'from .._library import Op', 'import torch', 'from torch_geometric import EdgeIndex',
    'from .carrier import derived  # pyg_tc.ops is named here only in a comment',
])
def test_layer_check_allows_the_formats_own_imports(code):
    assert layer_violations(code, 'pyg_tc.formats') == []


def test_relative_imports_resolve_from_the_package():
    assert [m for _, m in imported_modules('from .. import ops', 'pyg_tc.formats')] == ['pyg_tc', 'pyg_tc.ops']
    assert ('pyg_tc.formats.csr' in
            [m for _, m in imported_modules('from .csr import CSRGraph', 'pyg_tc.formats')])
    assert _package_of(FORMATS / '__init__.py') == 'pyg_tc.formats'
    assert _package_of(FORMATS / 'csr.py') == 'pyg_tc.formats'


@pytest.mark.parametrize('code,hits', [
    ('g._memo[k] = 1', 1), ('x = g._memo.get(k)', 1), ("v = getattr(g, '_memo')", 1),
    ('for k in list(g._memo):\n    del g._memo[k]', 2), ('g.memo(k, f)', 0), ('g.memoised(k)', 0),
])
def test_memo_check_catches(code, hits):
    assert len(memo_accesses(code)) == hits
