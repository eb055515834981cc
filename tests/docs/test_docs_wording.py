"""The documentation speaks to users, and every results page says where it was measured.

* README, ``docs/`` pages and ``benchmarks/README.md`` hold no project-internal
  references: issue numbers, "blocked", paths outside the repository, a
  particular remote runner (``device_run.sh``, ``$OUT``, ``.device_data``) or
  working sessions. The project's history lives in ``docs/status.md`` in plain
  words.
* Each results page (``docs/results/*.md``) opens with a run block naming its
  GPU, driver, torch and CUDA versions, date and commit ("not recorded" where a
  field was not recorded at the time)."""

import re

import pytest

from ..conftest import REPO_ROOT

PAGES = sorted(
    [
        REPO_ROOT / 'README.md',
        REPO_ROOT / 'benchmarks' / 'README.md',
        *(REPO_ROOT / 'docs').rglob('*.md'),
        *(REPO_ROOT / 'docs').rglob('*.rst'),
        # the tutorials' and the package's docstrings are pages too (the site renders them)
        REPO_ROOT / 'tutorials' / 'README.md',
        *(REPO_ROOT / 'tutorials').glob('*.py'),
        *(REPO_ROOT / 'pyg_tc').rglob('*.py'),
        *(REPO_ROOT / 'benchmarks').glob('*.py'),
    ]
)
PAGES = [p for p in PAGES if '_build' not in p.parts]
INTERNAL = {
    'an issue number': r'\b[Ii]ssue \d+|\(issue\b',
    '"blocked"': r'\b[Bb]locked\b',
    'a path outside the repository': r'\.\./shared\b',
    'a particular remote runner': r'device_run\.sh|\$OUT\b|\.device_data|PYG_TC_SHARED|nvidia-h[12]00-x'
    r'|device (?:tool|call)',
    'a working session': r'\b(?:this|previous|last|next) session\b',
    'a requirement number': r'\b[Rr]equirement \d',
}
RESULTS = sorted((REPO_ROOT / 'docs' / 'results').glob('*.md'))
FIELDS = {
    'GPU': r'NVIDIA \S.*|CPU \(no GPU\).*',
    'driver': r'\d+\.\d+(?:\.\d+)?|not recorded',
    'torch': r'\d+\.\d+\.\d+\S*',
    'CUDA': r'\d+\.\d+.*|none',
    'date': r'20\d\d-\d\d-\d\d\b.*',
    'commit': r'.*\b[0-9a-f]{7,40}\b.*',
}


@pytest.mark.parametrize('page', PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_pages_hold_no_internal_references(page):
    text = page.read_text()
    found = [
        f'{page.relative_to(REPO_ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {what}: {m.group(0)!r}'
        for what, pattern in INTERNAL.items()
        for m in re.finditer(pattern, text)
    ]
    assert not found, '\n'.join(found)


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
