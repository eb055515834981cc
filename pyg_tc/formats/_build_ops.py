"""The format builders' GPU ops, defined below the rest of ``formats`` (this
module imports only :mod:`pyg_tc._library`), so :mod:`pyg_tc.formats.csr`
calls them directly and ``formats`` never reaches the op packages above it:

* ``sort_int32(keys, end_bit) -> (values, perm)``: stable sort of
  non-negative int32 keys below ``2**end_bit``, with an int32 permutation
  (the radix sort of ``kernels/sort/``: about half the memory of
  ``torch.sort``, which returns int64 indices);
* ``csr_transpose(col, rows, num_cols) -> (t_rowptr, t_col, t_perm)``: the
  transpose of a CSR given the source (``col``) and target (``rows``) of
  every CSR position, sources sorted stably (``kernels/csr/csr_build.cu``);
* ``csr_schedules(rowptrs, chunk) -> [units, heavy_rows, heavy_ptr] * n +
  [slots]``: the degree-bucket schedule of each ``rowptr``
  (:class:`~pyg_tc.formats.csr.Schedule`), with one synchronisation in all
  (``kernels/csr/csr_build.cu``).

The references of the last two are the pure-PyTorch builders of
:mod:`pyg_tc.formats.csr` (imported when a reference runs: ``csr`` imports
this module).
"""
from __future__ import annotations

from typing import List

import torch
from torch import Tensor

from .._library import Op


def sort_reference(keys: Tensor):
    """``torch.sort`` (stable), permutation as int32."""
    values, perm = torch.sort(keys, stable=True)
    return values, perm.to(torch.int32)


def transpose_reference(col: Tensor, rows: Tensor, num_cols: int):
    """:func:`pyg_tc.formats.csr.transpose_torch`."""
    from .csr import transpose_torch
    return transpose_torch(col, rows, num_cols)


def schedules_reference(rowptrs: List[Tensor], chunk: int) -> List[Tensor]:
    """:func:`pyg_tc.formats.csr.build_schedules_torch`, flattened."""
    from .csr import build_schedules_torch
    out: List[Tensor] = []
    scheds = build_schedules_torch(rowptrs, chunk)
    for s in scheds:
        out += [s.units, s.heavy_rows, s.heavy_ptr]
    return out + [torch.tensor([s.num_slots for s in scheds], dtype=torch.long)]


def _schedules_fake(a):
    ctx = torch.library.get_ctx()
    out = []
    for rp in a.rowptrs:
        u, h = ctx.new_dynamic_size(), ctx.new_dynamic_size()
        out += [rp.new_empty(u, 4), rp.new_empty(h), rp.new_empty(h + 1)]
    return out + [torch.empty(len(a.rowptrs), dtype=torch.long)]


sort_int32 = Op(
    'sort_int32(Tensor keys, int end_bit) -> (Tensor values, Tensor perm)',
    reference=sort_reference,
    fake=lambda a: (a.keys.new_empty(a.keys.shape), a.keys.new_empty(a.keys.shape)))

csr_transpose = Op(
    'csr_transpose(Tensor col, Tensor rows, int num_cols) -> (Tensor t_rowptr, Tensor t_col, Tensor t_perm)',
    reference=transpose_reference,
    fake=lambda a: (a.col.new_empty(a.num_cols + 1), a.col.new_empty(a.col.shape), a.col.new_empty(a.col.shape)))

csr_schedules = Op('csr_schedules(Tensor[] rowptrs, int chunk) -> Tensor[]',
                   reference=schedules_reference, fake=_schedules_fake)
