"""Shared fixtures and helpers of the pyg_tc test suite.

* the ``cuda`` marker: tests that need a GPU; skipped without one;
* ``devices`` / ``DEVICES``: the devices to parametrize over (``DEVICES`` keeps
  the cuda entry, marked, so GPU tests are collected and reported as skipped
  on CPU-only machines);
* ``DTYPES`` with tolerances, compared against an fp64 oracle computed from
  the same (already rounded) inputs;
* ``make_graph(kind, device)``: small deterministic graphs of every shape the
  kernels treat specially;
* independent pure-torch oracles for SpMM and SDDMM;
* ``cora``: the real Planetoid Cora graph from ``$PYG_TC_DATA`` (the folder of the real
  datasets); tests that need real data skip, saying so, without it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Optional, Tuple, Union

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # the package is used from the checkout
    sys.path.insert(0, str(REPO_ROOT))

os.environ.setdefault('OUTDATED_IGNORE', '1')
# the suite tests pyg_tc's own paths: backend='auto' never takes PyG's path for speed
# (tests/nn/test_pyg_where_faster.py turns that choice back on)
os.environ.setdefault('PYG_TC_ALWAYS_KERNELS', '1')

CUDA = torch.cuda.is_available()


def pytest_configure(config):
    config.addinivalue_line('markers', 'cuda: needs a CUDA GPU (skipped when none is available)')


def pytest_collection_modifyitems(config, items):
    if CUDA:
        return
    skip = pytest.mark.skip(reason='CUDA is not available')
    for item in items:
        if 'cuda' in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope='module', autouse=True)
def _single_cpu_thread(request):
    """The op/format tests use small tensors: one intra-op thread avoids
    OpenMP spin-waiting on a loaded 2-core machine (several times faster
    there). Other test folders keep torch's default."""
    name = request.module.__name__
    if not any(part in name for part in ('.ops.', '.formats.', 'test_registry')):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------------------
# devices and dtypes

devices = ['cpu'] + (['cuda'] if CUDA else [])
#: parametrization over devices: the cuda entry is always there, marked ``cuda``
DEVICES = ['cpu', pytest.param('cuda', marks=pytest.mark.cuda)]
cuda_only = pytest.mark.cuda

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
#: relative tolerance per dtype (also used, scaled by the sum of |terms|, as
#: the absolute part, so cancellation in a sum does not cause false alarms)
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 3e-2, torch.float64: 1e-10}


def dtype_id(dt: torch.dtype) -> str:
    return str(dt).replace('torch.', '')


def assert_hetero_match(ours, ref, x_dict, *args, tol: float = 1e-5, **kwargs) -> dict:
    """A heterogeneous layer against PyG's (the same weights): ``ours(x_dict,
    *args, **kwargs)`` and ``ref(...)`` give the same node types, shapes,
    dtypes and values, and the same gradients of every input feature and
    parameter (``None`` where PyG's is). Returns ours' outputs."""
    xa = {t: v.clone().requires_grad_() for t, v in x_dict.items()}
    xb = {t: v.clone().requires_grad_() for t, v in x_dict.items()}
    got, want = ours(xa, *args, **kwargs), ref(xb, *args, **kwargs)
    assert got.keys() == want.keys()
    for t in want:
        assert got[t].shape == want[t].shape and got[t].dtype == want[t].dtype
        torch.testing.assert_close(got[t], want[t], atol=tol, rtol=tol)
    loss_a = sum((v * (i + 1)).sum() for i, v in enumerate(got.values()))
    loss_b = sum((v * (i + 1)).sum() for i, v in enumerate(want.values()))
    ga = torch.autograd.grad(loss_a, list(xa.values()) + list(ours.parameters()), allow_unused=True)
    gb = torch.autograd.grad(loss_b, list(xb.values()) + list(ref.parameters()), allow_unused=True)
    for a, b in zip(ga, gb):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, atol=10 * tol, rtol=10 * tol)
    return got


