"""One results page per suite (``docs/results/*.md``), each opening with a run
block naming its GPU, driver, torch and CUDA versions, date and commit ("not
recorded" where a field was not recorded at the time). The raw records of
every run (``.jsonl``, ``.json``, probe logs) are kept in ``docs/results/data/``,
each linked from the page it belongs to; the results folder itself holds the
pages and the plots they show."""

import re

import pytest

from ..conftest import REPO_ROOT

RESULTS_DIR = REPO_ROOT / 'docs' / 'results'
RESULTS = sorted(RESULTS_DIR.glob('*.md'))
DATA = sorted((RESULTS_DIR / 'data').iterdir())
FIELDS = {
    'GPU': r'NVIDIA \S.*|CPU \(no GPU\).*',
    'driver': r'\d+\.\d+(?:\.\d+)?|not recorded',
    'torch': r'\d+\.\d+\.\d+\S*',
    'CUDA': r'\d+\.\d+.*|none',
    'date': r'20\d\d-\d\d-\d\d\b.*',
    'commit': r'.*\b[0-9a-f]{7,40}\b.*',
}
LINK = re.compile(r'\]\(([^)#\s]+)(?:#[^)\s]*)?\)')


def run_block(text: str) -> dict:
    """The rows of the ``| run | |`` table that follows a page's title."""
    lines = text.splitlines()
    assert lines[0].startswith('# '), 'a results page starts with its title'
    body = [line for line in lines[1:6] if line.strip()]
    assert body[:2] == ['| run | |', '|---|---|'], 'the run block follows the title'
    rows = {}
    for line in lines[lines.index('|---|---|') + 1 :]:
        if not line.startswith('|'):
            break
        key, value = (c.strip() for c in line.strip('|').split('|', 1))
        rows[key] = value
    return rows


@pytest.mark.parametrize('page', RESULTS, ids=lambda p: p.name)
def test_results_pages_say_where_they_were_measured(page):
    rows = run_block(page.read_text())
    assert set(FIELDS) <= set(rows), f'missing: {sorted(set(FIELDS) - set(rows))}'
    for field, pattern in FIELDS.items():
        assert re.fullmatch(pattern, rows[field]), f'{field}: {rows[field]!r}'


def test_run_block_parsing():
    page = '# t\n\n| run | |\n|---|---|\n| GPU | NVIDIA H200 |\n| date | 2026-11-21 |\n\n| a | b |\n'
    assert run_block(page) == {'GPU': 'NVIDIA H200', 'date': '2026-11-21'}
    with pytest.raises(AssertionError):
        run_block('# t\n\n- GPU: NVIDIA H200\n')


@pytest.mark.parametrize('page', RESULTS, ids=lambda p: p.name)
def test_results_pages_link_files_that_exist(page):
    targets = [t for t in LINK.findall(page.read_text()) if not re.match(r'[a-z]+:', t)]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, missing


def test_every_raw_record_is_linked_from_its_page():
    linked = {(page.parent / t).resolve() for page in RESULTS for t in LINK.findall(page.read_text())}
    orphans = [p.name for p in DATA if p.resolve() not in linked]
    assert not orphans, f'linked from no results page: {orphans}'
