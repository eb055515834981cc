"""The op framework: every ``torch.ops.pyg_tc`` op is one :class:`Op`.

An op module (``pyg_tc/ops/<family>.py``) writes, side by side, its schema
(once: the CUDA side only registers implementations with
``TORCH_LIBRARY_IMPL``), its pure-PyTorch reference (the CPU implementation
and the test oracle), its fake kernel (``torch.compile`` / meta shapes) and
its autograd formula, and creates the op with :class:`Op`. The schema is
defined when the module is imported; the reference is registered for the
CPU then, and :func:`ensure` (first use, never at import) builds and loads
the CUDA kernels, or registers the reference for CUDA too where they are
unavailable. This module knows no op by name: :func:`ensure` loops over
:data:`OPS`.

Named arguments everywhere: the reference and the fake kernel receive the
schema's arguments by name (a reference declares only those it uses), and
an autograd formula reads saved inputs by name and returns its gradients as
a ``{argument name: gradient}`` dict::

    spmm_csr = Op(
        'spmm_csr(Tensor rowptr, Tensor col, Tensor? value, Tensor x, ...) -> Tensor',
        reference=reference,                       # reference(rowptr, col, value, x, diag, reduce)
        fake=lambda a: a.x.new_empty(a.rowptr.size(0) - 1, a.x.size(1)),
        backward=_backward)                        # _backward(a, needs, grad) -> {'x': ..., 'value': ...}

Layering: ``_kernels`` (build) < this module < ``formats`` < ``ops.dispatch``
< ``ops.<family>`` < ``nn``; nothing here imports another pyg_tc package at
import time (:func:`ensure` imports :mod:`pyg_tc.ops` when first called, so
every op is defined before the CUDA fallbacks are registered).
"""

from __future__ import annotations

import importlib
import inspect
import threading
from types import SimpleNamespace
from typing import Any, Callable, Dict, Optional, Sequence, Union

import torch

from . import _kernels

NAMESPACE = 'pyg_tc'
#: every op, by name, in definition order (filled by the op modules)
OPS: Dict[str, 'Op'] = {}
# The graph arguments of the schemas, each pack defined once and shared by
# the ops that take it (the C++ entry points take the same arguments in the
# same order; kernels/attn/attn_host.cpp spells GRAPH_ARGS as one macro):
#: a CSR's unit schedule: units, the heavy rows and their slot ranges, the slot count
SCHEDULE_ARGS = 'Tensor units, Tensor heavy_rows, Tensor heavy_ptr, int num_slots'
#: the transpose of a CSR with its schedule (the backward walks over the sources)
T_GRAPH_ARGS = (
    'Tensor t_rowptr, Tensor t_col, Tensor t_perm, Tensor t_units, Tensor t_heavy_rows, '
    'Tensor t_heavy_ptr, int t_num_slots'
)
#: a CSR, its schedule and its transpose (the attention ops)
GRAPH_ARGS = f'Tensor rowptr, Tensor col, {SCHEDULE_ARGS}, {T_GRAPH_ARGS}'
_STATE = {'ready': False, 'kernels': False}
_LOCK = threading.Lock()

Saved = Union[Sequence[str], Callable[[SimpleNamespace], Sequence[str]]]


