"""The documentation site cannot go stale (CI builds it with Sphinx, warnings
as errors; these checks need no Sphinx):

* the API reference (``docs/api/*.rst``) documents every public name: each
  name in the ``__all__`` of pyg_tc and of any of its modules has an autodoc
  (or ``py:``) directive under its public path, and every such directive
  names an object that exists;
* every tutorial has its page, which the tutorials' README links to;
* every results table is a page of the Results section and every plot is
  shown on some page;
* no markdown heading holds a link (Sphinx's HTML writer fails on one)."""

import importlib
import pkgutil
import re

import pytest

import pyg_tc

from ..conftest import REPO_ROOT

DOCS = REPO_ROOT / 'docs'
DIRECTIVE = re.compile(
    r'^\.\. (?:auto(?:module|class|function|data|attribute|exception|method)|'
    r'py:(?:module|class|function|data|attribute|exception|method))::\s+([\w.]+)',
    re.M,
)


def _documented() -> set:
    return {m.group(1) for p in (DOCS / 'api').glob('*.rst') for m in DIRECTIVE.finditer(p.read_text())}


def _modules_with_all():
    yield pyg_tc
    for m in pkgutil.walk_packages(pyg_tc.__path__, 'pyg_tc.'):
        if m.name.endswith('__main__') or any(p.startswith('_') for p in m.name.split('.')[1:]):
            continue
        mod = importlib.import_module(m.name)
        if hasattr(mod, '__all__'):
            yield mod


def _resolve(path: str):
    parts = path.split('.')
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module('.'.join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def test_every_public_name_is_in_the_api_reference():
    documented = _documented()
    modules = list(_modules_with_all())
    assert {'pyg_tc', 'pyg_tc.nn', 'pyg_tc.ops', 'pyg_tc.formats', 'pyg_tc.transforms'} <= {m.__name__ for m in modules}
    missing = [
        f'{mod.__name__}.{name}'
        for mod in modules
        for name in mod.__all__
        if f'{mod.__name__}.{name}' not in documented
    ]
    assert not missing, f'not in docs/api/*.rst: {missing}'


@pytest.mark.parametrize('path', sorted(_documented()))
def test_api_reference_names_exist(path):
    _resolve(path)


def test_every_tutorial_has_its_page():
    readme = (REPO_ROOT / 'tutorials' / 'README.md').read_text()
    index = (DOCS / 'tutorials' / 'index.md').read_text()
    assert '{include} ../../tutorials/README.md' in index
    for script in sorted((REPO_ROOT / 'tutorials').glob('[0-9][0-9]_*.py')):
        page = DOCS / 'tutorials' / f'{script.stem}.rst'
        assert page.is_file(), f'{script.name} has no page {page.relative_to(REPO_ROOT)}'
        text = page.read_text()
        # the README's link [NN_name.py](NN_name.py) resolves to this label in the docs
        assert text.startswith(f'.. _{script.name}:\n'), f'{page.name}: label {script.name} first'
        assert f'.. tutorial-source:: ../../tutorials/{script.name}' in text  # code, text once
        assert f'({script.name})' in readme


def test_every_result_is_in_the_results_section():
    pages = {p: p.read_text() for p in DOCS.glob('*.md')}
    results = pages[DOCS / 'results.md']
    for table in sorted((DOCS / 'results').glob('*.md')):
        assert f'<results/{table.stem}>' in results, f'{table.name} is not in docs/results.md'
    shown = {m for text in pages.values() for m in re.findall(r'!\[[^\]]*\]\((results/[^)\s]+\.png)\)', text)}
    plots = {f'results/{p.name}' for p in (DOCS / 'results').glob('*.png')}
    assert not plots - shown, f'plots shown on no page: {sorted(plots - shown)}'


def test_no_link_in_a_heading():
    """A link in a markdown heading goes into the page's table of contents;
    a link to a file that is not a page (a figure, a ``.jsonl``) becomes a
    download reference there, on which Sphinx's HTML writer fails with
    ``KeyError: 'anchorname'``. Link from the paragraph below the heading."""
    heading = re.compile(r'^#{1,6} .*\]\(', re.M)
    bad = [
        f'{p.relative_to(REPO_ROOT)}: {m.group(0)}'
        for p in sorted(DOCS.rglob('*.md'))
        if '_build' not in p.parts
        for m in heading.finditer(p.read_text())
    ]
    assert not bad, bad
