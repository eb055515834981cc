"""The datasets of the tutorials: the real ones from a folder, or synthetic stand-ins of the same shape.

The tutorials run on five PyG datasets: Cora (node classification), PROTEINS_full and ENZYMES
(graph classification), Tolokers (a large-degree node classification graph) and DBLP (a
heterogeneous graph: authors, papers, terms, conferences). :func:`load` reads the real one from
a folder laid out as PyG roots its datasets (``planetoid/Cora``, ``tu/PROTEINS_full``,
``tu/ENZYMES``, ``heterophilous/tolokers``, ``hetero/dblp_hencex``; PyG downloads missing files
there), or, given no folder, returns :func:`synthetic` data of the same shape, so every
tutorial also runs offline::

    import pyg_tc.datasets

    ds = pyg_tc.datasets.load('Cora', root=None)     # synthetic: 2,708 nodes, 1,433 features, 7 classes
    ds = pyg_tc.datasets.load('Cora', root='data')   # PyG's Planetoid(root='data/planetoid', name='Cora')
    data = ds[0]

The synthetic data is random but not noise: its labels can be learned from the features and
the graph, so training curves and accuracies behave like those of the real data, though their
numbers are of course not the real datasets' numbers.
"""

from __future__ import annotations

import math
import os
from typing import Callable, List, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData, InMemoryDataset

__all__ = ['NAMES', 'DatasetUnavailableError', 'SyntheticDataset', 'synthetic', 'load', 'load_or_exit']

#: name -> (PyG dataset class, sub-folder of the root, PyG's name)
_REAL = {
    'Cora': ('Planetoid', 'planetoid', 'Cora'),
    'PROTEINS_full': ('TUDataset', 'tu', 'PROTEINS_full'),
    'ENZYMES': ('TUDataset', 'tu', 'ENZYMES'),
    'Tolokers': ('HeterophilousGraphDataset', 'heterophilous', 'Tolokers'),
    'DBLP': ('DBLP', 'hetero', 'dblp_hencex'),
}
#: PyG classes that take no ``name``: the third entry of ``_REAL`` is their folder
_NO_NAME = ('DBLP',)
#: synthetic only (no real counterpart): :func:`load` returns them whatever the root
_SYNTHETIC_ONLY = ('Molecules',)
#: the dataset names :func:`load` and :func:`synthetic` know
NAMES = tuple(_REAL) + _SYNTHETIC_ONLY


class DatasetUnavailableError(RuntimeError):
    """A real dataset that could be neither read from its folder nor downloaded into it."""


def _check(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f'unknown dataset {name!r}; known: {", ".join(NAMES)}')


def load(name: str, root: Optional[str] = None, transform: Optional[Callable] = None) -> InMemoryDataset:
    """A tutorial dataset: the real one under ``root``, or its synthetic stand-in without a root.

    Args:
        name (str): One of :data:`NAMES` (``'Cora'``, ``'PROTEINS_full'``, ``'ENZYMES'``,
            ``'Tolokers'``, ``'DBLP'``; ``'Molecules'`` is synthetic only).
        root (str, optional): The folder holding the datasets as PyG roots them
            (``planetoid/Cora``, ``tu/PROTEINS_full``, ``tu/ENZYMES``, ``heterophilous/tolokers``,
            ``hetero/dblp_hencex``).
            PyG downloads missing files there and writes ``processed/`` beside ``raw/``, so it must
            be writable. If :obj:`None`, returns :func:`synthetic` data of the same shape.
            (default: :obj:`None`)
        transform (typing.Callable, optional): Applied to every graph on access, as a PyG dataset's
            ``transform``. (default: :obj:`None`)

    Returns:
        The PyG dataset (``Planetoid``, ``TUDataset``, ``HeterophilousGraphDataset`` or
        ``DBLP``), or a :class:`SyntheticDataset`.

    Raises:
        ValueError: For an unknown ``name``.
        DatasetUnavailableError: When the dataset is not under ``root`` and cannot be downloaded
            there (no network, a folder that is not writable); its message is one line.
    """
    _check(name)
    if root is None or name in _SYNTHETIC_ONLY:
        return synthetic(name, transform=transform)
    import torch_geometric.datasets as D

    cls, sub, pyg_name = _REAL[name]
    folder = os.path.join(os.fspath(root), sub)
    try:
        if name in _NO_NAME:
            folder = os.path.join(folder, pyg_name)
            return getattr(D, cls)(folder, transform=transform)
        return getattr(D, cls)(folder, pyg_name, transform=transform)
    except OSError as e:  # DNS / HTTP errors of the download, a folder that cannot be written
        reason = (str(e).strip().splitlines() or [''])[0][:200]
        raise DatasetUnavailableError(
            f'{name} is not in {folder} and could not be downloaded there ({type(e).__name__}: {reason})'
        ) from None


