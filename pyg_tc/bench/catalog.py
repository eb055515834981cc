"""The benchmark graphs by name: the synthetic (R-MAT) shapes, the real
graphs' sources, the default suites, and the resolution of a ``--graphs``
list. Plain data without torch, so the command line checks the names
without importing it; :mod:`.graphs` builds and loads them."""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple, Union

# name -> (nodes, edges, large)
SYNTHETIC: Dict[str, Tuple[int, int, bool]] = {
    'reddit': (233_000, 96_700_000, True),
    'products': (2_449_029, 104_000_000, True),
    'arxiv': (169_343, 2_100_000, True),
    'tiny': (2_000, 20_000, False),
}


# name -> (source: PyG dataset (class, sub-folder, folder, name) or .mat (path, key), large, description)
REAL: Dict[str, Tuple[tuple, bool, str]] = {
    'cora': (('Planetoid', 'planetoid', 'Cora', 'Cora'), False, 'Planetoid Cora'),
    'citeseer': (('Planetoid', 'planetoid', 'CiteSeer', 'CiteSeer'), False, 'Planetoid CiteSeer'),
    'tolokers': (
        ('HeterophilousGraphDataset', 'heterophilous', 'tolokers', 'Tolokers'),
        True,
        'HeterophilousGraphDataset Tolokers',
    ),
    'proteins': (
        ('TUDataset', 'tu', 'PROTEINS_full', 'PROTEINS_full'),
        False,
        'TUDataset PROTEINS_full, all graphs as one batch',
    ),
    'blogcatalog': (('misc/blogcatalog.mat', 'network'), True, 'BlogCatalog (deepwalk .mat, symmetric)'),
    'cornell5': (('misc/facebook100/Cornell5.mat', 'A'), True, 'Facebook100 Cornell5 (.mat, symmetric)'),
}

GPU_SUITE: List[str] = [
    'reddit',
    'products',
    'arxiv',
    'cora',
    'citeseer',
    'tolokers',
    'proteins',
    'blogcatalog',
    'cornell5',
]
QUICK_GPU_SUITE: List[str] = ['arxiv', 'cora', 'tolokers', 'cornell5']
CPU_SUITE: List[str] = ['tiny']
ALL_NAMES: List[str] = list(SYNTHETIC) + list(REAL)


def groups() -> Dict[str, List[str]]:
    """The group names ``--graphs`` accepts: ``all`` (every graph except
    tiny), ``large`` (the speed targets), ``synthetic``, ``real``."""
    return {
        'all': [n for n in ALL_NAMES if n != 'tiny'],
        'large': [n for n in ALL_NAMES if n in SYNTHETIC and SYNTHETIC[n][2] or n in REAL and REAL[n][1]],
        'synthetic': [n for n in SYNTHETIC if n != 'tiny'],
        'real': list(REAL),
    }


def check_name(name: str) -> str:
    """``name`` if it is a graph of the catalog, also ``'<synthetic>@<fraction>'``
    (that graph's nodes with a fraction of its edges); else ValueError with a
    one-line message."""
    base, _, frac = name.partition('@')
    if base in SYNTHETIC and frac:
        try:
            ok = 0 < float(frac) <= 1
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f'edge fraction must be in (0, 1], got {name!r}')
        return name
    if name not in SYNTHETIC and name not in REAL:
        raise ValueError(f'unknown graph {name!r}; known: {", ".join(ALL_NAMES)} or groups {", ".join(groups())}')
    return name


def resolve_names(spec: Union[str, Sequence[str], None], default: Sequence[str]) -> List[str]:
    """``'a,b'`` (or a list) -> graph names, groups expanded (:func:`groups`),
    each checked (:func:`check_name`), duplicates dropped; None / empty ->
    ``default``."""
    tokens = spec.split(',') if isinstance(spec, str) else list(spec or ())
    names: List[str] = []
    for tok in (t.strip().lower() for t in tokens):
        for n in groups().get(tok, [tok] if tok else []):
            if check_name(n) not in names:
                names.append(n)
    return names or list(default)
