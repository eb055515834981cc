"""Sphinx configuration of pyg_tc's documentation (PyG's conventions: autodoc +
napoleon for the Google-style ``Args:`` / ``Shapes:`` docstrings, MyST for the
markdown pages).

Build (from the repository root; CI runs both with warnings as errors)::

    python -m sphinx -W --keep-going -n -b html docs docs/_build/html
    PYG_TC_DOCS_OFFLINE=1 python -m sphinx -W --keep-going -n -b linkcheck docs docs/_build/linkcheck

``PYG_TC_DOCS_OFFLINE=1`` makes the link check skip external http(s) URLs (no
network on CI's machines); every local link (pages, ``page.md#anchor``,
results files, figures) is still checked, by MyST and Sphinx during the read
phase (an unresolved one is a warning, so an error under ``-W``) and by the
linkcheck builder. Without it the link check also fetches external URLs.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document the working tree, installed or not

import pyg_tc  # noqa: E402
from sphinx.directives.code import LiteralInclude  # noqa: E402
from sphinx.errors import ExtensionError  # noqa: E402

project = 'pyg_tc'
author = 'pyg_tc contributors'
copyright = 'pyg_tc contributors, MIT license'
release = version = pyg_tc.__version__

extensions = [
    'sphinx.ext.autodoc',
    'sphinx.ext.napoleon',
    'sphinx.ext.mathjax',
    # MathJax copied into _static (the layers' docstrings have math): the pages
    # render their formulas offline, without a CDN (the docs extra installs it).
    'sphinx-mathjax-offline',
    'sphinx.ext.viewcode',
    'myst_parser',
]

source_suffix = {'.rst': 'restructuredtext', '.md': 'markdown'}
root_doc = 'index'
exclude_patterns = ['_build', 'Thumbs.db', '.DS_Store']
# docs/results/ also holds raw records (.jsonl, .txt, .log): they are not pages,
# the pages link them as downloads. Its .md files are pages (the generated
# tables, in the Results toctree of results.md).

# --- MyST ------------------------------------------------------------------
# Headings get slug anchors down to level 4, so ``page.md#some-heading`` links
# are resolved, and checked, at build time (an unknown anchor is a warning).
myst_heading_anchors = 4

# --- autodoc / napoleon (Google style, as PyG) -----------------------------
autodoc_member_order = 'bysource'
autodoc_typehints = 'signature'
autodoc_default_options = {'show-inheritance': True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_custom_sections = ['Shapes']  # PyG's layer docstrings: rendered as a rubric + list

# --- nitpicky mode (-n) -----------------------------------------------------
# pyg_tc's own references must resolve. References into other packages cannot
# (no intersphinx: the build is offline and the html must not depend on other
# sites), so type annotations, ``Bases:`` and docstring references to torch,
# PyG and the standard library are ignored; nothing else is.
nitpick_ignore_regex = [
    (
        r'py:.*',
        r'(torch|torch_geometric|torch_sparse|torch_scatter|numpy|scipy|typing|'
        r'collections|pathlib|types)(\..*)?',
    ),
    # PyG's SAGEConv annotates ``aggr`` with its Aggregation class unqualified
    (r'py:class', r'Aggregation'),
    # PyG's docstring convention (pyg_tc's layers repeat PyG's docstrings) marks
    # literal values and argument names with :obj: (:obj:`True`, :obj:`"auto"`,
    # :obj:`edge_index`): not references. :obj: references to pyg_tc names must
    # still resolve.
    (r'py:obj', r'(?!pyg_tc\b).*'),
    # napoleon's "(bool, optional)" / "**kwargs (optional)" argument types
    (r'py:class', r'optional'),
    # PyG's GATv2Conv docstring (appended to ours by pyg_tc.nn.conv.pyg_layer)
    # refers to a class GATv2 that PyG does not have.
    (r'py:class', r'GATv2'),
    # PyG's RGCNConv docstring (appended to ours) refers to FastRGCNConv unqualified.
    (r'py:class', r'FastRGCNConv'),
]

# --- HTML -------------------------------------------------------------------
# Furo: code blocks scroll instead of being clipped, the sidebar wraps long
# names, and the layout follows the window's width.
html_theme = 'furo'
html_title = f'pyg_tc {release}'
html_static_path = ['_static']
html_css_files = ['custom.css']

# --- link check -------------------------------------------------------------
linkcheck_timeout = 15
linkcheck_retries = 2
if os.environ.get('PYG_TC_DOCS_OFFLINE') == '1':
    # No network: skip external URLs only; local links are still checked.
    linkcheck_ignore = [r'https?://.*', r'mailto:.*']


# --- hooks -------------------------------------------------------------------
def _public_path(cls) -> str:
    """The shortest public import path of a class of another package
    (``torch_geometric.nn.GCNConv``, not ``...conv.gcn_conv.GCNConv``)."""
    parts = cls.__module__.split('.')
    for i in range(1, len(parts) + 1):
        try:
            if getattr(importlib.import_module('.'.join(parts[:i])), cls.__name__, None) is cls:
                return f"{'.'.join(parts[:i])}.{cls.__name__}"
        except ImportError:
            pass
    return f'{cls.__module__}.{cls.__qualname__}'


def _public_bases(app, name, obj, options, bases):
    """``Bases:`` lists public classes only: a private pyg_tc base (``_GATBase``,
    ``pyg_tc.nn._base.TCLayer``) is replaced by its own bases, ``object`` is
    dropped next to another base, and another package's class is named by
    its full public path (``pyg_tc.nn.GCNConv`` derives from
    ``torch_geometric.nn.GCNConv``, which a bare ``GCNConv`` would hide)."""

    def public(cls):
        path = f'{cls.__module__}.{cls.__qualname__}'
        if not (path.startswith('pyg_tc.') and any(p.startswith('_') for p in path.split('.'))):
            return [cls]
        return [b for base in cls.__bases__ for b in public(base)]

    new = []
    for base in bases:
        new += [b for b in public(base) if b not in new]
    new = [b for b in new if b is not object] or new
    bases[:] = [
        b
        if not isinstance(b, type) or b.__module__ in ('builtins', 'typing') or b.__module__.startswith('pyg_tc')
        else f':py:class:`{_public_path(b)}`'
        for b in new
    ]


def _no_builtin_doc(app, what, name, obj, options, lines):
    """A constant re-exported by a package (``pyg_tc.ops.BACKENDS``) has no
    ``#:`` comment there, and autodoc would show its type's docstring (a
    tuple's, a str's); the page describes it instead."""
    if (
        what in ('data', 'attribute')
        and type(obj).__module__ == 'builtins'
        and lines
        and '\n'.join(lines).strip() == (type(obj).__doc__ or '').strip()
    ):
        lines.clear()


def code_start(path) -> int:
    """The first line (1-based) of a script after its module docstring and the
    blank lines that follow it; 1 for a script without a docstring."""
    text = Path(path).read_text(encoding='utf-8')
    body = ast.parse(text).body
    if not (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return 1
    lines = text.splitlines()
    start = body[0].end_lineno + 1
    while start <= len(lines) and not lines[start - 1].strip():
        start += 1
    return start


class TutorialSource(LiteralInclude):
    """``.. tutorial-source:: ../../tutorials/NN_name.py``: the tutorial's code
    without its module docstring (the page already shows that text, rendered
    by ``.. include::``), so the text appears once. Line numbers stay those of
    the file. The docstring's end is found by parsing the file, so edits to the
    text move it along."""

    def run(self):
        _, path = self.env.relfn2path(self.arguments[0])
        self.options.setdefault('lines', f'{code_start(path)}-')
        self.options.setdefault('lineno-match', True)
        return super().run()


_REMOTE_SCRIPT = re.compile(r'<script[^>]*\ssrc="(?:https?:)?//[^"]*"')


def _no_remote_scripts(app, exception):
    """The pages work offline: no page loads a script from another site (MathJax
    comes from ``_static``). Checked after every html build; CI builds with -W."""
    if exception is not None or app.builder.format != 'html':
        return
    bad = sorted(
        str(p.relative_to(app.outdir))
        for p in Path(app.outdir).rglob('*.html')
        if _REMOTE_SCRIPT.search(p.read_text(encoding='utf-8', errors='replace'))
    )
    if bad:
        raise ExtensionError(f'pages load scripts from another site: {", ".join(bad[:5])}')


def setup(app):
    app.add_directive('tutorial-source', TutorialSource)
    app.connect('build-finished', _no_remote_scripts)
    app.connect('autodoc-process-bases', _public_bases)
    app.connect('autodoc-process-docstring', _no_builtin_doc)
