"""The suites' Cora: the real graph from ``$PYG_TC_DATA``, and a synthetic one of its shape."""

from pathlib import Path

import pytest

from ..conftest import data_dir, real_data


@pytest.fixture(params=['synthetic', 'real'])
def cora_root(request, monkeypatch, tmp_path) -> Path:
    """The ``--data-root`` to give a suite that trains on Cora.

    ``real``: ``$PYG_TC_DATA`` (skipped without it). ``synthetic``: the suites'
    ``load_dataset`` returns ``pyg_tc.datasets.synthetic('Cora')`` instead (2,708 nodes,
    1,433 features, 7 classes, Planetoid's masks), so their code runs without any data; the
    root is then a folder that does not exist, and any other dataset fails to load."""
    if request.param == 'real':
        real_data('planetoid/Cora')
        return data_dir()
    import torch_geometric.transforms as T

    from benchmarks.suites import common
    from pyg_tc.datasets import synthetic

    def load_dataset(name, data_root, cache_dir=None, normalize=True):
        if name != 'cora':
            raise FileNotFoundError(f'{name}: only Cora has a synthetic stand-in here')
        return synthetic('Cora', transform=T.NormalizeFeatures() if normalize else None)[0]

    monkeypatch.setattr(common, 'load_dataset', load_dataset)
    return tmp_path / 'no-data'