def assert_close_ref(
    out: torch.Tensor, ref: torch.Tensor, mag: Optional[torch.Tensor], dtype: torch.dtype, what: str = ''
) -> None:
    """``|out - ref| <= tol * (|ref| + mag) + tiny`` elementwise, where ``ref``
    is the fp64 oracle and ``mag`` the same oracle on absolute values (the
    scale of the accumulated terms)."""
    assert out.shape == ref.shape, f'{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}'
    assert out.dtype == dtype, f'{what}: dtype {out.dtype} != {dtype}'
    o = out.detach().double().cpu()
    r = ref.detach().double().cpu()
    m = r.abs() if mag is None else mag.detach().double().cpu()
    assert torch.isfinite(o).all(), f'{what}: non-finite values in the output'
    tol = TOL[dtype]
    bound = tol * (r.abs() + m) + 1e-7
    err = (o - r).abs()
    bad = err > bound
    if bad.any():
        idx = bad.nonzero()[0].tolist()
        raise AssertionError(
            f'{what}: {int(bad.sum())} / {bad.numel()} elements off; first at {idx}: '
            f'got {o[tuple(idx)].item()}, expected {r[tuple(idx)].item()} '
            f'(max abs err {err.max().item():.3g})'
        )


# ---------------------------------------------------------------------------
# graphs

GRAPH_KINDS = ['random', 'empty', 'isolated', 'self_loops', 'duplicates', 'hub', 'not_tile_multiple', 'bipartite']

NumNodes = Union[int, Tuple[int, int]]


def sizes(num_nodes: NumNodes) -> Tuple[int, int]:
    """``(num_src, num_dst)`` of a graph returned by :func:`make_graph`."""
    if isinstance(num_nodes, tuple):
        return num_nodes
    return num_nodes, num_nodes


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _shuffle(ei: torch.Tensor, seed: int) -> torch.Tensor:
    return ei[:, torch.randperm(ei.size(1), generator=_gen(seed))]


def _build(kind: str) -> Tuple[torch.Tensor, NumNodes]:
    if kind == 'random':
        N, E = 300, 3000
        return torch.randint(0, N, (2, E), generator=_gen(1)), N
    if kind == 'empty':
        return torch.empty(2, 0, dtype=torch.long), 10
    if kind == 'isolated':
        # edges only touch a subset of 0..29 (even nodes); nodes 30..49 and all
        # odd nodes have no edges at all; num_nodes > max index + 1
        g = _gen(2)
        ei = torch.randint(0, 15, (2, 120), generator=g) * 2
        return ei, 50
    if kind == 'self_loops':
        N = 40
        ei = torch.randint(0, N, (2, 150), generator=_gen(3))
        loops = torch.arange(N).repeat(2, 1)
        return _shuffle(torch.cat([ei, loops, loops[:, :10]], 1), 3), N
    if kind == 'duplicates':
        N = 30
        base = torch.randint(0, N, (2, 60), generator=_gen(4))
        reps = torch.randint(1, 5, (60,), generator=_gen(5))
        return _shuffle(base.repeat_interleave(reps, 1), 4), N
    if kind == 'hub':
        # row 0: ~5000 in-edges (split over many 256-edge units), rows 1-3 on
        # the unit boundary (256, 257, 512 edges), plus light rows
        N = 400
        g = _gen(6)
        parts = []
        for row, deg in ((0, 5003), (1, 256), (2, 257), (3, 512)):
            parts.append(torch.stack([torch.randint(0, N, (deg,), generator=g), torch.full((deg,), row)]))
        parts.append(
            torch.stack([torch.randint(0, N, (1500,), generator=g), torch.randint(4, N, (1500,), generator=g)])
        )
        return _shuffle(torch.cat(parts, 1), 6), N
    if kind == 'not_tile_multiple':
        N = 17
        g = _gen(7)
        ei = torch.randint(0, N, (2, 70), generator=g)
        hub = torch.stack([torch.randint(0, N, (33,), generator=g), torch.full((33,), 16)])
        return _shuffle(torch.cat([ei, hub], 1), 7), N
    if kind == 'bipartite':
        num_src, num_dst = 50, 30
        g = _gen(8)
        ei = torch.stack(
            [torch.randint(0, num_src, (400,), generator=g), torch.randint(0, num_dst, (400,), generator=g)]
        )
        return ei, (num_src, num_dst)
    raise ValueError(f'unknown graph kind {kind!r}')


