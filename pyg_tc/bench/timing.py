"""The measuring half of the benchmark harness (``report.py`` writes):
per-call time (:func:`bench`: CUDA events around each repetition after a
warm-up, ``perf_counter`` on the CPU; the median counts), kernel-only time
(:func:`kernel_time`: CUDA-graph replay, short calls captured back to back),
peak memory, copy bandwidth, training steps, and :func:`measure`, which runs
one case's implementations (ours and the baselines) on the same inputs and
records their times, errors and skip reasons. For loops (training steps,
epochs, samplers): :func:`loop_time` / :func:`loop_ms` (back to back,
synchronised at the ends),
:class:`PhaseTimer` (each phase synchronised) and :func:`kernel_profile`
(GPU time per item from the profiler, its matrix products' share)."""

from __future__ import annotations

import gc
import math
import statistics
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from .._cuda_graph import capture_graph

MB = 2**20
warnings.filterwarnings('ignore', message='.*[Ss]parse CSR tensor support is in beta.*')
warnings.filterwarnings('ignore', message='.*[Ss]parse invariant checks.*')
KERNEL_CALLS = 10
KERNEL_BATCH_MS = 0.5


def is_cuda(device=None) -> bool:
    """Whether ``device`` (default: the default device) is a GPU."""
    return torch.cuda.is_available() if device is None else torch.device(device).type == 'cuda'


def free(device=None) -> None:
    """Collects garbage and returns cached GPU memory."""
    gc.collect()
    if is_cuda(device):
        torch.cuda.empty_cache()


def short_error(e: BaseException) -> str:
    """'oom', or 'Type: first line of the message'."""
    if isinstance(e, torch.OutOfMemoryError):
        return 'oom'
    return f'{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ""}'


@contextmanager
def precision(p: Optional[str]):
    """fp32 matmul precision ('highest', 'high', 'medium') inside the block."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(p or old)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def kernel_time_note(device) -> str:
    """How :func:`kernel_time` timed on ``device``, for report headers."""
    if is_cuda(device):
        return (
            f'kernel-only times (CUDA-graph replay; calls under {KERNEL_BATCH_MS} ms captured '
            f'{KERNEL_CALLS}x back to back), median'
        )
    return 'per-call times (time.perf_counter; no CUDA graphs on the CPU), median'


# -- timing ----------------------------------------------------------------------

#: the 95% two-sided normal quantile, for ``median_ci``
Z95 = 1.96
#: the most repetitions :func:`bench` adds while it waits for a stable median
MAX_REPS = 5000


def median_ci(times: Sequence[float]) -> float:
    """Half the width of the distribution-free 95% confidence interval of the
    median of ``times`` (order statistics at ``n/2 -+ 0.98 sqrt(n)``), relative
    to the median: the median is known within about ``+-`` this fraction.
    ``inf`` for fewer than 6 times (too few for any interval)."""
    n = len(times)
    if n < 6:
        return math.inf
    t, med = sorted(times), statistics.median(times)
    lo = max(1, math.floor(n / 2 - Z95 * math.sqrt(n) / 2))
    hi = min(n, math.ceil(1 + n / 2 + Z95 * math.sqrt(n) / 2))
    return (t[hi - 1] - t[lo - 1]) / (2 * med) if med > 0 else math.inf


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    reps: int
    #: with a stability target (:func:`bench`'s ``target``): ``median_ci``,
    #: and whether it stayed above the target (the median is noisy)
    ci: Optional[float] = None
    noisy: Optional[bool] = None

    @property
    def spread(self) -> float:
        """How noisy the repetitions were, as ``(max - min) / median``."""
        return (self.max_ms - self.min_ms) / self.median_ms if self.median_ms > 0 else 0.0

    def as_dict(self, prefix: str) -> Dict[str, float]:
        """``<prefix>_ms`` (median), ``_min_ms``, ``_max_ms``, ``_spread``, ``_reps``;
        with a stability target also ``_ci`` and ``_noisy``."""
        d = {
            f'{prefix}_ms': self.median_ms,
            f'{prefix}_min_ms': self.min_ms,
            f'{prefix}_max_ms': self.max_ms,
            f'{prefix}_spread': round(self.spread, 4),
            f'{prefix}_reps': self.reps,
        }
        if self.ci is not None:
            d.update(
                {
                    f'{prefix}_ci': round(self.ci, 4) if math.isfinite(self.ci) else self.ci,
                    f'{prefix}_noisy': bool(self.noisy),
                }
            )
        return d

    @classmethod
    def of(cls, times: Sequence[float], target: Optional[float] = None) -> 'Timing':
        """The Timing of a list of times in ms; with ``target``, its
        ``median_ci`` and whether that is above ``target``."""
        ci = median_ci(times) if target is not None else None
        return cls(
            statistics.median(times), min(times), max(times), len(times), ci, None if ci is None else ci > target
        )


class Stopwatch:
    """Times the regions between :meth:`start` and :meth:`stop` (at most ``n``):
    CUDA events made up front and read by :meth:`times_ms` (no host sync in
    between) on a GPU, ``perf_counter`` on the CPU."""

    def __init__(self, device=None, n: int = 1):
        self.cuda, self._done = is_cuda(device), []
        self._ev = [[torch.cuda.Event(enable_timing=True) for _ in range(2)] for _ in range(n)] if self.cuda else []

    def start(self) -> None:
        """Starts a region."""
        if self.cuda:
            self._ev[len(self._done)][0].record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        """Ends the region."""
        if self.cuda:
            self._ev[len(self._done)][1].record()
        self._done.append(self._ev[len(self._done)] if self.cuda else (time.perf_counter() - self._t0) * 1e3)

    def times_ms(self) -> List[float]:
        """The regions' times in ms (waits for the GPU)."""
        if self.cuda:
            torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in self._done] if self.cuda else list(self._done)


