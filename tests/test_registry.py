"""The op framework (pyg_tc._library): schemas written once in Python, the
CUDA side only registers implementations, references and autograd bound by
argument name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import pyg_tc.ops  # noqa: F401 (defines the ops)
from pyg_tc import _library
from pyg_tc._library import OPS, Op

KERNELS = Path(__file__).resolve().parents[1] / 'kernels'


def _sources():
    files = sorted(p for p in KERNELS.rglob('*') if p.suffix in ('.cu', '.cpp', '.cuh', '.h'))
    assert files, 'no kernel sources'
    return files


def _code(path: Path) -> str:
    """Source without // and /* */ comments (string literals kept)."""
    return re.sub(r'//[^\n]*|/\*.*?\*/', ' ', path.read_text(), flags=re.S)


def _kernel_impls() -> list:
    """The op names the CUDA sources register implementations for (with repeats)."""
    return [name for f in _sources() for name in re.findall(r'\.\s*impl\s*\(\s*"(\w+)"', _code(f))]


def test_every_op_is_defined_once_with_its_schema():
    assert OPS, 'no op defined'
    for name, op in OPS.items():
        registered = getattr(torch.ops.pyg_tc, name).default._schema
        assert str(registered) == f'pyg_tc::{op.schema}'


def test_kernels_only_register_cuda_implementations_of_known_ops():
    for f in _sources():
        src = _code(f)
        assert not re.search(r'\bTORCH_LIBRARY(_FRAGMENT)?\s*\(', src), f'{f.name} defines a library'
        assert not re.search(r'\.\s*def\s*\(', src), f'{f.name} defines a schema'
        for lib, key in re.findall(r'TORCH_LIBRARY_IMPL\s*\(\s*(\w+)\s*,\s*(\w+)\s*,', src):
            assert (lib, key) == ('pyg_tc', 'CUDA'), f'{f.name} registers {lib} / {key}'
    impls = _kernel_impls()
    assert not set(impls) - set(OPS), f'kernels implement undefined ops: {sorted(set(impls) - set(OPS))}'
    assert len(impls) == len(set(impls)), 'an op has two CUDA implementations'
    # every op not declared reference_only has its kernel (the lists come from the code, not from here)
    assert set(impls) == {name for name, op in OPS.items() if not op.reference_only}


def test_reference_binds_arguments_by_name():
    with pytest.raises(TypeError, match='unknown arguments'):
        Op('bad_ref(Tensor x) -> Tensor', reference=lambda y: y, fake=lambda a: a.x, namespace='pyg_tc_test')


def test_named_autograd_and_saved_consts():
    def backward(a, needs, grad):
        assert a.scale == 3 and a.width == a.x.size(1) and needs['x'] and not needs['y']
        return {'x': grad * a.scale * a.y}

    op = Op(
        'scaled_mul(Tensor x, Tensor y, int scale) -> Tensor',
        reference=lambda x, y, scale: x * y * scale,
        fake=lambda a: a.x.new_empty(a.x.shape),
        backward=backward,
        consts=lambda a: {'width': a.x.size(1)},
        namespace='pyg_tc_test',
    )
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, 3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: op(x, y, 3, differentiable=(x,)), (x,))
    assert 'scaled_mul' not in OPS  # other namespaces stay out of the pyg_tc loader


def test_backward_returning_an_unknown_input_raises():
    op = Op(
        'typo_grad(Tensor x) -> Tensor',
        reference=lambda x: x * 2,
        fake=lambda a: a.x.new_empty(a.x.shape),
        backward=lambda a, needs, g: {'z': g},
        namespace='pyg_tc_test',
    )
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match='unknown inputs'):
        op(x, differentiable=(x,)).sum().backward()


def test_ensure_reports_the_kernels():
    loaded = _library.ensure()
    assert loaded == _library.kernels_loaded() == pyg_tc._kernels.status()['loaded']


def test_eager_calls_skip_the_registered_autograd_wrapper(monkeypatch):
    """Op.__call__ with ``differentiable``: the same values and gradients as
    the registered op (torch.library's autograd), through an
    autograd.Function when an input needs a gradient (a cheaper host path)
    and below autograd when none does or grad mode is off."""
    from pyg_tc.formats import CSRGraph
    from pyg_tc.ops import spmm_graph

    op = OPS['spmm_csr']
    torch.manual_seed(0)
    ei = torch.tensor([[1, 2, 0, 1, 2, 0], [0, 0, 2, 2, 2, 1]])
    g = CSRGraph.from_coo(ei[0], ei[1], 3, 3)
    value = torch.rand(6, dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    seen = []
    call = Op.__call__
    monkeypatch.setattr(Op, '__call__', lambda self, *a, **k: seen.append(a) or call(self, *a, **k))
    fast = spmm_graph(g, x, value, 'sum')
    monkeypatch.undo()
    assert type(fast.grad_fn).__name__ == 'spmm_csr_functionBackward'
    slow = op.overload(*seen[0])  # the registered op: torch.library's autograd
    assert type(slow.grad_fn).__name__ != type(fast.grad_fn).__name__
    gout = torch.randn_like(fast)
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)
    torch.testing.assert_close(
        torch.autograd.grad(fast, (value, x), gout), torch.autograd.grad(slow, (value, x), gout), rtol=0, atol=0
    )
    assert torch.autograd.gradgradcheck(lambda v, xx: spmm_graph(g, xx, v, 'sum'), (value, x))
    with torch.no_grad():
        assert spmm_graph(g, x, value, 'sum').grad_fn is None
    assert spmm_graph(g, x.detach(), value.detach(), 'sum').grad_fn is None
