"""The README's measured numbers equal the results files they cite.

The README is cut into claims: a table row, or a bullet / paragraph. A claim
that states a measurement (a ratio ``28.5x``, a percentage, ``ms``, ``MiB`` or
``points``) must link at least one results file under ``docs/results/``, and
every such number must be found in one of the files it links, rounded half-up
to the digits the README writes (``28.5x`` matches the file's ``28.45``; ``29x``
would not match ``28.45``)."""

import re
from decimal import ROUND_HALF_UP, Decimal

import pytest

from ..conftest import REPO_ROOT

README = REPO_ROOT / 'README.md'
RESULTS_LINK = re.compile(r'\]\((docs/results/[^)#\s]+)\)')
# 28.5x / 1.25x (no space before x: '4 x 32' is a shape), 8.1%, 9.79 ms, 4,299 MiB, 0.33 points
CLAIM_NUMBER = re.compile(r'(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?:x\b|%|\s(?:ms|MiB|points)\b)')
FILE_NUMBER = re.compile(r'(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?')


def claims(text: str):
    """(first line number, text) of each table row, bullet or paragraph outside code blocks."""
    out, cur, start, fenced = [], [], 0, False
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith('```'):
            fenced = not fenced
            if cur:
                out.append((start, '\n'.join(cur)))
                cur = []
            continue
        if fenced:
            continue
        new_unit = (
            not line.strip() or line.startswith('|') or line.lstrip().startswith(('* ', '- ')) or line.startswith('#')
        )
        if new_unit and cur:
            out.append((start, '\n'.join(cur)))
            cur = []
        if line.strip() and not line.startswith('#'):
            if not cur:
                start = i
            cur.append(line)
            if line.startswith('|'):
                out.append((start, '\n'.join(cur)))
                cur = []
    if cur:
        out.append((start, '\n'.join(cur)))
    return out


def numbers_in(path) -> set:
    return {Decimal(m.replace(',', '')) for m in FILE_NUMBER.findall(path.read_text())}


def matches(claimed: str, found: set) -> bool:
    value = Decimal(claimed.replace(',', ''))
    quantum = Decimal(1).scaleb(value.as_tuple().exponent)  # 1, 0.1, 0.01 ...
    return any(v.quantize(quantum, rounding=ROUND_HALF_UP) == value for v in found)


def check(text: str, root) -> list:
    """Every problem found in a README text, as readable lines."""
    problems = []
    for line, claim in claims(text):
        nums = CLAIM_NUMBER.findall(claim)
        links = RESULTS_LINK.findall(claim)
        if not nums:
            continue
        if not links:
            problems.append(f'README.md:{line}: {nums} cite no docs/results file')
            continue
        found = set()
        for link in links:
            path = root / link
            if not path.is_file():
                problems.append(f'README.md:{line}: {link} does not exist')
                continue
            found |= numbers_in(path)
        for n in nums:
            if found and not matches(n, found):
                problems.append(f'README.md:{line}: {n} is not in {", ".join(links)} (rounded as written)')
    return problems


def test_readme_numbers_match_the_results_files_they_cite():
    text = README.read_text()
    assert RESULTS_LINK.search(text), 'the README cites no results file'
    problems = check(text, REPO_ROOT)
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize(
    'claim, ok',
    [
        ('28.5x', True),  # 28.45 rounded half-up to one decimal
        ('28.45x', True),
        ('29x', False),  # 28.45 rounds to 28
        ('28.4x', False),
        ('4,299 MiB', True),
        ('1.2 ms', False),
    ],
)
def test_the_check_rounds_as_written(tmp_path, claim, ok):
    results = tmp_path / 'docs' / 'results'
    results.mkdir(parents=True)
    (results / 'r.md').write_text('| reddit | GAT 8x8 | **28.45** | 4299 | 1.26 ms |\n')
    readme = f'* pyg_tc: {claim} on the Reddit-shaped graph ([results](docs/results/r.md)).\n'
    assert (check(readme, tmp_path) == []) is ok


def test_a_measured_claim_without_a_results_link_is_reported(tmp_path):
    problems = check('* pyg_tc runs 43x cuSPARSE ([docs](docs/es_spmm.md)).\n', tmp_path)
    assert len(problems) == 1 and 'cite no docs/results file' in problems[0]
    assert check('| 4 x 32 heads | 2-layer |\n', tmp_path) == []  # shapes are not claims
