"""Overrides of the kernels' measured launch rules, for tests and sweeps."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from .. import _kernels, _library


@contextlib.contextmanager
def kernel_overrides(**overrides: Any) -> Iterator[None]:
    """Run the block with some of the kernels' launch rules replaced, then
    restore the settings from before.

    The same settings are read once from the environment when the kernels
    load: ``PYG_TC_SPMM_CONFIG="8,2"``, ``PYG_TC_SPMM_COOP``,
    ``PYG_TC_SPMM_TWO_LEVEL``, ``PYG_TC_SDDMM_INFLIGHT`` (``0`` / ``1`` or
    the number). None for any argument restores the rule.

    Args:
        spmm_config: the csr SpMM's (lanes, 16-byte vectors per lane), lanes
            in 4, 8, 16, 32 and vectors in 1, 2.
        spmm_coop: the csr SpMM's cooperative mode forced on (True) or off.
        spmm_two_level: the half-precision two-level sum forced on or off.
        sddmm_inflight: the csr SDDMM's edges in flight per lane, 4 or 8.
        cbsr_pair: False turns off the CBSR SpMM's paired loads
            (``PYG_TC_CBSR_PAIR=0``).
        attn_nv4: the fused attention kernels' four 16-byte vectors per
            lane on (True) or off (False, where a head fits 32 lanes of one
            vector) (``PYG_TC_ATTN_NV4``).

    Raises:
        ValueError: an unknown name or an unsupported value.
        RuntimeError: the kernels are not loaded.

    Example::

        with kernel_overrides(spmm_config=(8, 2), spmm_coop=False):
            out = pyg_tc.ops.spmm(x, edge_index)
    """
    if not _library.ensure():
        raise RuntimeError(f'pyg_tc: the kernels are not loaded ({_kernels.status()["error"]})')
    before = _kernels.overrides()
    try:
        for name, value in overrides.items():
            _kernels.set_override(name, value)
        yield
    finally:
        for name in overrides:
            _kernels.set_override(name, before.get(name))
