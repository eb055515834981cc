"""Tutorial 9: multi-GPU training with DistributedDataParallel and NeighborLoader.

When one GPU is not fast enough, PyG's recipe is data parallelism over mini-batches: one process
per GPU (``torchrun --nproc_per_node=N``), ``torch.distributed`` (NCCL between GPUs, gloo on
CPUs), the model wrapped in ``DistributedDataParallel`` (DDP), and every process ("rank")
running its own ``NeighborLoader`` over its share of the training nodes. pyg_tc's layers drop into
that recipe unchanged: there is no pyg_tc communication layer, DDP averages the gradients of
whatever layers the model has. The per-rank loader is pyg_tc's GPU sampler,
``pyg_tc.loader.NeighborLoader`` (``--loader pyg_tc``, the default), or PyG's
(``--loader pyg``)::

    torchrun --nproc_per_node=2 tutorials/09_multi_gpu.py --graph tolokers

    # per rank (see run() below):
    dist.init_process_group('nccl')                       # rank / world size from torchrun
    model = DDP(Net(pyg_tc.nn, 'sage', ...).to(device), device_ids=[device])
    share = train_nodes.view(world_size, -1)[rank]        # equal shares: equal steps per rank
    loader = pyg_tc.loader.NeighborLoader(data.to(device), input_nodes=share, num_neighbors=[15, 10],
                                          device=device, ...)
    for batch in loader:                                   # sampled on this GPU, the CSR attached
        loss = F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size], ...)
        loss.backward()                                    # DDP all-reduces the gradients here

With ``--loader pyg`` the loader is ``torch_geometric.loader.NeighborLoader(data, ...)``, which
samples on the CPU, and each batch is moved and formatted on the rank's GPU:
``batch = DegreeBucketTransform()(batch.to(device))``.

What to watch for:

* **Equal steps.** DDP's all-reduce is collective: a rank with one batch more waits forever. The
  training nodes are shuffled once with a seed every rank shares and cut into ``world_size``
  equal shares (the remainder, fewer than ``world_size`` nodes, sits out the epoch).
* **The graph in memory once.** Run as ``python tutorials/09_multi_gpu.py`` the script starts its
  own processes (``torch.multiprocessing.spawn``) and hands them the graph in shared memory
  (``data.share_memory_()``): one copy however many ranks. Under ``torchrun`` the ranks are
  separate programs; local rank 0 saves the graph once and every rank memory-maps that file
  (``torch.load(..., mmap=True)``), so the operating system keeps one copy in its page cache.
  With pyg_tc's loader each rank also copies the graph and its features to its own GPU, where
  it samples and gathers (one copy per GPU).
* **A share of the CPU each.** Every rank sets ``torch.set_num_threads(cores // world_size)``
  (``torchrun`` sets ``OMP_NUM_THREADS`` for the same reason): ranks that each start a thread
  per core fight over the cores while they sample and build, and two of them made the two-GPU
  epoch slower than one GPU's (Tolokers on two H100s, PyG's loader: 0.71 s against 0.35 s;
  0.18 s with shares).
* **Sampling ahead.** pyg_tc's loader needs no worker processes: it samples each batch on the
  GPU, on a side stream, beside the previous step. PyG's loader samples on the CPU: ``--workers
  N`` gives each rank N ``NeighborLoader`` worker processes (``num_workers``; 4 by default on
  GPUs with ``--loader pyg``), forked from the rank so they share its graph (a spawned rank would
  otherwise spawn its workers and pickle the graph to each); they sample while the GPU trains.
  That CPU sampler bounds the epoch: 6 workers made the products-shaped epoch on one GPU 4-5x
  faster. ``--layers loader`` shows the floor that the loader alone sets, for either loader.
* **Randomness.** Each epoch reseeds the shuffle (the loader's ``generator``) and torch's default
  generator, from which pyg_tc's loader draws neighbours, with the epoch and the rank: every
  rank draws its own batches, and a run repeats.
* **Evaluation.** Each rank scores its share of the test nodes; the counts are summed over the
  ranks (``all_reduce``) before dividing, so the accuracy is that of all test nodes.
* **pyg_tc's caches** are per process and per device: a batch's format is made on the rank's
  own GPU (by the GPU sampler, or built from PyG's batch) and carried on its ``edge_index``;
  ``backend='auto'`` tunes only graphs that carry SGT metadata (mini-batches do not), so every
  rank runs the same CSR kernels. The CUDA kernels are built once per machine: rank 0 builds
  them (``pyg_tc.info()``) while the others wait at a barrier and then load the finished library
  (torch's extension build also holds a file lock).

``--captured`` (pyg_tc's layers with pyg_tc's loader) trains with the step captured in CUDA graphs:
each rank pads its batches to two buckets (the loader's ``transform``; the buckets measured on 10
batches, then the largest over the ranks; per-hop buckets, ``pyg_tc.transforms.PadHops``, and each layer
runs on PyG's ``trim_to_layer`` of the batch, ``pyg_tc.capture.trimmed_forward``), wraps the model
in ``DDP(..., static_graph=True)`` and steps through ``pyg_tc.capture.CapturedStep`` with a capturable
Adam: DDP's all-reduce is part of each replayed graph. On GPUs, DDP, the step and the loop run under
one side stream (``with torch.cuda.stream(s)``): DDP keeps its gradient accumulators on the stream
it was built under, and a capture must not depend on another. The loss is ``pyg_tc.capture.seed_loss``
(cross-entropy over the real seeds, the same as PyG's ``[:batch_size]`` on unpadded batches).

``--prefetch K`` (pyg_tc's loader) makes each rank's next ``K`` batches on a thread of the
loader's own (``NeighborLoader(..., prefetch=K)``); the batches are the same.

``--check`` (on with ``--small``, which CI runs on two CPU processes with gloo) verifies the
recipe: after the epoch every rank holds bitwise the same parameters, and rank 0 replays all
ranks' batches in one process (each step: the ranks' losses divided by ``world_size``, one
backward, one Adam step, which is what DDP's averaged gradients give) and compares the losses
and parameters. The table has one row per (processes, layers), naming the loader: epoch time,
speed-up over one process, pyg_tc's speed-up over PyG's layers at the same process count, and
test accuracy. ``--scaling 1,2,4`` runs each process count in turn (spawned; one GPU per
process); ``--layers loader`` adds rows that only make the batches (sampling, and for PyG's
loader the transfer to the GPU): the floor under any model's epoch with that loader. On the CPU
(``--device cpu``) pyg_tc's loader runs its pure-PyTorch reference, which gives the same batches
as on the GPU. Without a sampler backend (pyg-lib or torch_sparse) PyG's loader is replaced by
full k-hop subgraphs of the seeds; pyg_tc's loader needs none.

Measured on four H100s (``--graph products --scaling 1,2,4 --layers pyg_tc --epochs 3``, then
``--scaling 1,4 --layers PyG --loader pyg --epochs 2``; docs/results/ddp.md)::

    | processes | layers | loader                                   | epoch s | speed-up |
    |---|---|---|---|---|
    | 1         | pyg_tc | pyg_tc.loader.NeighborLoader [15, 10]    | 1.064   | 1.00     |
    | 2         | pyg_tc | pyg_tc.loader.NeighborLoader [15, 10]    | 0.519   | 2.05     |
    | 4         | pyg_tc | pyg_tc.loader.NeighborLoader [15, 10]    | 0.305   | 3.49     |
    | 1         | PyG    | PyG's NeighborLoader (pyg-lib, 4 workers) | 2.222   | 1.00     |
    | 4         | PyG    | PyG's NeighborLoader (pyg-lib, 4 workers) | 0.860   | 2.58     |

In a later call (``--scaling 1,4 --epochs 6``, the same page) the eager step scaled 3.57x, and 3.62x
with ``--prefetch 2`` (``NeighborLoader(..., prefetch=2)``: each rank's loader makes its next two
batches on a thread of its own while the step runs); ``--captured`` scaled 2.87x and was slower than
the eager step with these two short layers. A fourth call measured 3.06-3.45x (PyG's layers and
loader: 2.91x): the four processes' host work per batch, which paces this short step, runs 20-45%
slower than one process's, with no communication between them (the page has every rank's times).

Data: ``--root DIR`` (default: ``$PYG_TC_DATA``) is where the real Cora and Tolokers live, as
``DIR/planetoid/Cora`` and ``DIR/heterophilous/tolokers`` (PyG downloads them there if they are
missing). Without a root the script runs on synthetic data of their shape
(``pyg_tc.datasets.synthetic``), so it also runs offline; ``--graph products`` is always generated.
Under ``torchrun`` the graph file the ranks memory-map is written to ``DIR`` (without a root, to
the temporary folder).
"""

