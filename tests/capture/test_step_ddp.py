"""CapturedStep with DistributedDataParallel (one process, and two on two
GPUs; DDP built and the loop run under a side stream): the captured run's
loss curve and parameters equal the eager DDP loop's on every rank, the
ranks hold identical parameters (the all-reduce is inside the graphs), and
the ranks stay in lockstep although their batches (each rank samples its own)
fall into the shared buckets in different orders."""

from __future__ import annotations

import itertools
import os
import socket
from datetime import timedelta

import pytest
import torch

from tests.capture.test_step import Net, _data, _eager

CONVS = ('sage', 'gat')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _run(rank: int, captured: bool, conv: str) -> tuple:
    with torch.cuda.stream(torch.cuda.Stream(rank)):  # DDP, its step and the loop on one side stream
        return _train(rank, captured, conv)


def _train(rank: int, captured: bool, conv: str) -> tuple:
    """Two epochs on this rank's batches; (losses, flat parameters, CapturedStep or None)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from pyg_tc.capture import CapturedStep
    from pyg_tc.loader import NeighborLoader
    from pyg_tc.transforms import PadToBuckets, buckets_from_batches

    dev = torch.device('cuda', rank)
    loader = NeighborLoader(
        _data(seed=rank), [5, 3], batch_size=32, device=dev, shuffle=True, generator=torch.Generator().manual_seed(rank)
    )
    torch.manual_seed(123 + rank)
    buckets = buckets_from_batches(loader, num_batches=6, levels=2, node_multiple=64, edge_multiple=256)
    t = torch.tensor(buckets, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the same buckets on every rank (CapturedStep's DDP rule)
    loader.transform = PadToBuckets([tuple(b) for b in t.tolist()], 32, self_loops=True)
    torch.manual_seed(0)
    model = DDP(Net(conv).to(dev), device_ids=[dev], static_graph=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, capturable=True)
    step = CapturedStep(model, opt) if captured else None
    eager = _eager(model, opt)
    losses = []
    loader.generator.manual_seed(rank)
    torch.manual_seed(7 + rank)  # this rank's neighbour draws (the same in both runs)
    for _ in range(2):
        for b in loader:
            losses.append((step or eager)(b))
    torch.cuda.synchronize()
    dist.barrier()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return torch.stack(losses).cpu(), flat, step


def _worker(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group('nccl', rank=rank, world_size=world, timeout=timedelta(seconds=120))
    try:
        for conv in CONVS:  # one process group for every model (starting processes dominates the time)
            l_eager, p_eager, _ = _run(rank, False, conv)
            l_cap, p_cap, step = _run(rank, True, conv)
            every = [torch.empty_like(p_cap) for _ in range(world)]
            dist.all_gather(every, p_cap)
            torch.save(
                dict(
                    eager=l_eager,
                    captured=l_cap,
                    p_eager=p_eager.cpu(),
                    p_cap=p_cap.cpu(),
                    ranks=[t.cpu() for t in every],
                    replays=step.replays,
                    eager_steps=step.eager_steps,
                    graphs=len(step.graphs),
                ),
                os.path.join(out, f'{conv}_rank{rank}.pt'),
            )
            step.close()  # its graphs hold NCCL work: freed before the process group goes
            assert not step.graphs
    finally:
        dist.destroy_process_group()


@pytest.mark.cuda
@pytest.mark.parametrize('world', [1, 2], ids=['world1', 'world2'])
def test_ddp_captured_equals_ddp_eager(world, tmp_path):
    if not torch.cuda.is_available() or torch.cuda.device_count() < world:
        pytest.skip(f'needs {world} GPU(s)')
    torch.multiprocessing.spawn(_worker, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True)
    for conv, rank in itertools.product(CONVS, range(world)):
        r = torch.load(tmp_path / f'{conv}_rank{rank}.pt')
        torch.testing.assert_close(r['captured'], r['eager'], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(r['p_cap'], r['p_eager'], atol=1e-4, rtol=1e-3)
        for other in r['ranks']:  # DDP's all-reduce ran in the replays: identical parameters
            torch.testing.assert_close(other, r['ranks'][0], atol=0, rtol=0)
        assert r['replays'] > 0 and r['graphs'] >= 1


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a GPU')
def test_ddp_under_the_default_stream_is_refused():
    """A DDP model built under the default stream cannot be captured (its
    gradient accumulators live there): a clear error up front."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from pyg_tc.capture import CapturedStep

    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(_free_port()))
    dist.init_process_group('nccl', rank=0, world_size=1)
    try:
        model = DDP(Net('sage').cuda())
        opt = torch.optim.Adam(model.parameters(), capturable=True)
        with pytest.raises(ValueError, match='side stream'):
            CapturedStep(model, opt)
        with torch.cuda.stream(torch.cuda.Stream()):
            assert CapturedStep(model, opt).stream is not None
    finally:
        dist.destroy_process_group()
