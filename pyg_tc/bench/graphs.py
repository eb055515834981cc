"""Benchmark graphs: an R-MAT generator and the suite (synthetic + real, offline).

Synthetic graphs are R-MAT power-law graphs with random node ids, shaped like
Reddit, ogbn-products and ogbn-arxiv. Real graphs are read from the shared
datasets folder (``shared/datasets``, see its README) with no network; PyG
dataset folders are copied to a temporary directory first, because PyG writes
``processed/`` next to ``raw/`` and the shared folder is read-only.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor


def default_device() -> torch.device:
    return torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def rmat(num_nodes: int, num_edges: int, a: float = 0.57, b: float = 0.19, c: float = 0.19,
         seed: int = 0, device=None, chunk: int = 1 << 24) -> Tensor:
    """R-MAT graph: ``edge_index [2, E]`` int64, edges ``src -> dst``, directed,
    duplicates allowed, deterministic for a seed on one device type.

    Each edge descends ``scale = ceil(log2 N)`` levels of the adjacency; per
    level one uniform draw picks the quadrant (a: top-left, b: top-right,
    c: bottom-left, d = 1-a-b-c: bottom-right) for all edges of a chunk at
    once. Ids ``[0, 2^scale)`` are then relabelled by a random permutation and
    folded into ``[0, N)`` with ``% N``. Work is done in chunks of ``chunk``
    edges in place in the output, so 100M edges need the 1.6 GB output plus
    about 0.4 GB of temporaries.
    """
    if not (a > 0 and b >= 0 and c >= 0 and a + b + c < 1):
        raise ValueError('rmat: need a > 0, b, c >= 0 and a + b + c < 1')
    if num_nodes < 1 or num_edges < 0:
        raise ValueError('rmat: need num_nodes >= 1 and num_edges >= 0')
    device = torch.device(device) if device is not None else default_device()
    scale = max(1, math.ceil(math.log2(max(num_nodes, 2))))
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    perm = torch.randperm(1 << scale, generator=gen, device=device)
    out = torch.empty(2, num_edges, dtype=torch.long, device=device)
    ab, abc = a + b, a + b + c
    for s in range(0, num_edges, chunk):
        n = min(chunk, num_edges - s)
        src, dst = out[0, s:s + n], out[1, s:s + n]
        src.zero_()
        dst.zero_()
        r = torch.empty(n, device=device)
        for _ in range(scale):
            r.uniform_(generator=gen)
            src.mul_(2).add_((r >= ab).long())                            # quadrants c, d
            dst.mul_(2).add_(((r >= a) & (r < ab) | (r >= abc)).long())   # quadrants b, d
        del r
        src.copy_(perm[src] % num_nodes)
        dst.copy_(perm[dst] % num_nodes)
    return out


@dataclass
class BenchGraph:
    name: str
    edge_index: Tensor  # [2, E] int64, src -> dst
    num_nodes: int
    large: bool  # counts towards the 'larger graphs' speed targets
    synthetic: bool
    source: str

    @property
    def num_edges(self) -> int:
        return self.edge_index.size(1)


# name -> (nodes, edges, large)
SYNTHETIC: Dict[str, Tuple[int, int, bool]] = {
    'reddit': (233_000, 96_700_000, True),
    'products': (2_449_029, 104_000_000, True),
    'arxiv': (169_343, 2_100_000, True),
    'tiny': (2_000, 20_000, False),
}


# -- shared datasets folder ---------------------------------------------------

def shared_dir() -> Path:
    """``$PYG_TC_SHARED``, else the ``shared`` folder beside the repository
    checkout (or inside it), else ``../shared`` / ``./shared`` from the cwd."""
    env = os.environ.get('PYG_TC_SHARED')
    if env:
        cands = [Path(env)]
    else:
        repo = Path(__file__).resolve().parents[2]
        cands = [repo.parent / 'shared', repo / 'shared',
                 Path.cwd().parent / 'shared', Path.cwd() / 'shared']
    for c in cands:
        if (c / 'datasets').is_dir():
            return c
    raise FileNotFoundError('pyg_tc.bench: shared datasets folder not found (tried '
                            + ', '.join(str(c) for c in cands) + '); set PYG_TC_SHARED')


def _pyg_dataset(cls_name: str, sub: str, folder: str, name: str):
    """Load a PyG dataset from a temporary copy of ``shared/datasets/<sub>/<folder>``."""
    import torch_geometric.datasets as D
    src = shared_dir() / 'datasets' / sub / folder
    if not src.is_dir():
        raise FileNotFoundError(f'pyg_tc.bench: {src} not found')
    with tempfile.TemporaryDirectory(prefix='pyg_tc_bench_') as tmp:
        shutil.copytree(src, Path(tmp) / folder, ignore=shutil.ignore_patterns('processed'))
        ds = getattr(D, cls_name)(root=tmp, name=name)
        if len(ds) == 1:
            return ds[0]
        from torch_geometric.data import Batch
        return Batch.from_data_list([ds[i] for i in range(len(ds))])


def _mat(rel: str, key: str) -> Tuple[Tensor, int]:
    try:
        import scipy.io
    except ImportError as e:  # scipy is in the 'bench' extra
        raise RuntimeError(f'reading {rel} needs scipy: pip install "pyg_tc[bench]"') from e
    A = scipy.io.loadmat(str(shared_dir() / 'datasets' / rel))[key].tocoo()
    ei = torch.stack([torch.from_numpy(A.col.astype('int64')), torch.from_numpy(A.row.astype('int64'))])
    return ei, A.shape[0]


def _from_data(d) -> Tuple[Tensor, int]:
    return d.edge_index, int(d.num_nodes)


# name -> (loader returning (edge_index, num_nodes), large, description)
REAL: Dict[str, Tuple[Callable[[], Tuple[Tensor, int]], bool, str]] = {
    'cora': (lambda: _from_data(_pyg_dataset('Planetoid', 'planetoid', 'Cora', 'Cora')),
             False, 'Planetoid Cora'),
    'citeseer': (lambda: _from_data(_pyg_dataset('Planetoid', 'planetoid', 'CiteSeer', 'CiteSeer')),
                 False, 'Planetoid CiteSeer'),
    'tolokers': (lambda: _from_data(_pyg_dataset('HeterophilousGraphDataset', 'heterophilous',
                                                 'tolokers', 'Tolokers')),
                 True, 'HeterophilousGraphDataset Tolokers'),
    'proteins': (lambda: _from_data(_pyg_dataset('TUDataset', 'tu', 'PROTEINS_full', 'PROTEINS_full')),
                 False, 'TUDataset PROTEINS_full, all graphs as one batch'),
    'blogcatalog': (lambda: _mat('misc/blogcatalog.mat', 'network'), True,
                    'BlogCatalog (deepwalk .mat, symmetric)'),
    'cornell5': (lambda: _mat('misc/facebook100/Cornell5.mat', 'A'), True,
                 'Facebook100 Cornell5 (.mat, symmetric)'),
}

GPU_SUITE: List[str] = ['reddit', 'products', 'arxiv', 'cora', 'citeseer', 'tolokers', 'proteins',
                        'blogcatalog', 'cornell5']
QUICK_GPU_SUITE: List[str] = ['arxiv', 'cora', 'tolokers', 'cornell5']
CPU_SUITE: List[str] = ['tiny']
ALL_NAMES: List[str] = list(SYNTHETIC) + list(REAL)


def resolve_names(spec: Optional[str], default: List[str]) -> List[str]:
    """``'a,b'`` -> names; also ``'all'`` (every graph except tiny), ``'large'``,
    ``'synthetic'``, ``'real'``; ``None``/empty -> ``default``."""
    if not spec:
        return list(default)
    groups = {'all': [n for n in ALL_NAMES if n != 'tiny'],
              'large': [n for n in ALL_NAMES if n in SYNTHETIC and SYNTHETIC[n][2]
                        or n in REAL and REAL[n][1]],
              'synthetic': [n for n in SYNTHETIC if n != 'tiny'], 'real': list(REAL)}
    names: List[str] = []
    for tok in (t.strip().lower() for t in spec.split(',')):
        if not tok:
            continue
        new = groups.get(tok, [tok])
        for n in new:
            if _split_frac(n)[0] not in SYNTHETIC and n not in REAL:
                raise ValueError(f'unknown graph {n!r}; known: {", ".join(ALL_NAMES)} '
                                 f'or groups {", ".join(groups)}')
            if n not in names:
                names.append(n)
    return names


def _split_frac(name: str) -> Tuple[str, float]:
    """``'reddit@0.25'``: the synthetic graph's nodes with a quarter of its
    edges (for baselines that run out of memory on the whole graph)."""
    base, _, frac = name.partition('@')
    if not frac or base not in SYNTHETIC:
        return name, 1.0
    f = float(frac)
    if not 0 < f <= 1:
        raise ValueError(f'edge fraction must be in (0, 1], got {name!r}')
    return base, f


def load_graph(name: str, device=None, seed: int = 0) -> BenchGraph:
    """One suite graph with ``edge_index`` on ``device`` (default: the GPU when
    available). Synthetic graphs are generated on that device."""
    device = torch.device(device) if device is not None else default_device()
    base, frac = _split_frac(name)
    if base in SYNTHETIC:
        n, e, large = SYNTHETIC[base]
        return BenchGraph(name, rmat(n, int(e * frac), seed=seed, device=device), n, large, True,
                          f'R-MAT a=0.57 b=0.19 c=0.19, random ids, seed {seed}'
                          + (f', {frac:g} of the edges' if frac != 1 else ''))
    if name in REAL:
        loader, large, desc = REAL[name]
        ei, n = loader()
        return BenchGraph(name, ei.to(device=device, dtype=torch.long).contiguous(), n, large,
                          False, desc)
    raise ValueError(f'unknown graph {name!r}; known: {", ".join(ALL_NAMES)}')