class Op:
    """One registered op.

    Args:
        schema: the op's schema without namespace, e.g.
            ``'sort_int32(Tensor keys, int end_bit) -> (Tensor values, Tensor perm)'``.
        reference: pure-PyTorch implementation; its parameters are schema
            argument names (a subset, bound by name). Registered for the CPU,
            and for CUDA where the kernels are unavailable.
        fake: ``fake(a)`` with ``a`` the arguments by name (a namespace):
            empty outputs of the right shape, dtype and device.
        backward: ``backward(a, needs, *grads) -> {name: grad}``; ``a`` holds
            the non-tensor arguments and the saved tensors by name (the op's
            outputs under their return names, ``out`` for an unnamed single
            one), ``needs[name]`` says whether that input needs a gradient.
            Omitted: not differentiable.
        save: input / output names to save for the backward (default: every
            tensor input), or a function of ``a`` returning them.
        consts: ``consts(a) -> dict``: extra non-tensor values the backward
            reads from ``a`` (e.g. a shape of an input it does not save).
        materialize_grads: as ``ctx.set_materialize_grads`` (False: outputs
            without an incoming gradient pass None).
        namespace: the op library (``pyg_tc``; only its ops are in :data:`OPS`).
        reference_only: no CUDA kernel implements the op; its reference runs
            on every device (tests check the kernels register exactly the
            other ops).
    """

    def __init__(
        self,
        schema: str,
        *,
        reference: Callable,
        fake: Callable,
        backward: Optional[Callable] = None,
        save: Optional[Saved] = None,
        consts: Optional[Callable] = None,
        materialize_grads: bool = True,
        namespace: str = NAMESPACE,
        reference_only: bool = False,
    ):
        parsed = torch._C.parse_schema(f'{namespace}::{schema}')
        self.namespace = namespace
        self.name: str = parsed.name.split('::', 1)[1]
        if namespace == NAMESPACE and self.name in OPS:
            raise RuntimeError(f'pyg_tc: op {self.name} defined twice')
        self.schema = schema
        self.args = [a.name for a in parsed.arguments]
        self.tensors = [a.name for a in parsed.arguments if str(a.type) in ('Tensor', 'Optional[Tensor]')]
        rets = [r.name for r in parsed.returns]
        self.returns = rets if len(rets) > 1 else [rets[0] or 'out']
        self.reference = reference
        ref_args = list(inspect.signature(reference).parameters)
        unknown = set(ref_args) - set(self.args)
        if unknown:
            raise TypeError(f'pyg_tc: reference of {self.name} takes unknown arguments {sorted(unknown)}')
        self._ref_args = [(n, self.args.index(n)) for n in ref_args]
        self._fake, self._backward = fake, backward
        self._overload = None  # torch.ops.<namespace>.<name>.default, once the kernels are loaded
        #: whether CUDA runs a C++ kernel (set by :func:`ensure`; else the reference runs there)
        self.cuda_kernel = False
        #: declared: no kernel implements this op (its reference runs on every device)
        self.reference_only = bool(reference_only)
        self._save, self._consts = save, consts
        self._saved_names = tuple(self.tensors) if save is None or callable(save) else tuple(save)
        self._const_args = tuple(n for n in self.args if n not in self.tensors)
        self._materialize = materialize_grads
        self._lib = torch.library.Library(namespace, 'FRAGMENT')
        self._lib.define(schema)
        self._lib.impl(self.name, self._reference_impl, 'CPU')
        torch.library.register_fake(self.qualname, lib=self._lib)(self._fake_impl)
        if backward is not None:
            torch.library.register_autograd(
                self.qualname, self._backward_impl, setup_context=self._setup, lib=self._lib
            )
        if namespace == NAMESPACE:
            OPS[self.name] = self

    @property
    def qualname(self) -> str:
        return f'{self.namespace}::{self.name}'

    @property
    def overload(self):
        """``torch.ops.<namespace>.<name>.default``."""
        return getattr(getattr(torch.ops, self.namespace), self.name).default

    def __call__(self, *args: Any, differentiable: Optional[Sequence[Any]] = None) -> Any:
        """Call the op (loading the kernels on first use). Given the inputs
        that can need gradients (``differentiable``), an eager call skips the
        autograd wrapper ``register_autograd`` installs (its host time per call
        exceeds a mini-batch's SpMM: ``benchmarks/probes/layer_overhead.py``): where no input
        needs a gradient the op runs below autograd; where one does, the same
        formulas run through a ``torch.autograd.Function`` (:meth:`_function`).
        With grad mode off (inference, and a backward formula's calls unless
        the backward builds a graph) nothing can record a graph, so the op
        runs below autograd too. Otherwise, without ``differentiable`` (a
        backward formula under ``create_graph``) and under ``torch.compile``,
        the call goes through the registered op and its autograd (what
        ``opcheck`` tests)."""
        op = self._overload
        if op is None:
            ensure()
            op = self._overload = self.overload
        if torch.compiler.is_compiling():
            return op(*args)
        if torch.is_grad_enabled():
            if differentiable is None:
                return op(*args)
            if any(t is not None and t.requires_grad for t in differentiable):
                if self._backward is None or len(args) != len(self.args):
                    return op(*args)
                return self._function().apply(*args)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args)

    def _function(self) -> type:
        """The op as a ``torch.autograd.Function`` with the registered
        formulas (same saved tensors, constants and gradients as the
        ``register_autograd`` path; backward formulas call ops through
        autograd, so double backward works as there). Built once."""
        fn = self.__dict__.get('_fn')
        if fn is None:
            me = self

            def forward(ctx: Any, *args: Any) -> Any:
                with torch._C._AutoDispatchBelowAutograd():
                    out = me._overload(*args)
                me._setup(ctx, args, out)
                return out

            def backward(ctx: Any, *grads: Any) -> tuple:
                return me._backward_impl(ctx, *grads)

            # named after the op: its grad_fn reads <op>_functionBackward
            fn = self._fn = type(
                f'{self.name}_function',
                (torch.autograd.Function,),
                {'forward': staticmethod(forward), 'backward': staticmethod(backward)},
            )
        return fn

    def named(self, args: Sequence[Any]) -> SimpleNamespace:
        """The positional arguments of a call, by schema name."""
        return SimpleNamespace(**dict(zip(self.args, args)))

    # -- registered implementations ----------------------------------------
    def _reference_impl(self, *args: Any) -> Any:
        return self.reference(**{n: args[i] for n, i in self._ref_args})

    def _fake_impl(self, *args: Any) -> Any:
        return self._fake(self.named(args))

    def _setup(self, ctx: Any, inputs: Sequence[Any], output: Any) -> None:
        a = dict(zip(self.args, inputs))
        outs = output if isinstance(output, (tuple, list)) else (output,)
        a.update(zip(self.returns, outs))
        if callable(self._save):
            names = tuple(self._save(SimpleNamespace(**a)))
        else:
            names = self._saved_names
        ctx.pyg_tc_names = names
        consts = {n: a[n] for n in self._const_args}
        if self._consts is not None:
            consts.update(self._consts(SimpleNamespace(**a)))
        ctx.pyg_tc_consts = consts
        ctx.save_for_backward(*[a[n] for n in names])
        if not self._materialize:
            ctx.set_materialize_grads(False)

    def _backward_impl(self, ctx: Any, *grads: Any) -> tuple:
        a = SimpleNamespace(**ctx.pyg_tc_consts, **dict(zip(ctx.pyg_tc_names, ctx.saved_tensors)))
        needs = dict(zip(self.args, ctx.needs_input_grad))
        out = self._backward(a, needs, *grads)
        unknown = set(out) - set(self.args)
        if unknown:
            raise RuntimeError(f'pyg_tc: backward of {self.name} returned unknown inputs {sorted(unknown)}')
        return tuple(out.get(n) for n in self.args)


