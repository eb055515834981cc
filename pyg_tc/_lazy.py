"""Lazy attributes of a package (PEP 562), shared by :mod:`pyg_tc` and
:mod:`pyg_tc.bench`: a public name is imported from its module on first
access and kept in the package; any other submodule loads on first access
too. Imports no torch."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


def attach(
    package: str, names: Dict[str, Tuple[str, Optional[str]]], public: Sequence[str]
) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps a public
    name to ``(relative module, attribute)`` (attribute None: the module
    itself)."""

    def __getattr__(name: str) -> Any:
        if name in names:
            module, attr = names[name]
            value = importlib.import_module(module, package)
            if attr is not None:
                value = getattr(value, attr)
        elif not name.startswith('__') and importlib.util.find_spec(f'{package}.{name}') is not None:
            value = importlib.import_module(f'.{name}', package)
        else:
            raise AttributeError(f'module {package!r} has no attribute {name!r}')
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(public))

    return __getattr__, __dir__