_CACHE: dict = {}


def make_graph(kind: str, device='cpu') -> Tuple[torch.Tensor, NumNodes]:
    """``(edge_index [2, E] int64, num_nodes)``; ``num_nodes`` is a tuple
    ``(num_src, num_dst)`` for ``'bipartite'``. Deterministic; a fresh tensor
    on every call (tests may edit it in place)."""
    if kind not in _CACHE:
        _CACHE[kind] = _build(kind)
    ei, n = _CACHE[kind]
    return ei.clone().to(device), n


def random_graph(
    num_src: int, num_dst: int, num_edges: int, seed: int = 0, device='cpu', unique: bool = False
) -> torch.Tensor:
    """Random ``edge_index``; ``unique=True`` removes repeated (src, dst)
    pairs (so max aggregation has no exactly tied messages)."""
    g = _gen(seed)
    ei = torch.stack(
        [torch.randint(0, num_src, (num_edges,), generator=g), torch.randint(0, num_dst, (num_edges,), generator=g)]
    )
    if unique:
        key = ei[0] * num_dst + ei[1]
        order = torch.argsort(key, stable=True)
        ks = key[order]
        first = torch.ones_like(ks, dtype=torch.bool)
        first[1:] = ks[1:] != ks[:-1]
        ei = ei[:, order[first].sort()[0]]
    return ei.to(device)


