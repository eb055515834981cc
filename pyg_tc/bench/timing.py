"""Timing helpers (per call, and kernel-only by CUDA-graph replay), peak-memory
tracking and the copy-bandwidth ceiling.

On a GPU every repetition is bracketed by CUDA events (device time, no host
sync inside the loop) after a warm-up; the median is the reported number. On
the CPU the same loop uses ``time.perf_counter``.
"""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, Optional, Sequence

import torch

from .._cuda_graph import capture_graph

MB = 2**20


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    reps: int

    @property
    def spread(self) -> float:
        """(max - min) / median: how noisy the repetitions were."""
        return (self.max_ms - self.min_ms) / self.median_ms if self.median_ms > 0 else 0.0

    def as_dict(self, prefix: str) -> Dict[str, float]:
        return {f'{prefix}_ms': self.median_ms, f'{prefix}_min_ms': self.min_ms,
                f'{prefix}_max_ms': self.max_ms, f'{prefix}_spread': round(self.spread, 4),
                f'{prefix}_reps': self.reps}


def _is_cuda(device) -> bool:
    if device is None:
        return torch.cuda.is_available()
    return torch.device(device).type == 'cuda'


def bench(fn: Callable[[], object], warmup: int = 10, rep: int = 50, device=None,
          max_time_s: Optional[float] = None) -> Timing:
    """Median / min / max time of ``fn()`` in ms over ``rep`` repetitions after
    ``warmup`` calls. ``max_time_s`` lowers ``rep`` (to no fewer than 3) when
    the warm-up shows that the repetitions would take longer than that."""
    cuda = _is_cuda(device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(warmup):
        fn()
    sync()
    if max_time_s is not None and warmup > 0:
        per_call = (time.perf_counter() - t0) / warmup
        rep = max(3, min(rep, int(max_time_s / max(per_call, 1e-9))))
    times = []
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(rep)]
        for s, e in ev:
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in ev]
    else:
        for _ in range(rep):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return Timing(statistics.median(times), min(times), max(times), rep)


def bench_graph_replay(fns: Sequence[Callable[[], object]], warmup: int = 3, rep: int = 30,
                       device=None) -> Timing:
    """Device time per call with no host overhead: all ``fns`` (one call each,
    e.g. the same op on rotating inputs) are captured into one CUDA graph whose
    replays are timed; the result is divided by ``len(fns)``. This is the
    kernel-only time; :func:`bench` is the per-call time a Python user sees."""
    t = bench(capture_graph(fns, warm_passes=2).replay, warmup, rep, device)
    n = len(fns)
    return Timing(t.median_ms / n, t.min_ms / n, t.max_ms / n, t.reps)


@contextmanager
def track_memory(device=None) -> Iterator[Dict[str, Optional[float]]]:
    """Peak GPU memory of the enclosed block (MiB). ``resident_mb`` is what was
    already allocated on entry (graph, features, model); ``peak_mb`` is the
    absolute peak inside the block; ``extra_mb`` = peak - resident. All None
    on the CPU."""
    stats: Dict[str, Optional[float]] = {'resident_mb': None, 'peak_mb': None, 'extra_mb': None}
    cuda = _is_cuda(device)
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
    """Measured device-to-device copy bandwidth in GB/s (1e9 B/s), counting the
    bytes read plus the bytes written: the practical ceiling for a
    memory-bound kernel. Default buffer: 2 GiB on a GPU, 64 MiB on the CPU."""
    cuda = _is_cuda(device)
    dev = torch.device(device) if device is not None else torch.device('cuda' if cuda else 'cpu')
    nbytes = nbytes or (2**31 if cuda else 2**26)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), warmup=3, rep=20, device=dev)
    del src, dst
    return {'copy_gbps': 2 * nbytes / (t.median_ms * 1e-3) / 1e9, 'copy_bytes': nbytes,
            'copy_ms': t.median_ms}
