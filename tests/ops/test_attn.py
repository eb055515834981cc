"""pyg_tc.ops.attn: fused GAT / GATv2 attention (fuseGNN), edge softmax and
the Philox 4x32-10 dropout generator shared by the kernels and references.

CPU: Philox known answers and statistics; the references against an
independent oracle (PyG's ``softmax``, original edge order); the custom
backward ops against torch autograd through the references (fp64, dropout,
gradients into ``lse``); gradcheck; the CPU emulation of the kernel's unit
schedule (:func:`~pyg_tc.testing.emulate_attention`); input validation;
opcheck; NaN safety (logits x 1e3, a 700K-edge hub row) in fp32 / fp16 /
bf16.

CUDA (marked ``cuda``): the fused kernels against the fp64 reference of the
same (rounded) inputs, every width / head layout, every GAT term subset,
GATv2 with and without edge features, dropout (the kernels draw the same
Philox mask), split rows of a power-law graph, determinism, NaN safety,
empty graphs, noncontiguous and misaligned inputs, the wide-head fallback.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch_geometric.utils import softmax as pyg_softmax

import pyg_tc
from pyg_tc.formats import CSRGraph
from pyg_tc.ops import attn
from pyg_tc.ops.attn import (
    attention_weights,
    dropout_keep,
    edge_softmax,
    gat_attention,
    gat_logits,
    gat_reference,
    gatv2_attention,
    gatv2_logits,
    gatv2_reference,
    new_rng,
    philox4x32,
    philox_uniform,
)
from pyg_tc.testing import emulate_attention

from ..conftest import DTYPES, GRAPH_KINDS, dtype_id, make_graph, sizes

cuda = pytest.mark.cuda
F64 = torch.float64
MODELS = ['gat', 'gatv2']
GAT_TERMS = ('a_src', 'a_dst', 'score')
TERM_SUBSETS = [t for n in range(4) for t in itertools.combinations(GAT_TERMS, n)]
#: forward / gradient tolerances (relative to |ref| + max(1, max |ref|))
FWD_TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 3e-2}
BWD_TOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 6e-2}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def acc_of(dtype):
    return F64 if dtype == F64 else torch.float32


# ---------------------------------------------------------------------------
# graphs


def rmat(scale: int = 14, num_edges: int = 100_000, seed: int = 0, probs=(0.57, 0.19, 0.19, 0.05)) -> torch.Tensor:
    """R-MAT edge_index (power law; node 0 is the heaviest target: about
    ``E * 0.76^scale`` in-edges) on ``2^scale`` nodes."""
    g = _gen(seed)
    p = torch.tensor(probs, dtype=F64)
    src = torch.zeros(num_edges, dtype=torch.long)
    dst = torch.zeros(num_edges, dtype=torch.long)
    for _ in range(scale):
        q = torch.multinomial(p, num_edges, replacement=True, generator=g)
        src = src * 2 + q // 2
        dst = dst * 2 + q % 2
    return torch.stack([src, dst])


def hub_graph(degree: int = 700_000, num_src: int = 1000, num_dst: int = 5, seed: int = 9):
    """Row 0 with ``degree`` in-edges, plus a few light rows and an empty one."""
    g = _gen(seed)
    hub = torch.stack([torch.randint(0, num_src, (degree,), generator=g), torch.zeros(degree, dtype=torch.long)])
    light = torch.stack(
        [torch.randint(0, num_src, (20,), generator=g), torch.randint(1, num_dst - 1, (20,), generator=g)]
    )
    return torch.cat([hub, light], 1), num_src, num_dst


def build(kind: str, device='cpu', chunk=None):
    """``(CSRGraph, edge_index, num_src, num_dst)`` of a conftest graph kind,
    ``'rmat'`` (100K edges) or ``'rmat_small'`` (20K edges)."""
    if kind == 'rmat':
        ei, ns, nd = rmat(), 1 << 14, 1 << 14
    elif kind == 'rmat_small':
        ei, ns, nd = rmat(12, 20_000, seed=1), 1 << 12, 1 << 12
    elif kind == 'hub700k':
        ei, ns, nd = hub_graph()
    else:
        ei, n = make_graph(kind)
        ns, nd = sizes(n)
    ei = ei.to(device)
    return CSRGraph.from_coo(ei[0], ei[1], ns, nd, chunk=chunk), ei, ns, nd


def tiny_graph(chunk: int = 2):
    """Every target has an edge (gradcheck: lse finite); duplicates, a self loop."""
    src = torch.tensor([0, 1, 2, 3, 4, 5, 0, 0, 2, 5, 1, 3, 3, 4])
    dst = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4])
    return CSRGraph.from_coo(src, dst, 6, 5, chunk=chunk)


# ---------------------------------------------------------------------------
# inputs, calls, comparisons


def gat_inputs(g, H, C, dtype=F64, device='cpu', seed=0, terms=GAT_TERMS, scale=1.0):
    """GAT inputs ``{x, a_src, a_dst, score}`` (absent terms omitted); the
    score terms are fp32 (fp64 for fp64), times ``scale``."""
    gen = _gen(seed)
    acc = acc_of(dtype)
    out = {'x': torch.randn(g.num_cols, H, C, generator=gen, dtype=F64).to(dtype)}
    shapes = {'a_src': (g.num_cols, H), 'a_dst': (g.num_rows, H), 'score': (g.num_edges, H)}
    for t in GAT_TERMS:
        v = torch.randn(*shapes[t], generator=gen, dtype=F64) * scale
        if t in terms:
            out[t] = v.to(acc)
    return {k: v.to(device) for k, v in out.items()}


def gatv2_inputs(g, H, C, dtype=F64, device='cpu', seed=0, edge=True, scale=1.0):
    """GATv2 inputs ``{x, x_r, att, edge}``; ``att`` (fp32 / fp64) times ``scale``."""
    gen = _gen(seed)
    out = {
        'x': torch.randn(g.num_cols, H, C, generator=gen, dtype=F64).to(dtype),
        'x_r': torch.randn(g.num_rows, H, C, generator=gen, dtype=F64).to(dtype),
        'att': (torch.randn(H, C, generator=gen, dtype=F64) * scale).to(acc_of(dtype)),
    }
    if edge:
        out['edge'] = torch.randn(g.num_edges, H, C, generator=gen, dtype=F64).to(dtype)
    return {k: v.to(device) for k, v in out.items()}


def make_inputs(model, g, H, C, dtype=F64, device='cpu', seed=0, **kw):
    fn = gat_inputs if model == 'gat' else gatv2_inputs
    return fn(g, H, C, dtype, device, seed, **kw)


def call(model, g, inp, slope=0.2, dropout=0.0, rng=None, backend='auto'):
    if model == 'gat':
        return gat_attention(
            g, inp['x'], inp.get('a_src'), inp.get('a_dst'), inp.get('score'), slope, dropout, rng, backend=backend
        )
    return gatv2_attention(g, inp['x'], inp['x_r'], inp['att'], inp.get('edge'), slope, dropout, rng, backend=backend)


def logits_of(model, g, inp, slope=0.2):
    """Per-edge logits ``[E, H]`` (CSR order) in the accumulation dtype."""
    x = inp['x']
    acc = acc_of(x.dtype)
    if model == 'gat':
        return gat_logits(g.rowptr, g.col, inp.get('a_src'), inp.get('a_dst'), inp.get('score'), slope, x.size(1), acc)
    return gatv2_logits(g.rowptr, g.col, x, inp['x_r'], inp['att'], inp.get('edge'), slope, acc)


def upstream(g, H, C, dtype, device='cpu', seed=7):
    """Incoming gradients ``(go [Nd, H, C] in dtype, gl [Nd, H] in fp32 / fp64)``."""
    gen = _gen(seed)
    go = torch.randn(g.num_rows, H, C, generator=gen, dtype=F64).to(dtype).to(device)
    gl = torch.randn(g.num_rows, H, generator=gen, dtype=F64).to(acc_of(dtype)).to(device)
    return go, gl


def fwd_bwd(model, g, inp, go, gl, **kw):
    """``out, lse`` and the gradients ``{name: grad}`` of ``<out, go> + <lse, gl>``
    (``gl`` is zeroed on rows whose lse is ``-inf``)."""
    # detach() aliases keep the inputs' layout (strides, storage offset)
    leaves = {k: v.detach().requires_grad_(True) for k, v in inp.items()}
    out, lse = call(model, g, leaves, **kw)
    gl = torch.where(torch.isfinite(lse.detach()), gl.to(lse.dtype), torch.zeros_like(gl, dtype=lse.dtype))
    # (GAT without score terms: lse depends on nothing that needs a gradient)
    pairs = [(t, gt) for t, gt in ((out, go.to(out.dtype)), (lse, gl)) if t.requires_grad]
    torch.autograd.backward([t for t, _ in pairs], [gt for _, gt in pairs])
    grads = {k: (v.grad if v.grad is not None else torch.zeros_like(v)) for k, v in leaves.items()}
    return out.detach(), lse.detach(), grads


def as64(inp):
    return {k: v.detach().double() for k, v in inp.items()}


def near(got, ref, tol, what=''):
    """``|got - ref| <= tol (|ref| + max(1, max |ref|))`` on finite entries;
    non-finite entries (``-inf`` lse of empty rows) must match exactly."""
    got = got.detach().double().cpu()
    ref = ref.detach().double().cpu()
    assert got.shape == ref.shape, f'{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}'
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(got), fin), f'{what}: non-finite entries differ'
    assert torch.equal(got[~fin], ref[~fin]), f'{what}: infinite entries differ'
    if not fin.any():
        return
    g, r = got[fin], ref[fin]
    scale = max(1.0, r.abs().max().item())
    err = (g - r).abs()
    bad = err > tol * (r.abs() + scale)
    if bad.any():
        i = int(bad.nonzero()[0])
        raise AssertionError(
            f'{what}: {int(bad.sum())} / {bad.numel()} entries off (tol {tol}); '
            f'max err {err.max().item():.3g}, scale {scale:.3g}; first: got '
            f'{g[i].item()}, expected {r[i].item()}'
        )


def check_against_reference(
    model, g, inp, dtype, slope=0.2, dropout=0.0, rng=None, what='', fwd_tol=None, bwd_tol=None, grads=True
):
    """Run ``inp`` (dtype) through the default backend and the fp64 reference of
    the same values; compare out, lse and (with ``grads``) every gradient."""
    H, C = inp['x'].shape[1:]
    go, gl = upstream(g, H, C, dtype, inp['x'].device)
    fwd_tol = fwd_tol or FWD_TOL[dtype]
    bwd_tol = bwd_tol or BWD_TOL[dtype]
    if grads:
        out, lse, gr = fwd_bwd(model, g, inp, go, gl, slope=slope, dropout=dropout, rng=rng)
        rout, rlse, rgr = fwd_bwd(
            model, g, as64(inp), go.double(), gl.double(), slope=slope, dropout=dropout, rng=rng, backend='reference'
        )
    else:
        with torch.no_grad():
            out, lse = call(model, g, inp, slope, dropout, rng)
            rout, rlse = call(model, g, as64(inp), slope, dropout, rng, backend='reference')
    assert out.dtype == dtype and lse.dtype == F64, what
    assert out.shape == (g.num_rows, H, C) and lse.shape == (g.num_rows, H), what
    near(out, rout, fwd_tol, f'{what} out')
    near(lse, rlse, fwd_tol, f'{what} lse')
    if grads:
        for k in inp:
            assert gr[k].dtype == inp[k].dtype, f'{what} grad {k} dtype'
            near(gr[k], rgr[k], bwd_tol, f'{what} grad {k}')
    return out, lse


# ---------------------------------------------------------------------------
# independent oracle (PyG's softmax, no pyg_tc code) in the original edge order


def oracle(model, ei, nd, inp, slope=0.2, keep=None, perm=None):
    """fp64 ``(out, lse)``; ``inp`` per-edge tensors in CSR order (``perm``:
    CSR position -> original edge, as ``CSRGraph.perm``; None: the identity)."""
    i64 = {k: v.detach().double().cpu() for k, v in inp.items()}
    ei = ei.cpu()
    src, dst = ei[0], ei[1]
    E = src.numel()
    inv = torch.empty(E, dtype=torch.long)
    inv[torch.arange(E) if perm is None else perm.long().cpu()] = torch.arange(E)  # original edge -> CSR position
    x = i64['x']
    H = x.size(1)
    if model == 'gat':
        z = torch.zeros(E, H, dtype=F64)
        if 'a_src' in i64:
            z = z + i64['a_src'][src]
        if 'a_dst' in i64:
            z = z + i64['a_dst'][dst]
        if 'score' in i64:
            z = z + i64['score'][inv]
        s = torch.nn.functional.leaky_relu(z, slope)
    else:
        z = x[src] + i64['x_r'][dst]
        if 'edge' in i64:
            z = z + i64['edge'][inv]
        s = (torch.nn.functional.leaky_relu(z, slope) * i64['att']).sum(-1)
    alpha = pyg_softmax(s, dst, num_nodes=nd)
    w = alpha if keep is None else alpha * keep.double().cpu()[inv]
    out = torch.zeros(nd, H, x.size(2), dtype=F64).index_add(0, dst, w.unsqueeze(-1) * x[src])
    lse = torch.full((nd, H), float('-inf'), dtype=F64)
    lse[dst] = s - torch.log(alpha)  # any edge of the row gives log sum exp
    return out, lse


# ---------------------------------------------------------------------------
# Philox 4x32-10

KAT = [  # Random123 kat_vectors: philox4x32 10 rounds (counter, key, output)
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize('ctr,key,expected', KAT, ids=['zeros', 'ones', 'pi'])
def test_philox_known_answers(ctr, key, expected):
    t = lambda v: torch.tensor([v], dtype=torch.int64)
    words = philox4x32(*map(t, ctr), *map(t, key))
    assert tuple(int(w) for w in words) == expected
    # broadcast over a batch: the same answer in every lane
    b = lambda v: torch.full((5,), v, dtype=torch.int64)
    words = philox4x32(*map(b, ctr), t(key[0]), t(key[1]))
    for w, e in zip(words, expected):
        assert (w == e).all()


def test_philox_uniform_counter_layout():
    """Counter (idx_lo, idx_hi, offset_lo, offset_hi), key (seed_lo, seed_hi)
    of the two's-complement int64 seed / offset; 24-bit uniforms in [0, 1)."""
    M = 0xFFFFFFFF
    for seed, offset in ((0, 0), (123456789012345, 987654321), (-5, -(2**62))):
        idx = torch.tensor([0, 1, 7, 2**32 + 3, 2**40 + 5], dtype=torch.int64)
        u = philox_uniform(torch.tensor([seed, offset]), idx)
        s, o = seed & ((1 << 64) - 1), offset & ((1 << 64) - 1)
        c0, _, _, _ = philox4x32(
            idx & M, idx >> 32, torch.tensor(o & M), torch.tensor(o >> 32), torch.tensor(s & M), torch.tensor(s >> 32)
        )
        assert u.dtype == torch.float32
        assert torch.equal(u, (c0 >> 8).float() / 2**24)
    u = philox_uniform(torch.tensor([3, 4]), torch.arange(100_000))
    assert float(u.min()) >= 0 and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.005