def op(name: str) -> Op:
    """The op ``name`` (importing :mod:`pyg_tc.ops`, which defines every op,
    if it is not defined yet)."""
    if name not in OPS:
        importlib.import_module(f'{NAMESPACE}.ops')
    try:
        return OPS[name]
    except KeyError:
        raise RuntimeError(f'pyg_tc: op {name!r} is not defined') from None


def ensure() -> bool:
    """Load the CUDA kernels once (building them on first use on this
    machine); where they are unavailable, and for ops without a kernel,
    register the op's reference for CUDA tensors too. Returns whether the
    kernels are loaded.

    Args:
        (none): safe to call any number of times, from any thread.
    """
    if _STATE['ready']:
        return _STATE['kernels']
    # every op must be defined before the CUDA fallbacks below are registered;
    # ``import pyg_tc`` is lazy and may not have imported the op modules yet
    importlib.import_module(f'{NAMESPACE}.ops')
    with _LOCK:
        if not _STATE['ready']:
            loaded = _kernels.load()
            for o in OPS.values():
                # no kernel for this op (or none loaded): its reference runs on CUDA too
                o.cuda_kernel = loaded and torch._C._dispatch_has_kernel_for_dispatch_key(o.qualname, 'CUDA')
                if not o.cuda_kernel:
                    o._lib.impl(o.name, o._reference_impl, 'CUDA')
            _STATE['kernels'], _STATE['ready'] = loaded, True
    return _STATE['kernels']


def kernels_loaded() -> bool:
    """Whether the CUDA kernels are loaded (False before :func:`ensure`)."""
    return _STATE['kernels']


def _use_kernel(t: torch.Tensor) -> bool:
    """The one rule for "kernel or reference" on a CUDA tensor: the kernels
    are loaded and the dtype is fp32 / fp16 / bf16 (float64 runs the
    reference); an implementation's own limits (the widest row its kernel
    takes) are declared with it and read by
    :func:`pyg_tc.ops.dispatch.choose`.

    Private: only :func:`~pyg_tc.ops.dispatch.choose` (every op call), the
    format builders of :mod:`pyg_tc.formats.csr` (below the ops, so they
    cannot ask the dispatcher) and the dense epilogue of
    :mod:`pyg_tc.ops.dense` (no graph to dispatch on) call it."""
    return t.is_cuda and t.dtype != torch.float64 and ensure()
