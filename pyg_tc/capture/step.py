"""``CapturedStep`` and ``CapturedForward``: a training step, or an inference
forward, captured in a CUDA graph and replayed, so the host no longer paces
the step.

* **A full graph** (a ``Data`` without ``bucket``, e.g. Cora) is captured on
  the data's own tensors the second time the same tensors come and replayed
  from then on, nothing copied (features changed in place are read by the
  next replay; structures the layers memoise on the graph are constants of
  the captured graph).
* **Padded mini-batches** (``batch.bucket`` set, :mod:`pyg_tc.transforms.pad`)
  get one graph per bucket; each batch is copied into the bucket's static
  buffers, then replayed (structures the layers memoise inside the step are
  recomputed by each replay).

The recipe is PyTorch's whole-network capture (``torch.cuda.graphs``), as
NVIDIA's MLPerf GNN code applies it: warm-up steps on a side stream, then
forward + loss + backward (+ the optimizer's step) captured in one
``torch.cuda.CUDAGraph``; parameters, buffers and optimizer state are put
back as they were before the warm-up, so the run trains exactly as the eager
loop would. A CPU batch, a batch that fits no bucket and the optimizer step
under a ``GradScaler`` run eagerly; code that synchronises inside the step
raises before the capture, naming the fix. DDP and the limits:
:class:`CapturedStep`; the recipes: ``docs/pipelines.md``.
"""

from __future__ import annotations

import contextlib
import copy
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..formats.carrier import attach, graph_of, plain_tensor
from ..ops.dispatch import kernel_paths
from ..loader.loader import _tensors
from .half_weights import HalfWeights
from .losses import step_loss
from .padded import padding

#: eager DDP iterations before DDP's first capture (PyTorch's CUDA-graph notes: at least 11)
DDP_WARMUP = 11


def check_capturable(optimizer: torch.optim.Optimizer) -> None:
    """Raises where the optimizer's step cannot be captured (Adam / AdamW
    without ``capturable=True`` keep their step count on the host)."""
    for group in optimizer.param_groups:
        if group.get('capturable') is False:
            raise ValueError(
                f'pyg_tc: CapturedStep needs a capturable optimizer: build '
                f'{type(optimizer).__name__} with capturable=True'
            )


def _forward(model: torch.nn.Module, batch: Data) -> Tensor:
    if isinstance(batch, HeteroData):
        return model(batch.x_dict, batch.edge_index_dict)
    return model(batch.x, batch.edge_index)


def _stores(batch: Data) -> list:
    """A batch's attribute stores: a ``Data``'s own, a ``HeteroData``'s
    global, node and edge stores."""
    return list(batch.stores) if isinstance(batch, HeteroData) else [batch._store]


def _cuda_device(batch: Data) -> Optional[torch.device]:
    """The CUDA device of the batch's node features (``x``; for a
    ``HeteroData`` its first node type's with ``x``), or None: the step runs
    eagerly."""
    for store in _stores(batch):
        x = store.get('x')
        if isinstance(x, Tensor):
            return x.device if x.is_cuda else None
    return None


def _is_ddp(model: torch.nn.Module) -> bool:
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def _static_copy(batch: Data) -> Data:
    """``batch`` with every tensor copied to fresh memory (shared tensors
    stay shared): the step's input buffers for one bucket."""
    out = copy.deepcopy(batch)
    for store in _stores(out):
        ei = store.get('edge_index')
        if ei is None:
            continue
        size = store.size() if isinstance(out, HeteroData) else int(batch.num_nodes)
        store.edge_index = attach(ei.as_tensor().clone(), size, graph_of(ei), sort_order='col')
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

    def __init__(
        self,
        static: Data,
        graph: torch.cuda.CUDAGraph,
        out: Tensor,
        buffers: List[Tensor],
        grads: List[Optional[Tensor]],
    ):
        self.static, self.graph, self.out, self.buffers = static, graph, out, buffers
        #: the gradients the graph's backward writes (what an eager step after a replay reads)
        self.grads = grads
        #: a full graph's attribute tensors (held: the graph reads them)
        self.inputs: List[Tensor] = []
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