import argparse
import copy
import json
import os
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch_geometric.nn
import torch_geometric.typing
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_geometric.data import Data
from torch_geometric.utils import k_hop_subgraph
from tqdm import tqdm

import pyg_tc
import pyg_tc.datasets
import pyg_tc.loader
import pyg_tc.nn
from pyg_tc.bench.models import Net
from pyg_tc.formats import plain_tensor
from pyg_tc.transforms import DegreeBucketTransform

LAYERS = {'PyG': torch_geometric.nn, 'pyg_tc': pyg_tc.nn}
SAMPLED = torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE  # PyG's loader works


def make_model(layers, model: str, cin: int, hidden: int, cout: int) -> Net:
    """Two SAGE (mean) or GAT (4 heads, then 1) layers, ReLU between them, from ``layers``: the
    benchmarks' model (``pyg_tc.bench.models.Net``). Given the batch's hop counts
    (``trimmed_forward`` passes them), each layer runs on PyG's ``trim_to_layer`` of the batch:
    the second only on the seeds and the first hop."""
    return Net(layers, model, [cin, hidden, cout], trim=True, heads=4, last_heads=1)


def load(a) -> Data:
    """The graph on the CPU with features, labels, train / test masks and ``num_classes``."""
    g = torch.Generator().manual_seed(0)
    if a.graph in ('cora', 'tolokers'):
        name = {'cora': 'Cora', 'tolokers': 'Tolokers'}[a.graph]
        try:
            data = pyg_tc.datasets.load(name, a.root)[0]  # without a root: synthetic, of the same shape
        except pyg_tc.datasets.DatasetUnavailableError as e:
            raise SystemExit(f'error: {e}; check --root, or run without it (and $PYG_TC_DATA) on synthetic data')
        if a.graph == 'tolokers':  # its first split; no validation here
            data.train_mask, data.test_mask = data.train_mask[:, 0].contiguous(), data.test_mask[:, 0].contiguous()
            del data.val_mask
        data.num_classes = int(data.y.max()) + 1
    else:  # products-shaped R-MAT graph (pyg_tc's benchmark generator), random features and labels
        from pyg_tc.bench.graphs import load_graph

        bg = load_graph('products', 'cpu')
        n = bg.num_nodes
        data = Data(
            x=torch.randn(n, 100, generator=g),
            y=torch.randint(0, 47, (n,), generator=g),
            edge_index=bg.edge_index,
            num_nodes=n,
        )
        r = torch.rand(n, generator=g)
        data.train_mask, data.test_mask = r < 0.08, r > 0.9  # ogbn-products: 8% training nodes
        data.num_classes = 47
    return data


