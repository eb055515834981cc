"""``CapturedStep``: a training step on padded mini-batches
(:mod:`pyg_tc.loader.pad`) captured once per bucket in a CUDA graph and
replayed for every batch of that bucket, so the host no longer paces the step.

The recipe is PyTorch's whole-network capture (``torch.cuda.graphs``), as
NVIDIA's MLPerf GNN code applies it to sampled batches:

* per bucket, the first batch is copied into static buffers (every tensor of
  the batch: features, labels, masks, the CSR and what padding built for it);
* warm-up steps on a side stream (lazy allocations, the optimizer's state),
  then forward + loss + backward (+ the optimizer's step) captured in one
  ``torch.cuda.CUDAGraph``; the model's parameters, buffers and the
  optimizer's state are then put back as they were before the warm-up, so
  the run trains exactly as the eager loop would;
* per step: the batch copied into its bucket's buffers, one replay;
* a batch that fits no bucket (``batch.get('bucket')`` is None), a CPU batch,
  and every step under a ``GradScaler`` take the eager path (the scaler's
  step reads its inf check on the host; its forward + backward are still
  captured).

Memoised structures computed inside the step (a GCN normalisation, GAT's
loop-fill index) are dropped before the capture, so each replay recomputes
them from the batch in the buffers; what padding built (the CSR, GAT's
padded self-loop graph) is part of the batch and copied per step. A model
that trims by layer (PyG's ``trim_to_layer``) runs on per-hop padded batches
(:class:`~pyg_tc.loader.PadHops`) with ``forward=``
:func:`~pyg_tc.loader.trimmed_forward`: its per-layer graphs, memoised on the
batch's graph, are such structures, derived inside each replay.

DistributedDataParallel (``static_graph=True`` recommended): the model may be
a ``DDP`` module; DDP's all-reduce is then part of each captured backward
(NCCL records into CUDA graphs). DDP keeps its parameters' gradient
accumulators from its construction, on the stream current then, and autograd
joins that stream in every backward: a capture on another stream would make
it depend on the capturing one, which CUDA refuses. So build DDP, the
``CapturedStep`` and run the loop under one side stream
(``with torch.cuda.stream(s): ...``); the step warms up and captures on it
(a DDP model under the default stream is refused with that advice). As
PyTorch's CUDA-graph notes ask, DDP runs 11 eager, synchronised iterations
before its first capture: on every rank the first call runs them on its batch
(parameters and optimizer state put back afterwards). Later captures warm up
through the wrapped module (``ddp.module``: no collective, no change to DDP's
state, and again put back), so every call after the first is one
synchronised step on every rank, whether it replays, captures or runs
eagerly, as long as the ranks make the same number of calls (DDP's own
rule). Give every rank the same buckets (``all_reduce`` them with ``MAX``),
as the tested recipe does. Free the step (:meth:`~pyg_tc.loader.CapturedStep.close`) before
``destroy_process_group()``: graphs holding NCCL work keep it waiting.

Limits: the model's forward must take ``(x, edge_index)`` (or pass
``forward=``), its loss a ``(out, batch)`` function; the optimizer must be
capturable (Adam / AdamW with ``capturable=True``; SGD as is). State the
optimizer creates on its first step is restored to zeros (Adam's, AdamW's,
RMSprop's and SGD's without dampening start so).
"""
from __future__ import annotations

import contextlib
import copy
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data

from ..formats.carrier import _ATTR, attach, plain_tensor
from .loader import _tensors
from .pad import seed_loss

#: eager DDP iterations before DDP's first capture (PyTorch's CUDA-graph notes: at least 11)
DDP_WARMUP = 11


def check_capturable(optimizer: torch.optim.Optimizer) -> None:
    """Raises where the optimizer's step cannot be captured (Adam / AdamW
    without ``capturable=True`` keep their step count on the host)."""
    for group in optimizer.param_groups:
        if group.get('capturable') is False:
            raise ValueError(f'pyg_tc: CapturedStep needs a capturable optimizer: build '
                             f'{type(optimizer).__name__} with capturable=True')


def _forward(model: torch.nn.Module, batch: Data) -> Tensor:
    return model(batch.x, batch.edge_index)


def _is_ddp(model: torch.nn.Module) -> bool:
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def _static_copy(batch: Data) -> Data:
    """``batch`` with every tensor copied to fresh memory (shared tensors
    stay shared): the step's input buffers for one bucket."""
    out = copy.deepcopy(batch)
    ei = out.edge_index
    graph = getattr(ei, _ATTR, (None, None))[1]
    out.edge_index = attach(ei.as_tensor().clone(), int(batch.num_nodes), graph, sort_order='col')
    return out


def _key(bucket) -> tuple:
    """``bucket`` as a dict key. ``Data.to`` and ``Data.apply`` rebuild a
    named tuple but turn the tuples inside it into lists (a
    :class:`HopBucket`'s per-hop counts), so nested sequences become
    tuples."""
    return tuple(_key(b) if isinstance(b, (list, tuple)) else b for b in bucket)


