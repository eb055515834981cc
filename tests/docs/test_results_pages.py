"""Each results page (``docs/results/*.md``) opens with a run block naming its
GPU, driver, torch and CUDA versions, date and commit ("not recorded" where a
field was not recorded at the time)."""

import re

import pytest

from ..conftest import REPO_ROOT

RESULTS = sorted((REPO_ROOT / 'docs' / 'results').glob('*.md'))
FIELDS = {
    'GPU': r'NVIDIA \S.*|CPU \(no GPU\).*',
    'driver': r'\d+\.\d+(?:\.\d+)?|not recorded',
    'torch': r'\d+\.\d+\.\d+\S*',
    'CUDA': r'\d+\.\d+.*|none',
    'date': r'20\d\d-\d\d-\d\d\b.*',
    'commit': r'.*\b[0-9a-f]{7,40}\b.*',
}


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