@pytest.mark.parametrize('p', [0.1, 0.5, 0.6])
def test_dropout_keep_fraction(p):
    rng = torch.tensor([20240521, 77])
    keep = dropout_keep(rng, 250_000, 4, p, 'cpu')  # 1M draws
    assert keep.shape == (250_000, 4) and keep.dtype == torch.float32
    kept = keep != 0
    assert abs(float(kept.double().mean()) - (1 - p)) < 0.005
    scale = torch.tensor(1.0, dtype=torch.float32) / (1 - p)
    assert torch.equal(keep[kept], scale.expand(int(kept.sum())))
    # the expected value of a kept weight is 1 (inverted dropout)
    assert abs(float(keep.double().mean()) - 1.0) < 0.01


def test_dropout_determinism_and_independence():
    E, H, p = 20_000, 3, 0.5
    base = torch.tensor([11, 5])
    a = dropout_keep(base, E, H, p, 'cpu')
    assert torch.equal(a, dropout_keep(base.clone(), E, H, p, 'cpu'))
    # counter e * H + h: the [E, H] layout is a view of E * H draws of one head
    assert torch.equal(a.view(-1), dropout_keep(base, E * H, 1, p, 'cpu').view(-1))
    # a prefix of the edges draws the same mask
    assert torch.equal(a[:100], dropout_keep(base, 100, H, p, 'cpu'))
    for other in (
        torch.tensor([12, 5]),
        torch.tensor([11, 6]),
        torch.tensor([11 + 2**32, 5]),
        torch.tensor([11, 5 + 2**32]),
    ):
        b = dropout_keep(other, E, H, p, 'cpu')
        agree = float(((a != 0) == (b != 0)).double().mean())
        assert abs(agree - 0.5) < 0.02, f'{other.tolist()}: masks agree on {agree:.3f}'
    # a different p thresholds the same uniforms: the kept sets are nested
    k6 = dropout_keep(base, E, H, 0.6, 'cpu') != 0
    assert not (k6 & (a == 0)).any()


