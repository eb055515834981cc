"""``NeighborLoader(..., prefetch=k)``: batches made ahead on the loader's own
thread are the batches of the loader without prefetching (same seed, same
epochs), the thread stops when the loop stops, its errors reach the loop; on
CUDA a captured step over a prefetching loader trains as over a plain one
(the thread's CUDA calls do not break the capture)."""

from __future__ import annotations

import copy
import threading
import time

import pytest
import torch
from torch_geometric.data import Data

from pyg_tc.capture import CapturedStep, trimmed_forward
from pyg_tc.loader import NeighborLoader
from pyg_tc.transforms import PadHops, buckets_from_batches

from ..conftest import DEVICES
from ..capture.test_step import _train


def _data(N=300, E=2500, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Data(
        x=torch.randn(N, 8, generator=g),
        y=torch.randint(0, 4, (N,), generator=g),
        edge_index=torch.randint(0, N, (2, E), generator=g),
        edge_attr=torch.randn(E, generator=g),
    )


def _epochs(loader, epochs=2):
    torch.manual_seed(3)
    return [b for _ in range(epochs) for b in loader]


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == 'pyg_tc-prefetch']


def _wait_no_threads(timeout=10.0):
    end = time.monotonic() + timeout
    while _prefetch_threads() and time.monotonic() < end:
        time.sleep(0.01)
    return not _prefetch_threads()


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('prefetch', [1, 3])
def test_same_batches_as_without_prefetch(device, prefetch):
    """Two shuffled epochs, with a transform: the same batches, field by field
    (pyg_tc's sampler: on the CPU, prefetching samples with the reference)."""
    data = _data()
    cpu_sampler = 'reference' if device == 'cpu' else 'auto'

    def loader(p):
        return NeighborLoader(
            data,
            [4, 3],
            batch_size=40,
            shuffle=True,
            device=device,
            prefetch=p,
            cpu_sampler=cpu_sampler,
            transform=lambda b: b.update(dict(doubled=2 * b.x)),
        )

    plain, ahead = _epochs(loader(0)), _epochs(loader(prefetch))
    assert len(plain) == len(ahead) == 2 * 8
    for a, b in zip(plain, ahead):
        for key in ('n_id', 'e_id', 'x', 'y', 'edge_attr', 'doubled', 'input_id'):
            assert torch.equal(a[key], b[key]), key
        assert a.num_sampled_nodes == b.num_sampled_nodes and a.batch_size == b.batch_size
        assert torch.equal(a.edge_index.as_tensor(), b.edge_index.as_tensor())
    assert not torch.equal(plain[0].n_id, plain[8].n_id)  # the second epoch draws anew
    assert _wait_no_threads()


def test_prefetch_on_the_cpu_samples_with_the_reference():
    """PyG's sampler draws on the thread that calls it, so a prefetching
    loader samples with pyg_tc's reference (which takes each batch's draw
    from the loop's thread); asking for PyG's is an error."""
    assert NeighborLoader(_data(), [3], device='cpu', prefetch=2)._sampler.sampler == 'reference'
    with pytest.raises(ValueError, match='prefetch'):
        NeighborLoader(_data(), [3], device='cpu', prefetch=2, cpu_sampler='pyg')


def test_len_counts_down_and_thread_ends():
    loader = NeighborLoader(_data(), [3], batch_size=50, device='cpu', prefetch=2)
    it = iter(loader)
    assert len(it) == len(loader) == 6
    next(it)
    assert len(it) == 5
    assert list(it) and len(it) == 0
    assert _wait_no_threads()


def test_stopping_early_ends_the_thread():
    """A loop that breaks (or a partial read, as buckets_from_batches does) leaves no thread behind."""
    loader = NeighborLoader(_data(), [3, 2], batch_size=20, device='cpu', prefetch=3)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert _wait_no_threads()


def test_errors_reach_the_loop_at_their_batch():
    seen = []

    def transform(b):
        seen.append(b)
        if len(seen) == 3:
            raise RuntimeError('bad batch')
        return b

    loader = NeighborLoader(_data(), [3], batch_size=50, device='cpu', prefetch=2, transform=transform)
    it = iter(loader)
    next(it), next(it)
    with pytest.raises(RuntimeError, match='bad batch'):
        next(it)
    with pytest.raises(StopIteration):  # the error ended the epoch
        next(it)
    del it
    assert _wait_no_threads()


@pytest.mark.parametrize('bad', [-1, 1.5, True, '2'])
def test_bad_prefetch(bad):
    with pytest.raises(ValueError, match='prefetch must be an int >= 0'):
        NeighborLoader(_data(), [3], batch_size=50, device='cpu', prefetch=bad)


class _Trimmed(torch.nn.Module):
    """Two SAGE layers on PyG's trim_to_layer of the batch."""

    def __init__(self):
        super().__init__()
        import pyg_tc.nn

        self.c1, self.c2 = pyg_tc.nn.SAGEConv(8, 16), pyg_tc.nn.SAGEConv(16, 4)

    def forward(self, x, edge_index, num_sampled_nodes_per_hop, num_sampled_edges_per_hop):
        from torch_geometric.utils import trim_to_layer

        for i, conv in enumerate((self.c1, self.c2)):
            x, edge_index, _ = trim_to_layer(i, num_sampled_nodes_per_hop, num_sampled_edges_per_hop, x, edge_index)
            x = conv(x, edge_index)
            x = x.relu() if i == 0 else x
        return x


@pytest.mark.cuda
def test_captured_step_over_a_prefetching_loader():
    """CapturedStep captures while the loader's thread samples (and synchronises) on its side
    stream: the loss curve equals that of the same run without prefetching."""
    data = _data().to('cuda')
    probe = NeighborLoader(data, [4, 3], batch_size=32, device='cuda', shuffle=True)
    torch.manual_seed(1)
    buckets = buckets_from_batches(probe, num_batches=6, levels=2, per_hop=True, node_multiple=32, edge_multiple=128)
    torch.manual_seed(0)
    model = _Trimmed().cuda()
    runs = []
    for p in (0, 2):
        m = copy.deepcopy(model)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2, capturable=True)
        step = CapturedStep(m, opt, forward=trimmed_forward)
        loader = NeighborLoader(
            data, [4, 3], batch_size=32, device='cuda', shuffle=True, prefetch=p, transform=PadHops(buckets, 32)
        )
        runs.append(_train(step, loader))
        assert step.replays > 0
    torch.testing.assert_close(runs[0], runs[1], atol=1e-5, rtol=1e-5)
    assert _wait_no_threads()