def bench(
    fn: Callable[[], object],
    warmup: int = 10,
    rep: int = 50,
    device=None,
    max_time_s: Optional[float] = None,
    wall: bool = False,
    target: Optional[float] = None,
    max_total_s: float = 2.0,
) -> Timing:
    """Median / min / max ms of ``fn()`` over ``rep`` repetitions after
    ``warmup`` calls. ``max_time_s`` lowers ``rep`` (to no fewer than 3) when the
    warm-up shows the repetitions would take longer; ``wall``: host wall time
    with a device sync after every call.

    ``target``: repeat until the median is stable, that is until its 95%
    confidence interval (``median_ci``) is within ``+-target`` of it,
    doubling the repetitions each round (at least 10 in all), for at most
    ``max_total_s`` seconds (warm-up included) and ``MAX_REPS``
    repetitions; the Timing then says the interval and whether the median
    stayed noisy."""
    sync = torch.cuda.synchronize if is_cuda(device) else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(warmup):
        fn()
    sync()
    if max_time_s is not None and warmup > 0:
        rep = max(3, min(rep, int(max_time_s / max((time.perf_counter() - t0) / warmup, 1e-9))))
    if target is not None:
        rep = max(rep, 10)
    times = _timed(fn, rep, device, wall, sync)
    while (
        target is not None
        and median_ci(times) > target
        and len(times) < MAX_REPS
        and time.perf_counter() - t0 < max_total_s
    ):
        per_call_s = max(time.perf_counter() - t0, 1e-9) / (warmup + len(times))
        left = int((max_total_s - (time.perf_counter() - t0)) / per_call_s)
        times += _timed(fn, max(1, min(len(times), left, MAX_REPS - len(times))), device, wall, sync)
    return Timing.of(times, target)


def synchronize(device=None) -> None:
    """Waits for the device's work (nothing on the CPU)."""
    if is_cuda(device):
        torch.cuda.synchronize()