def _identity(batch: Data) -> Tuple[tuple, List[Tensor]]:
    """A full graph's identity and its attribute tensors: each tensor's name,
    object, address, shape, strides and dtype, and ``edge_index``'s version
    (an in-place change of the edges makes the memoised structures stale:
    the eager path then sees it)."""
    key, tensors = [], []
    for store in _stores(batch):
        for k, v in store.items():
            if isinstance(v, Tensor):
                t = plain_tensor(v)
                key.append((store._key, k, id(v), t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t.device))
                tensors.append(v)
                if k == 'edge_index':
                    key.append(getattr(v, '_version', None))
    return tuple(key), tensors


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


@contextlib.contextmanager
def _sync_is_error():
    """Inside: an operation that synchronises the host with the GPU raises
    (``torch.cuda.set_sync_debug_mode('error')``)."""
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode('error')
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(old)


def _reraise_capture_error(e: RuntimeError, what: str) -> None:
    msg = str(e)
    if any(k in msg.lower() for k in ('captur', 'operation not permitted', 'synchroniz')):
        raise RuntimeError(
            f'pyg_tc: {what} could not be captured in a CUDA graph: something inside it synchronises with '
            f'the host or is not capturable (.item(), .cpu(), printing a CUDA tensor, boolean-mask indexing '
            f'such as out[data.train_mask], torch.nonzero). Use static-shape code (e.g. pyg_tc.capture.masked_loss '
            f'instead of indexing by a mask) or call the model eagerly. CUDA said: {msg.splitlines()[0]}'
        ) from e