def load_or_exit(name: str, root: Optional[str] = None, transform: Optional[Callable] = None) -> InMemoryDataset:
    """:func:`load` for a command-line script (the tutorials): without ``root`` it says in one line
    that it runs on synthetic data shaped like ``name``; a dataset that cannot be had ends the
    script with a one-line error (``SystemExit``) instead of a traceback.

    Args:
        name (str): As in :func:`load`.
        root (str, optional): As in :func:`load` (the script's ``--root``).
        transform (typing.Callable, optional): As in :func:`load`.
    """
    if root is None:
        print(
            f'No --root: synthetic data shaped like {name}; --root DIR runs on the real {name} '
            '(downloaded there if missing).'
        )
    try:
        return load(name, root, transform)
    except DatasetUnavailableError as e:
        raise SystemExit(f'error: {e}; check --root, or run without it (and $PYG_TC_DATA) on synthetic data') from None


class SyntheticDataset(InMemoryDataset):
    r"""A random dataset shaped like a real one (:func:`synthetic`), held in memory.

    It has the real dataset's attributes, sizes and dtypes: for ``'Cora'`` one graph with ``x``,
    ``y``, ``edge_index`` (undirected) and the ``train_mask`` / ``val_mask`` / ``test_mask`` of
    Planetoid's public split (20 nodes per class, 500, 1,000); for ``'Tolokers'`` the same with
    ``[num_nodes, 10]`` masks (10 random 50 / 25 / 25 % splits) and a heavy-tailed degree
    distribution; for ``'PROTEINS_full'`` and ``'ENZYMES'`` small graphs with one-hot node types
    as ``x`` and one label per graph; ``'Molecules'`` (no real counterpart) 4,000 molecule-shaped
    graphs as ZINC's: 10-40 atoms, a tree plus a few rings (mean degree about 2.2), 9 one-hot atom
    types, 2 classes that depend on the atoms' types and their neighbours'; ``'DBLP'`` one
    ``HeteroData`` with DBLP's node and edge types, counts, feature widths and author split.

    Args:
        name (str): One of :data:`NAMES`.
        seed (int, optional): The random seed; the same seed gives the same data.
            (default: :obj:`0`)
        transform (typing.Callable, optional): Applied to every graph on access. (default: :obj:`None`)
    """

    def __init__(self, name: str, seed: int = 0, transform: Optional[Callable] = None):
        _check(name)
        super().__init__(None, transform)
        self.name, self.seed = name, seed
        gen = torch.Generator().manual_seed(seed)
        self._data, self.slices = self.collate(_GENERATORS[name](gen))

    def __repr__(self) -> str:
        return f'SyntheticDataset({self.name!r}, {len(self)})'


def synthetic(name: str, seed: int = 0, transform: Optional[Callable] = None) -> SyntheticDataset:
    """Synthetic data shaped like the real dataset ``name``, made in memory (no files, no network).

    Args:
        name (str): One of :data:`NAMES`.
        seed (int, optional): The random seed. (default: :obj:`0`)
        transform (typing.Callable, optional): Applied to every graph on access. (default: :obj:`None`)

    Returns:
        SyntheticDataset: One graph (``'Cora'``, ``'Tolokers'``) or many (``'PROTEINS_full'``:
        1,113; ``'ENZYMES'``: 600), with the real dataset's node, edge, feature and class counts
        (Cora: exactly 2,708 nodes, 10,556 edges, 1,433 features, 7 classes).
    """
    return SyntheticDataset(name, seed, transform)