def test_new_rng_follows_manual_seed():
    torch.manual_seed(3)
    r1 = new_rng('cpu')
    torch.manual_seed(3)
    r2 = new_rng('cpu')
    assert r1.dtype == torch.int64 and r1.shape == (2,)
    assert torch.equal(r1, r2)
    assert not torch.equal(new_rng('cpu'), r2)
    # the front-end draws a fresh rng when none is given: reproducible under manual_seed
    g, _, _, _ = build('duplicates')
    inp = gat_inputs(g, 2, 4)
    torch.manual_seed(5)
    o1, _ = call('gat', g, inp, dropout=0.5)
    torch.manual_seed(5)
    o2, _ = call('gat', g, inp, dropout=0.5)
    o3, _ = call('gat', g, inp, dropout=0.5)
    assert torch.equal(o1, o2) and not torch.equal(o1, o3)


# ---------------------------------------------------------------------------
# references against the independent oracle


@pytest.mark.parametrize('dropout', [0.0, 0.3])
@pytest.mark.parametrize('model', MODELS)
@pytest.mark.parametrize('kind', GRAPH_KINDS)
def test_reference_matches_oracle(kind, model, dropout):
    g, ei, ns, nd = build(kind)
    inp = make_inputs(model, g, 3, 5, seed=1)
    rng = torch.tensor([99, 1]) if dropout else None
    with torch.no_grad():
        out, lse = call(model, g, inp, dropout=dropout, rng=rng, backend='reference')
    if model == 'gat':
        direct = gat_reference(g.rowptr, g.col, inp['x'], inp['a_src'], inp['a_dst'], inp['score'], 0.2, dropout, rng)
    else:
        direct = gatv2_reference(g.rowptr, g.col, inp['x'], inp['x_r'], inp['att'], inp['edge'], 0.2, dropout, rng)
    assert torch.equal(out, direct[0]) and torch.equal(lse, direct[1])
    keep = dropout_keep(rng, g.num_edges, 3, dropout, 'cpu') if dropout else None
    rout, rlse = oracle(model, ei, nd, inp, keep=keep, perm=g.perm)
    near(out, rout, 1e-12, 'out')
    near(lse, rlse, 1e-12, 'lse')
    deg = g.degree()
    assert (out[deg == 0] == 0).all() and torch.isneginf(lse[deg == 0]).all()


@pytest.mark.parametrize('slope', [0.0, 0.2, 1.0])
@pytest.mark.parametrize('model', MODELS)
def test_reference_negative_slope(model, slope):
    g, ei, _, nd = build('self_loops')
    inp = make_inputs(model, g, 2, 3, seed=2)
    out, lse = call(model, g, inp, slope=slope, backend='reference')
    rout, rlse = oracle(model, ei, nd, inp, slope=slope, perm=g.perm)
    near(out, rout, 1e-12, 'out')
    near(lse, rlse, 1e-12, 'lse')