class _Replayer:
    """What :class:`CapturedStep` and :class:`CapturedForward` share: the
    captured graphs (by bucket, or by a full graph's identity), the warm-up,
    the snapshot of the model's (and optimizer's) state, and the choice
    between replay and the eager path (see the module doc)."""

    #: full-graph identities remembered (a full graph is captured the second time it comes)
    SEEN = 8

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: Optional[torch.optim.Optimizer],
        forward: Callable[[torch.nn.Module, Data], Any],
        autocast: Optional[torch.dtype],
        warmup: int,
        stream: Optional[torch.cuda.Stream],
    ):
        self.model, self.optimizer, self.forward = model, optimizer, forward
        self.autocast, self.warmup, self.stream = autocast, max(int(warmup), 1), stream
        self.graphs: Dict[Any, _Captured] = {}
        self._seen: Dict[tuple, list] = {}
        #: calls answered by a replay and eagerly
        self.replays = self.eager_steps = 0

    def _amp(self):
        if self.autocast is None:
            return contextlib.nullcontext()
        dev = next(iter(self.model.parameters()), torch.empty(0)).device.type
        return torch.autocast('cuda' if dev == 'cuda' else 'cpu', dtype=self.autocast, cache_enabled=False)

    # -- subclass hooks --------------------------------------------------------
    def _body(self, batch: Data, model: Optional[torch.nn.Module] = None) -> Tensor:
        """The work captured (and run by every warm-up): returns the graph's result."""
        raise NotImplementedError

    def eager(self, batch: Data) -> Tensor:
        raise NotImplementedError

    def _result(self, cap: _Captured) -> Tensor:
        return cap.out.detach().clone()

    # -- dispatch --------------------------------------------------------------
    def _lookup(self, batch: Data) -> Optional[_Captured]:
        """The captured graph ready for ``batch`` (captured now if due; for a
        padded batch its tensors copied in), or None: run eagerly."""
        if _cuda_device(batch) is None:
            return None
        bucket = batch.get('bucket')
        if bucket is None:  # a full graph: replay on its own tensors
            key, tensors = _identity(batch)
            cap = self.graphs.get(key)  # (its graph holds the tensors: their ids are not reused)
            if cap is None:
                refs = self._seen.get(key)
                if refs is None or any(r() is not t for r, t in zip(refs, tensors)):  # first time
                    self._seen[key] = [weakref.ref(t) for t in tensors]
                    if len(self._seen) > self.SEEN:
                        del self._seen[next(iter(self._seen))]
                    return None
                cap = self.graphs[key] = self._capture(batch, own=True)
                cap.inputs = tensors
            return cap
        key = _key(bucket)
        cap = self.graphs.get(key)
        if cap is None:
            cap = self.graphs[key] = self._capture(batch, own=False)
        src = _flat(batch)
        if len(src) != len(cap.buffers) or any(
            a.shape != b.shape or a.dtype != b.dtype for a, b in zip(src, cap.buffers)
        ):
            return None  # another structure (e.g. built by other layers): eager
        cap.copy_in(src)
        return cap

    def close(self) -> None:
        """Frees the captured graphs and their static buffers (later calls
        capture again). With DDP, call it (or drop the step) before
        ``torch.distributed.destroy_process_group()``: graphs that hold NCCL
        work keep ``destroy_process_group`` waiting (it did not return on two
        H100s, NCCL 2.28)."""
        if self.graphs and torch.cuda.is_available():
            torch.cuda.synchronize()
        self.graphs.clear()
        self._seen.clear()

    # -- capture ---------------------------------------------------------------
    def _snapshot(self) -> tuple:
        model = {
            k: v.detach().clone() for k, v in self.model.state_dict(keep_vars=True).items() if isinstance(v, Tensor)
        }
        states = self.optimizer.state.values() if self.optimizer is not None else ()
        opt = {id(t): t.detach().clone() for st in states for t in st.values() if isinstance(t, Tensor)}
        half = getattr(self, 'half', None)
        masters = [m.detach().clone() for m in half.masters] if half is not None else []
        return model, opt, masters

    def _restore(self, snap: tuple) -> None:
        model, opt, masters = snap
        half = getattr(self, 'half', None)
        with torch.no_grad():
            if masters:
                torch._foreach_copy_(half.masters, masters)
            for k, v in self.model.state_dict(keep_vars=True).items():
                if k in model:
                    v.copy_(model[k])
            for st in self.optimizer.state.values() if self.optimizer is not None else ():
                for t in st.values():
                    if isinstance(t, Tensor):
                        if id(t) in opt:
                            t.copy_(opt[id(t)])
                        else:  # created by the warm-up: as a first step finds it
                            t.zero_()

    def _warm(self, batch: Data, steps: int, model: Optional[torch.nn.Module] = None) -> None:
        """``steps`` eager runs of the body on a side stream (the caller puts the state back)."""
        side = self.stream or torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), kernel_paths():
            for _ in range(steps):
                self._body(batch, model)
        torch.cuda.current_stream().wait_stream(side)

    def _capture(self, batch: Data, own: bool) -> _Captured:
        """Captures the body on ``batch``'s own tensors (``own``: a full
        graph; what the warm-up memoises stays) or on a static copy (a padded
        batch; what the warm-up memoises is dropped, so the graph recomputes
        it from the buffers)."""
        static = batch if own else _static_copy(batch)
        buffers = _flat(static)
        graphs = [] if own else _graphs(static)
        before = [g.cache.keys() for g in graphs]
        snap = self._snapshot()
        # the warm-up and the capture draw no random numbers of the run: the first replay draws
        # what the next eager step would (dropout as in the eager loop)
        dev = _index(_cuda_device(batch))
        rng = torch.cuda.get_rng_state(dev)
        try:
            # a DDP model warms up through the module it wraps: no collective, so the ranks stay in step
            module = self.model.module if _is_ddp(self.model) else None
            self._warm(static, self.warmup - 1, module)
            try:  # the last warm-up with synchronisations as errors: what would break the capture
                with _sync_is_error():
                    self._warm(static, 1, module)
            except RuntimeError as e:
                _reraise_capture_error(e, type(self).__name__)
                raise
            for g, keys in zip(graphs, before):
                g.cache.drop(keep=keys)
            graph = torch.cuda.CUDAGraph()
            side = self.stream or torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            gen = torch.cuda.default_generators[dev]
            fresh = gen.clone_state()
            try:
                # thread_local: a prefetching loader's thread may call into CUDA during the capture
                with torch.cuda.graph(graph, stream=side, capture_error_mode='thread_local'), kernel_paths():
                    out = self._body(static)
            except RuntimeError as e:
                # (the last warm-up catches what synchronises; another failure) a capture that fails
                # leaves the device's generator in capture mode (every later random op would raise):
                # it gets a state that is not capturing
                gen.graphsafe_set_state(fresh)
                _reraise_capture_error(e, type(self).__name__)
                raise
            torch.cuda.synchronize()
        finally:
            self._restore(snap)
            torch.cuda.set_rng_state(rng, dev)
        grads = [p.grad for p in self._grad_owners()]
        return _Captured(static, graph, out, buffers, grads)

    def _grad_owners(self) -> List[Tensor]:
        """The tensors whose ``.grad`` an eager optimizer step after a replay reads."""
        return list(self.model.parameters())