def loop_time(
    fn: Callable[[object], object], items: Iterable[object], device=None, warmup: int = 0
) -> Tuple[float, int]:
    """``(seconds, items timed)`` of ``fn(item)`` back to back over ``items`` (the first ``warmup``
    untimed), synchronised only before and after: what a loop or an epoch sees, host work included."""
    it = iter(items)
    for _ in range(warmup):
        fn(next(it))
    synchronize(device)
    t0, n = time.perf_counter(), 0
    for item in it:
        fn(item)
        n += 1
    synchronize(device)
    return time.perf_counter() - t0, n


def loop_ms(fn: Callable[[object], object], items: Iterable[object], device=None, warmup: int = 1) -> float:
    """Wall ms per item of :func:`loop_time`."""
    seconds, n = loop_time(fn, items, device, warmup)
    if n == 0:
        raise ValueError('loop_ms: no item left to time after the warm-up')
    return 1e3 * seconds / n


class PhaseTimer:
    """Wall ms of consecutive phases of a loop, each ended by a device
    synchronisation: per iteration ``start()``, then ``lap(name)`` after
    each phase; :meth:`mean_ms` gives ``{'<name>_ms': mean}``."""

    def __init__(self, device=None):
        self.device = device
        self.times: Dict[str, List[float]] = {}
        self._t = 0.0

    def start(self) -> None:
        """Starts an iteration (after the device's pending work)."""
        synchronize(self.device)
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        """Ends phase ``name`` (when the device has finished it)."""
        synchronize(self.device)
        now = time.perf_counter()
        self.times.setdefault(name, []).append(1e3 * (now - self._t))
        self._t = now

    def mean_ms(self) -> Dict[str, float]:
        """``<phase>_ms``: each phase's mean over the iterations."""
        return {f'{k}_ms': statistics.mean(v) for k, v in self.times.items()}


def is_matrix_product(kernel: str) -> bool:
    """Whether a kernel is a cuBLAS / CUTLASS GEMM, GEMV or split-K reduction."""
    n = kernel.lower()
    return 'gemm' in n or 'gemv' in n or 'splitk' in n or 'xmma' in n