@pytest.mark.parametrize('H,C', list(itertools.product([1, 3, 8], [1, 5, 8, 41, 64])))
@pytest.mark.parametrize('model', MODELS)
def test_heads_channels(model, H, C):
    """Reference vs oracle and custom backward vs autograd, every layout."""
    g, ei, _, nd = build('not_tile_multiple')
    inp = make_inputs(model, g, H, C, seed=H * 100 + C)
    out, lse = check_against_reference(model, g, inp, F64, what=f'H{H} C{C}')
    rout, rlse = oracle(model, ei, nd, inp, perm=g.perm)
    near(out, rout, 1e-12, 'out')
    near(lse, rlse, 1e-12, 'lse')


def test_attention_weights():
    g, ei, _, nd = build('duplicates')
    inp = gat_inputs(g, 3, 4, seed=3)
    s = logits_of('gat', g, inp)
    out, lse = call('gat', g, inp)
    alpha = attention_weights(g, s, lse)
    row = g.row().long()
    ref = pyg_softmax(s, row, num_nodes=nd)
    near(alpha, ref, 1e-12, 'alpha')
    sums = torch.zeros(nd, 3, dtype=F64).index_add(0, row, alpha)
    assert torch.allclose(sums[g.degree() > 0], torch.ones(1, dtype=F64))
    # aggregating with the weights gives the output, also with dropout
    rng = torch.tensor([4, 2])
    out, lse = call('gat', g, inp, dropout=0.4, rng=rng)
    alpha = attention_weights(g, s, lse, 0.4, rng)
    agg = torch.zeros_like(out).index_add(0, row, alpha.unsqueeze(-1) * inp['x'][g.col.long()])
    near(agg, out, 1e-12, 'aggregation')


# ---------------------------------------------------------------------------
# the custom backward ops against autograd through the references


@pytest.mark.parametrize('dropout', [0.0, 0.4])
@pytest.mark.parametrize('model', MODELS)
@pytest.mark.parametrize('kind', GRAPH_KINDS)
def test_custom_backward_matches_autograd(kind, model, dropout):
    g, _, _, _ = build(kind, chunk=4)
    inp = make_inputs(model, g, 3, 5, seed=4)
    rng = torch.tensor([8, 123]) if dropout else None
    check_against_reference(model, g, inp, F64, dropout=dropout, rng=rng, what=kind)


@pytest.mark.parametrize('terms', TERM_SUBSETS, ids=lambda t: '+'.join(t) or 'none')
def test_custom_backward_gat_terms(terms):
    g, _, _, _ = build('self_loops')
    inp = gat_inputs(g, 2, 6, terms=terms, seed=5)
    check_against_reference('gat', g, inp, F64, dropout=0.2, rng=torch.tensor([1, 1]), what='+'.join(terms))
    check_against_reference('gat', g, inp, F64, slope=1.0, what='+'.join(terms) + ' slope 1')


@pytest.mark.parametrize('edge', [False, True], ids=['no_edge', 'edge'])
def test_custom_backward_gatv2_edge(edge):
    g, _, _, _ = build('duplicates')
    inp = gatv2_inputs(g, 3, 4, edge=edge, seed=6)
    check_against_reference('gatv2', g, inp, F64, dropout=0.3, rng=torch.tensor([2, 9]))
    check_against_reference('gatv2', g, inp, F64, slope=1.0)


@pytest.mark.parametrize('model', MODELS)
def test_custom_backward_fp32_and_lse_only(model):
    g, _, _, _ = build('hub')
    inp = make_inputs(model, g, 2, 8, torch.float32, seed=7)
    check_against_reference(model, g, inp, torch.float32, dropout=0.1, rng=torch.tensor([5, 5]))
    # a gradient into lse only (out unused: its incoming gradient is None)
    inp = make_inputs(model, g, 2, 3, seed=8)
    leaves = {k: v.clone().requires_grad_(True) for k, v in inp.items()}
    ref = {k: v.detach().clone().requires_grad_(True) for k, v in leaves.items()}
    _, lse = call(model, g, leaves)
    _, rlse = call(model, g, ref, backend='reference')
    fin = torch.isfinite(lse)
    lse[fin].sum().backward()
    rlse[fin].sum().backward()
    for k in leaves:  # (GAT's lse does not depend on x: no gradient in the reference)
        rg = ref[k].grad if ref[k].grad is not None else torch.zeros_like(ref[k])
        near(leaves[k].grad, rg, 1e-10, f'lse-only grad {k}')


def test_backends_and_no_grad_agree():
    g, _, _, _ = build('random')
    for model in MODELS:
        inp = make_inputs(model, g, 2, 4, torch.float32, seed=9)
        a = call(model, g, inp)
        b = call(model, g, inp, backend='csr')
        c = call(model, g, inp, backend='reference')
        with torch.no_grad():
            d = call(model, g, inp)
        for t in (b, c, d):
            assert torch.equal(a[0], t[0]) and torch.equal(a[1], t[1])


# ---------------------------------------------------------------------------
# gradcheck


def test_gradcheck_gat():
    g = tiny_graph()
    inp = {k: v.requires_grad_(True) for k, v in gat_inputs(g, 2, 3, seed=10).items()}
    names = list(inp)

    def fn(*ts, dropout=0.0):
        d = dict(zip(names, ts))
        return gat_attention(g, d['x'], d['a_src'], d['a_dst'], d['score'], 0.2, dropout, torch.tensor([3, 7]))

    torch.autograd.gradcheck(fn, tuple(inp.values()))
    torch.autograd.gradcheck(lambda *ts: fn(*ts, dropout=0.5), tuple(inp.values()))
    # a term without gradient, one absent
    x, a_src = inp['x'], inp['a_src'].detach()
    torch.autograd.gradcheck(lambda xx, sc: gat_attention(g, xx, a_src, None, sc, 1.0), (x, inp['score']))


def test_gradcheck_gatv2():
    g = tiny_graph()
    inp = {k: v.requires_grad_(True) for k, v in gatv2_inputs(g, 2, 3, seed=11).items()}
    names = list(inp)

    def fn(*ts, dropout=0.0, edge=True):
        d = dict(zip(names, ts))
        return gatv2_attention(
            g, d['x'], d['x_r'], d['att'], d['edge'] if edge else None, 0.2, dropout, torch.tensor([3, 8])
        )

    torch.autograd.gradcheck(fn, tuple(inp.values()))
    torch.autograd.gradcheck(lambda *ts: fn(*ts, dropout=0.5), tuple(inp.values()))
    torch.autograd.gradcheck(lambda *ts: fn(*ts, edge=False)[0], tuple(inp.values())[:3] + (inp['edge'].detach(),))


def test_gradcheck_edge_softmax():
    g = tiny_graph()
    s2 = torch.randn(g.num_edges, 3, dtype=F64, generator=_gen(12), requires_grad=True)
    s1 = torch.randn(g.num_edges, dtype=F64, generator=_gen(13), requires_grad=True)
    torch.autograd.gradcheck(lambda s: edge_softmax(g, s), (s2,))
    torch.autograd.gradcheck(lambda s: edge_softmax(g, s), (s1,))


