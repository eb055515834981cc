"""``sort_int32(keys, end_bit)``: stable sort of non-negative int32 keys below
``2**end_bit``, as (sorted keys, int32 permutation): the radix sort the
format builders use on the GPU (about half the memory of ``torch.sort``,
which returns int64 indices). Kernel: ``kernels/sort/``. Caller:
:func:`pyg_tc.formats.csr.sort_int32`.

The op is defined in ``pyg_tc.formats._build_ops`` (below the formats, which
call it directly and never import this package); this module names it among
the op families."""
from __future__ import annotations

from ..formats._build_ops import sort_int32, sort_reference  # noqa: F401
