"""One CUDA-graph capture for the two places that time kernels without the
Python launch cost: ``backend='auto'``'s tuning (pyg_tc.ops.sgt) and the
benchmarks' kernel-only timing (pyg_tc.bench.timing)."""

from __future__ import annotations

from typing import Callable, Sequence

import torch


def capture_graph(fns: Sequence[Callable[[], object]], warm_passes: int = 1) -> torch.cuda.CUDAGraph:
    """Runs every distinct callable of ``fns`` ``warm_passes`` times on a side
    stream (allocations, lazy builds and autotuning happen outside the
    capture), then captures one call of each entry of ``fns``, in order, into
    a CUDA graph. Raises what the capture raises (e.g. an op that cannot be
    captured)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warm_passes):
            for f in dict.fromkeys(fns):
                f()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for f in fns:
            f()
    return graph