def kernel_profile(
    fn: Callable[[object], object], items: Iterable[object], device=None, top: int = 0
) -> Dict[str, object]:
    """Per item of ``fn(item)`` (``torch.profiler``): ``gpu_ms`` (kernel times summed), ``dense_ms`` (of
    ``is_matrix_product`` kernels), ``launches`` and the ``top`` ``kernels`` (name, launches, ms). NaN on the CPU."""
    if not is_cuda(device):
        return dict(gpu_ms=float('nan'), dense_ms=float('nan'), launches=float('nan'), kernels=[])
    from torch.profiler import ProfilerActivity, profile

    items = list(items)
    synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for item in items:
            fn(item)
        synchronize(device)
    n = max(len(items), 1)
    ev = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    ev.sort(key=lambda e: -e.self_device_time_total)
    return dict(
        gpu_ms=sum(e.self_device_time_total for e in ev) / 1e3 / n,
        dense_ms=sum(e.self_device_time_total for e in ev if is_matrix_product(e.key)) / 1e3 / n,
        launches=sum(e.count for e in ev) / n,
        kernels=[(e.key[:90], e.count // n, e.self_device_time_total / 1e3 / n) for e in ev[:top]],
    )


def _timed(fn: Callable[[], object], rep: int, device, wall: bool, sync: Callable[[], None]) -> List[float]:
    sw = Stopwatch('cpu' if wall else device, rep)
    for _ in range(rep):
        sw.start()
        fn()
        if wall:
            sync()
        sw.stop()
    return sw.times_ms()


def _replay(fns: Sequence[Callable[[], object]], warmup: int, rep: int, device) -> Timing:
    """Per call: all ``fns`` captured once each in one CUDA graph, its replays timed."""
    t = bench(capture_graph(fns, warm_passes=2).replay, warmup, rep, device)
    return Timing(t.median_ms / len(fns), t.min_ms / len(fns), t.max_ms / len(fns), t.reps)


def kernel_time(
    fns: Union[Callable[[], object], Sequence[Callable[[], object]]],
    device=None,
    rep: int = 20,
    warmup: int = 2,
    fallback: bool = True,
) -> Timing:
    """Kernel-only time per call of ``fns`` (a callable, or a list such as one
    op on rotating inputs), repeated to at least ``KERNEL_CALLS`` calls per graph
    when a call takes under ``KERNEL_BATCH_MS``. A call that cannot be captured
    is timed per call (CUDA events) when ``fallback``, else the error propagates."""
    fns = [fns] if callable(fns) else list(fns)
    if not is_cuda(device):
        return bench(_rotating(fns), warmup=1, rep=rep, device=device)
    try:
        if _replay(fns, warmup, min(rep, 3), device).median_ms < KERNEL_BATCH_MS:
            fns = fns * math.ceil(KERNEL_CALLS / len(fns))
        return _replay(fns, warmup, rep, device)
    except torch.OutOfMemoryError:
        raise
    except RuntimeError:
        if not fallback:
            raise
        torch.cuda.synchronize()
        return bench(_rotating(fns), warmup=3, rep=rep, device=device)


def _rotating(fns: Sequence[Callable[[], object]]) -> Callable[[], object]:
    if len(fns) == 1:
        return fns[0]
    state = [0]

    def call():
        state[0] = (state[0] + 1) % len(fns)
        return fns[state[0]]()

    return call


def warm_up(device, seconds: float = 1.0) -> None:
    """Busy the GPU so it has left its idle clocks before the first timing
    (docs/benchmarks.md, "Harness"). No-op on the CPU."""
    if not is_cuda(device):
        return
    a = torch.randn(4096, 4096, device=device)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize(device)


@contextmanager
def track_memory(device=None) -> Iterator[Dict[str, Optional[float]]]:
    """Peak GPU memory of the block in MiB: ``resident_mb`` allocated on entry,
    ``peak_mb`` the absolute peak inside, ``extra_mb`` = peak - resident; None on the CPU."""
    stats: Dict[str, Optional[float]] = {'resident_mb': None, 'peak_mb': None, 'extra_mb': None}
    cuda = is_cuda(device)
    if cuda:
        torch.cuda.synchronize()
        stats['resident_mb'] = torch.cuda.memory_allocated() / MB
        torch.cuda.reset_peak_memory_stats()
    try:
        yield stats
    finally:
        if cuda:
            torch.cuda.synchronize()
            stats['peak_mb'] = torch.cuda.max_memory_allocated() / MB
            stats['extra_mb'] = stats['peak_mb'] - stats['resident_mb']


def copy_bandwidth(device=None, nbytes: Optional[int] = None) -> Dict[str, float]:
    """Copy bandwidth in GB/s (read + write): the ceiling of a memory-bound
    kernel. Buffer: 2 GiB on a GPU, 64 MiB on the CPU."""
    dev = torch.device(device if device is not None else 'cuda' if torch.cuda.is_available() else 'cpu')
    nbytes = nbytes or (2**31 if dev.type == 'cuda' else 2**26)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), warmup=3, rep=20, device=dev)
    return {'copy_gbps': 2 * nbytes / (t.median_ms * 1e-3) / 1e9, 'copy_bytes': nbytes, 'copy_ms': t.median_ms}


# -- one case: implementations, baselines, errors ----------------------------------


class Skip(str):
    """An implementation that cannot run here; the string is the one-line reason."""


@dataclass
class Impl:
    """An implementation with options: ``post`` maps its output to what is
    compared with the reference, ``precision`` is the fp32 matmul precision."""

    fn: Callable
    post: Optional[Callable] = None
    precision: Optional[str] = None