# ---------------------------------------------------------------------------
# edge softmax


@pytest.mark.parametrize('kind', GRAPH_KINDS)
def test_edge_softmax(kind):
    g, _, _, nd = build(kind)
    row = g.row().long()
    for shape in ((g.num_edges,), (g.num_edges, 4)):
        s = torch.randn(*shape, generator=_gen(14)) * 10
        y = edge_softmax(g, s)
        assert y.shape == s.shape and y.dtype == s.dtype
        near(y, pyg_softmax(s.double(), row, num_nodes=nd), 1e-6, f'{kind} {shape}')
    for dt in (torch.float16, torch.bfloat16):
        s = (torch.randn(g.num_edges, 2, generator=_gen(15)) * 1e3).to(dt)
        y = edge_softmax(g, s)
        assert y.dtype == dt and torch.isfinite(y).all()
        near(y, pyg_softmax(s.double(), row, num_nodes=nd), FWD_TOL[dt], f'{kind} {dt}')


# ---------------------------------------------------------------------------
# CPU emulation of the forward kernel's schedule


@pytest.mark.parametrize('dropout', [0.0, 0.3])
@pytest.mark.parametrize('chunk', [1, 4, 256])
@pytest.mark.parametrize('model', MODELS)
@pytest.mark.parametrize('kind', GRAPH_KINDS)
def test_emulate_attention(kind, model, chunk, dropout):
    g, _, _, _ = build(kind, chunk=chunk)
    if chunk < 256 and g.num_edges:
        assert g.sched.num_slots > 0  # heavy rows are split and merged
    inp = make_inputs(model, g, 3, 5, seed=16)
    rng = torch.tensor([6, 6]) if dropout else None
    s = logits_of(model, g, inp)
    out, lse = emulate_attention(g, inp['x'], s, dropout, rng)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), 'a row was never written'
    with torch.no_grad():
        rout, rlse = call(model, g, inp, dropout=dropout, rng=rng, backend='reference')
    near(out, rout, 1e-12, 'out')
    near(lse, rlse, 1e-12, 'lse')


@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('kind,chunk', [('hub', 16), ('rmat_small', 32), ('rmat_small', None)])
def test_emulate_attention_low_precision(kind, chunk, dtype):
    g, _, _, _ = build(kind, chunk=chunk)
    assert g.sched.num_slots > 0
    inp = gat_inputs(g, 2, 8, dtype, seed=17, scale=3.0)
    out, lse = emulate_attention(g, inp['x'], logits_of('gat', g, inp), 0.2, torch.tensor([1, 2]))
    assert out.dtype == dtype and lse.dtype == torch.float64
    rout, rlse = call('gat', g, as64(inp), dropout=0.2, rng=torch.tensor([1, 2]), backend='reference')
    near(out, rout, FWD_TOL[dtype] if dtype != torch.float32 else 1e-5, 'out')
    near(lse, rlse, 1e-5, 'lse')


@pytest.mark.parametrize('H,C', [(1, 1), (8, 41), (3, 64)])
def test_emulate_heads_channels(H, C):
    g, _, _, _ = build('hub', chunk=64)
    inp = gatv2_inputs(g, H, C, seed=18)
    out, lse = emulate_attention(g, inp['x'], logits_of('gatv2', g, inp))
    rout, rlse = call('gatv2', g, inp, backend='reference')
    near(out, rout, 1e-12, 'out')
    near(lse, rlse, 1e-12, 'lse')


def test_emulate_shows_schedule_bugs():
    """A unit dropped from the schedule leaves NaN (light row) or poisons the
    merge of its heavy row (chunk 8: the graph's own schedule is the
    kernels', see attention_schedules)."""
    g, _, _, _ = build('hub', chunk=8)
    inp = gat_inputs(g, 1, 2, seed=19)
    s = logits_of('gat', g, inp)
    u = g.sched.units
    for pick in ((u[:, 3] < 0) & (u[:, 2] > u[:, 1]), u[:, 3] >= 0):
        k = int(pick.nonzero()[0])
        keep = torch.ones(u.size(0), dtype=torch.bool)
        keep[k] = False
        bad = CSRGraph(
            g.rowptr,
            g.col,
            g.perm,
            g.t_rowptr,
            g.t_col,
            g.t_perm,
            g.sched._replace(units=u[keep]),
            g.t_sched,
            g.num_rows,
            g.num_cols,
            g.chunk,
        )
        out, lse = emulate_attention(bad, inp['x'], s)
        row = int(u[k, 0])
        assert torch.isnan(out[row]).all() and torch.isnan(lse[row]).all()


# ---------------------------------------------------------------------------
# empty graphs


@pytest.mark.parametrize('model', MODELS)
def test_empty_graphs(model):
    for ns, nd in ((7, 5), (7, 0), (0, 4)):
        e = torch.empty(0, dtype=torch.long)
        g = CSRGraph.from_coo(e, e, ns, nd)
        inp = make_inputs(model, g, 2, 3, torch.float32, seed=20)
        go, gl = upstream(g, 2, 3, torch.float32)
        out, lse, gr = fwd_bwd(model, g, inp, go, gl)
        assert out.shape == (nd, 2, 3) and (out == 0).all() and torch.isneginf(lse).all()
        for k, v in gr.items():
            assert v.shape == inp[k].shape and (v == 0).all(), k
        s = logits_of(model, g, inp)
        eo, el = emulate_attention(g, inp['x'], s)
        assert torch.equal(eo, out) and torch.equal(el, lse)
        assert edge_softmax(g, torch.zeros(0)).shape == (0,)
        assert edge_softmax(g, torch.zeros(0, 3)).shape == (0, 3)


# ---------------------------------------------------------------------------
# input validation