def to_adj_t(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """PyG's sparse ``adj_t`` of a square graph: torch CSR, rows = targets, ones."""
    return (
        torch.sparse_coo_tensor(
            edge_index.flip(0), torch.ones(edge_index.size(1), device=edge_index.device), (num_nodes, num_nodes)
        )
        .coalesce()
        .to_sparse_csr()
    )


def features(
    n: int, f: int, dtype=torch.float32, device='cpu', seed: int = 0, requires_grad: bool = False
) -> torch.Tensor:
    """Normal features, rounded to ``dtype``."""
    x = torch.randn(n, f, generator=_gen(1000 + seed)).to(dtype).to(device)
    return x.requires_grad_(requires_grad)


def edge_weights(e: int, dtype=torch.float32, device='cpu', seed: int = 0) -> torch.Tensor:
    """Weights in [-0.5, 1.5) (some negative, so max sees sign changes)."""
    return (torch.rand(e, generator=_gen(2000 + seed)) * 2 - 0.5).to(dtype).to(device)


# ---------------------------------------------------------------------------
# oracles (independent of pyg_tc; differentiable)


def spmm_oracle(
    x: torch.Tensor,
    edge_index: torch.Tensor,
    num_dst: int,
    edge_weight: Optional[torch.Tensor] = None,
    reduce: str = 'sum',
    diag=None,
    dtype=torch.float64,
) -> torch.Tensor:
    """``out[i] = reduce_{e: src_e -> i} w_e * x[src_e] (+ diag[i] * x[i])``
    in ``dtype`` (float64 by default). Rows without in-edges are 0."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    xx = x.to(dtype)
    msg = xx[src]
    if edge_weight is not None:
        msg = msg * edge_weight.to(dtype).unsqueeze(1)
    F = x.size(1)
    out = torch.zeros(num_dst, F, dtype=dtype, device=x.device)
    if reduce in ('sum', 'add', 'mean'):
        out = out.index_add(0, dst, msg)
        if reduce == 'mean':
            cnt = torch.bincount(dst, minlength=num_dst).clamp(min=1).to(dtype)
            out = out / cnt.unsqueeze(1)
    elif reduce == 'max':
        out = out.scatter_reduce(0, dst.unsqueeze(1).expand(-1, F), msg, 'amax', include_self=False)
    else:
        raise ValueError(reduce)
    if diag is not None:
        d = diag.to(dtype).reshape(-1, 1) if torch.is_tensor(diag) else float(diag)
        out = out + d * xx
    return out


def spmm_magnitude(x, edge_index, num_dst, edge_weight=None, reduce='sum', diag=None):
    """Scale of the terms combined by :func:`spmm_oracle` (the same oracle on
    absolute values: sum / mean of |terms|, or the largest |term| for max)."""
    d = None
    if diag is not None:
        d = diag.detach().abs() if torch.is_tensor(diag) else abs(float(diag))
    return spmm_oracle(
        x.detach().abs(), edge_index, num_dst, None if edge_weight is None else edge_weight.detach().abs(), reduce, d
    )


def sddmm_oracle(a: torch.Tensor, b: torch.Tensor, edge_index: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """``out[e] = <a[dst_e], b[src_e]>`` in the original edge order."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    return (a.to(dtype)[dst] * b.to(dtype)[src]).sum(1)


# ---------------------------------------------------------------------------
# real data

#: the environment variable naming the real datasets' folder
DATA_ENV = 'PYG_TC_DATA'
NO_DATA = (
    f'needs the real datasets: set {DATA_ENV} to their folder '
    '(laid out as planetoid/Cora, tu/PROTEINS_full, heterophilous/tolokers, ...)'
)


def forbid_device_reads(monkeypatch) -> None:
    """Patches the calls that synchronise with a GPU (``item``, ``tolist``,
    ``int()`` / ``bool()`` / ``float()`` / ``index`` of a tensor, ``nonzero``)
    to raise, except inside a kernel's CPU reference (``_library``'s
    ``_reference_impl``: on the GPU the kernel runs instead). ``monkeypatch.undo()``
    lifts it."""
    import inspect

    def guard(name, orig):
        def call(*a, **k):
            if any(f.function == '_reference_impl' for f in inspect.stack()[1:]):
                return orig(*a, **k)
            raise AssertionError(f'{name}: read a value from the device')

        return call

    for name in ('item', 'tolist', '__int__', '__bool__', '__float__', '__index__', 'nonzero'):
        monkeypatch.setattr(torch.Tensor, name, guard(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch, 'nonzero', guard('nonzero', torch.nonzero))


def data_dir() -> Optional[Path]:
    """``$PYG_TC_DATA``, the folder of the real datasets, or ``None`` when it is not set."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else None


def real_data(rel: str) -> Path:
    """``$PYG_TC_DATA/rel``; skips the calling test, saying why, when it is not there."""
    root = data_dir()
    if root is None:
        pytest.skip(NO_DATA)
    src = root / rel
    if not src.is_dir():
        pytest.skip(f'{rel} not found in {DATA_ENV}={root}')
    return src


def writable_copy(tmp_path_factory, rel: str) -> Path:
    """A fresh folder holding a writable copy of ``$PYG_TC_DATA/rel`` under its last name
    (PyG writes ``processed/`` next to ``raw/``; the data folder may be read-only and stays
    untouched). Skips the calling test when the data is not there."""
    src = real_data(rel)
    root = tmp_path_factory.mktemp(src.name)
    shutil.copytree(src, root / src.name, ignore=shutil.ignore_patterns('processed'))
    for p in [root / src.name, *(root / src.name).rglob('*')]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return root


@pytest.fixture(scope='session')
def planetoid_root(tmp_path_factory) -> Path:
    """A private copy of ``$PYG_TC_DATA/planetoid/Cora`` (skips without it)."""
    return writable_copy(tmp_path_factory, 'planetoid/Cora')


@pytest.fixture(scope='session')
def cora(planetoid_root):
    """The real Cora ``Data`` object (2,708 nodes, 10,556 edges, 1,433 features)."""
    from torch_geometric.datasets import Planetoid

    return Planetoid(str(planetoid_root), 'Cora')[0]
