"""The op schemas exist once: kernels/registration.cpp (TORCH_LIBRARY) and the
Python copy used where the CUDA extension is not loaded must agree."""
from __future__ import annotations

import re
from pathlib import Path

import torch

import pyg_tc
from pyg_tc.ops import _registry

KERNELS = Path(__file__).resolve().parents[1] / 'kernels'


def strip_comments(src: str) -> str:
    """Remove // and /* */ comments, leaving string literals intact."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c == '"':
            j = i + 1
            while src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            out.append(src[i:j + 1])
            i = j + 1
        elif src.startswith('//', i):
            i = src.find('\n', i)
            i = n if i < 0 else i
        elif src.startswith('/*', i):
            i = src.index('*/', i) + 2
            out.append(' ')
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def call_args(src: str, name: str) -> list:
    """The argument text of every call ``name(...)`` (balanced parentheses)."""
    found = []
    for m in re.finditer(re.escape(name) + r'\s*\(', src):
        depth, j = 1, m.end()
        while depth:
            if src[j] == '"':
                j = src.index('"', j + 1)
            elif src[j] == '(':
                depth += 1
            elif src[j] == ')':
                depth -= 1
            j += 1
        found.append(src[m.end():j - 1])
    return found


def literal(text: str) -> str:
    """Adjacent C string literals, concatenated; nothing else allowed."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', text)
    assert re.fullmatch(r'(\s*"(?:[^"\\]|\\.)*")+\s*', text), f'not only string literals: {text!r}'
    return ''.join(parts)


def cpp_schemas() -> dict:
    src = strip_comments((KERNELS / 'registration.cpp').read_text())
    blocks = re.findall(r'TORCH_LIBRARY\s*\(\s*pyg_tc\s*,\s*m\s*\)', src)
    assert len(blocks) == 1, 'registration.cpp must define the pyg_tc library exactly once'
    schemas = {}
    for arg in call_args(src, 'm.def'):
        s = literal(arg)
        name = s.split('(', 1)[0].strip()
        assert name not in schemas, f'{name} defined twice'
        schemas[name] = s
    return schemas


def test_cpp_schemas_equal_python():
    cpp = cpp_schemas()
    assert cpp, 'no m.def(...) found in registration.cpp'
    assert cpp == _registry.SCHEMAS


def test_python_schema_keys_are_op_names():
    for name, schema in _registry.SCHEMAS.items():
        assert schema.startswith(name + '(')


def test_kernel_files_only_register_impls():
    cu_files = sorted(KERNELS.glob('*.cu'))
    assert cu_files, 'no .cu files in kernels/'
    impls = set()
    for f in cu_files:
        src = strip_comments(f.read_text())
        assert not re.search(r'\bTORCH_LIBRARY\s*\(', src), f'{f.name} defines the library'
        assert not re.search(r'\bTORCH_LIBRARY_FRAGMENT\s*\(', src), f'{f.name} defines ops'
        assert not re.search(r'\bm\s*\.\s*def\s*\(', src), f'{f.name} defines a schema'
        blocks = re.findall(r'TORCH_LIBRARY_IMPL\s*\(\s*(\w+)\s*,\s*(\w+)\s*,\s*\w+\s*\)', src)
        for lib, key in blocks:
            assert lib == 'pyg_tc', f'{f.name} registers into library {lib}'
            assert key == 'CUDA', f'{f.name} registers for dispatch key {key}'
        names = [literal(a.split(',', 1)[0]) for a in call_args(src, '.impl')]
        if names:
            assert blocks, f'{f.name} registers impls outside TORCH_LIBRARY_IMPL'
        for name in names:
            assert name in _registry.SCHEMAS, f'{f.name} implements unknown op {name}'
        impls.update(names)
    # every op has a CUDA implementation somewhere
    assert impls == set(_registry.SCHEMAS)


def test_registration_cpp_has_no_impls():
    src = strip_comments((KERNELS / 'registration.cpp').read_text())
    assert 'TORCH_LIBRARY_IMPL' not in src and '.impl(' not in src


def test_registered_ops_have_the_schemas():
    pyg_tc.ops.ensure()
    for name, schema in _registry.SCHEMAS.items():
        op = getattr(torch.ops.pyg_tc, name).default
        assert str(op._schema) == 'pyg_tc::' + schema