def test_validation_errors():
    g, _, ns, nd = build('bipartite')
    E = g.num_edges
    x = torch.randn(ns, 2, 4)
    ok = dict(a_src=torch.randn(ns, 2), a_dst=torch.randn(nd, 2), score=torch.randn(E, 2))
    gat_attention(g, x, **ok)
    with pytest.raises(ValueError, match=r'\[num_nodes, heads, channels\]'):
        gat_attention(g, x.view(ns, 8))
    with pytest.raises(ValueError, match='x rows|source nodes'):
        gat_attention(g, torch.randn(nd, 2, 4))
    with pytest.raises(TypeError, match='float16, bfloat16, float32 or float64'):
        gat_attention(g, x.int())
    with pytest.raises(ValueError, match='a_src must have shape'):
        gat_attention(g, x, a_src=torch.randn(nd, 2))
    with pytest.raises(ValueError, match='a_dst must have shape'):
        gat_attention(g, x, a_dst=torch.randn(nd, 3))
    with pytest.raises(ValueError, match='score must have shape'):
        gat_attention(g, x, score=torch.randn(E))
    with pytest.raises(TypeError, match='a_dst must be a floating-point tensor'):
        gat_attention(g, x, a_dst=torch.ones(nd, 2, dtype=torch.long))
    with pytest.raises(ValueError, match='is on meta'):
        gat_attention(g, x.to('meta'))
    with pytest.raises(ValueError, match='a_src is on meta'):
        gat_attention(g, x, a_src=ok['a_src'].to('meta'))
    for p in (-0.1, 1.0, 1.5, float('nan')):
        with pytest.raises(ValueError, match='dropout must lie in'):
            gat_attention(g, x, **ok, dropout=p)
    for rng in (torch.tensor([1, 2], dtype=torch.int32), torch.tensor([1, 2, 3]), torch.tensor([1.0, 2.0]), [1, 2]):
        with pytest.raises(ValueError, match='rng must be an int64 tensor'):
            gat_attention(g, x, **ok, dropout=0.5, rng=rng)
    with pytest.raises(ValueError, match='backend'):
        gat_attention(g, x, backend='bogus')
    with pytest.raises(ValueError, match="no 'sgt' implementation"):
        gat_attention(g, x, backend='sgt')
    # GATv2
    x_r, att, edge = torch.randn(nd, 2, 4), torch.randn(2, 4), torch.randn(E, 2, 4)
    gatv2_attention(g, x, x_r, att, edge)
    with pytest.raises(ValueError, match='x_r must have shape'):
        gatv2_attention(g, x, torch.randn(ns, 2, 4), att)
    with pytest.raises(ValueError, match='att must have shape'):
        gatv2_attention(g, x, x_r, torch.randn(4, 2))
    with pytest.raises(ValueError, match='edge must have shape'):
        gatv2_attention(g, x, x_r, att, torch.randn(E, 2, 3))
    with pytest.raises(TypeError, match='x_r and edge must have the dtype of x'):
        gatv2_attention(g, x, x_r.half(), att)
    with pytest.raises(TypeError, match='x_r and edge must have the dtype of x'):
        gatv2_attention(g, x, x_r, att, edge.double())
    with pytest.raises(ValueError, match='x_r is on meta'):
        gatv2_attention(g, x, x_r.to('meta'), att)
    with pytest.raises(ValueError, match='dropout must lie in'):
        gatv2_attention(g, x, x_r, att, dropout=1.0)
    # edge softmax
    with pytest.raises(ValueError, match='score must be'):
        edge_softmax(g, torch.randn(E + 1))
    with pytest.raises(ValueError, match='score must be'):
        edge_softmax(g, torch.randn(E, 2, 2))


# ---------------------------------------------------------------------------
# opcheck


def _gat_args(g, inp, slope=0.2, dropout=0.0, rng=None):
    return (*attn._graph_args(g), inp['x'], inp.get('a_src'), inp.get('a_dst'), inp.get('score'), slope, dropout, rng)


def _gatv2_args(g, inp, slope=0.2, dropout=0.0, rng=None):
    return (*attn._graph_args(g), inp['x'], inp['x_r'], inp['att'], inp.get('edge'), slope, dropout, rng)


def _opcheck_all(g, dtype, device, test_utils=None):
    kw = {} if test_utils is None else {'test_utils': test_utils}
    ops = torch.ops.pyg_tc
    rng = torch.tensor([3, 4], device=device)
    H, C = 2, 8
    for terms, dropout in ((GAT_TERMS, 0.0), (('a_src', 'score'), 0.3), ((), 0.0)):
        inp = {k: v.requires_grad_(True) for k, v in gat_inputs(g, H, C, dtype, device, seed=21, terms=terms).items()}
        args = _gat_args(g, inp, 0.2, dropout, rng if dropout else None)
        torch.library.opcheck(ops.attn_gat.default, args, **kw)
        out, lse = ops.attn_gat(*args)
        go, gl = upstream(g, H, C, dtype, device)
        delta = attn._delta(go, out.detach(), gl)
        d = {k: v.detach() for k, v in inp.items()}
        bargs = (*_gat_args(g, d, 0.2, dropout, rng if dropout else None), go, lse.detach(), delta)
        for need_row in (False, True):
            torch.library.opcheck(ops.attn_gat_backward.default, bargs + (need_row,), **kw)
    for edge, dropout in ((True, 0.0), (False, 0.3)):
        inp = {k: v.requires_grad_(True) for k, v in gatv2_inputs(g, H, C, dtype, device, seed=22, edge=edge).items()}
        args = _gatv2_args(g, inp, 0.2, dropout, rng if dropout else None)
        torch.library.opcheck(ops.attn_gatv2.default, args, **kw)
        out, lse = ops.attn_gatv2(*args)
        go, gl = upstream(g, H, C, dtype, device)
        delta = attn._delta(go, out.detach(), None)
        d = {k: v.detach() for k, v in inp.items()}
        bargs = (*_gatv2_args(g, d, 0.2, dropout, rng if dropout else None), go, lse.detach(), delta)
        for need_edge in (False, True):
            torch.library.opcheck(ops.attn_gatv2_backward.default, bargs + (need_edge,), **kw)


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32], ids=dtype_id)
def test_opcheck(dtype):
    pyg_tc.ops.ensure()
    g, _, _, _ = build('bipartite', chunk=4)
    assert g.sched.num_slots > 0
    _opcheck_all(g, dtype, 'cpu')
    s = torch.randn(g.num_edges, 3, dtype=dtype, requires_grad=True)
    torch.library.opcheck(torch.ops.pyg_tc.edge_softmax.default, (g.rowptr, s))


# ---------------------------------------------------------------------------
# NaN safety of the reference (and the emulation): huge logits, a 700K-edge row


@pytest.fixture(scope='module')
def hub700k():
    g, _, _, _ = build('hub700k', chunk=1024)
    assert int(g.degree()[0]) == 700_000
    return g


@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('model,C', [('gat', 1), ('gatv2', 4)])
def test_reference_nan_safety(hub700k, model, C, dtype):
    g = hub700k
    inp = make_inputs(model, g, 1, C, dtype, seed=23, scale=1e3)
    s = logits_of(model, g, inp)
    assert float(s.abs().max()) > 500  # exp would overflow without the max shift
    with torch.no_grad():
        out, lse = call(model, g, inp)
    assert torch.isfinite(out).all()
    assert torch.isfinite(lse[g.degree() > 0]).all()
    rout, rlse = call(model, g, as64(inp), backend='reference')
    near(out, rout, FWD_TOL[dtype] if dtype != torch.float32 else 1e-5, 'out')
    near(lse, rlse, 1e-6, 'lse')
    if model == 'gat' and dtype == torch.float32:
        eo, el = emulate_attention(g, inp['x'], s)
        near(eo, rout, 1e-5, 'emulated out')
        near(el, rlse, 1e-6, 'emulated lse')


