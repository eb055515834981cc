"""The benchmark suites by name: ``pyg-tc bench SUITE [options]`` runs one.

The suites live in ``benchmarks/`` of the source checkout, beside the package
(a clone installed with ``pip install -e .``), not in the wheel. This module
is plain data and imports a suite only when asked (no torch), so the command
line lists the suites at once."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, Optional, Sequence, Tuple

#: suite name -> (module, one-line description); every module has ``main(argv, prog)``
SUITES: Dict[str, Tuple[str, str]] = {
    'spmm': ('benchmarks.suites.spmm', 'SpMM vs cuSPARSE / torch.sparse, training step vs PyG'),
    'cbsr': ('benchmarks.suites.cbsr', 'MaxK-GNN: CBSR kernels (SpGEMM, SSpMM, top-k) and the MaxK-SAGE epoch'),
    'cbsr_train': ('benchmarks.suites.cbsr_train', 'MaxK-GNN: MaxK vs ReLU, accuracy and epoch time on real graphs'),
    'sgt': ('benchmarks.suites.sgt', 'TC-GNN: tensor-core SpMM / SDDMM, auto rules, SGT build, training'),
    'gat': ('benchmarks.suites.gat', 'fuseGNN: fused GAT / GATv2 vs PyG and the unfused ops, training'),
    'half': ('benchmarks.suites.half', 'HalfGNN: fp16 / bf16 SpMM / SDDMM, training steps, accuracy'),
    'half_minibatch': (
        'benchmarks.suites.half_minibatch',
        'half precision in mini-batch training: bf16 / fp16 / fp8 features, captured epochs, GAT, accuracy',
    ),
    'rgat': (
        'benchmarks.suites.rgat',
        "the MLPerf-shaped R-GAT epoch on an IGBH-shaped graph, PyG's loader and layers vs pyg_tc's",
    ),
    'es_spmm': ('benchmarks.suites.es_spmm', 'ES-SpMM: sampled SpMM kernels, sampled inference and training'),
    'minibatch': ('benchmarks.suites.minibatch', "NeighborLoader training per batch, PyG's layers vs pyg_tc's"),
    'sampling': ('benchmarks.suites.sampling', "GPU neighbour sampling vs PyG's samplers, the mini-batch epoch"),
    'sampler_accuracy': ('benchmarks.suites.sampler_accuracy', "test metric with pyg_tc's sampler vs PyG's"),
    'captured_step': ('benchmarks.suites.captured_step', 'a mini-batch training step captured as CUDA graphs vs eager'),
    'small_graphs': ('benchmarks.suites.small_graphs', 'full-graph training step on small graphs, eager and captured'),
    'graph_classification': (
        'benchmarks.suites.graph_classification',
        'graph classification epochs on DataLoader batches, eager and padded + captured',
    ),
}
#: the suite ``pyg-tc bench`` runs without a suite name
DEFAULT = 'spmm'


class SuitesNotFound(RuntimeError):
    """Raised where ``benchmarks/`` is not beside the package (an installed wheel)."""


def checkout() -> Path:
    """The source checkout: the folder holding ``pyg_tc/`` and ``benchmarks/``.

    Raises:
        SuitesNotFound: When there is no ``benchmarks/`` beside the package.
    """
    import pyg_tc

    root = Path(pyg_tc.__file__).resolve().parents[1]
    if not (root / 'benchmarks' / 'suites' / '__init__.py').is_file():
        raise SuitesNotFound(
            'the benchmark suites ship with the source checkout: clone pyg_tc, '
            f'pip install -e . and run from there (no benchmarks/ next to {root})'
        )
    return root


def load_suite(name: str) -> ModuleType:
    """The module of suite ``name``, the checkout put first on ``sys.path``.

    Raises:
        ValueError: For a name not in :data:`pyg_tc.bench.SUITES`.
        SuitesNotFound: Without a source checkout (no ``benchmarks/`` beside the package).
    """
    if name not in SUITES:
        raise ValueError(f'unknown suite {name!r}; known: {", ".join(SUITES)}')
    root = str(checkout())
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(SUITES[name][0])


def run_suite(name: str, argv: Optional[Sequence[str]] = None) -> int:
    """Runs suite ``name``'s command line on ``argv`` (program ``pyg-tc bench NAME``); its exit code."""
    return load_suite(name).main(list(argv or []), prog=f'pyg-tc bench {name}') or 0
