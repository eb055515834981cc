"""Benchmark graphs: R-MAT power-law graphs with random node ids shaped like
Reddit, ogbn-products and ogbn-arxiv, and real graphs read offline from the
datasets folder named by ``$PYG_TC_DATA`` (or a suite's ``--data-root``),
laid out as PyG roots them (``planetoid/Cora``, ``tu/PROTEINS_full``,
``heterophilous/tolokers``, ``misc/blogcatalog.mat``, ...)."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import torch
from torch import Tensor

from .catalog import ALL_NAMES, CPU_SUITE, GPU_SUITE, QUICK_GPU_SUITE, REAL, SYNTHETIC, resolve_names  # noqa: F401


def default_device() -> torch.device:
    """The GPU when torch sees one, else the CPU."""
    return torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def rmat(
    num_nodes: int,
    num_edges: int,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int = 0,
    device=None,
    chunk: int = 1 << 24,
) -> Tensor:
    """R-MAT graph: ``edge_index [2, E]`` int64, edges ``src -> dst``, directed,
    duplicates allowed, deterministic for a seed on one device type. Each edge
    descends ``scale = ceil(log2 N)`` levels; per level one uniform draw picks
    the quadrant (a: top-left, b: top-right, c: bottom-left, d: bottom-right).
    Ids ``[0, 2^scale)`` are relabelled by a random permutation and folded into
    ``[0, N)`` with ``% N``. Chunks of ``chunk`` edges are built in place, so
    100M edges need the 1.6 GB output plus about 0.4 GB of temporaries."""
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
        src, dst = out[0, s : s + n], out[1, s : s + n]
        src.zero_()
        dst.zero_()
        r = torch.empty(n, device=device)
        for _ in range(scale):
            r.uniform_(generator=gen)
            src.mul_(2).add_((r >= ab).long())  # quadrants c, d
            dst.mul_(2).add_(((r >= a) & (r < ab) | (r >= abc)).long())  # quadrants b, d
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
        """E, the number of (directed) edges."""
        return self.edge_index.size(1)

    def csr(self):
        """The graph as a ``CSRGraph`` (rows = targets)."""
        from ..formats import CSRGraph

        return CSRGraph.from_coo(self.edge_index[0], self.edge_index[1], self.num_nodes, self.num_nodes)


# -- the real datasets' folder -------------------------------------------------

#: the environment variable naming the real datasets' folder
DATA_ENV = 'PYG_TC_DATA'


def data_dir() -> Path:
    """The folder of the real datasets: ``$PYG_TC_DATA``.

    Raises:
        FileNotFoundError: When ``PYG_TC_DATA`` is not set or not a folder (a one-line message
            naming ``PYG_TC_DATA`` and ``--data-root``).
    """
    env = os.environ.get(DATA_ENV)
    if not env:
        raise FileNotFoundError(f'real datasets: set {DATA_ENV} (or pass --data-root) to their folder')
    path = Path(env).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f'{DATA_ENV}={env} is not a folder (set it, or pass --data-root, to the real datasets\' folder)'
        )
    return path


def pyg_dataset(
    cls_name: str, sub: str, folder: str, name: str, data_root=None, cache_dir=None, transform=None
) -> list:
    """The graphs of a PyG dataset, loaded from a writable copy of
    ``<data_root>/<sub>/<folder>`` (default: :func:`data_dir`; PyG writes
    ``processed/`` next to ``raw/`` and the data folder may be read-only),
    kept in ``cache_dir/<sub>`` or in a temporary folder."""
    import torch_geometric.datasets as D

    src = Path(data_root if data_root is not None else data_dir()) / sub / folder
    if not (src / 'raw').is_dir():
        raise FileNotFoundError(f'{src}/raw not found (pass --data-root or set {DATA_ENV} to the datasets folder)')

    def load(root: Path) -> list:
        if not (root / folder).exists():
            shutil.copytree(src, root / folder, ignore=shutil.ignore_patterns('processed'))
            for p in [root / folder, *(root / folder).rglob('*')]:
                p.chmod(0o755 if p.is_dir() else 0o644)
        # name None: a dataset without names (Actor), rooted at its own folder
        kw, at = ({}, root / folder) if name is None else ({'name': name}, root)
        ds = getattr(D, cls_name)(root=str(at), transform=transform, **kw)
        return [ds[i] for i in range(len(ds))]

    if cache_dir is not None:
        return load(Path(cache_dir) / sub)
    with tempfile.TemporaryDirectory(prefix='pyg_tc_bench_') as tmp:
        return load(Path(tmp))


def _mat(rel: str, key: str) -> Tuple[Tensor, int]:
    try:
        import scipy.io
    except ImportError as e:  # scipy is in the 'bench' extra
        raise RuntimeError(f'reading {rel} needs scipy: pip install "pyg_tc[bench]"') from e
    A = scipy.io.loadmat(str(data_dir() / rel))[key].tocoo()
    ei = torch.stack([torch.from_numpy(A.col.astype('int64')), torch.from_numpy(A.row.astype('int64'))])
    return ei, A.shape[0]


def _from_data(graphs: list) -> Tuple[Tensor, int]:
    from torch_geometric.data import Batch

    d = graphs[0] if len(graphs) == 1 else Batch.from_data_list(graphs)
    return d.edge_index, int(d.num_nodes)


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
        return BenchGraph(
            name,
            rmat(n, int(e * frac), seed=seed, device=device),
            n,
            large,
            True,
            f'R-MAT a=0.57 b=0.19 c=0.19, random ids, seed {seed}' + (f', {frac:g} of the edges' if frac != 1 else ''),
        )
    if name in REAL:
        src, large, desc = REAL[name]
        ei, n = _mat(*src) if len(src) == 2 else _from_data(pyg_dataset(*src))
        return BenchGraph(name, ei.to(device=device, dtype=torch.long).contiguous(), n, large, False, desc)
    raise ValueError(f'unknown graph {name!r}; known: {", ".join(ALL_NAMES)}')
