"""``sort_int32(keys, end_bit)``: stable sort of non-negative int32 keys below
``2**end_bit``, as (sorted keys, int32 permutation): the radix sort the
format builders use on the GPU (about half the memory of ``torch.sort``,
which returns int64 indices). Kernel: ``kernels/sort/``. Caller:
:func:`pyg_tc.formats.csr.sort_int32`.

The op is defined in :mod:`pyg_tc.formats.csr`, beside its reference (the
formats sit below the ops and call it directly, never importing this
package); this module names it among the op families."""

from __future__ import annotations

from ..formats.csr import sort_int32_op as sort_int32, sort_reference  # noqa: F401