def _flat(batch: Data) -> List[Tensor]:
    """Every tensor of a batch, in a fixed order; an ``EdgeIndex`` as the
    plain tensor it wraps (zero-copy), so ``copy_`` writes its memory."""
    return [plain_tensor(t) for t in _tensors(batch, set())]


class _Captured:
    """One bucket's buffers and graph."""

    def __init__(self, static: Data, graph: torch.cuda.CUDAGraph, loss: Tensor, buffers: List[Tensor],
                 grads: List[Optional[Tensor]]):
        self.static, self.graph, self.loss, self.buffers = static, graph, loss, buffers
        #: the gradients the graph's backward writes (what an eager step after a replay reads)
        self.grads = grads
        #: the buffers by dtype: ``_foreach_copy_`` copies a list of one dtype in a few kernels
        #: (multi_tensor_apply), a mixed list one tensor at a time (a batch: about 45 copies)
        by: dict = {}
        for i, b in enumerate(buffers):
            by.setdefault(b.dtype, []).append(i)
        self.groups = [(idx, [buffers[i] for i in idx]) for idx in by.values()]

    def copy_in(self, src: List[Tensor]) -> None:
        """Copies a batch's tensors (``_flat`` order) into the buffers."""
        for idx, bufs in self.groups:
            torch._foreach_copy_(bufs, [src[i] for i in idx], non_blocking=True)


