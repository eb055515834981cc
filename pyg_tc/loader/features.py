"""Node features stored in half precision or fp8 for the GPU loaders
(``NeighborLoader(..., feature_storage=...)``): a sampled batch's bytes are
mostly its features, so storing them narrower halves (or quarters) what
every batch moves over HBM or PCIe.

* ``torch.bfloat16`` / ``torch.float16``: the features are stored and
  gathered in that dtype, and the batch's ``x`` has it (train under
  ``torch.autocast`` of the same dtype). Each value is rounded once, to
  nearest.
* ``torch.float8_e4m3fn``: the features are stored as fp8 (e4m3: 3
  mantissa bits, largest 448) with one power-of-two scale per column (or
  one for the matrix, ``scale='tensor'``), and gathered by a kernel that
  upcasts each row to ``compute_dtype`` (bfloat16 by default) on the way.
  The scale is the power of two that brings the column's largest magnitude
  to at most 448, so the stored value ``q`` times the scale is exact in
  bfloat16 (and fp32; in float16 where it lies in its range): the batch
  holds exactly what was stored. What storing costs is the rounding to
  fp8: with ``s`` the column's scale (its largest magnitude lies in
  ``(224 s, 448 s]``), relative error at most 2^-4 (6.25%) for magnitudes
  of at least ``2^-6 s``, an absolute error of at most ``2^-10 s`` below
  (e4m3's subnormals), so magnitudes under ``2^-10 s`` become zero.

Memory: the converted copy is made once per attribute (by default on the
GPU for features there, else in pinned host memory read over UVA;
``FeatureStorage(memory=...)`` picks) and held by the loader, its rows
padded to a multiple of 16 bytes on the GPU (the gather reads whole 16-byte
words; a 100-wide bf16 row: 104 values) and of 64 bytes in pinned host
memory (PCIe reads whole 64-byte pieces; a 100-wide bf16 row: 128 values),
converted a slice of rows at a time (no full-size temporary). To hold the
features on the GPU in half only, keep the fp32 ``data.x`` in host memory
and store with ``FeatureStorage(torch.bfloat16, memory='device')``, or
store ``data.x`` in half yourself (``data.x = data.x.bfloat16()``; gathered
as stored, rows unpadded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..ops import neighbor as ops

#: e4m3's largest finite magnitude
FP8_MAX = 448.0
#: the row alignment (bytes) of :func:`padded_rows`: on the GPU (the gather's 16-byte loads)
#: and in pinned host memory (the 64-byte pieces PCIe reads: a row that straddles fewer of
#: them moves fewer bytes)
ROW_ALIGN, PINNED_ROW_ALIGN = 16, 64
HALVES = (torch.float16, torch.bfloat16)
#: ``FeatureStorage(memory=...)``'s choices
MEMORY = ('auto', 'device', 'pinned')


def quantize_fp8(x: Tensor, scale: str = 'column') -> Tuple[Tensor, Tensor]:
    """``(q, s)``: ``x`` (2-D, floating) as e4m3 values ``q`` and fp32
    power-of-two scales ``s`` (``[F]`` per column, ``[1]`` per tensor) with
    ``q * s`` the rounded ``x``: ``s`` is the smallest power of two with
    ``max |x| / s <= 448`` (1 for an all-zero column), ``q = fp8(x / s)``
    rounded to nearest.

    Args:
        x (torch.Tensor): the features (2-D, floating, finite).
        scale (str, optional): ``'column'`` (default) or ``'tensor'``.

    Shapes:
        - **input:** x :math:`(N, F)`
        - **output:** q :math:`(N, F)` ``float8_e4m3fn``, s :math:`(F,)` or
          :math:`(1,)` fp32

    Raises:
        ValueError: ``x`` is not a 2-D floating tensor, holds inf or NaN, or
            ``scale`` is neither ``'column'`` nor ``'tensor'``.
    """
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f'pyg_tc: quantize_fp8: x must be a 2-D floating tensor, got {x.dtype} {tuple(x.shape)}')
    if scale not in ('column', 'tensor'):
        raise ValueError(f"pyg_tc: quantize_fp8: scale must be 'column' or 'tensor', got {scale!r}")
    xf = x.float()
    if x.numel() == 0:  # (amax has no identity over nothing: scales of 1)
        amax = xf.new_zeros(x.size(1) if scale == 'column' else 1)
    else:
        amax = xf.abs().amax(dim=0) if scale == 'column' else xf.abs().amax().reshape(1)
    if not bool(torch.isfinite(amax).all()):
        raise ValueError('pyg_tc: quantize_fp8: x holds inf or NaN; fp8 features need finite values')
    exp = torch.ceil(torch.log2(amax / FP8_MAX)).clamp(-126, 127)
    s = torch.where(amax > 0, torch.exp2(exp), torch.ones_like(amax))
    # (a power-of-two s: x / s is exact; the one rounding is to fp8)
    return (xf / s).to(ops.FP8), s.contiguous()


@dataclass(frozen=True)
class FeatureStorage:
    """How the GPU loaders store and gather floating node features.

    Args:
        dtype (torch.dtype): ``torch.bfloat16``, ``torch.float16`` or
            ``torch.float8_e4m3fn``.
        compute_dtype (torch.dtype, optional): the batch's dtype for fp8
            storage (``torch.bfloat16`` default, ``torch.float16`` or
            ``torch.float32``); for half storage it is ``dtype``.
        scale (str, optional): fp8 scales per ``'column'`` (default) or one
            per ``'tensor'``.
        attrs (Sequence[str], optional): the node attributes stored so
            (default ``('x',)``; each must be a 2-D floating tensor).
        memory (str, optional): where a GPU loader keeps the converted copy:
            ``'auto'`` (default: on the GPU for an attribute there, else in
            pinned host memory read over UVA), ``'device'`` (on the loader's
            GPU, also for an attribute in host memory: keep the fp32
            original on the host and only the half copy on the GPU) or
            ``'pinned'`` (pinned host memory). A CPU loader keeps it on the
            CPU.

    ``NeighborLoader(data, ..., feature_storage=torch.bfloat16)`` is
    ``feature_storage=FeatureStorage(torch.bfloat16)``.

    Shapes:
        - **input:** a stored attribute :math:`(N, F)`, floating
        - **output:** a batch's rows of it :math:`(B, F)` in :attr:`batch_dtype`
    """

    dtype: torch.dtype
    compute_dtype: Optional[torch.dtype] = None
    scale: str = 'column'
    attrs: Sequence[str] = ('x',)
    memory: str = 'auto'

    def __post_init__(self) -> None:
        if self.dtype not in HALVES + (ops.FP8,):
            raise ValueError(
                f'pyg_tc: FeatureStorage: dtype must be torch.bfloat16, torch.float16 or {ops.FP8}, got {self.dtype}'
            )
        if self.dtype == ops.FP8:
            if self.compute_dtype is not None and self.compute_dtype not in ops.UPCAST:
                raise ValueError(
                    f'pyg_tc: FeatureStorage: compute_dtype must be one of {ops.UPCAST}, got {self.compute_dtype}'
                )
        elif self.compute_dtype not in (None, self.dtype):
            raise ValueError(
                f'pyg_tc: FeatureStorage: half features are gathered in their dtype ({self.dtype}); '
                f'compute_dtype={self.compute_dtype} applies to fp8 storage only'
            )
        if self.scale not in ('column', 'tensor'):
            raise ValueError(f"pyg_tc: FeatureStorage: scale must be 'column' or 'tensor', got {self.scale!r}")
        if self.memory not in MEMORY:
            raise ValueError(f'pyg_tc: FeatureStorage: memory must be one of {MEMORY}, got {self.memory!r}')
        object.__setattr__(self, 'attrs', tuple(self.attrs))

    @property
    def batch_dtype(self) -> torch.dtype:
        """The dtype of the batch's stored attributes."""
        if self.dtype == ops.FP8:
            return self.compute_dtype or torch.bfloat16
        return self.dtype

    def store(self, key: str, value: Tensor, pin: bool, device: torch.device) -> Any:
        """What the loader keeps for attribute ``key``: a half tensor, or an
        ``(fp8 values, scales on device)`` pair; the values on ``device``, or
        with ``pin`` in pinned host memory."""
        if not isinstance(value, Tensor) or value.dim() != 2 or not value.is_floating_point():
            got = f'{value.dtype} {tuple(value.shape)}' if isinstance(value, Tensor) else type(value).__name__
            where = key if key.startswith('[') else f'.{key}'
            raise ValueError(
                f'pyg_tc.loader: feature_storage stores 2-D floating node attributes; data{where} is {got}'
            )
        if self.dtype == ops.FP8:
            q, s = quantize_fp8(value, self.scale)
            return (q.cpu().pin_memory() if pin else q.to(device), s.to(device))
        return padded_rows(value, pin, self.dtype, device)

    def pinned(self, value: Tensor, device: torch.device) -> bool:
        """Whether :meth:`store` keeps attribute ``value`` of a loader
        sampling on ``device`` in pinned host memory (else on ``device``;
        see ``memory``)."""
        if device.type != 'cuda' or self.memory == 'device':
            return False
        return self.memory == 'pinned' or not value.is_cuda

    def gather(self, stored: Any, index: Tensor) -> Tensor:
        """The rows ``index`` of what :meth:`store` kept, on ``index``'s device."""
        if isinstance(stored, tuple):
            q, s = stored
            return ops.gather_rows_scaled(q, s, index, self.batch_dtype)
        return gather_from(stored, index)


