"""Property tests (hypothesis): on any small graph, every schedule is valid
and the CPU emulation of the kernel's schedule, the op and an independent
oracle agree."""

import torch
from hypothesis import given, settings, strategies as st

from pyg_tc.formats import CSRGraph
from pyg_tc.formats.carrier import csr_order
from pyg_tc.testing import emulate_csr_spmm
from pyg_tc.ops import spmm

from ..conftest import spmm_oracle


@st.composite
def graphs(draw):
    num_src = draw(st.integers(1, 40))
    num_dst = draw(st.integers(1, 40))
    E = draw(st.integers(0, 300))
    src = draw(st.lists(st.integers(0, num_src - 1), min_size=E, max_size=E))
    dst = draw(st.lists(st.integers(0, num_dst - 1), min_size=E, max_size=E))
    if draw(st.booleans()) and E:  # a hub row
        hub = draw(st.integers(0, num_dst - 1))
        dst = [hub if i % 2 else d for i, d in enumerate(dst)]
    chunk = draw(st.sampled_from([1, 2, 3, 8, 256]))
    F = draw(st.integers(1, 9))
    reduce = draw(st.sampled_from(['sum', 'mean', 'max']))
    weighted = draw(st.booleans())
    return (torch.tensor([src, dst], dtype=torch.long).view(2, E), num_src, num_dst, chunk, F, reduce, weighted)


@settings(max_examples=60, deadline=None)
@given(graphs())
def test_schedule_emulation_and_op_agree_with_oracle(case):
    ei, ns, nd, chunk, F, reduce, weighted = case
    g = CSRGraph.from_coo(ei[0], ei[1], ns, nd, chunk=chunk).validate()
    torch.manual_seed(0)
    x = torch.randn(ns, F, dtype=torch.float64)
    w = torch.rand(ei.size(1), dtype=torch.float64) if weighted else None
    ref = spmm_oracle(x, ei, nd, w, reduce)
    w_csr = None if w is None else csr_order(w, g)
    emu = emulate_csr_spmm(g, x, w_csr, reduce)
    assert not torch.isnan(emu).any()  # every row written
    torch.testing.assert_close(emu, ref, rtol=1e-5, atol=1e-5)  # fp32 accumulation, as the kernel
    out = spmm(x, ei, w, reduce, size=(ns, nd))
    torch.testing.assert_close(out, ref)
