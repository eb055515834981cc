"""``sort_int32(keys, end_bit)``: stable sort of non-negative int32 keys below
``2**end_bit``, as (sorted keys, int32 permutation): the radix sort the
format builders use on the GPU (about half the memory of ``torch.sort``,
which returns int64 indices). Kernel: ``kernels/sort/``. Callers:
:func:`pyg_tc.formats.csr.sort_int32` (through the private ``pyg_tc._library.op``,
so the formats do not import this package)."""
from __future__ import annotations

import torch
from torch import Tensor

from .._library import Op


def sort_reference(keys: Tensor):
    """``torch.sort`` (stable), permutation as int32."""
    values, perm = torch.sort(keys, stable=True)
    return values, perm.to(torch.int32)


sort_int32 = Op(
    'sort_int32(Tensor keys, int end_bit) -> (Tensor values, Tensor perm)',
    reference=sort_reference,
    fake=lambda a: (a.keys.new_empty(a.keys.shape), a.keys.new_empty(a.keys.shape)))
