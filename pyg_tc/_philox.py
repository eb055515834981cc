"""Philox 4x32-10 (Salmon et al., SC'11) on int64 tensors: the counter-based
generator that pyg_tc's kernels and their references share (attention
dropout, neighbour sampling), bit for bit. The device twin is
``kernels/common/philox.cuh``."""

from __future__ import annotations

from typing import Tuple

from torch import Tensor

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
U32 = 0xFFFFFFFF


def _mulhilo(a: Tensor, m: int) -> Tuple[Tensor, Tensor]:
    """(high, low) 32-bit words of ``a * m`` for uint32 values held in int64
    (split in 16-bit halves so no product overflows int64)."""
    lo16, hi16 = m & 0xFFFF, m >> 16
    p1 = a * lo16
    p2 = a * hi16
    hi = (p2 + (p1 >> 16)) >> 16
    lo = (((p2 & 0xFFFF) << 16) + p1) & U32
    return hi, lo


def philox4x32(
    c0: Tensor, c1: Tensor, c2: Tensor, c3: Tensor, k0: Tensor, k1: Tensor
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Philox 4x32-10 of counters ``(c0, c1, c2, c3)`` under key ``(k0, k1)``:
    uint32 words held in int64 tensors (broadcast), four output words."""
    for rnd in range(10):
        h0, l0 = _mulhilo(c0, _M0)
        h1, l1 = _mulhilo(c2, _M1)
        c0, c1, c2, c3 = h1 ^ c1 ^ k0, l1, h0 ^ c3 ^ k1, l0
        if rnd < 9:
            k0, k1 = (k0 + _W0) & U32, (k1 + _W1) & U32
    return c0, c1, c2, c3