def test_reference_nan_safety_gradients(hub700k):
    g = hub700k
    inp = gat_inputs(g, 1, 2, torch.float32, seed=24, scale=1e3)
    go, gl = upstream(g, 1, 2, torch.float32)
    _, _, gr = fwd_bwd('gat', g, inp, go, gl)
    for k, v in gr.items():
        assert torch.isfinite(v).all(), k


# ===========================================================================
# CUDA: the fused kernels against the fp64 reference of the same inputs


def cuda_graph(kind, chunk=None):
    g, ei, ns, nd = build(kind, 'cuda', chunk)
    return g


@cuda
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('model', MODELS)
@pytest.mark.parametrize('kind', GRAPH_KINDS + ['rmat'])
def test_cuda_matches_reference(kind, model, dtype):
    g = cuda_graph(kind)
    inp = make_inputs(model, g, 3, 16, dtype, 'cuda', seed=30)
    check_against_reference(model, g, inp, dtype, what=f'{kind} {model}')


@cuda
@pytest.mark.parametrize('H', [1, 2, 3, 8])
@pytest.mark.parametrize('C', [1, 3, 8, 41, 64, 200, 512])
@pytest.mark.parametrize('model', MODELS)
def test_cuda_widths_and_heads(model, C, H):
    g = cuda_graph('hub')
    inp = make_inputs(model, g, H, C, torch.float32, 'cuda', seed=31)
    assert attn._fits(inp['x'])
    check_against_reference(model, g, inp, torch.float32, what=f'C{C} H{H}')


@cuda
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize('C', [1, 8, 41, 64, 200, 1024])
def test_cuda_half_widths(C, dtype):
    g = cuda_graph('hub')
    for model in MODELS:
        inp = make_inputs(model, g, 2, C, dtype, 'cuda', seed=32)
        assert attn._fits(inp['x'])
        check_against_reference(model, g, inp, dtype, what=f'{model} C{C}')


@cuda
@pytest.mark.parametrize('nv4', [True, False])
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('H,C', [(1, 3), (2, 8), (1, 64), (1, 256), (3, 200)])
def test_cuda_lane_layouts(H, C, dtype, nv4):
    """Either lane layout (four 16-byte vectors per lane, or one where the
    head fits 32 lanes), forced with ``kernel_overrides(attn_nv4=...)``:
    the same results against the reference."""
    from pyg_tc.testing import kernel_overrides

    g = cuda_graph('hub')
    with kernel_overrides(attn_nv4=nv4):
        for model in MODELS:
            inp = make_inputs(model, g, H, C, dtype, 'cuda', seed=34)
            check_against_reference(model, g, inp, dtype, what=f'{model} H{H} C{C} nv4={nv4}')


@cuda
@pytest.mark.parametrize('slope', [0.2, 1.0])
@pytest.mark.parametrize('terms', TERM_SUBSETS, ids=lambda t: '+'.join(t) or 'none')
def test_cuda_gat_terms(terms, slope):
    g = cuda_graph('hub')
    for dtype in (torch.float32, torch.float16):
        inp = gat_inputs(g, 4, 24, dtype, 'cuda', seed=33, terms=terms)
        check_against_reference('gat', g, inp, dtype, slope=slope, what='+'.join(terms))


@cuda
@pytest.mark.parametrize('slope', [0.2, 1.0])
@pytest.mark.parametrize('edge', [False, True], ids=['no_edge', 'edge'])
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_cuda_gatv2_edge(dtype, edge, slope):
    g = cuda_graph('hub')
    inp = gatv2_inputs(g, 3, 32, dtype, 'cuda', seed=34, edge=edge)
    check_against_reference('gatv2', g, inp, dtype, slope=slope)


@cuda
@pytest.mark.parametrize('p', [0.1, 0.5])
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('model', MODELS)
@pytest.mark.parametrize('kind,chunk', [('hub', None), ('rmat', 32), ('bipartite', 4)])
def test_cuda_dropout_matches_reference(kind, chunk, model, dtype, p):
    """Kernels and reference draw the same Philox mask from the same rng."""
    g = cuda_graph(kind, chunk)
    inp = make_inputs(model, g, 3, 8, dtype, 'cuda', seed=35)
    rng = torch.tensor([1234567, 89], device='cuda')
    check_against_reference(model, g, inp, dtype, dropout=p, rng=rng, what=f'{kind} p{p}')


@cuda
@pytest.mark.parametrize('p', [0.1, 0.5, 0.6])
def test_cuda_dropout_mask_through_kernel(p):
    """One in-edge per row: alpha = 1, so out = the dropout scale of each
    (edge, head): the kernel's mask equals dropout_keep's (1M draws)."""
    n, H = 250_000, 4
    ar = torch.arange(n, device='cuda')
    g = CSRGraph.from_coo(ar, ar, n, n)
    x = torch.ones(n, H, 1, device='cuda')
    rng = torch.tensor([-7, 2**40 + 3], device='cuda')
    keep = dropout_keep(rng, n, H, p, 'cuda')
    for model in MODELS:
        if model == 'gat':
            out, _ = gat_attention(g, x, torch.randn(n, H, device='cuda'), dropout=p, rng=rng)
        else:
            out, _ = gatv2_attention(
                g, x, torch.randn(n, H, 1, device='cuda'), torch.randn(H, 1, device='cuda'), dropout=p, rng=rng
            )
        out = out.view(n, H)
        assert torch.equal(out != 0, keep != 0), model
        torch.testing.assert_close(out, keep, rtol=1e-6, atol=0)
        assert abs(float((out != 0).double().mean()) - (1 - p)) < 0.005


@cuda
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('model', MODELS)
@pytest.mark.parametrize('chunk', [None, 32], ids=['default_chunk', 'chunk32'])
def test_cuda_power_law(chunk, model, dtype):
    g = cuda_graph('rmat', chunk)
    assert g.sched.num_slots > 0 and g.t_sched.num_slots > 0  # rows and columns are split
    inp = make_inputs(model, g, 4, 16, dtype, 'cuda', seed=36)
    check_against_reference(model, g, inp, dtype, what=f'rmat chunk {chunk}')


