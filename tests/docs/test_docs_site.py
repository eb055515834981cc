"""What the built site shows, checked without building it:

* each tutorial's text appears once on its page: the page renders the
  script's docstring (``.. include::``) and lists the code after it
  (``.. tutorial-source::``, whose first line is computed by ``code_start``);
* the pages load no script from another site (the check ``docs/conf.py`` runs
  after every html build), so math renders offline.

``docs/conf.py`` imports Sphinx: these tests skip where it is not installed
(``pip install -e ".[docs]"``)."""

import ast
import importlib.util
import re
from types import SimpleNamespace

import pytest

from ..conftest import REPO_ROOT

TUTORIALS = sorted((REPO_ROOT / 'tutorials').glob('[0-9][0-9]_*.py'))


@pytest.fixture(scope='module')
def conf():
    pytest.importorskip('sphinx')
    spec = importlib.util.spec_from_file_location('pyg_tc_docs_conf', REPO_ROOT / 'docs' / 'conf.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize('script', TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_page_shows_the_text_once(script):
    page = (REPO_ROOT / 'docs' / 'tutorials' / f'{script.stem}.rst').read_text()
    rel = f'../../tutorials/{script.name}'
    assert f'.. include:: {rel}' in page  # the docstring, rendered
    assert f'.. tutorial-source:: {rel}' in page  # the code without it
    assert '.. literalinclude::' not in page  # would list the docstring a second time


@pytest.mark.parametrize('script', TUTORIALS, ids=lambda p: p.stem)
def test_listed_code_is_the_script_without_its_docstring(conf, script):
    text = script.read_text()
    start = conf.code_start(script)
    shown = '\n'.join(text.splitlines()[start - 1 :])
    doc = ast.get_docstring(ast.parse(text))
    assert doc and doc.splitlines()[0] not in shown
    assert shown.lstrip() == shown  # starts at code, not at a blank line
    body = ast.parse(text).body
    assert ast.dump(ast.parse(shown)) == ast.dump(ast.Module(body=body[1:], type_ignores=[]))


def test_code_start_without_a_docstring(conf, tmp_path):
    script = tmp_path / 's.py'
    script.write_text('import os\n"""not a module docstring"""\n')
    assert conf.code_start(script) == 1


def test_pages_loading_remote_scripts_fail_the_build(conf, tmp_path):
    from sphinx.errors import ExtensionError

    (tmp_path / 'api').mkdir()
    page = tmp_path / 'api' / 'nn.html'
    app = SimpleNamespace(outdir=str(tmp_path), builder=SimpleNamespace(format='html'))
    page.write_text('<script defer="defer" src="../_static/mathjax/tex-chtml.js"></script>')
    conf._no_remote_scripts(app, None)
    page.write_text('<script async="async" src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>')
    with pytest.raises(ExtensionError, match=re.escape('api/nn.html')):
        conf._no_remote_scripts(app, None)
    conf._no_remote_scripts(app, RuntimeError('an earlier failure'))  # nothing to check then


def test_math_is_served_by_the_site(conf):
    assert 'sphinx-mathjax-offline' in conf.extensions