class CapturedStep(_Replayer):
    r"""A training step (forward, loss, backward, optimizer step) captured in
    a CUDA graph, for a full graph or per bucket of padded batches (the
    module doc says how each is captured). On a full graph::

        data = dataset[0].to('cuda')
        opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)
        step = pyg_tc.capture.CapturedStep(model, opt)   # loss: cross-entropy over data.train_mask
        for epoch in range(200):
            loss = step(data)   # a CUDA tensor; no synchronisation

    On mini-batches padded to buckets::

        loader = pyg_tc.loader.NeighborLoader(data, [15, 10, 5], batch_size=1024, input_nodes=train)
        pad = PadToBuckets(buckets_from_batches(loader), seed_capacity=1024)
        loader.transform = pad
        step = pyg_tc.capture.CapturedStep(model, opt)   # loss: cross-entropy over the real seeds
        for batch in loader:
            loss = step(batch)

    Args:
        model (torch.nn.Module): the model (on the GPU).
        optimizer (torch.optim.Optimizer): its optimizer; Adam / AdamW need
            ``capturable=True``.
        loss_fn (Callable, optional): ``loss_fn(out, batch) -> Tensor``
            (default: :func:`~pyg_tc.capture.step_loss`: cross-entropy over
            the real seeds of a mini-batch, over ``train_mask`` on a full
            graph). It must keep static shapes and not synchronise.
        forward (Callable, optional): ``forward(model, batch) -> out``
            (default: ``model(batch.x, batch.edge_index)``; for ``HeteroData``
            ``model(batch.x_dict, batch.edge_index_dict)``).
        autocast (torch.dtype, optional): run forward and loss under
            ``torch.autocast('cuda', autocast)``.
        scaler (torch.amp.GradScaler, optional): scaled backward (captured)
            and the scaler's step and update (eager). Build the optimizer
            with ``fused=True`` (Adam / AdamW): it unscales and skips a step
            with infinite gradients on the GPU, so the scaler's step does not
            synchronise the host (it does, once per step, for other
            optimizers).
        half_weights (bool, optional): with ``autocast`` fp16 / bf16, the
            model computes with half copies of its parameters
            (:class:`~pyg_tc.capture.HalfWeights`: no weight cast in the
            forward, half activations between half layers) while the
            optimizer steps the fp32 parameters it was built on (its state
            fp32); each step upcasts the gradients into them and rounds them
            back into the half copies. The model's parameters are the half
            copies until :meth:`restore_weights`. Not with DDP.
        warmup (int, optional): warm-up steps before each capture (default 3;
            at least 1: the last runs with synchronisations as errors, so
            that code the capture would fail on raises before it).
        stream (torch.cuda.Stream, optional): the stream warm-ups and
            captures run on (default: a new side stream per capture; for a
            DDP model the stream current at construction, below).
            A DDP model first runs ``DDP_WARMUP`` (11) synchronised steps on
            its first call (below).

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
    as the tested recipe does. Free the step (:meth:`~pyg_tc.capture.CapturedStep.close`) before
    ``destroy_process_group()``: graphs holding NCCL work keep it waiting.

    Heterogeneous batches (``HeteroData`` padded by
    :class:`~pyg_tc.transforms.PadToBuckets` or :class:`~pyg_tc.transforms.PadHops`)
    are captured per bucket the same way: the model's output is the seeds'
    node type's, and the default loss is over those seeds
    (``docs/pipelines.md``, static-shape heterogeneous batches).

    Limits: the model's forward must take ``(x, edge_index)`` (or
    ``(x_dict, edge_index_dict)``; else pass ``forward=``), its loss a
    ``(out, batch)`` function; the optimizer must be
    capturable (Adam / AdamW with ``capturable=True``; SGD as is). State the
    optimizer creates on its first step is restored to zeros (Adam's, AdamW's,
    RMSprop's and SGD's without dampening start so).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable[[Tensor, Data], Tensor] = step_loss,
        forward: Callable[[torch.nn.Module, Data], Tensor] = _forward,
        autocast: Optional[torch.dtype] = None,
        scaler: Optional[Any] = None,
        warmup: int = 3,
        stream: Optional[torch.cuda.Stream] = None,
        half_weights: bool = False,
    ):
        cuda = any(p.is_cuda for p in model.parameters())
        if half_weights and (autocast is None or _is_ddp(model)):
            raise ValueError(
                'pyg_tc: CapturedStep(half_weights=True) needs autocast=torch.bfloat16 or torch.float16, '
                'and a model that is not DistributedDataParallel'
            )
        #: the half copies of the parameters and their fp32 masters (half_weights=True)
        self.half = HalfWeights(model, autocast) if half_weights else None
        if cuda:
            check_capturable(optimizer)
        if cuda and _is_ddp(model) and stream is None:
            cur = torch.cuda.current_stream()
            if cur.cuda_stream == torch.cuda.default_stream().cuda_stream:
                raise ValueError(
                    'pyg_tc: CapturedStep with DistributedDataParallel: build DDP, the CapturedStep '
                    'and run the loop under one side stream (s = torch.cuda.Stream(); with '
                    'torch.cuda.stream(s): model = DDP(...); step = CapturedStep(model, opt); ...), '
                    "so DDP's gradient accumulators live on the stream the step is captured on"
                )
            stream = cur
        super().__init__(model, optimizer, forward, autocast, warmup, stream)
        self.loss_fn, self.scaler = loss_fn, scaler
        #: a DDP model still needs its eager iterations before a capture
        self._ddp_pending = _is_ddp(model)

    def _loss(self, batch: Data, model: Optional[torch.nn.Module] = None) -> Tensor:
        with self._amp(), padding(batch):
            return self.loss_fn(self.forward(self.model if model is None else model, batch), batch)

    def _backward(self, loss: Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def _optimizer_step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if self.half is not None:
            self.half.masters_to_halves()

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if self.half is not None:
            self.half.zero_grad()

    def _backward_to_masters(self, loss: Tensor) -> None:
        self._backward(loss)
        if self.half is not None:
            self.half.grads_to_masters()

    def _grad_owners(self) -> List[Tensor]:
        return [p for group in self.optimizer.param_groups for p in group['params']]

    def _body(self, batch: Data, model: Optional[torch.nn.Module] = None) -> Tensor:
        self._zero_grad()
        loss = self._loss(batch, model)
        self._backward_to_masters(loss)
        if self.scaler is None:
            self.optimizer.step()
            if self.half is not None:
                self.half.masters_to_halves()
        return loss

    def eager(self, batch: Data) -> Tensor:
        """The same step without capture (what a batch outside every bucket
        gets)."""
        self._zero_grad()
        loss = self._loss(batch)
        self._backward_to_masters(loss)
        self._optimizer_step()
        self.eager_steps += 1
        return loss.detach()

    def restore_weights(self) -> None:
        """With ``half_weights=True``: puts the fp32 parameters (the
        optimizer's) back into the model and frees the captured graphs;
        later calls train the fp32 model without half copies."""
        if self.half is not None:
            self.close()
            self.half.restore()
            self.half = None

    def __call__(self, batch: Data) -> Tensor:
        """One training step on ``batch``; returns its loss (a detached
        tensor on the batch's device; reading it synchronises)."""
        if self._ddp_pending and _cuda_device(batch) is not None:
            self._ddp_warmup(batch)
        cap = self._lookup(batch)
        if cap is None:
            return self.eager(batch)
        cap.graph.replay()
        if self.scaler is not None:  # its step reads .grad: the graph's (an eager step may have replaced them)
            for p, g in zip(self._grad_owners(), cap.grads):
                p.grad = g
            self._optimizer_step()
        self.replays += 1
        return self._result(cap)

    def _ddp_warmup(self, batch: Data) -> None:
        """DDP's eager iterations before its first capture, on every rank's
        first call (synchronised: every rank runs them); state put back."""
        snap = self._snapshot()
        self._warm(batch, DDP_WARMUP)
        torch.cuda.synchronize()
        self._restore(snap)
        self._ddp_pending = False


class CapturedForward(_Replayer):
    r"""An inference forward captured in a CUDA graph, for a full graph or
    per bucket of padded batches (the rules of :class:`CapturedStep`)::

        model.eval()
        infer = pyg_tc.capture.CapturedForward(model)
        out = infer(data)          # eager the first time, captured the second, replayed after
        acc = (out.argmax(-1)[data.test_mask] == data.y[data.test_mask]).float().mean()

    Runs under ``torch.no_grad()``; returns a new tensor per call. Put the
    model in the mode you want (``model.eval()``) before the first call: the
    mode is part of what is captured.

    Args:
        model (torch.nn.Module): the model (on the GPU).
        forward (Callable, optional): ``forward(model, batch) -> out``
            (default: ``model(batch.x, batch.edge_index)``; for ``HeteroData``
            ``model(batch.x_dict, batch.edge_index_dict)``).
        autocast (torch.dtype, optional): run the forward under
            ``torch.autocast('cuda', autocast)``.
        warmup (int, optional): warm-up runs before each capture (default 2;
            at least 1, as :class:`CapturedStep`'s).

    Shapes:
        - **input:** a graph or padded batch, ``batch.x`` :math:`(|\mathcal{V}|, F)`
        - **output:** the model's output (a new tensor)
    """

    def __init__(
        self,
        model: torch.nn.Module,
        forward: Callable[[torch.nn.Module, Data], Tensor] = _forward,
        autocast: Optional[torch.dtype] = None,
        warmup: int = 2,
    ):
        super().__init__(model, None, forward, autocast, warmup, None)

    def _body(self, batch: Data, model: Optional[torch.nn.Module] = None) -> Tensor:
        with torch.no_grad(), self._amp():
            return self.forward(self.model if model is None else model, batch)

    def eager(self, batch: Data) -> Tensor:
        """The same forward without capture."""
        self.eager_steps += 1
        return self._body(batch)

    def __call__(self, batch: Data) -> Tensor:
        cap = self._lookup(batch)
        if cap is None:
            return self.eager(batch)
        cap.graph.replay()
        self.replays += 1
        return self._result(cap)


def _graphs(batch: Data) -> list:
    """Every CSRGraph reachable from a batch (its adjacency's, and those
    memoised on it: GAT's padded self-loop graph)."""
    from ..formats.csr import CSRGraph

    out, seen, todo = [], set(), [s.edge_index for s in _stores(batch) if s.get('edge_index') is not None]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, CSRGraph):
            out.append(obj)
            todo.extend(obj.cache.values())
        elif isinstance(obj, (tuple, list)):
            todo.extend(obj)
        elif isinstance(obj, Tensor) and graph_of(obj) is not None:
            todo.append(graph_of(obj))
    return out