def gather_from(src: Tensor, index: Tensor) -> Tensor:
    """The rows ``index`` of ``src`` on ``index``'s device: the gather
    kernel where ``src`` is on that device or pinned (contiguous, or rows at
    a pitch; another layout is copied first), else ``index_select`` where
    ``src`` lives and a copy."""
    if src.device == index.device or src.is_pinned():
        pitched = src.dim() == 2 and src.stride(1) == 1 and src.stride(0) >= src.size(1)
        return ops.gather_rows(src if pitched or src.is_contiguous() else src.contiguous(), index)
    return src.index_select(0, index.to(src.device)).to(index.device)


def padded_rows(
    x: Tensor, pin: bool = False, dtype: Optional[torch.dtype] = None, device: Optional[torch.device] = None
) -> Tensor:
    """``x`` (2-D) as a view of a matrix whose rows are padded with zeros to
    a multiple of ``ROW_ALIGN`` bytes (16), or in pinned host memory with
    ``pin``, of ``PINNED_ROW_ALIGN`` (64): the gather then reads whole
    16-byte words of every row, whatever its width, and over PCIe no row
    straddles more 64-byte pieces than it fills. ``dtype`` / ``device``
    (default ``x``'s; ``pin`` puts it in host memory): the copy's, converted
    in slices of rows, so no full-size temporary is made on either side."""
    dtype = x.dtype if dtype is None else dtype
    device = torch.device('cpu') if pin else (x.device if device is None else torch.device(device))
    F = x.size(1)
    pad = -F % max((PINNED_ROW_ALIGN if pin else ROW_ALIGN) // torch.empty((), dtype=dtype).element_size(), 1)
    if pad == 0 and dtype == x.dtype and x.device == device:
        x = x.contiguous()
        return x.pin_memory() if pin else x
    buf = torch.empty(x.size(0), F + pad, dtype=dtype, device=device, pin_memory=pin)
    if pad:
        buf[:, F:].zero_()
    step = max(1, _SLICE_BYTES // max(F * x.element_size(), 1))
    for i in range(0, x.size(0), step):
        buf[i : i + step, :F].copy_(x[i : i + step])
    return buf[:, :F]


#: the rows converted at a time by :func:`padded_rows` (bytes of the source)
_SLICE_BYTES = 64 << 20


def as_storage(value: Union[None, torch.dtype, FeatureStorage]) -> Optional[FeatureStorage]:
    """``feature_storage=`` as a :class:`FeatureStorage` (None: as stored)."""
    if value is None or isinstance(value, FeatureStorage):
        return value
    if isinstance(value, torch.dtype):
        return FeatureStorage(value)
    raise TypeError(
        f'pyg_tc.loader: feature_storage must be a torch.dtype or a FeatureStorage, got {type(value).__name__}'
    )