class CapturedStep:
    r"""A training step (forward, loss, backward, optimizer step) captured in
    a CUDA graph per bucket of padded batches (see the module doc)::

        loader = pyg_tc.loader.NeighborLoader(data, [15, 10, 5], batch_size=1024, input_nodes=train)
        pad = PadToBuckets(buckets_from_batches(loader), seed_capacity=1024)
        loader.transform = pad
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
        step = pyg_tc.loader.CapturedStep(model, opt)
        for batch in loader:
            loss = step(batch)  # a CUDA tensor; no synchronisation

    Args:
        model (torch.nn.Module): the model (on the GPU).
        optimizer (torch.optim.Optimizer): its optimizer; Adam / AdamW need
            ``capturable=True``.
        loss_fn (Callable, optional): ``loss_fn(out, batch) -> Tensor``
            (default: :func:`~pyg_tc.loader.seed_loss`, cross-entropy over
            the real seeds). It must keep static shapes on padded batches.
        forward (Callable, optional): ``forward(model, batch) -> out``
            (default: ``model(batch.x, batch.edge_index)``).
        autocast (torch.dtype, optional): run forward and loss under
            ``torch.autocast('cuda', autocast)``.
        scaler (torch.amp.GradScaler, optional): scaled backward (captured)
            and the scaler's step and update (eager).
        warmup (int, optional): warm-up steps before each capture (default 3).
        stream (torch.cuda.Stream, optional): the stream warm-ups and
            captures run on (default: a new side stream per capture; for a
            DDP model the stream current at construction, see the module doc).
            A DDP model first runs ``DDP_WARMUP`` (11) synchronised steps on
            its first call (see the module doc).
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 loss_fn: Callable[[Tensor, Data], Tensor] = seed_loss,
                 forward: Callable[[torch.nn.Module, Data], Tensor] = _forward,
                 autocast: Optional[torch.dtype] = None, scaler: Optional[Any] = None, warmup: int = 3,
                 stream: Optional[torch.cuda.Stream] = None):
        cuda = any(p.is_cuda for p in model.parameters())
        if cuda:
            check_capturable(optimizer)
        if cuda and _is_ddp(model) and stream is None:
            cur = torch.cuda.current_stream()
            if cur.cuda_stream == torch.cuda.default_stream().cuda_stream:
                raise ValueError('pyg_tc: CapturedStep with DistributedDataParallel: build DDP, the CapturedStep '
                                 'and run the loop under one side stream (s = torch.cuda.Stream(); with '
                                 'torch.cuda.stream(s): model = DDP(...); step = CapturedStep(model, opt); ...), '
                                 "so DDP's gradient accumulators live on the stream the step is captured on")
            stream = cur
        self.stream = stream
        self.model, self.optimizer, self.loss_fn, self.forward = model, optimizer, loss_fn, forward
        self.autocast, self.scaler, self.warmup = autocast, scaler, int(warmup)
        self.graphs: Dict[Any, _Captured] = {}
        #: a DDP model still needs its eager iterations before a capture
        self._ddp_pending = _is_ddp(model)
        #: steps taken by replay and eagerly
        self.replays = self.eager_steps = 0

    # -- one step -----------------------------------------------------------
    def _amp(self):
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast('cuda', dtype=self.autocast, cache_enabled=False)

    def _loss(self, batch: Data, model: Optional[torch.nn.Module] = None) -> Tensor:
        with self._amp():
            return self.loss_fn(self.forward(self.model if model is None else model, batch), batch)

    def _backward(self, loss: Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def _optimizer_step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def eager(self, batch: Data) -> Tensor:
        """The same step without capture (what a batch outside every bucket
        gets)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._loss(batch)
        self._backward(loss)
        self._optimizer_step()
        self.eager_steps += 1
        return loss.detach()

    def __call__(self, batch: Data) -> Tensor:
        """One training step on ``batch``; returns its loss (a detached
        tensor on the batch's device; reading it synchronises)."""
        bucket = batch.get('bucket')
        if self._ddp_pending and batch.x.is_cuda:
            self._ddp_warmup(batch)
        if bucket is None or not batch.x.is_cuda:
            return self.eager(batch)
        key = _key(bucket)
        cap = self.graphs.get(key)
        if cap is None:
            cap = self.graphs[key] = self._capture(batch)
        src = _flat(batch)
        if len(src) != len(cap.buffers) or any(a.shape != b.shape or a.dtype != b.dtype
                                               for a, b in zip(src, cap.buffers)):
            return self.eager(batch)  # another structure (e.g. built by other layers): eager
        cap.copy_in(src)
        cap.graph.replay()
        if self.scaler is not None:  # its step reads .grad: the graph's (an eager step may have replaced them)
            for p, g in zip(self.model.parameters(), cap.grads):
                p.grad = g
            self._optimizer_step()
        self.replays += 1
        return cap.loss.detach().clone()

    def close(self) -> None:
        """Frees the captured graphs and their static buffers (later calls
        capture again). With DDP, call it (or drop the step) before
        ``torch.distributed.destroy_process_group()``: graphs that hold NCCL
        work keep ``destroy_process_group`` waiting (it did not return on two
        H100s, NCCL 2.28)."""
        if self.graphs and torch.cuda.is_available():
            torch.cuda.synchronize()
        self.graphs.clear()

    # -- capture ------------------------------------------------------------
    def _snapshot(self) -> tuple:
        model = {k: v.detach().clone() for k, v in self.model.state_dict(keep_vars=True).items()
                 if isinstance(v, Tensor)}
        opt = {id(t): t.detach().clone() for st in self.optimizer.state.values() for t in st.values()
               if isinstance(t, Tensor)}
        return model, opt

    def _restore(self, snap: tuple) -> None:
        model, opt = snap
        with torch.no_grad():
            for k, v in self.model.state_dict(keep_vars=True).items():
                if k in model:
                    v.copy_(model[k])
            for st in self.optimizer.state.values():
                for t in st.values():
                    if isinstance(t, Tensor):
                        if id(t) in opt:
                            t.copy_(opt[id(t)])
                        else:  # created by the warm-up: as a first step finds it
                            t.zero_()

    def _warm(self, batch: Data, steps: int, model: Optional[torch.nn.Module] = None) -> None:
        """``steps`` eager steps on a side stream (the caller puts the state back)."""
        side = self.stream or torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(steps):
                self.optimizer.zero_grad(set_to_none=True)
                loss = self._loss(batch, model)
                self._backward(loss)
                if self.scaler is None:
                    self.optimizer.step()
        torch.cuda.current_stream().wait_stream(side)

    def _ddp_warmup(self, batch: Data) -> None:
        """DDP's eager iterations before its first capture, on every rank's
        first call (synchronised: every rank runs them); state put back."""
        snap = self._snapshot()
        self._warm(batch, DDP_WARMUP)
        torch.cuda.synchronize()
        self._restore(snap)
        self._ddp_pending = False

    def _capture(self, batch: Data) -> _Captured:
        static = _static_copy(batch)
        buffers = _flat(static)  # the inputs; what the step memoises later is computed in the graph
        graphs = _graphs(static)
        before = [g.derived_keys() for g in graphs]
        snap = self._snapshot()
        # a DDP model warms up through the module it wraps: no collective, so the ranks stay in step
        self._warm(static, self.warmup, self.model.module if _is_ddp(self.model) else None)
        for g, keys in zip(graphs, before):  # recomputed inside the graph on every replay
            g.drop_derived(keep=keys)
        graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)
        side = self.stream or torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        # thread_local: a prefetching loader's thread may call into CUDA during the capture
        with torch.cuda.graph(graph, stream=side, capture_error_mode='thread_local'):
            loss = self._loss(static)
            self._backward(loss)
            if self.scaler is None:
                self.optimizer.step()
        torch.cuda.synchronize()
        self._restore(snap)
        return _Captured(static, graph, loss, buffers, [p.grad for p in self.model.parameters()])


def _graphs(batch: Data) -> list:
    """Every CSRGraph reachable from a batch (its adjacency's, and those
    memoised on it: GAT's padded self-loop graph)."""
    from ..formats.csr import CSRGraph
    out, seen, todo = [], set(), [batch.edge_index]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, CSRGraph):
            out.append(obj)
            todo.extend(obj.derived_values())
        elif isinstance(obj, (tuple, list)):
            todo.extend(obj)
        elif isinstance(obj, Tensor) and hasattr(obj, _ATTR):
            todo.append(getattr(obj, _ATTR))
    return out