class KHopLoader:
    """Without a sampler backend: batches of seeds, each with its full k-hop subgraph, seeds first."""

    def __init__(self, data, seeds, hops: int, batch_size: int, generator):
        self.data, self.seeds, self.hops, self.batch_size, self.generator = data, seeds, hops, batch_size, generator

    def __iter__(self):
        d = self.data
        for s in self.seeds[torch.randperm(self.seeds.numel(), generator=self.generator)].split(self.batch_size):
            subset = k_hop_subgraph(s, self.hops, d.edge_index, num_nodes=d.num_nodes)[0]
            batch = d.subgraph(torch.cat([s, subset[~torch.isin(subset, s)]]))
            batch.batch_size = s.numel()
            yield batch


def loader_name(a) -> str:
    if a.loader == 'pyg_tc':
        return f'pyg_tc.loader.NeighborLoader {a.fanout}' + (f', prefetch {a.prefetch}' if a.prefetch else '')
    return f"PyG's NeighborLoader {a.fanout}" if SAMPLED else 'k-hop subgraphs (no sampler backend)'


def make_loader(data, seeds, a, seed: int, device, shuffle: bool = True):
    """This rank's loader over ``seeds``; with pyg_tc's, ``data`` is on ``device``, where it samples."""
    gen = torch.Generator().manual_seed(seed)
    if a.loader == 'pyg_tc':  # batches sampled and gathered on the device, the CSR on edge_index
        return pyg_tc.loader.NeighborLoader(
            data,
            num_neighbors=a.fanout,
            input_nodes=seeds,
            batch_size=a.batch_size,
            shuffle=shuffle,
            generator=gen,
            device=device,
            prefetch=a.prefetch,
        )
    if SAMPLED:
        from torch_geometric.loader import NeighborLoader

        # a spawned rank's default start method is spawn, which would pickle the shared graph to
        # every worker: on Linux fork them (they never touch CUDA)
        ctx = 'fork' if a.workers > 0 and sys.platform.startswith('linux') else None
        return NeighborLoader(
            data,
            num_neighbors=a.fanout,
            input_nodes=seeds,
            batch_size=a.batch_size,
            shuffle=shuffle,
            generator=gen,  # its .generator: the shuffle draws from it per epoch
            num_workers=a.workers,
            persistent_workers=a.workers > 0,
            multiprocessing_context=ctx,
        )
    return KHopLoader(data, seeds, len(a.fanout), a.batch_size, gen)