@cuda
@pytest.mark.parametrize('kind,chunk', [('hub', 16), ('rmat', 32), ('random', None)])
def test_cuda_kernel_matches_emulation(kind, chunk):
    """The kernel's forward equals the CPU emulation of its schedule (fp32)."""
    g = cuda_graph(kind, chunk)
    for model in MODELS:
        inp = make_inputs(model, g, 2, 8, torch.float32, 'cuda', seed=37)
        rng = torch.tensor([5, 6], device='cuda')
        with torch.no_grad():
            out, lse = call(model, g, inp, dropout=0.2, rng=rng)
        gc = g.to('cpu')
        cpu = {k: v.cpu() for k, v in inp.items()}
        eo, el = emulate_attention(gc, cpu['x'], logits_of(model, gc, cpu), 0.2, rng.cpu())
        torch.testing.assert_close(out.cpu(), eo, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(lse.cpu(), el, rtol=1e-6, atol=1e-6)


@cuda
@pytest.mark.parametrize('model', MODELS)
def test_cuda_deterministic(model):
    g = cuda_graph('rmat', 32)
    inp = make_inputs(model, g, 3, 24, torch.float32, 'cuda', seed=38)
    go, gl = upstream(g, 3, 24, torch.float32, 'cuda')
    rng = torch.tensor([9, 9], device='cuda')
    runs = [fwd_bwd(model, g, inp, go, gl, dropout=0.3, rng=rng) for _ in range(2)]
    (o1, l1, g1), (o2, l2, g2) = runs
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    for k in g1:
        assert torch.equal(g1[k], g2[k]), k


@cuda
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
@pytest.mark.parametrize('model,C', [('gat', 1), ('gat', 4), ('gatv2', 4)])
def test_cuda_nan_safety(model, C, dtype):
    g, _, _, _ = build('hub700k', 'cuda')
    assert g.sched.num_slots > 0
    inp = make_inputs(model, g, 1, C, dtype, 'cuda', seed=39, scale=1e3)
    out, lse = check_against_reference(
        model,
        g,
        inp,
        dtype,
        fwd_tol=1e-4 if dtype == torch.float32 else None,
        bwd_tol=1e-3 if dtype == torch.float32 else None,
    )
    assert torch.isfinite(out).all() and torch.isfinite(lse[g.degree() > 0]).all()


@cuda
@pytest.mark.parametrize('model', MODELS)
def test_cuda_empty_graphs(model):
    for ns, nd in ((7, 5), (7, 0), (0, 4)):
        e = torch.empty(0, dtype=torch.long, device='cuda')
        g = CSRGraph.from_coo(e, e, ns, nd)
        for dtype in DTYPES:
            inp = make_inputs(model, g, 2, 8, dtype, 'cuda', seed=40)
            go, gl = upstream(g, 2, 8, dtype, 'cuda')
            out, lse, gr = fwd_bwd(model, g, inp, go, gl)
            assert out.shape == (nd, 2, 8) and (out == 0).all() and torch.isneginf(lse).all()
            for k, v in gr.items():
                assert v.shape == inp[k].shape and (v == 0).all(), (ns, nd, dtype, k)


@cuda
@pytest.mark.parametrize('C', [8, 41, 200])
def test_cuda_noncontiguous_and_misaligned(C):
    g = cuda_graph('hub')
    ns, nd, E, H = g.num_cols, g.num_rows, g.num_edges, 2
    gen = _gen(41)

    def nc(*shape):  # a strided view: every other channel of a wider tensor
        return torch.randn(*shape[:-1], 2 * shape[-1], generator=gen).cuda()[..., ::2]

    def misaligned(*shape):  # contiguous, but 4 bytes past a 16-byte boundary
        n = 1
        for s in shape:
            n *= s
        buf = torch.randn(n + 1, generator=gen).cuda()
        t = buf[1:].view(*shape)
        assert t.is_contiguous() and t.data_ptr() % 16 != 0
        return t

    for make in (nc, misaligned):
        gat = {
            'x': make(ns, H, C),
            'a_src': torch.randn(H, ns).cuda().t(),
            'a_dst': torch.randn(nd, 2 * H).cuda()[:, ::2],
            'score': torch.randn(H, E).cuda().t(),
        }
        check_against_reference('gat', g, gat, torch.float32, what=f'gat {make.__name__}')
        v2 = {'x': make(ns, H, C), 'x_r': make(nd, H, C), 'att': torch.randn(C, H).cuda().t(), 'edge': make(E, H, C)}
        check_against_reference('gatv2', g, v2, torch.float32, what=f'gatv2 {make.__name__}')


@cuda
def test_cuda_wide_head_falls_back_to_reference():
    g = cuda_graph('hub')
    for model in MODELS:
        inp = make_inputs(model, g, 2, 600, torch.float32, 'cuda', seed=42)
        assert not attn._fits(inp['x'])
        check_against_reference(model, g, inp, torch.float32, what=f'{model} C600')
    inp = make_inputs('gat', g, 1, 600, torch.float16, 'cuda', seed=43)  # 1200 bytes: the kernel
    assert attn._fits(inp['x'])
    check_against_reference('gat', g, inp, torch.float16, what='gat fp16 C600')


@cuda
@pytest.mark.parametrize('dtype', DTYPES, ids=dtype_id)
def test_cuda_opcheck(dtype):
    pyg_tc.ops.ensure()
    g = cuda_graph('hub', 64)
    _opcheck_all(g, dtype, 'cuda', test_utils=('test_schema', 'test_faketensor', 'test_aot_dispatch_static'))


@cuda
def test_cuda_rng_on_cpu_and_fresh_rng():
    """An rng given on the CPU is moved; without one, a fresh one from the
    CUDA generator (reproducible under manual_seed)."""
    g = cuda_graph('random')
    inp = gat_inputs(g, 2, 8, torch.float32, 'cuda', seed=44)
    a, _ = call('gat', g, inp, dropout=0.5, rng=torch.tensor([1, 2]))
    b, _ = call('gat', g, inp, dropout=0.5, rng=torch.tensor([1, 2], device='cuda'))
    assert torch.equal(a, b)
    torch.manual_seed(0)
    c, _ = call('gat', g, inp, dropout=0.5)
    torch.manual_seed(0)
    d, _ = call('gat', g, inp, dropout=0.5)
    assert torch.equal(c, d)


def test_small_graph_schedules(monkeypatch):
    """Small graphs (the SpMM's cooperative size) get attention units of
    small_graph_chunk edges for both walks; larger ones keep the graph's."""
    g, _, _, _ = build('hub')
    c = attn.small_graph_chunk(g)
    assert 8 <= c <= 64 and c & (c - 1) == 0
    fwd, tr = attn.attention_schedules(g)
    for s, rowptr in ((fwd, g.rowptr), (tr, g.t_rowptr)):
        u = s.units.long()
        assert int((u[:, 2] - u[:, 1]).max()) <= c < g.chunk
        assert int((u[:, 2] - u[:, 1]).sum()) == g.num_edges
        assert s.num_slots > 0  # the hub is split and merged
    assert attn.attention_schedules(g)[0] is fwd  # memoised
    monkeypatch.setattr(attn, 'coop_units', lambda device: 0)  # a large graph: its own schedule
    assert attn.attention_schedules(g)[0] is g.sched
