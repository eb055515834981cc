"""The format builders' GPU ops (kernels: ``kernels/csr/csr_build.cu``):

* ``csr_transpose(col, rows, num_cols) -> (t_rowptr, t_col, t_perm)``: the
  transpose of a CSR given the source (``col``) and target (``rows``) of every
  CSR position, sources sorted stably;
* ``csr_schedules(rowptrs, chunk) -> [units, heavy_rows, heavy_ptr] * n +
  [slots]``: the degree-bucket schedule of each ``rowptr``
  (:class:`~pyg_tc.formats.csr.Schedule`), with one synchronisation in all.

Their references are the pure-PyTorch builders of :mod:`pyg_tc.formats.csr`
(which call these ops on CUDA tensors when the kernels are loaded, through
the private ``pyg_tc._library.op``, so the formats do not import this package).
"""
from __future__ import annotations

from typing import List

import torch
from torch import Tensor

from .._library import Op
from ..formats import csr as _csr


def transpose_reference(col: Tensor, rows: Tensor, num_cols: int):
    """:func:`pyg_tc.formats.csr.transpose_torch`."""
    return _csr.transpose_torch(col, rows, num_cols)


def schedules_reference(rowptrs: List[Tensor], chunk: int) -> List[Tensor]:
    """:func:`pyg_tc.formats.csr.build_schedules_torch`, flattened."""
    out: List[Tensor] = []
    scheds = _csr.build_schedules_torch(rowptrs, chunk)
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


csr_transpose = Op(
    'csr_transpose(Tensor col, Tensor rows, int num_cols) -> (Tensor t_rowptr, Tensor t_col, Tensor t_perm)',
    reference=transpose_reference,
    fake=lambda a: (a.col.new_empty(a.num_cols + 1), a.col.new_empty(a.col.shape), a.col.new_empty(a.col.shape)))

csr_schedules = Op('csr_schedules(Tensor[] rowptrs, int chunk) -> Tensor[]',
                   reference=schedules_reference, fake=_schedules_fake)