def rel_errors(out, ref) -> Dict[str, float]:
    """max|out - ref| / max|ref| and ||out - ref|| / ||ref|| in ``ref``'s dtype (inf if not finite)."""
    d = out.to(ref.dtype) - ref
    if not d.numel():
        return {'rel_err': 0.0, 'rel_err_fro': 0.0}
    if not bool(torch.isfinite(d).all()):
        return {'rel_err': math.inf, 'rel_err_fro': math.inf}
    return {
        'rel_err': float(d.abs().max() / ref.abs().max().clamp(min=1e-30)),
        'rel_err_fro': float(d.norm() / ref.norm().clamp(min=1e-30)),
    }


_SKIPS_LOGGED: set = set()


def measure(
    rec: dict,
    impls: Mapping[str, Union[Callable, Impl, Skip]],
    device,
    *,
    rep: int = 20,
    warmup: int = 10,
    per_call: bool = False,
    kernel_rep: Optional[int] = None,
    ref=None,
    errors: Callable = rel_errors,
    inputs: Optional[Sequence] = None,
    max_time_s: Optional[float] = None,
    log: Callable[[str], None] = print,
    target: Optional[float] = None,
    max_total_s: float = 2.0,
) -> dict:
    """Times each implementation of one case into ``rec``, in order, on the
    same inputs (with ``inputs``, functions take one and the calls rotate over
    them so repeated calls do not just hit L2; else no argument).

    Per ``name``: ``name_<k>`` for each ``k`` of ``errors(output, ref)`` when
    ``ref`` is given; with ``per_call`` the :class:`Timing` fields ``name_ms``, ...
    (repeated until stable with ``target``: :func:`bench`) plus kernel-only
    ``name_graph_ms`` on a GPU; else kernel-only ``name_ms``.
    A ``Skip`` or an unsupported-dtype error gives ``name_skipped`` (the
    reason, logged once), any other failure ``name_error``."""
    for name, impl in impls.items():
        if isinstance(impl, Skip):
            _skip(rec, name, str(impl), log)
            continue
        impl = impl if isinstance(impl, Impl) else Impl(impl)
        fns = [lambda x=x, f=impl.fn: f(x) for x in inputs] if inputs is not None else [impl.fn]
        try:
            with precision(impl.precision):
                if ref is not None:
                    out = fns[0]()
                    rec.update({f'{name}_{k}': v for k, v in errors(impl.post(out) if impl.post else out, ref).items()})
                    del out
                if not per_call:
                    rec[f'{name}_ms'] = kernel_time(fns, device, rep).median_ms
                    continue
                rec.update(
                    bench(
                        _rotating(fns), warmup, rep, device, max_time_s, target=target, max_total_s=max_total_s
                    ).as_dict(name)
                )
                if is_cuda(device):
                    try:
                        rec[f'{name}_graph_ms'] = kernel_time(fns, device, kernel_rep or rep, fallback=False).median_ms
                    except Exception as e:
                        rec[f'{name}_graph_error'] = short_error(e)
                        free(device)
        except Exception as e:  # unsupported dtype, OOM, ...
            if isinstance(e, NotImplementedError) or 'not implemented for' in str(e) or 'not supported' in str(e):
                _skip(rec, name, str(e).splitlines()[0][:160] if str(e) else type(e).__name__, log)
            else:
                rec[f'{name}_error'] = short_error(e)
            free(device)
    return rec


def _skip(rec: dict, name: str, reason: str, log) -> None:
    rec[f'{name}_skipped'] = reason
    if (name, reason) not in _SKIPS_LOGGED:
        _SKIPS_LOGGED.add((name, reason))
        log(f'[skip] {name}: {reason}')


def speedups(rec: dict, fast: str, others: Sequence[str], key: str = '{fast}_vs_{other}', suffix: str = '_ms') -> dict:
    """``rec[key]`` = other time / ``fast`` time for each other measured."""
    for o in others:
        a, b = rec.get(f'{fast}{suffix}'), rec.get(f'{o}{suffix}')
        if a and b:
            rec[key.format(fast=fast, other=o)] = b / a
    return rec
