"""What the suites share: the real datasets (:data:`DATASETS`, :func:`load_dataset`,
:func:`split_masks`, read offline from ``$PYG_TC_DATA`` or a suite's ``--data-root``),
their metrics (:func:`evaluate`: accuracy or ROC-AUC) and the full-batch training
loop (:func:`fit`: Adam, the test metric at the first best-val epoch, the median
epoch time)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as Fn
from torch import Tensor

from pyg_tc.bench.graphs import data_dir, pyg_dataset
from pyg_tc.bench.timing import Stopwatch, bench, free, short_error, track_memory

# name -> (sub-folder, folder, PyG class, PyG name, metric)
DATASETS: Dict[str, Tuple[str, str, str, Optional[str], str]] = {
    'cora': ('planetoid', 'Cora', 'Planetoid', 'Cora', 'accuracy'),
    'citeseer': ('planetoid', 'CiteSeer', 'Planetoid', 'CiteSeer', 'accuracy'),
    'tolokers': ('heterophilous', 'tolokers', 'HeterophilousGraphDataset', 'Tolokers', 'roc_auc'),
    'minesweeper': ('heterophilous', 'minesweeper', 'HeterophilousGraphDataset', 'Minesweeper', 'roc_auc'),
    'actor': ('', 'actor', 'Actor', None, 'accuracy'),
}
WARMUP_EPOCHS = 5


def default_data_root() -> Optional[Path]:
    """The real datasets' folder (:func:`graphs.data_dir`: ``$PYG_TC_DATA``), or ``None``
    when it is not set (loading a dataset then says so in one line)."""
    try:
        return data_dir()
    except FileNotFoundError:
        return None


def data_paths(a) -> None:
    """A benchmark CLI's ``a.data_root`` (default: :func:`default_data_root`)
    and ``a.cache_dir`` (optional) as Paths, in place."""
    a.data_root = Path(a.data_root) if a.data_root is not None else default_data_root()
    a.cache_dir = Path(a.cache_dir) if getattr(a, 'cache_dir', None) else None


def load_dataset(name: str, data_root: Path, cache_dir: Optional[Path] = None, normalize: bool = True):
    """The ``Data`` of ``name`` (Planetoid features row-normalized unless ``normalize=False``)."""
    import torch_geometric.transforms as T

    sub, folder, cls, pyg_name, _ = DATASETS[name]
    return pyg_dataset(
        cls,
        sub,
        folder,
        pyg_name,
        data_root,
        cache_dir,
        T.NormalizeFeatures() if cls == 'Planetoid' and normalize else None,
    )[0]


def split_masks(data, seed: int) -> Tuple[Tensor, Tensor, Tensor, int]:
    """(train, val, test) masks and the split; 2-D masks [N, S] use split ``seed % S``."""
    masks = [data.train_mask, data.val_mask, data.test_mask]
    if masks[0].dim() == 1:
        return (*masks, 0)
    split = seed % masks[0].size(1)
    return (*(m[:, split] for m in masks), split)


def roc_auc(score: Tensor, target: Tensor) -> Tensor:
    """Binary ROC-AUC (Mann-Whitney U with average ranks for ties), a 0-d float64
    tensor on ``score``'s device (no host sync); NaN when a class is absent."""
    score, pos = score.detach().double().flatten(), target.flatten().bool()
    _, inv, counts = torch.unique(score, sorted=True, return_inverse=True, return_counts=True)
    first = torch.cumsum(counts, 0) - counts  # 0-based rank of each group's first element
    ranks = (first.double() + (counts.double() + 1) / 2)[inv]  # 1-based average ranks
    n_pos = pos.sum().double()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * (pos.numel() - n_pos))


def evaluate(out: Tensor, y: Tensor, mask: Tensor, metric: str) -> Tensor:
    """The test metric of ``out`` on ``mask``: accuracy, or ROC-AUC of P(class 1)."""
    if metric == 'accuracy':
        return (out[mask].argmax(-1) == y[mask]).double().mean()
    return roc_auc(out[mask].softmax(-1)[:, 1], y[mask])


