"""The loaders' batches of seeds: with torch's default samplers they are drawn
as tensor slices (``_SeedBatches``), and must be the batches torch's
``DataLoader`` gives under the same seed (shuffled or not, ``drop_last``, a
``generator`` of the user's, which must advance as with torch); a sampler of
the user's is followed as given."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from pyg_tc.loader import LinkNeighborLoader, NeighborLoader
from pyg_tc.loader.loader import _SeedBatches


def _data(N=103, E=600):
    g = torch.Generator().manual_seed(0)
    return Data(x=torch.randn(N, 4, generator=g), edge_index=torch.randint(0, N, (2, E), generator=g))


@pytest.mark.parametrize('shuffle', [False, True])
@pytest.mark.parametrize('drop_last', [False, True])
@pytest.mark.parametrize('with_generator', [False, True])
def test_seed_batches_are_torch_dataloader_batches(shuffle, drop_last, with_generator):
    data = _data()
    seeds = torch.arange(5, 103, 2)  # 49 seeds: a short last batch
    kw = dict(batch_size=8, shuffle=shuffle, drop_last=drop_last)
    g_ours = torch.Generator().manual_seed(11) if with_generator else None
    g_torch = torch.Generator().manual_seed(11) if with_generator else None
    loader = NeighborLoader(data, [2], input_nodes=seeds, cpu_sampler='reference', generator=g_ours, **kw)
    assert type(loader._index_sampler) is _SeedBatches
    torch.manual_seed(5)
    ours = [b.input_id for b in loader]
    torch.manual_seed(5)
    ref = [torch.as_tensor(b) for b in torch.utils.data.DataLoader(range(seeds.numel()), generator=g_torch, **kw)]
    assert len(ours) == len(ref) == len(loader) == (6 if drop_last else 7)
    for a, b in zip(ours, ref):
        assert torch.equal(a, b)
    if with_generator:  # advanced as by torch's sampler
        assert torch.equal(g_ours.get_state(), g_torch.get_state())
    batch = next(iter(loader))
    assert torch.equal(batch.n_id[: batch.batch_size], seeds[batch.input_id])
    if shuffle:
        assert not torch.equal(batch.input_id, ours[0])  # another epoch draws anew


def test_a_sampler_of_the_users_is_followed():
    data = _data()
    order = [7, 3, 3, 90, 1, 0, 44]
    loader = NeighborLoader(data, [2], batch_size=3, sampler=order, cpu_sampler='reference')
    assert type(loader._index_sampler) is not _SeedBatches
    assert [b.input_id.tolist() for b in loader] == [[7, 3, 3], [90, 1, 0], [44]]


def test_link_loader_seed_batches_are_torch_dataloader_batches():
    data = _data()
    links = data.edge_index[:, :50]
    loader = LinkNeighborLoader(data, [2], edge_label_index=links, batch_size=16, shuffle=True, cpu_sampler='reference')
    torch.manual_seed(2)
    ours = [b.input_id for b in loader]
    torch.manual_seed(2)
    ref = [torch.as_tensor(b) for b in torch.utils.data.DataLoader(range(50), batch_size=16, shuffle=True)]
    assert len(ours) == len(ref) == 4
    for a, b in zip(ours, ref):
        assert torch.equal(a, b)
