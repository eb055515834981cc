"""The package's layering, read from the source with ``ast`` (nothing is
imported, so an import made only inside a function counts too):

* ``pyg_tc.formats`` sits below the ops and the layers: no module of it
  imports ``pyg_tc.ops``, ``pyg_tc.nn``, ``pyg_tc.loader``,
  ``pyg_tc.transforms`` or ``pyg_tc.bench`` (absolute or relative, at module
  or function level, nor through ``importlib``), nor looks an op up by name
  (``_library.op``): the ops it needs are defined below it;
* the objects derived from a graph live in one store of
  :class:`~pyg_tc.formats.CSRGraph` that only ``pyg_tc.formats`` reads
  directly: no other module touches ``_memo`` (they use the named accessors);
* no import cycle among the modules of ``pyg_tc``, at module or function
  level (:func:`import_graph`, :func:`find_cycles`);
* one dispatch point: only ``pyg_tc/ops/dispatch.py`` decides between a
  kernel and a reference or between backends (:func:`backend_decisions`).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

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
    'from . import csr', 'from .csr import CSRGraph', 'from .. import _library',
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


# -- no import cycle ---------------------------------------------------------
#
# The graph: one node per module of pyg_tc (a package is its __init__). An
# import anywhere in a module (module level, or inside a function or class)
# is an edge to the module it names: ``import a.b`` and ``from a import b``
# name ``a.b`` when that is a module, else ``a``; relative imports resolved;
# ``importlib.import_module`` / ``__import__`` of a string the source spells
# (a constant, or an f-string of the module's own string constants). Loading
# a module runs its packages' __init__ first, so an edge to ``a.b.c`` is also
# an edge to ``a.b`` and ``a`` -- except for the importer's own packages,
# which are loaded before it whatever it imports (a package importing its own
# modules is no cycle). Imports of a name computed at run time (the lazy
# attributes of pyg_tc/_lazy.py, the benchmark registry's suites) are not seen.

#: edges left out of the graph, each with its reason
ALLOWED_EDGES = {
    ('pyg_tc._library', 'pyg_tc.ops'):
        '_library.ensure() and _library.op() import the op modules by name on first use, so every op is '
        'defined before its CUDA fallback is registered (the op framework is below them at import time)',
}


def _constants(tree: ast.Module) -> Dict[str, str]:
    """The module-level ``NAME = 'string'`` assignments of a module."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _string(node: ast.AST, constants: Dict[str, str]) -> Optional[str]:
    """The value of a string expression the source spells, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            part = _string(v.value if isinstance(v, ast.FormattedValue) else v, constants)
            if part is None:
                return None
            parts.append(part)
        return ''.join(parts)
    return None


def module_imports(source: str, package: str, modules: Set[str]) -> Iterator[tuple]:
    """``(line, module)`` for every import in ``source`` (a module of package
    ``package``) of a module in ``modules``: the most specific module each
    import names (see above)."""
    tree = ast.parse(source)
    constants = _constants(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(package, node.level, node.module) if node.level else node.module
            names = [f'{base}.{a.name}' if f'{base}.{a.name}' in modules else base for a in node.names]
        elif isinstance(node, ast.Call) and node.args and \
                (getattr(node.func, 'attr', None) or getattr(node.func, 'id', None)) in ('import_module',
                                                                                        '__import__'):
            name = _string(node.args[0], constants)
            if name is None:
                continue
            if name.startswith('.'):  # import_module('.x', package)
                anchor = _string(node.args[1], constants) if len(node.args) > 1 else None
                if anchor is None:
                    continue
                level = len(name) - len(name.lstrip('.'))
                name = _resolve(anchor if level == 1 else anchor, level, name.lstrip('.') or None)
            names = [name]
        else:
            continue
        for name in names:
            while name and name not in modules:  # an attribute of a module: the module
                name = name.rpartition('.')[0]
            if name:
                yield node.lineno, name


def _packages(module: str) -> List[str]:
    parts = module.split('.')
    return ['.'.join(parts[:i]) for i in range(1, len(parts))]


def import_graph(sources: Dict[str, Tuple[str, bool]]) -> Dict[str, Dict[str, int]]:
    """``{module: {imported module: line}}`` of modules ``{name: (source,
    is_package)}``, edges to the imported modules' packages included and
    :data:`ALLOWED_EDGES` left out."""
    modules = set(sources)
    graph: Dict[str, Dict[str, int]] = {}
    for name, (source, is_package) in sources.items():
        own = set(_packages(name)) | {name}
        edges = graph[name] = {}
        package = name if is_package else name.rpartition('.')[0]
        for line, target in module_imports(source, package, modules):
            for t in [target] + _packages(target):
                if t in modules and t not in own and (name, t) not in ALLOWED_EDGES:
                    edges.setdefault(t, line)
    return graph


def find_cycles(graph: Dict[str, Dict[str, int]]) -> List[List[str]]:
    """One cycle (``[a, b, ..., a]``) through every strongly connected group
    of modules that has one (Tarjan's algorithm, then a path in the group)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    groups: List[Set[str]] = []

    def visit(v: str) -> None:  # (recursion depth: the import depth of pyg_tc)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph[v]:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for group in groups:  # the shortest way back to the group's first module, breadth-first
        start = min(group)
        parent: Dict[str, Optional[str]] = {start: None}
        frontier, cycle = [start], None
        while cycle is None and frontier:  # (a group always has one)
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w == start:
                        cycle = [v]
                        while parent[cycle[-1]] is not None:
                            cycle.append(parent[cycle[-1]])
                        break
                    if w in group and w not in parent:
                        parent[w] = v
                        nxt.append(w)
                if cycle is not None:
                    break
            frontier = nxt
        cycles.append(cycle[::-1] + [start] if cycle else sorted(group))
    return cycles


def _package_sources() -> Dict[str, Tuple[str, bool]]:
    return {_module_name(p): (p.read_text(), p.name == '__init__.py') for p in _sources(PACKAGE)}


def test_no_import_cycle():
    graph = import_graph(_package_sources())
    cycles = find_cycles(graph)
    shown = ['  ' + ' -> '.join(f'{a} (line {graph[a][b]})' for a, b in zip(c, c[1:])) + f' -> {c[-1]}'
             for c in cycles]
    assert not cycles, 'import cycles (module or function level):\n' + '\n'.join(shown)


def _graph_of(**modules: str) -> Dict[str, Dict[str, int]]:
    """The import graph of made-up modules: ``p__a='...'`` is module ``p.a``;
    ``p`` is a package (its __init__) when named alone."""
    names = {k.replace('__', '.'): v for k, v in modules.items()}
    packages = {q for n in names for q in _packages(n)}
    return import_graph({n: (src, n in packages) for n, src in names.items()})


@pytest.mark.parametrize('modules,cycle', [
    (dict(p='', p__a='from . import b', p__b='def f():\n    from .a import x\n    return x'),
     ['p.a', 'p.b', 'p.a']),
    (dict(p='', p__a='from .b import f', p__b='from .c import g', p__c='from . import a'),
     ['p.a', 'p.b', 'p.c', 'p.a']),
    (dict(p='', p__a='import p.b', p__b='class K:\n    def m(self):\n        import p.a'),
     ['p.a', 'p.b', 'p.a']),
    (dict(p='', p__q='from .a import x', p__q__a='', p__b='from .q import a',
          p__c='from . import b'), None),
    (dict(p='', p__q='from .. import b', p__q__m='', p__b='from .q.m import z'),
     ['p.b', 'p.q', 'p.b']),  # loading p.q.m runs p.q's __init__ first
    (dict(p='', p__a="import importlib\nNS = 'p'\ndef f():\n    return importlib.import_module(f'{NS}.b')",
          p__b='from . import a'), ['p.a', 'p.b', 'p.a']),
    (dict(p='', p__a="import importlib\nimportlib.import_module('.b', 'p')", p__b='from .a import x'),
     ['p.a', 'p.b', 'p.a']),
    (dict(p='from . import a, b', p__a='from . import b', p__b='import p'), None),  # own packages
    (dict(p='', p__a='from ..x import y\nimport os', p__b='from p import a'), None),
])
def test_cycle_check_catches(modules, cycle):
    found = find_cycles(_graph_of(**modules))
    assert found == ([] if cycle is None else [cycle])


def test_cycle_check_on_the_allowed_edge():
    sources = {'pyg_tc': ('', True), 'pyg_tc.ops': ('from .. import _library', True),
               'pyg_tc._library': ("import importlib\nNAMESPACE = 'pyg_tc'\n"
                                   "def ensure():\n    importlib.import_module(f'{NAMESPACE}.ops')", False)}
    graph = import_graph(sources)
    assert graph['pyg_tc.ops'] == {'pyg_tc._library': 1} and graph['pyg_tc._library'] == {}
    # the same edge from another module is a cycle
    sources['pyg_tc.ops.x'] = ('from ... import _library', False)
    sources['pyg_tc._other'] = (sources.pop('pyg_tc._library')[0], False)
    sources['pyg_tc.ops'] = ('from .. import _other', True)
    assert find_cycles(import_graph(sources)) == [['pyg_tc._other', 'pyg_tc.ops', 'pyg_tc._other']]


# -- one dispatch point ------------------------------------------------------
#
# A backend decision, outside the dispatcher:
#
# * a call of a function that decides kernel or reference or picks a backend:
#   ``use_kernel`` / ``_use_kernel`` (the kernels loaded, not float64),
#   ``kernels_loaded``, ``_fits`` (the attention kernels' head limit),
#   ``torch.are_deterministic_algorithms_enabled`` (atomics or the reference),
#   ``choose`` / ``choose_backend`` (the dispatcher's own); or an import of
#   ``use_kernel`` / ``_use_kernel``;
# * a comparison (``==``, ``!=``, ``in``, ``not in``) of a backend -- a name or
#   attribute called ``backend`` or ``*_backend`` -- with a string literal or
#   a tuple / list / set of them, except ``'pyg'`` (a layer's own choice of
#   PyG's message passing, in TCLayer, not an implementation of an op).
#
# Passing a limit as a value (``register(..., fits=_fits)``) declares it and is
# no decision.

DECIDERS = {'use_kernel', '_use_kernel', 'kernels_loaded', '_fits', 'are_deterministic_algorithms_enabled',
            'choose', 'choose_backend'}
#: the layers' own backend, compared in TCLayer
LAYER_BACKENDS = {'pyg'}
DISPATCH = PACKAGE / 'ops' / 'dispatch.py'
#: outside dispatch: {file: {function: the deciders it may call}}; the format
#: builders sit below the ops and cannot ask the dispatcher
ALLOWED_DECISIONS = {
    PACKAGE / 'formats' / 'csr.py': {f: {'_use_kernel'} for f in ('build_schedules', 'pad_hops_layout',
                                                                       'padded_schedules', 'sort_int32', 'transpose')},
}


def _is_backend(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ''
    return name == 'backend' or name.endswith('_backend')


def _literals(node: ast.AST) -> Optional[List[str]]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and \
            all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def backend_decisions(source: str) -> List[tuple]:
    """``(line, enclosing function or None, what)`` for every backend
    decision in ``source`` (see above)."""
    found = []

    def visit(node: ast.AST, fn: Optional[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = node.name
        if isinstance(node, ast.Call):
            name = getattr(node.func, 'attr', None) or getattr(node.func, 'id', None)
            if name in DECIDERS:
                found.append((node.lineno, fn, name))
        elif isinstance(node, ast.ImportFrom):
            found.extend((node.lineno, fn, f'imports {a.name}') for a in node.names
                         if a.name in ('use_kernel', '_use_kernel'))
        elif isinstance(node, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                   for op in node.ops):
            terms = [node.left] + node.comparators
            for a, b in zip(terms, terms[1:]):
                for x, y in ((a, b), (b, a)):
                    values = _literals(y)
                    if _is_backend(x) and values is not None and not set(values) <= LAYER_BACKENDS:
                        found.append((node.lineno, fn, f'compares a backend with {values}'))
        for child in ast.iter_child_nodes(node):
            visit(child, fn)

    visit(ast.parse(source), None)
    return found


def test_only_dispatch_decides_backends():
    bad = []
    for path in _sources(PACKAGE):
        if path == DISPATCH:
            continue
        allowed = ALLOWED_DECISIONS.get(path, {})
        bad += [f'{path.relative_to(REPO_ROOT)}:{line} ({fn}): {what}'
                for line, fn, what in backend_decisions(path.read_text())
                if what not in allowed.get(fn, ())]
    assert not bad, 'backend decisions outside pyg_tc/ops/dispatch.py (declare them as limits ' \
                    'of implementations that choose() reads):\n' + '\n'.join(bad)


def test_the_allowed_decisions_exist():
    """The allowance names what is there (a renamed builder must not leave a
    stale exemption behind)."""
    for path, functions in ALLOWED_DECISIONS.items():
        found = {(fn, what) for _, fn, what in backend_decisions(path.read_text())}
        assert {(fn, w) for fn, ws in functions.items() for w in ws} <= found


@pytest.mark.parametrize('code,what', [
    ('if use_kernel(x):\n    pass', 'use_kernel'),
    ('from .._library import _use_kernel', 'imports _use_kernel'),
    ('ok = _library._use_kernel(t)', '_use_kernel'),
    ('if x.is_cuda and not attn._fits(x):\n    pass', '_fits'),
    ('if not _library.kernels_loaded():\n    pass', 'kernels_loaded'),
    ('if torch.are_deterministic_algorithms_enabled():\n    pass', 'are_deterministic_algorithms_enabled'),
    ("name = dispatch.choose('spmm', b, g, x)", 'choose'),
    ("if self.backend != 'sgt':\n    pass", "['sgt']"),
    ("b = 'reference' if self.backend == 'reference' else 'csr'", "['reference']"),
    ("if backend in ('auto', 'csr'):\n    pass", "['auto', 'csr']"),
    ("def f(op_backend):\n    return 'csr' if 'sgt' == op_backend else op_backend", "['sgt']"),
    ("if self.backend not in {'pyg', 'csr'}:\n    pass", "['pyg', 'csr']"),
])
def test_decision_check_catches(code, what):
    found = backend_decisions(code)
    assert found and what in ' '.join(str(w) for _, _, w in found), found


@pytest.mark.parametrize('code', [
    "if self.backend == 'pyg':\n    pass",
    "@dispatch.register('attention', 'csr', fits=_fits)\ndef f(g):\n    pass",
    "dispatch.register('agnn', 'fused', fits=attn._fits, needs_kernel=False)",
    "if reduce == 'sum':\n    pass",
    "out = dispatch.run('attention', g, x, backend=self.backend, strict=False)",
    'self.backend = dispatch.check_backend(backend, BACKENDS)',
])
def test_decision_check_allows(code):
    assert backend_decisions(code) == []


def test_decision_check_names_the_function():
    code = 'def build(t):\n    return _library._use_kernel(t)\nclass A:\n    def m(self, backend):\n' \
           "        return backend == 'csr'"
    assert [(fn, w) for _, fn, w in backend_decisions(code)] == [
        ('build', '_use_kernel'), ('m', "compares a backend with ['csr']")]