def fit(
    model,
    data,
    masks,
    metric: str,
    epochs: int,
    lr: float,
    weight_decay: float,
    scaler: Optional['torch.amp.GradScaler'] = None,
) -> dict:
    """Full-batch training with Adam, val / test metric after each epoch (eval
    mode, no grad): the metrics at the first best-val epoch, the last loss and
    the median epoch time (forward + backward + step) after the first 5.
    ``scaler``: a ``torch.amp.GradScaler`` (float16 autocast training)."""
    train, val, test = masks
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    x, y, ei = data.x, data.y, data.edge_index
    sw, vals, tests, t0 = Stopwatch(x.device, epochs), [], [], time.perf_counter()
    for _ in range(epochs):
        model.train()
        sw.start()
        opt.zero_grad(set_to_none=True)
        loss = Fn.cross_entropy(model(x, ei)[train], y[train])
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        sw.stop()
        model.eval()
        with torch.no_grad():
            out = model(x, ei)
            vals.append(evaluate(out, y, val, metric))
            tests.append(evaluate(out, y, test, metric))
    times, best = sw.times_ms(), int(torch.stack(vals).argmax())
    return dict(
        val=float(vals[best]),
        test=float(tests[best]),
        best_epoch=best,
        last_loss=float(loss.detach()),
        epoch_ms=statistics.median(times[WARMUP_EPOCHS:] or times),
        run_s=time.perf_counter() - t0,
    )


# -- the cuSPARSE baseline and the full-batch training step the suites time ----------


def sparse_baseline(device) -> Tuple[str, str, str]:
    """``torch.sparse.mm`` named by what runs it on ``device``: (record key,
    short label, description). cuSPARSE only on an NVIDIA GPU."""
    if torch.device(device).type == 'cuda':
        lib = 'hipSPARSE' if torch.version.hip else 'cuSPARSE'
        return lib.lower(), lib, f'{lib} via torch.sparse.mm (CSR)'
    mkl = ' (MKL)' if torch.backends.mkl.is_available() else ''
    return 'cpu_sparse', 'torch.sparse CPU', f'torch.sparse.mm on the CPU{mkl}, not cuSPARSE'


def sparse_csr(g, values):
    """``torch.sparse`` CSR of ``g``'s adjacency (rows = targets, ``g``'s int32 indices) with edge ``values``."""
    return torch.sparse_csr_tensor(g.rowptr, g.col, values, size=(g.num_rows, g.num_cols), check_invariants=False)


def time_training(
    model,
    x,
    y,
    edge_index,
    steps: int,
    rep: int,
    lr: float = 0.01,
    target: Optional[float] = None,
    max_total_s: float = 2.0,
):
    """Full-batch cross-entropy steps with Adam: the losses of the first
    ``steps`` (also the warm-up), then ``rep`` timed steps (more until the
    median is stable with ``target``: :func:`bench`), peak memory over all.
    Returns (losses, Timing, memory dict)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = Fn.cross_entropy(model(x, edge_index), y)
        loss.backward()
        opt.step()
        return loss

    with track_memory(x.device) as mem:
        losses = [float(step().detach()) for _ in range(steps)]
        t = bench(step, warmup=0, rep=rep, device=x.device, target=target, max_total_s=max_total_s)
    return losses, t, mem


def train_case(
    rec: dict,
    build: Callable[[], torch.nn.Module],
    x,
    y,
    edge_index,
    steps: int,
    rep: int,
    prefix: str = 'step',
    after: Optional[Callable] = None,
    lr: float = 0.01,
    target: Optional[float] = None,
    max_total_s: float = 2.0,
) -> dict:
    """:func:`time_training` of ``build()`` into ``rec``: ``status`` ('ok', 'oom'
    or 'error: ...'), ``<prefix>_ms`` / ``_min_ms`` / ``_max_ms`` / ``_reps``
    (with ``target`` also ``_ci`` / ``_noisy``: :func:`bench`), the losses and
    the memory fields; then ``after(model)``. ``edge_index`` may be a
    function, called after ``build()``."""
    try:
        model = build()
        ei = edge_index() if callable(edge_index) else edge_index
        losses, t, mem = time_training(model, x, y, ei, steps, rep, lr, target, max_total_s)
        rec.update(
            status='ok',
            **{k.replace('step', prefix): v for k, v in t.as_dict('step').items() if not k.endswith('spread')},
            losses=losses,
            **mem,
            loss_first=losses[0] if losses else None,
            loss_last=losses[-1] if losses else None,
        )
        if after is not None:
            after(model)
    except Exception as e:  # OOM, a layer that is not available, ...
        rec['status'] = 'oom' if isinstance(e, torch.OutOfMemoryError) else f'error: {short_error(e)}'
    model = None
    free(x.device)
    return rec


def read_records(paths) -> Tuple[list, dict]:
    """The records of JSON-lines files (a path or a list of them, in order) and the
    run block of the first ``env`` record: what a script's ``--render`` redraws."""
    import json

    records = []
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        records += [json.loads(line) for line in open(path) if line.strip()]
    env = {k: v for k, v in next((r for r in records if r.get('kind') == 'env'), {}).items() if k != 'kind'}
    return records, env


def rerender(rep, records: list, kind: str) -> None:
    """Rewrites a reporter's markdown and PNG from ``records`` of ``kind``."""
    for r in records:
        if r.get('kind') == kind:
            rep.add(r, quiet=True)
    rep.write()
