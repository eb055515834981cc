"""Half-precision weights with fp32 master copies (``CapturedStep(...,
half_weights=True)``): the model computes with half parameters, so under
autocast no weight is cast in the forward, a half layer's output (bias
included) stays half between layers, and GAT's attention vectors are read
in half; the optimizer keeps stepping the fp32 parameters it was built on,
with its fp32 state.

Each step: the half parameters' gradients are copied (upcast) into the fp32
masters' ``.grad``, the optimizer steps the masters, and the masters are
copied (rounded) into the half parameters, two ``_foreach_copy_`` calls.
Normalisation layers (batch / layer / group / instance norm) keep fp32
parameters, as autocast runs them in fp32.
"""

from __future__ import annotations

from typing import Dict, List

import torch

#: modules whose parameters stay fp32
NORMS = (
    torch.nn.modules.batchnorm._NormBase,
    torch.nn.LayerNorm,
    torch.nn.GroupNorm,
)


class HalfWeights:
    """Swaps ``model``'s floating parameters (outside normalisation layers) for
    ``dtype`` copies; the originals become the fp32 master weights (the
    optimizer's parameters, untouched). A parameter shared by several
    modules gets one half copy.

    Args:
        model (torch.nn.Module): the model, its parameters swapped in place.
        dtype (torch.dtype): ``torch.float16`` or ``torch.bfloat16``.

    Shapes:
        - **input / output:** the parameters keep their shapes; the half
          copies and the masters pair up in order (``halves``, ``masters``)
    """

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype):
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f'pyg_tc: half_weights needs autocast=torch.float16 or torch.bfloat16, got {dtype}')
        self.model, self.dtype = model, dtype
        halves: Dict[int, torch.nn.Parameter] = {}
        #: (module, name, fp32 master) per swapped slot
        self.slots: List[tuple] = []
        #: the half copies and their fp32 masters, in pairs (a shared parameter once)
        self.halves: List[torch.nn.Parameter] = []
        self.masters: List[torch.nn.Parameter] = []
        for mod in model.modules():
            if isinstance(mod, NORMS):
                continue
            for name, p in list(mod._parameters.items()):
                if p is None or not p.is_floating_point() or p.dtype in (torch.float16, torch.bfloat16):
                    continue
                h = halves.get(id(p))
                if h is None:
                    h = halves[id(p)] = torch.nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
                    self.halves.append(h)
                    self.masters.append(p)
                mod._parameters[name] = h
                self.slots.append((mod, name, p))

    def zero_grad(self) -> None:
        """Drops the half parameters' gradients (``.grad = None``)."""
        for h in self.halves:
            h.grad = None

    def grads_to_masters(self) -> None:
        """The half gradients, upcast, as the masters' ``.grad`` (None where none)."""
        for h, m in zip(self.halves, self.masters):
            m.grad = None if h.grad is None else h.grad.to(m.dtype)

    def masters_to_halves(self) -> None:
        """The masters rounded into the half parameters."""
        if self.halves:
            with torch.no_grad():
                torch._foreach_copy_(self.halves, self.masters)

    def restore(self) -> None:
        """Puts the fp32 masters back into the model (its parameters as before)."""
        for mod, name, p in self.slots:
            mod._parameters[name] = p