# -- generators ---------------------------------------------------------------------------------


def _undirected(pairs: Tensor, num_undirected: int, num_nodes: int) -> Tensor:
    """The first ``num_undirected`` distinct node pairs (no loops) of ``pairs`` [2, M], as an
    ``edge_index`` with both directions, sorted by source."""
    lo, hi = pairs.min(0).values, pairs.max(0).values
    key = (lo * num_nodes + hi)[lo != hi]
    uniq, inv = torch.unique(key, return_inverse=True)
    first = torch.full((uniq.numel(),), key.numel(), dtype=torch.long).scatter_reduce(
        0, inv, torch.arange(key.numel()), 'amin'
    )
    key = key[first.sort().values][:num_undirected]  # the first occurrences, in draw order
    if key.numel() < num_undirected:
        raise RuntimeError('synthetic graph: too few distinct edges drawn')
    lo, hi = key // num_nodes, key % num_nodes
    ei = torch.stack([torch.cat([lo, hi]), torch.cat([hi, lo])])
    return ei[:, torch.argsort(ei[0] * num_nodes + ei[1])]


def _power_law_weights(n: int, exponent: float, offset: float, gen: torch.Generator) -> Tensor:
    """Chung-Lu weights ``(rank + offset) ** -exponent`` over randomly permuted nodes."""
    w = (torch.arange(n, dtype=torch.float64) + offset) ** -exponent
    return w[torch.randperm(n, generator=gen)]


def _splits(n: int, counts, gen: torch.Generator) -> List[Tensor]:
    perm = torch.randperm(n, generator=gen)
    masks, start = [], 0
    for c in counts:
        m = torch.zeros(n, dtype=torch.bool)
        m[perm[start : start + c]] = True
        masks.append(m)
        start += c
    return masks


def _cora(gen: torch.Generator) -> List[Data]:
    """Cora's shape: class sizes, 5,278 undirected edges (about 81% within a class, heavy-tailed
    degrees, no isolated node), 1,433 binary word features (18 per node, some from a per-class
    vocabulary), Planetoid's public split sizes."""
    N, F, E_und = 2708, 1433, 5278
    sizes = torch.tensor([351, 217, 418, 818, 426, 298, 180])
    C = sizes.numel()
    y = torch.repeat_interleave(torch.arange(C), sizes)[torch.randperm(N, generator=gen)]
    members = [(y == c).nonzero().view(-1) for c in range(C)]
    w = _power_law_weights(N, 0.85, 5.0, gen)

    def partners(src: Tensor) -> Tensor:  # same class with probability 0.78, degree-weighted
        dst = torch.multinomial(w, src.numel(), replacement=True, generator=gen)
        same = torch.rand(src.numel(), generator=gen) < 0.78
        for c in range(C):
            sel = same & (y[src] == c)
            pick = torch.multinomial(w[members[c]], int(sel.sum()), replacement=True, generator=gen)
            dst[sel] = members[c][pick]
        return dst

    src = torch.cat([torch.arange(N), torch.multinomial(w, 2 * E_und, replacement=True, generator=gen)])
    edge_index = _undirected(torch.stack([src, partners(src)]), E_und, N)

    # words: a per-class vocabulary of 120 words; each node draws 18, 4 of them on average from its
    # class vocabulary, the rest by a Zipf-like popularity over all words
    vocab = torch.randperm(F, generator=gen)[: C * 120].view(C, 120)
    pop = (torch.arange(F, dtype=torch.float64) + 10.0) ** -1.0
    pop = pop[torch.randperm(F, generator=gen)]
    x = torch.zeros(N, F)
    words = torch.multinomial(pop.expand(N, F), 18, replacement=False, generator=gen)
    topical = torch.rand(N, 18, generator=gen) < 4 / 18
    own = vocab[y].gather(1, torch.randint(0, 120, (N, 18), generator=gen))
    x.scatter_(1, torch.where(topical, own, words), 1.0)

    train = torch.zeros(N, dtype=torch.bool)
    for m in members:
        train[m[torch.randperm(m.numel(), generator=gen)[:20]]] = True
    rest = (~train).nonzero().view(-1)
    rest = rest[torch.randperm(rest.numel(), generator=gen)]
    val, test = torch.zeros(N, dtype=torch.bool), torch.zeros(N, dtype=torch.bool)
    val[rest[:500]], test[rest[500:1500]] = True, True
    return [Data(x=x, edge_index=edge_index, y=y, train_mask=train, val_mask=val, test_mask=test)]