def prepare(batch, layers: str, device):
    """The batch on this rank's device (a copy: ``Data.to`` moves in place); pyg_tc's format built
    there unless the batch carries it (pyg_tc's loader); PyG's layers get the plain edges."""
    batch = copy.copy(batch).to(device)
    if layers == 'PyG':
        batch.edge_index = plain_tensor(batch.edge_index)
    elif not isinstance(batch.edge_index, pyg_tc.formats.TCEdgeIndex):
        batch = DegreeBucketTransform()(batch)
    return batch


def forward_of(model, b):
    """The model's output on a batch; trimmed layer by layer on a per-hop padded batch (``PadHops``)."""
    if isinstance(b.get('bucket'), pyg_tc.transforms.HopBucket):
        return pyg_tc.capture.trimmed_forward(model, b)
    return model(b.x, b.edge_index)


def loss_of(model, b):
    """Cross-entropy over the seeds: ``out[:batch_size]`` (``seed_loss`` does that on a padded batch too)."""
    return pyg_tc.capture.seed_loss(forward_of(model, b), b)


def pad_to_buckets(loader, a, device):
    """``--captured``: pad this rank's batches hop by hop (``PadHops``) to two buckets measured on
    10 of them, the largest over the ranks (every rank then captures graphs of the same shapes), so
    the captured step trims each layer's graph (GAT derives its layers' self-loop graphs inside the
    step, on the GPU)."""
    buckets = pyg_tc.transforms.buckets_from_batches(loader, num_batches=10, levels=2, per_hop=True)
    t = torch.tensor([list(b.num_nodes) + list(b.num_edges) for b in buckets], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    H = len(buckets[0].num_edges)
    loader.transform = pyg_tc.transforms.PadHops([(r[: H + 1], r[H + 1 :]) for r in t.tolist()], a.batch_size)


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()


def run(rank: int, world: int, a, data: Data, layers: str) -> dict:
    """One rank's training (after init_process_group): epochs, evaluation, the check."""
    cuda = a.device == 'cuda'
    device = torch.device(f'cuda:{rank % torch.cuda.device_count()}') if cuda else torch.device('cpu')
    # each rank gets its share of the CPU cores for sampling and host work (as torchrun's
    # OMP_NUM_THREADS): W processes of all cores each oversubscribe the host
    # (not pinned to cores: on a 4-GPU KVM guest with one NUMA node, pinning each rank to its own
    # 16 of the 64 vCPUs made the loader 20% slower; docs/results/ddp.md)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    if cuda:
        torch.cuda.set_device(device)
    if rank == 0:
        pyg_tc.info()  # builds the CUDA kernels once (the other ranks wait at the barrier)
    dist.barrier()
    pyg_tc.info()
    # the same shuffled training nodes on every rank, cut into equal shares
    train = data.train_mask.nonzero().view(-1)
    train = train[torch.randperm(train.numel(), generator=torch.Generator().manual_seed(0))]
    share = train[: train.numel() // world * world].view(world, -1)[rank]
    steps = share.numel() // a.batch_size + (share.numel() % a.batch_size > 0)
    if a.loader == 'pyg_tc':  # the GPU sampler's graph and features, on this rank's device
        data = copy.copy(data).to(device)  # (a copy: Data.to moves in place)
    loader = make_loader(data, share, a, seed=0, device=device)  # once: the loader's setup converts the graph to CSC
    info = dict(processes=world, layers=layers, loader=loader_name(a), model=a.model, graph=a.graph, steps=steps)
    if layers == 'loader':  # the floor of any epoch: making the batches on the device, no model
        return dict(info, accuracy=None, **epoch_times(loader, a, rank, device, lambda b: b.to(device)))
    captured = a.captured and layers == 'pyg_tc'
    if captured:
        pad_to_buckets(loader, a, device)
        if cuda:  # DDP, its captured step and the loop on one side stream (see CapturedStep)
            with torch.cuda.stream(torch.cuda.Stream(device)):
                return train_and_test(rank, world, a, data, layers, device, loader, info, captured)
    return train_and_test(rank, world, a, data, layers, device, loader, info, captured)


def train_and_test(
    rank: int, world: int, a, data: Data, layers: str, device, loader, info: dict, captured: bool
) -> dict:
    """The model, its training epochs, the evaluation and (``--check``) the check."""
    cuda = device.type == 'cuda'
    torch.manual_seed(0)
    model = make_model(LAYERS[layers], a.model, data.num_features, a.hidden, data.num_classes)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    ddp = DDP(model.to(device), device_ids=[device] if cuda else None, static_graph=captured)
    opt = torch.optim.Adam(ddp.parameters(), lr=0.01, capturable=captured and cuda)
    record = []  # --check: this rank's (batch on the CPU, loss) per step
    if captured:  # forward, loss, backward (with DDP's all-reduce) and Adam: one CUDA graph per bucket
        info['step'] = (
            'captured, per-hop padded' if isinstance(loader.transform, pyg_tc.transforms.PadHops) else 'captured'
        )
        graph_step = pyg_tc.capture.CapturedStep(ddp, opt, forward=forward_of)

    def train_step(batch):
        b = prepare(batch, layers, device)
        if captured:
            loss = graph_step(b)
        else:
            opt.zero_grad()
            loss = loss_of(ddp, b)
            loss.backward()  # DDP averages the gradients over the ranks here
            opt.step()
        if a.check:
            record.append((copy.copy(batch).to('cpu'), float(loss.detach())))

    ddp.train()
    timed = epoch_times(loader, a, rank, device, train_step)
    # evaluation: every rank scores its share of the test nodes; counts summed over the ranks
    ddp.eval()
    test = data.test_mask.nonzero().view(-1).tensor_split(world)[rank]
    counts = torch.zeros(2, dtype=torch.long, device=device)
    with torch.no_grad():
        for b in make_loader(data, test, a, seed=0, device=device, shuffle=False):
            b = prepare(b, layers, device)
            pred = model(b.x, b.edge_index)[: b.batch_size].argmax(1)  # the module: no DDP sync
            counts[0] += (pred == b.y[: b.batch_size]).sum()
            counts[1] += b.batch_size
    dist.all_reduce(counts)
    out = dict(info, accuracy=float(counts[0]) / max(int(counts[1]), 1), **timed)
    if a.check:
        out.update(check(rank, world, a, model, init, record, layers, device, data))
    return out


def epoch_times(loader, a, rank: int, device, step) -> dict:
    """``a.epochs`` epochs of ``step(batch)`` over ``loader``; each epoch's time is the slowest rank's."""
    cuda = device.type == 'cuda'
    times, ranks = [], []
    for epoch in tqdm(range(a.epochs), 'epochs', leave=False, disable=rank != 0):
        loader.generator.manual_seed(1000 * epoch + rank)  # this epoch's shuffle, as a fresh loader's
        torch.manual_seed(1000 * epoch + rank)  # and neighbour draws (pyg_tc's loader: torch's generator)
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for b in loader:
            step(b)
        if cuda:
            torch.cuda.synchronize()
        t = torch.tensor([time.perf_counter() - t0], device=device)  # (NCCL gathers GPU tensors only)
        every = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(every, t)
        ranks.append([float(e) for e in every])
        times.append(max(ranks[-1]))  # the epoch ends with the slowest rank
    return dict(epoch_s=statistics.median(times[1:] or times), epoch_times=times, rank_epoch_times=ranks)


def check(rank, world, a, model, init, record, layers, device, data) -> dict:
    """Identical parameters on every rank; rank 0 replays every rank's batches in one process."""
    mine = flat_params(model).to(device)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    same = max(float((p - every[0]).abs().max()) for p in every)
    mine = mine.cpu()
    records = [None] * world
    dist.all_gather_object(records, record)
    if rank != 0:
        return {}
    ref = make_model(LAYERS[layers], a.model, data.num_features, a.hidden, data.num_classes)
    ref.load_state_dict(init)
    ref = ref.to(device)
    opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    loss_diff = 0.0
    for step in zip(*records):  # step i of every rank
        opt.zero_grad()
        for b, ddp_loss in step:
            loss = loss_of(ref, prepare(b, layers, device))
            (loss / world).backward()
            loss_diff = max(loss_diff, abs(float(loss.detach()) - ddp_loss))
        opt.step()
    param_diff = float((flat_params(ref) - mine).abs().max())
    return dict(ranks_param_diff=same, loss_diff_vs_single=loss_diff, param_diff_vs_single=param_diff)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def spawned(rank: int, world: int, a, data: Data, layers: str, port: int, result: str) -> None:
    """Entry of a process started by torch.multiprocessing.spawn."""
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    dist.init_process_group('nccl' if a.device == 'cuda' else 'gloo', rank=rank, world_size=world)
    try:
        out = run(rank, world, a, data, layers)
        if rank == 0:
            with open(result, 'a') as f:
                f.write(json.dumps(out) + '\n')
    finally:
        dist.destroy_process_group()


def under_torchrun(a) -> None:
    """``torchrun``: this process is one rank; the graph is memory-mapped from a file local rank 0 wrote."""
    dist.init_process_group('nccl' if a.device == 'cuda' else 'gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    path = os.path.join(a.root or tempfile.gettempdir(), f'ddp_{a.graph}{"" if a.root else "_synthetic"}.pt')
    if int(os.environ.get('LOCAL_RANK', rank)) == 0 and not os.path.exists(path):
        torch.save(load(a), path + '.tmp')
        os.replace(path + '.tmp', path)
    dist.barrier()
    data = torch.load(path, mmap=True, weights_only=False)
    try:
        for layers in a.layers:
            out = run(rank, world, a, data, layers)
            if rank == 0:
                print_table([out])
    finally:
        dist.destroy_process_group()


def print_table(rows) -> None:
    one = {(r['layers']): r['epoch_s'] for r in rows if r['processes'] == 1}
    pyg = {r['processes']: r['epoch_s'] for r in rows if r['layers'] == 'PyG'}
    r0 = rows[0]
    print(f'\n{r0["graph"]}, 2-layer {r0["model"].upper()}, DDP + per-rank mini-batches\n')
    print('| processes | layers | loader | steps / rank | epoch s | speed-up vs 1 process | x PyG | test accuracy |')
    print('|---|---|---|---|---|---|---|---|')
    for r in rows:
        s1 = f'{one[r["layers"]] / r["epoch_s"]:.2f}' if r['layers'] in one else '-'
        xp = f'{pyg[r["processes"]] / r["epoch_s"]:.2f}' if r['layers'] == 'pyg_tc' and r['processes'] in pyg else '-'
        acc = '-' if r['accuracy'] is None else f'{100 * r["accuracy"]:.1f}%'
        step = f', step {r["step"]}' if 'step' in r else ''
        print(
            f'| {r["processes"]} | {r["layers"]} | {r["loader"]}{step} | {r["steps"]} | {r["epoch_s"]:.3f} | {s1} | {xp} '
            f'| {acc} |'
        )
    for r in rows:
        if 'ranks_param_diff' in r:
            ok = r['ranks_param_diff'] == 0 and r['loss_diff_vs_single'] < 1e-5 and r['param_diff_vs_single'] < 1e-5
            print(
                f'\ncheck ({r["processes"]} processes, {r["layers"]}): parameters on every rank identical '
                f'(max diff {r["ranks_param_diff"]:.1e}); against one process replaying every rank\'s batches: '
                f'losses max diff {r["loss_diff_vs_single"]:.1e}, parameters {r["param_diff_vs_single"]:.1e}: '
                f'{"OK" if ok else "FAILED"}'
            )
            if not ok:
                raise SystemExit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument(
        '--root',
        default=os.environ.get('PYG_TC_DATA'),
        help='folder of the real datasets (DIR/planetoid/Cora, DIR/heterophilous/tolokers, downloaded '
        'there if missing); default $PYG_TC_DATA, else synthetic data of the same shape',
    )
    p.add_argument('--small', action='store_true', help='Cora, 2 CPU processes, 1 epoch, with --check (CI)')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--graph', choices=['cora', 'tolokers', 'products'], default='tolokers')
    p.add_argument('--model', choices=['sage', 'gat'], default='sage')
    p.add_argument(
        '--layers',
        help="comma-separated: PyG, pyg_tc, loader (sampling and transfer only: the "
        "epoch's floor); default PyG,pyg_tc (pyg_tc with --small)",
    )
    p.add_argument('--scaling', help='process counts to run in turn (spawned), e.g. 1,2,4')
    p.add_argument('--epochs', type=int, default=4)
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--fanout', default='15,10')
    p.add_argument('--hidden', type=int, default=256)
    p.add_argument(
        '--loader',
        choices=['pyg_tc', 'pyg'],
        default='pyg_tc',
        help="each rank's loader: pyg_tc.loader.NeighborLoader (samples on the rank's device; the "
        "default) or PyG's NeighborLoader (samples on the CPU)",
    )
    p.add_argument(
        '--workers',
        type=int,
        help="with --loader pyg: sampling worker processes per rank (num_workers; 0: the rank "
        "samples); default 4 on GPUs, 0 on CPUs",
    )
    p.add_argument('--json', help='also write the table rows (with every epoch time) to this file')
    p.add_argument(
        '--captured',
        action='store_true',
        help="pyg_tc's layers and loader: padded batches, the step captured (CapturedStep, see the module doc)",
    )
    p.add_argument(
        '--prefetch',
        type=int,
        default=0,
        metavar='K',
        help="pyg_tc's loader: K batches made ahead on the loader's own thread (NeighborLoader(prefetch=K))",
    )
    p.add_argument('--check', action='store_true', help='compare against one process (see the module doc)')
    a = p.parse_args()
    a.layers = [s for s in (a.layers or ('pyg_tc' if a.small else 'PyG,pyg_tc')).split(',') if s]
    unknown = set(a.layers) - set(LAYERS) - {'loader'}
    if unknown:
        p.error(f'--layers: unknown {sorted(unknown)}')
    a.fanout = [int(f) for f in a.fanout.split(',')]
    if a.workers and a.loader == 'pyg_tc':
        p.error(
            "--workers: pyg_tc's loader samples in the rank's process, on its device; the option is for --loader pyg"
        )
    if a.prefetch and a.loader != 'pyg_tc':
        p.error("--prefetch: pyg_tc's loader only (--loader pyg_tc); PyG's loader has --workers")
    if a.captured and a.loader != 'pyg_tc':
        p.error("--captured: needs pyg_tc's loader (--loader pyg_tc)")
    if a.workers is None:  # on GPUs the CPU sampler is the bottleneck: sample ahead (docs/distributed.md)
        a.workers = 4 if a.device == 'cuda' and a.loader == 'pyg' else 0
    if a.small:
        a.graph, a.epochs, a.batch_size, a.hidden, a.check = 'cora', 1, 32, 32, True
        a.scaling = a.scaling or '2'
    if a.root is None and a.graph != 'products' and int(os.environ.get('RANK', 0)) == 0:
        name = {'cora': 'Cora', 'tolokers': 'Tolokers'}[a.graph]
        print(
            f'No --root: synthetic data shaped like {name}; --root DIR runs on the real {name} '
            '(downloaded there if missing).'
        )
    if 'RANK' in os.environ and 'WORLD_SIZE' in os.environ:
        return under_torchrun(a)
    counts = [
        int(c) for c in (a.scaling or str(max(torch.cuda.device_count(), 1) if a.device == 'cuda' else 2)).split(',')
    ]
    data = load(a)
    data.share_memory_()  # the spawned ranks get these tensors without a copy
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, 'rows.jsonl')
        for world in counts:
            for layers in a.layers:
                torch.multiprocessing.spawn(
                    spawned, args=(world, a, data, layers, free_port(), result), nprocs=world, join=True
                )
                with open(result) as f:
                    rows = [json.loads(line) for line in f]
                acc = rows[-1]['accuracy']
                print(
                    f'[{world} processes, {layers}] epoch {rows[-1]["epoch_s"]:.3f} s '
                    f'(epochs: {", ".join(f"{t:.3f}" for t in rows[-1]["epoch_times"])})'
                    + ('' if acc is None else f', test accuracy {100 * acc:.1f}%'),
                    flush=True,
                )
    print(f'(pyg_tc backend: {pyg_tc.info()["backend"]}; loader: {loader_name(a)})')
    print_table(rows)
    if a.json:
        with open(a.json, 'w') as f:
            f.writelines(json.dumps(r) + '\n' for r in rows)


if __name__ == '__main__':
    main()
