"""The benchmark graphs by name: the synthetic (R-MAT) shapes, the real
graphs' sources, and the default suites. Plain data without torch, so the
command line lists the names without importing it; :mod:`.graphs` builds
and loads them."""
from __future__ import annotations

from typing import Dict, List, Tuple

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
    'tolokers': (('HeterophilousGraphDataset', 'heterophilous', 'tolokers', 'Tolokers'), True,
                 'HeterophilousGraphDataset Tolokers'),
    'proteins': (('TUDataset', 'tu', 'PROTEINS_full', 'PROTEINS_full'), False,
                 'TUDataset PROTEINS_full, all graphs as one batch'),
    'blogcatalog': (('misc/blogcatalog.mat', 'network'), True, 'BlogCatalog (deepwalk .mat, symmetric)'),
    'cornell5': (('misc/facebook100/Cornell5.mat', 'A'), True, 'Facebook100 Cornell5 (.mat, symmetric)'),
}

GPU_SUITE: List[str] = ['reddit', 'products', 'arxiv', 'cora', 'citeseer', 'tolokers', 'proteins',
                        'blogcatalog', 'cornell5']
QUICK_GPU_SUITE: List[str] = ['arxiv', 'cora', 'tolokers', 'cornell5']
CPU_SUITE: List[str] = ['tiny']
ALL_NAMES: List[str] = list(SYNTHETIC) + list(REAL)