def _tolokers(gen: torch.Generator) -> List[Data]:
    """Tolokers' shape: 519,000 undirected edges over 11,758 nodes with heavy-tailed degrees
    (mean 88, largest about 2,200), 10 features, 21.8% positive labels that depend on a node's
    features and its neighbours', 10 random 50 / 25 / 25 % splits."""
    N, E_und, F = 11758, 519000, 10
    w = _power_law_weights(N, 1.0, 60.0, gen)
    pairs = torch.multinomial(w, 2 * (E_und + E_und // 2), replacement=True, generator=gen).view(2, -1)
    edge_index = _undirected(pairs, E_und, N)
    x = torch.randn(N, F, generator=gen)
    x[:, 6:] = (x[:, 6:] > 0.5).float()  # a few binary features, as the real ones
    deg = torch.bincount(edge_index[1], minlength=N).clamp(min=1).float()
    nbr = torch.zeros(N, F).index_add_(0, edge_index[1], x[edge_index[0]]) / deg.unsqueeze(1)
    coef = torch.randn(F, generator=gen)
    signal = x @ coef + nbr @ coef + 0.3 * deg.log()
    score = signal + signal.std() * torch.randn(N, generator=gen)  # as much noise as signal
    y = (score > score.quantile(1 - 0.218)).long()
    masks = [_splits(N, (N // 2, N // 4, N - N // 2 - N // 4), gen) for _ in range(10)]
    train, val, test = (torch.stack([m[i] for m in masks], 1) for i in range(3))
    return [Data(x=x, edge_index=edge_index, y=y, train_mask=train, val_mask=val, test_mask=test)]


def _tu(num_graphs: int, class_sizes: List[int], mean_nodes: float, max_nodes: int, gen: torch.Generator) -> List[Data]:
    """Protein-like graphs: a chain of secondary-structure elements plus contacts between
    elements a few places apart (about 3.7 edges per node), 3 one-hot element types whose
    proportions and graph size depend on the class. Built for all graphs at once, then split."""
    C = len(class_sizes)
    y = torch.repeat_interleave(torch.arange(C), torch.tensor(class_sizes))
    y = y[torch.randperm(num_graphs, generator=gen)]
    props = (0.2 * torch.randn(C, 3, generator=gen)).softmax(1)  # element-type mix per class
    scale = 1.0 + 0.1 * torch.linspace(-1, 1, C)[torch.randperm(C, generator=gen)]
    size = (math.log(mean_nodes / 1.3) + 0.75 * torch.randn(num_graphs, generator=gen)).exp() * scale[y]
    n = size.long().clamp(4, max_nodes)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), n.cumsum(0)])
    total = int(ptr[-1])
    graph = torch.repeat_interleave(torch.arange(num_graphs), n)  # each node's graph
    last = (ptr[1:] - 1)[graph]  # the last node of that graph
    types = torch.multinomial(props[y][graph], 1, generator=gen).view(-1)
    i = torch.arange(total)
    chain = torch.stack([i[i < last], i[i < last] + 1])
    contact = torch.stack([i, torch.minimum(i + torch.randint(2, 7, (total,), generator=gen), last)])
    pairs = torch.cat([chain, contact], 1)
    lo, hi = pairs.min(0).values, pairs.max(0).values
    key = torch.unique((lo * total + hi)[lo != hi])
    lo, hi = key // total, key % total
    ei = torch.stack([torch.cat([lo, hi]), torch.cat([hi, lo])])
    ei = ei[:, torch.argsort(ei[0] * total + ei[1])]  # by source: each graph's edges are contiguous
    owner = graph[ei[0]]
    ei = ei - ptr[owner]  # node ids within each graph
    xs = torch.nn.functional.one_hot(types, 3).float().split(n.tolist())
    eis = ei.split(torch.bincount(owner, minlength=num_graphs).tolist(), dim=1)
    return [Data(x=xs[g], edge_index=eis[g], y=y[g : g + 1]) for g in range(num_graphs)]


def _molecules(num_graphs: int, gen: torch.Generator) -> List[Data]:
    """Molecule-shaped graphs (ZINC's sizes): 10-40 atoms joined as a random tree plus about one
    ring-closing bond per 9 atoms (mean degree about 2.2), 9 atom types (one-hot ``x``, the first
    ones commonest), label 1 where more type-0 atoms have a type-1 neighbour than the median
    graph has."""
    probs = torch.tensor([0.35, 0.2, 0.15, 0.1, 0.08, 0.05, 0.03, 0.02, 0.02])
    out, scores = [], []
    for _ in range(num_graphs):
        n = int(torch.randint(10, 41, (1,), generator=gen))
        parent = (torch.rand(n - 1, generator=gen) * torch.arange(1, n)).long()  # a random tree
        rings = torch.randint(0, n, (2, max(n // 9, 1)), generator=gen)
        pairs = torch.cat([torch.stack([torch.arange(1, n), parent]), rings[:, rings[0] != rings[1]]], 1)
        ei = torch.cat([pairs, pairs.flip(0)], 1)
        types = torch.multinomial(probs, n, replacement=True, generator=gen)
        hit = (types[ei[0]] == 0) & (types[ei[1]] == 1)
        scores.append(int(torch.unique(ei[0][hit]).numel()))
        out.append(Data(x=torch.nn.functional.one_hot(types, 9).float(), edge_index=ei))
    cut = torch.tensor(scores, dtype=torch.float).median()
    for d, sc in zip(out, scores):
        d.y = torch.tensor([int(sc > cut)])
    return out


def _dblp(gen: torch.Generator) -> List[HeteroData]:
    """DBLP's shape (PyG's ``DBLP``): 4,057 authors (451 binary keywords; 4 research areas of
    1,197 / 745 / 1,109 / 1,006; 400 / 400 / 3,257 train / val / test), 14,328 papers (4,233
    binary words), 7,723 terms (50-wide embeddings), 20 conferences (no features); 19,645
    author-paper, 85,810 paper-term and 14,328 paper-conference edges, each relation with its
    reverse (PyG's relation name ``to``). Each conference belongs to an area (5 each) and each
    paper to one conference; an author writes papers of their own area 3 times in 4, and the
    keywords, words and term embeddings lean to their area: the area can be learned from the
    features and the relations, as in DBLP."""
    A, P, T, K, C = 4057, 14328, 7723, 20, 4
    y = torch.repeat_interleave(torch.arange(C), torch.tensor([1197, 745, 1109, 1006]))[
        torch.randperm(A, generator=gen)
    ]
    paper_conf = torch.randint(0, K, (P,), generator=gen)
    paper_area = paper_conf % C  # conference k belongs to area k % 4
    term_area = torch.randint(0, C, (T,), generator=gen)
    by_area = [(paper_area == c).nonzero().view(-1) for c in range(C)]

    def pairs(src: Tensor, dst: Tensor, count: int, n_dst: int) -> Tensor:
        """The first ``count`` distinct (src, dst) pairs, in draw order."""
        key = src * n_dst + dst
        uniq, inv = torch.unique(key, return_inverse=True)
        first = torch.full((uniq.numel(),), key.numel(), dtype=torch.long).scatter_reduce(
            0, inv, torch.arange(key.numel()), 'amin'
        )
        key = key[first.sort().values][:count]
        if key.numel() < count:
            raise RuntimeError('synthetic DBLP: too few distinct edges drawn')
        return torch.stack([key // n_dst, key % n_dst])

    # authors write 1 paper at least, the prolific ones many (power law); 3 in 4 in their area
    w = _power_law_weights(A, 0.9, 3.0, gen)
    authors = torch.cat([torch.arange(A), torch.multinomial(w, 2 * 19645, replacement=True, generator=gen)])
    papers = torch.randint(0, P, (authors.numel(),), generator=gen)
    own = torch.rand(authors.numel(), generator=gen) < 0.75
    for c in range(C):
        sel = own & (y[authors] == c)
        papers[sel] = by_area[c][torch.randint(0, by_area[c].numel(), (int(sel.sum()),), generator=gen)]
    writes = pairs(authors, papers, 19645, P)
    # papers have about 6 terms, 2 in 5 of their area's
    tw = _power_law_weights(T, 0.8, 20.0, gen)
    src = torch.cat([torch.arange(P), torch.randint(0, P, (2 * 85810,), generator=gen)])
    terms = torch.multinomial(tw, src.numel(), replacement=True, generator=gen)
    topical = torch.rand(src.numel(), generator=gen) < 0.4
    area_terms = [(term_area == c).nonzero().view(-1) for c in range(C)]
    for c in range(C):
        sel = topical & (paper_area[src] == c)
        terms[sel] = area_terms[c][torch.randint(0, area_terms[c].numel(), (int(sel.sum()),), generator=gen)]
    has = pairs(src, terms, 85810, T)

    def words(n: int, width: int, per: int, area: Tensor, vocab_size: int) -> Tensor:
        """Binary bags of up to ``per`` words (a word drawn twice counts once), 3 in 10 from the
        row's area vocabulary."""
        vocab = torch.randperm(width, generator=gen)[: C * vocab_size].view(C, vocab_size)
        pop = (torch.arange(width, dtype=torch.float64) + 10.0) ** -1.0
        pop = pop[torch.randperm(width, generator=gen)]
        pick = torch.multinomial(pop, n * per, replacement=True, generator=gen).view(n, per)
        from_area = torch.rand(n, per, generator=gen) < 0.3
        own_words = vocab[area].gather(1, torch.randint(0, vocab_size, (n, per), generator=gen))
        return torch.zeros(n, width).scatter_(1, torch.where(from_area, own_words, pick), 1.0)

    data = HeteroData()
    data['author'].x = words(A, 451, 10, y, 40)
    data['author'].y = y
    train, val, test = _splits(A, (400, 400, 3257), gen)
    data['author'].train_mask, data['author'].val_mask, data['author'].test_mask = train, val, test
    data['paper'].x = words(P, 4233, 6, paper_area, 200)
    centers = torch.randn(C, 50, generator=gen)
    data['term'].x = torch.randn(T, 50, generator=gen) + 0.7 * centers[term_area]
    data['conference'].num_nodes = K
    conf = torch.stack([torch.arange(P), paper_conf])
    rels = [('author', 'paper', writes), ('paper', 'author', writes.flip(0)), ('paper', 'term', has)]
    rels += [('paper', 'conference', conf), ('term', 'paper', has.flip(0)), ('conference', 'paper', conf.flip(0))]
    for src_type, dst_type, ei in rels:  # (DBLP's order of edge types)
        data[src_type, 'to', dst_type].edge_index = ei
    return [data]


_GENERATORS = {
    'Cora': _cora,
    'Tolokers': _tolokers,
    'PROTEINS_full': lambda gen: _tu(1113, [663, 450], 41.0, 620, gen),
    'ENZYMES': lambda gen: _tu(600, [100] * 6, 32.6, 126, gen),
    'Molecules': lambda gen: _molecules(4000, gen),
    'DBLP': _dblp,
}
