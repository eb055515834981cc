"""Benchmark graphs: R-MAT power-law graphs with random node ids shaped like
Reddit, ogbn-products and ogbn-arxiv, an IGBH-shaped heterogeneous graph
(:func:`igbh_shaped`, MLPerf's GNN benchmark), and real graphs read offline from the
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
from torch_geometric.data import HeteroData

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


def igbh_shaped(
    papers: int, width: int = 0, dtype: torch.dtype = torch.float16, classes: int = 19, seed: int = 0
) -> HeteroData:
    """A synthetic heterogeneous graph shaped like IGBH (MLPerf Training's GNN
    benchmark), on the CPU: ``papers`` papers, 1.2 authors per paper, one
    institute per 100 papers and one field of study (``fos``) per 10; edge
    types ``cites`` (10 per paper), ``written_by`` (3 authors per paper),
    ``affiliated_to`` (1 institute per author) and ``topic`` (5 fields per
    paper), each with its reverse ``rev_<name>`` (8 edge types). Sources are
    drawn with power-law (Zipf) popularity, targets uniformly. With ``width``
    > 0 every node type gets ``x [n, width]`` Gaussian features in ``dtype``
    (IGBH's are 1,024 wide, stored in fp16 by MLPerf's reference), and papers
    random labels ``y`` in ``classes`` classes (19: IGBH's small label set):
    a graph to time, not to learn.

    Args:
        papers (int): the number of papers.
        width (int, optional): the feature width (0: structure only). (default: :obj:`0`)
        dtype (torch.dtype, optional): the features' dtype. (default: :obj:`torch.float16`)
        classes (int, optional): the paper label classes. (default: :obj:`19`)
        seed (int, optional): the random seed. (default: :obj:`0`)
    """
    g = torch.Generator().manual_seed(seed)
    n = {'paper': papers, 'author': papers * 6 // 5, 'institute': max(papers // 100, 1), 'fos': max(papers // 10, 1)}
    data = HeteroData()
    for t, k in n.items():
        data[t].num_nodes = k

    def zipf(k: int, m: int) -> Tensor:  # m sources of k nodes, popularity ~ 1 / rank
        u = torch.rand(m, generator=g, dtype=torch.float64)
        return torch.randperm(k, generator=g)[(k**u - 1).long().clamp_(max=k - 1)]

    def rel(src: str, name: str, dst: str, per_dst: float) -> None:
        m = int(n[dst] * per_dst)
        ei = torch.stack([zipf(n[src], m), torch.randint(0, n[dst], (m,), generator=g)])
        data[src, name, dst].edge_index = ei
        data[dst, f'rev_{name}', src].edge_index = ei.flip(0)

    rel('paper', 'cites', 'paper', 10)
    rel('author', 'written_by', 'paper', 3)
    rel('institute', 'affiliated_to', 'author', 1)
    rel('fos', 'topic', 'paper', 5)
    if width > 0:
        for t, k in n.items():
            x = torch.empty(k, width, dtype=dtype)
            for i in range(0, k, 1 << 16):  # (in slices: no fp32 copy of the whole matrix)
                x[i : i + (1 << 16)] = torch.randn(min(1 << 16, k - i), width, generator=g)
            data[t].x = x
        data['paper'].y = torch.randint(0, classes, (papers,), generator=g)
    return data


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
