"""CSRGraph construction, schedules, validation and movement."""

from __future__ import annotations

import copy

import pytest
import torch

from pyg_tc.formats import CSRGraph, Schedule, build_schedule
from pyg_tc.formats.csr import auto_chunk

from ..conftest import to_adj_t, DEVICES, GRAPH_KINDS, cuda_only, make_graph, random_graph, sizes

CHUNKS = [1, 4, 128, None]  # None: auto


def check_schedule_direct(s: Schedule, rowptr: torch.Tensor, chunk: int) -> None:
    """Every invariant of a schedule, checked from the unit table itself."""
    assert s.units.dtype == torch.int32 and s.units.is_contiguous()
    assert s.heavy_rows.dtype == torch.int32 and s.heavy_ptr.dtype == torch.int32
    rp = rowptr.long().cpu()
    R, E = rp.numel() - 1, int(rp[-1])
    deg = rp[1:] - rp[:-1]
    u = s.units.long().cpu().view(-1, 4)
    row, start, end, slot = u.unbind(1)
    # units lie inside their row and hold at most `chunk` edges
    assert bool(((row >= 0) & (row < R)).all())
    assert bool(((start >= rp[row]) & (end <= rp[row + 1]) & (start <= end)).all())
    assert bool(((end - start) <= chunk).all())
    # every edge in exactly one unit
    lens = end - start
    if E:
        edge = (
            torch.repeat_interleave(start, lens)
            + torch.arange(int(lens.sum()))
            - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
        )
        assert torch.equal(torch.bincount(edge, minlength=E), torch.ones(E, dtype=torch.long)), (
            'an edge is scheduled zero or several times'
        )
    # ceil(deg / chunk) units per row, at least one (isolated rows are written as 0)
    want = torch.clamp((deg + chunk - 1) // chunk, min=1)
    assert torch.equal(torch.bincount(row, minlength=R), want)
    # longest units first
    assert bool((lens[:-1] >= lens[1:]).all())
    # light rows: one direct unit; heavy rows: slots only
    heavy = deg > chunk
    assert bool((slot[~heavy[row]] == -1).all())
    assert bool((slot[heavy[row]] >= 0).all())
    assert torch.equal(s.heavy_rows.long().cpu(), heavy.nonzero().flatten())
    hp = s.heavy_ptr.long().cpu()
    assert hp.numel() == s.heavy_rows.numel() + 1 and int(hp[0]) == 0
    assert s.num_slots == int(hp[-1]) == int((slot >= 0).sum())
    # heavy row h owns slots heavy_ptr[h] .. heavy_ptr[h+1]-1, in edge order
    # (the second pass reduces them in slot order: deterministic)
    for h, r in enumerate(s.heavy_rows.long().cpu().tolist()):
        mine = row == r
        order = torch.argsort(start[mine])
        assert torch.equal(slot[mine][order], torch.arange(int(hp[h]), int(hp[h + 1])))


def check_csr_matches_coo(g: CSRGraph, ei: torch.Tensor, ns: int, nd: int) -> None:
    src, dst = ei[0].long().cpu(), ei[1].long().cpu()
    E = src.numel()
    assert g.num_rows == nd and g.num_cols == ns and g.num_edges == E
    for t in (g.rowptr, g.col, g.perm, g.t_rowptr, g.t_col, g.t_perm):
        assert t is None or (t.dtype == torch.int32 and t.is_contiguous())
    assert g.rowptr.numel() == nd + 1 and g.t_rowptr.numel() == ns + 1
    # perm is None exactly when the edges already are in CSR (target) order
    in_order = bool((dst[:-1] <= dst[1:]).all())
    assert (g.perm is None) == in_order
    perm = torch.arange(E) if g.perm is None else g.perm.long().cpu()
    assert torch.equal(torch.sort(perm)[0], torch.arange(E))
    assert torch.equal(g.col.long().cpu(), src[perm])
    assert torch.equal(g.row().cpu(), dst[perm])
    assert torch.equal(g.degree().cpu(), torch.bincount(dst, minlength=nd))
    # rows sorted; edges of one row keep their original relative order
    rows = dst[perm]
    assert bool((rows[:-1] <= rows[1:]).all())
    same = rows[:-1] == rows[1:]
    assert bool((perm[:-1][same] < perm[1:][same]).all())
    # transpose: rows = sources, t_perm maps to forward CSR positions
    tp = g.t_perm.long().cpu()
    assert torch.equal(torch.sort(tp)[0], torch.arange(E))
    t_rows = torch.repeat_interleave(torch.arange(ns), (g.t_rowptr[1:] - g.t_rowptr[:-1]).long().cpu())
    assert torch.equal(t_rows, src[perm][tp])
    assert torch.equal(g.t_col.long().cpu(), dst[perm][tp])
    assert bool((t_rows[:-1] <= t_rows[1:]).all())


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('chunk', CHUNKS, ids=lambda c: f'chunk{c}')
@pytest.mark.parametrize('presorted', [False, True], ids=['any_order', 'target_order'])
@pytest.mark.parametrize('kind', GRAPH_KINDS)
def test_from_coo_invariants(kind, chunk, device, presorted):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    if presorted:  # NeighborLoader's batches: sorted by target, no sort needed (perm None)
        ei = ei[:, torch.sort(ei[1], stable=True)[1]]
    g = CSRGraph.from_coo(ei[0], ei[1], ns, nd, chunk=chunk)
    assert g.validate() is g
    assert g.device == ei.device
    c = auto_chunk(ei.size(1), nd) if chunk is None else chunk
    assert g.chunk == c
    check_csr_matches_coo(g, ei, ns, nd)
    check_schedule_direct(g.sched, g.rowptr, c)
    check_schedule_direct(g.t_sched, g.t_rowptr, c)
    if kind == 'hub':
        # the hub row is split over many units, reduced by the second pass
        assert 0 in g.sched.heavy_rows.tolist()
        assert int((g.sched.units[:, 0] == 0).sum()) == -(-5003 // c)


@pytest.mark.parametrize('device', DEVICES)
def test_from_coo_int32(device):
    ei, n = make_graph('duplicates', device)
    a = CSRGraph.from_coo(ei[0], ei[1], n, n, chunk=4)
    b = CSRGraph.from_coo(ei[0].int(), ei[1].int(), n, n, chunk=4)
    for name in ('rowptr', 'col', 'perm', 't_rowptr', 't_col', 't_perm'):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert torch.equal(a.sched.units, b.sched.units)


@pytest.mark.filterwarnings('ignore::UserWarning')
@pytest.mark.parametrize('device', DEVICES)
def test_from_csr(device):
    ei, n = make_graph('hub', device)
    adj_t = to_adj_t(ei, n)
    g = CSRGraph.from_csr(adj_t.crow_indices(), adj_t.col_indices(), n, chunk=16).validate()
    assert g.perm is None
    assert torch.equal(g.rowptr.long(), adj_t.crow_indices().long())
    assert torch.equal(g.col.long(), adj_t.col_indices().long())
    check_schedule_direct(g.sched, g.rowptr, 16)
    check_schedule_direct(g.t_sched, g.t_rowptr, 16)
    with pytest.raises(IndexError, match='out of range'):
        CSRGraph.from_csr(adj_t.crow_indices(), adj_t.col_indices(), n - 1)


@pytest.mark.parametrize('chunk', [1, 3, 128])
def test_build_schedule_edge_cases(chunk):
    # zero rows, only empty rows, a row of exactly chunk and chunk + 1 edges
    check_schedule_direct(
        build_schedule(torch.zeros(1, dtype=torch.int32), chunk), torch.zeros(1, dtype=torch.int32), chunk
    )
    rp = torch.zeros(6, dtype=torch.int32)
    check_schedule_direct(build_schedule(rp, chunk), rp, chunk)
    rp = torch.tensor([0, chunk, chunk, 2 * chunk + 1, 2 * chunk + 1 + 5 * chunk], dtype=torch.int32)
    s = build_schedule(rp, chunk)
    check_schedule_direct(s, rp, chunk)
    assert s.units.size(0) == 1 + 1 + 2 + 5
    with pytest.raises(ValueError, match='chunk'):
        build_schedule(rp, 0)


def test_auto_chunk():
    # large graphs (many rows): grows with E, power of two in [128, 1024]
    values = [auto_chunk(e, 10**6) for e in (0, 1, 10_000, 2**20, 2**23, 2**26, 2**31 - 1)]
    for c in values:
        assert 128 <= c <= 1024 and c & (c - 1) == 0
    assert values == sorted(values) and values[0] == 128 and values[-1] == 1024
    # small graphs (cooperative kernel mode): 256
    assert auto_chunk(1_038_000, 11_758) == 256 and auto_chunk(10_556, 2_708) == 256
    assert auto_chunk(2_100_000, 169_343) == 128


@cuda_only
@pytest.mark.parametrize('chunk', [4, 128])
@pytest.mark.parametrize('kind', GRAPH_KINDS)
def test_build_cpu_equals_cuda(kind, chunk):
    ei, n = make_graph(kind)
    ns, nd = sizes(n)
    cpu = CSRGraph.from_coo(ei[0], ei[1], ns, nd, chunk=chunk)
    gpu = CSRGraph.from_coo(ei[0].cuda(), ei[1].cuda(), ns, nd, chunk=chunk)
    assert gpu.device.type == 'cuda'
    gpu.validate()
    assert (cpu.perm is None) == (gpu.perm is None)  # None: the edges were in target order
    for name in ('rowptr', 'col', 'perm', 't_rowptr', 't_col', 't_perm'):
        if getattr(cpu, name) is not None:
            assert torch.equal(getattr(cpu, name), getattr(gpu, name).cpu()), name
    for a, b in ((cpu.sched, gpu.sched), (cpu.t_sched, gpu.t_sched)):
        assert torch.equal(a.units, b.units.cpu())
        assert torch.equal(a.heavy_rows, b.heavy_rows.cpu())
        assert torch.equal(a.heavy_ptr, b.heavy_ptr.cpu())
        assert a.num_slots == b.num_slots
        assert torch.equal(
            build_schedule(cpu.rowptr, chunk).units, build_schedule(cpu.rowptr.cuda(), chunk).units.cpu()
        )


def test_from_coo_errors():
    src = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match='equal length'):
        CSRGraph.from_coo(src, src[:2], 3, 3)
    with pytest.raises(TypeError, match='int32 or int64'):
        CSRGraph.from_coo(src.float(), src.float(), 3, 3)
    with pytest.raises(IndexError, match='out of range'):
        CSRGraph.from_coo(src, src, 2, 3)
    with pytest.raises(IndexError, match='out of range'):
        CSRGraph.from_coo(src, src - 1, 3, 3)


# ---------------------------------------------------------------------------
# validate() catches corrupted metadata


def _tamper_graph() -> CSRGraph:
    """30 nodes: a heavy row (0, 40 in-edges), a second heavy row (1, 9),
    light rows and an isolated node (29); chunk 4."""
    ei = random_graph(29, 29, 80, seed=51)
    g_ = torch.Generator().manual_seed(52)
    heavy = torch.stack([torch.randint(0, 29, (49,), generator=g_), torch.tensor([0] * 40 + [1] * 9)])
    ei = torch.cat([ei, heavy], 1)
    g = CSRGraph.from_coo(ei[0], ei[1], 30, 30, chunk=4).validate()
    assert g.sched.heavy_rows.numel() >= 2 and int(g.degree()[29]) == 0
    return g


def _units(g, f, transpose=False):
    s = g.t_sched if transpose else g.sched
    s = s._replace(units=f(s.units.clone()).contiguous())
    return g.replace(**{'t_sched' if transpose else 'sched': s})


def _first(units, cond):
    return int(cond(units).nonzero()[0])


def _slot_collision(g):
    u = g.sched.units
    heavy = (u[:, 3] >= 0).nonzero().flatten()
    u[heavy[1], 3] = u[heavy[0], 3]


def _light_gets_slot(g):
    u = g.sched.units
    u[_first(u, lambda u: (u[:, 3] < 0) & (u[:, 2] > u[:, 1])), 3] = 0


def _heavy_unit_direct(g):
    u = g.sched.units
    u[_first(u, lambda u: u[:, 3] >= 0), 3] = -1


def _unit_outside_row(g):
    u = g.sched.units
    rp = g.rowptr
    k = _first(u, lambda u: (u[:, 2] == rp[u[:, 0].long() + 1]) & (u[:, 0] < g.num_rows - 2))
    u[k, 2] += 1


def _unit_start_after_end(g):
    u = g.sched.units
    k = _first(u, lambda u: u[:, 2] - u[:, 1] >= 2)
    u[k, 1], u[k, 2] = u[k, 2].clone(), u[k, 1].clone()


def _swap_heavy_rows(g):
    hr = g.sched.heavy_rows
    hr[0], hr[1] = hr[1].clone(), hr[0].clone()


def _swap_t_perm(g):
    tp = g.t_perm
    # two transpose positions whose forward edges differ in (row, col)
    rows, cols = g.row(), g.col.long()
    a = 0
    b = next(i for i in range(1, g.num_edges) if (rows[tp[i]], cols[tp[i]]) != (rows[tp[a]], cols[tp[a]]))
    tp[a], tp[b] = tp[b].clone(), tp[a].clone()


def _drop_transpose_unit(g):
    return _units(g, lambda u: u[1:], transpose=True)


TAMPER = {
    'drop_unit': lambda g: _units(g, lambda u: u[1:]),
    'drop_empty_unit': lambda g: _units(g, lambda u: u[u[:, 0] != 29]),
    'duplicate_unit': lambda g: _units(g, lambda u: torch.cat([u, u[-3:-2]])),
    'duplicate_heavy_unit': lambda g: _units(g, lambda u: torch.cat([u, u[:1]])),
    'slot_collision': _slot_collision,
    'light_unit_gets_slot': _light_gets_slot,
    'heavy_unit_written_directly': _heavy_unit_direct,
    'unit_outside_row': _unit_outside_row,
    'unit_start_after_end': _unit_start_after_end,
    'unit_row_out_of_range': lambda g: g.sched.units.__setitem__((0, 0), g.num_rows),
    'heavy_ptr_mid': lambda g: g.sched.heavy_ptr.__setitem__(1, g.sched.heavy_ptr[1] + 1),
    'heavy_ptr_end': lambda g: g.sched.heavy_ptr.__setitem__(-1, g.sched.heavy_ptr[-1] + 1),
    'heavy_rows_swapped': _swap_heavy_rows,
    'num_slots_wrong': lambda g: g.replace(sched=g.sched._replace(num_slots=g.sched.num_slots + 1)),
    'col_out_of_range': lambda g: g.col.__setitem__(0, g.num_cols),
    'col_negative': lambda g: g.col.__setitem__(3, -1),
    'col_changed_in_range': lambda g: g.col.__setitem__(0, (g.col[0] + 1) % g.num_cols),
    'rowptr_not_monotone': lambda g: g.rowptr.__setitem__(5, g.rowptr[7] + 1),
    'rowptr_short_span': lambda g: g.rowptr.__setitem__(-1, g.rowptr[-1] - 1),
    'perm_not_permutation': lambda g: g.perm.__setitem__(0, g.perm[1]),
    't_perm_not_permutation': lambda g: g.t_perm.__setitem__(0, g.t_perm[1]),
    't_perm_swapped': _swap_t_perm,
    't_col_changed': lambda g: g.t_col.__setitem__(0, (g.t_col[0] + 1) % g.num_rows),
    'transpose_drop_unit': _drop_transpose_unit,
}


@pytest.mark.parametrize('case', list(TAMPER))
def test_validate_rejects_corruption(case):
    g = _tamper_graph()
    bad = copy.deepcopy(g)
    bad = TAMPER[case](bad) or bad  # (a tampered tensor in place, or a graph with a tampered schedule)
    with pytest.raises(ValueError, match='pyg_tc'):
        bad.validate()
    g.validate()  # the original is untouched


# ---------------------------------------------------------------------------
# transpose, to, stats


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('kind', ['random', 'hub', 'bipartite', 'empty', 'isolated'])
def test_transpose_round_trip(kind, device):
    ei, n = make_graph(kind, device)
    ns, nd = sizes(n)
    g = CSRGraph.from_coo(ei[0], ei[1], ns, nd, chunk=8)
    t = g.transpose().validate()
    assert (t.num_rows, t.num_cols, t.chunk) == (ns, nd, 8)
    assert t.perm is None
    assert torch.equal(t.rowptr, g.t_rowptr) and torch.equal(t.col, g.t_col)
    assert torch.equal(t.sched.units, g.t_sched.units)
    # the transpose of the transpose is the original
    tt = t.transpose().validate()
    for name in ('rowptr', 'col', 't_rowptr', 't_col', 't_perm'):
        assert torch.equal(getattr(tt, name), getattr(g, name)), name
    assert torch.equal(tt.sched.units, g.sched.units)
    assert (tt.num_rows, tt.num_cols) == (nd, ns)
    # t's edges are g's edges reversed: (row, col) of t position k equals
    # (col, row) of forward position t_perm[k]
    assert torch.equal(t.row(), g.col.long()[g.t_perm.long()])
    assert torch.equal(t.col.long(), g.row()[g.t_perm.long()])


@pytest.mark.parametrize('device', DEVICES)
def test_to_keeps_content(device):
    ei, n = make_graph('hub', 'cpu')
    g = CSRGraph.from_coo(ei[0], ei[1], n, n, chunk=32)
    moved = g.to(device)
    back = moved.to('cpu', non_blocking=False)
    assert moved.device.type == device
    for h in (moved, back):
        h.validate()
        assert (h.num_rows, h.num_cols, h.chunk, h.num_edges) == (n, n, 32, g.num_edges)
        for name in ('rowptr', 'col', 'perm', 't_rowptr', 't_col', 't_perm'):
            assert torch.equal(getattr(h, name).cpu(), getattr(g, name)), name
        for a, b in ((h.sched, g.sched), (h.t_sched, g.t_sched)):
            assert a.units.device == h.device and a.heavy_rows.device == h.device
            assert torch.equal(a.units.cpu(), b.units)
            assert torch.equal(a.heavy_rows.cpu(), b.heavy_rows)
            assert torch.equal(a.heavy_ptr.cpu(), b.heavy_ptr)
            assert a.num_slots == b.num_slots
    assert back.perm is not None
    csr = CSRGraph.from_csr(g.rowptr, g.col, n, chunk=32)
    assert csr.to(device).perm is None


def test_a_graph_is_an_immutable_value_with_a_cache_beside_it():
    ei, n = make_graph('hub', 'cpu')
    g = CSRGraph.from_coo(ei[0], ei[1], n, n, chunk=32)
    for name, value in (('sched', g.t_sched), ('chunk', 4), ('sgt', None), ('anything', 1)):
        with pytest.raises(AttributeError, match='immutable'):
            setattr(g, name, value)
    with pytest.raises(AttributeError, match='immutable'):
        del g.perm
    assert g.cache.max_degree is None
    deg = g.max_degree()
    assert g.cache.max_degree == deg == int(g.degree().max())
    keys = g.cache.keys()
    norm = g.cache.memo(('norm', 1), lambda: torch.ones(3))
    assert g.cache.memo(('norm', 1), lambda: torch.zeros(3)) is norm  # made once
    assert g.cache.get(('norm', 2)) is None
    g.cache.notices.add('fp16_sum')
    g.cache.drop(keep=keys)  # what was made after `keys` goes; what was there stays
    assert g.cache.get(('norm', 1)) is None and g.cache.max_degree == deg and not g.cache.notices
    g.cache.drop()
    assert g.cache.max_degree is None and g.cache.keys() == frozenset()
    # another graph from this one: fields replaced, the others shared, its own empty cache
    g.max_degree()
    h = g.replace(chunk=8)
    assert h.chunk == 8 and h.col is g.col and h.sched is g.sched and h.cache is not g.cache
    assert h.cache.max_degree is None
    with pytest.raises(TypeError, match='unknown fields'):
        g.replace(sgt=None)
    # a copy is the same graph with its cache; a move is a graph on another device whose cache
    # starts empty (a static batch's buffers are moved once and then hold every batch's graph)
    c = copy.deepcopy(g)
    assert torch.equal(c.col, g.col) and c.cache.max_degree == deg
    moved = g.to('cpu')
    assert moved.cache.max_degree is None and moved.sampled_hops == g.sampled_hops


@pytest.mark.parametrize('kind', ['hub', 'empty', 'bipartite'])
def test_stats(kind):
    ei, n = make_graph(kind)
    ns, nd = sizes(n)
    g = CSRGraph.from_coo(ei[0], ei[1], ns, nd, chunk=64)
    st = g.stats()
    assert set(st) == {'rows', 'cols', 'edges', 'units', 'heavy_rows', 'slots', 'max_degree'}
    deg = torch.bincount(ei[1], minlength=nd)
    assert st['rows'] == nd and st['cols'] == ns and st['edges'] == ei.size(1)
    assert st['units'] == int(torch.clamp((deg + 63) // 64, min=1).sum())
    assert st['heavy_rows'] == int((deg > 64).sum())
    assert st['slots'] == int(torch.where(deg > 64, (deg + 63) // 64, 0).sum())
    assert st['max_degree'] == (int(deg.max()) if deg.numel() else 0)
    assert 'CSRGraph(' in repr(g)


def test_cora_format(cora):
    ei = cora.edge_index
    g = CSRGraph.from_coo(ei[0], ei[1], cora.num_nodes, cora.num_nodes).validate()
    check_csr_matches_coo(g, ei, cora.num_nodes, cora.num_nodes)
    check_schedule_direct(g.sched, g.rowptr, g.chunk)
    check_schedule_direct(g.t_sched, g.t_rowptr, g.chunk)
    assert g.stats()['max_degree'] == 168


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('num_edges', [0, 1, 700])
def test_transpose_with_long_runs_of_empty_columns(device, num_edges):
    """``transpose`` (the ``csr_transpose`` kernel on CUDA) equals the
    pure-PyTorch builder when most columns have no edge: runs of 10^5 empty
    columns before, between and after the used ones (a batch's sources
    that one edge type does not read)."""
    from pyg_tc.formats.csr import transpose, transpose_torch

    g = torch.Generator().manual_seed(0)
    C = 300_000
    used = torch.tensor([0, 5, 150_000, 150_001, 199_999])
    col = used[torch.randint(0, used.numel(), (num_edges,), generator=g)].to(torch.int32)
    rows = torch.randint(0, 50, (num_edges,), generator=g).sort().values.to(torch.int32)
    got = transpose(col.to(device), rows.to(device), C)
    want = transpose_torch(col, rows, C)
    for a, b in zip(got, want):
        assert torch.equal(a.cpu(), b)
