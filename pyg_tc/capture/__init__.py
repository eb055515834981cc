"""Steps captured in CUDA graphs, and what a captured step needs around it.

* :class:`CapturedStep`: a training step (forward, loss, backward, the
  optimizer's step) captured and replayed, on a full graph or per bucket of
  padded batches; :class:`CapturedForward`: the inference forward alike;
* losses with static shapes: :func:`step_loss` (picks one of
  :func:`masked_loss`, :func:`seed_loss`, :func:`graph_loss` by the batch);
* models on padded batches: :func:`padding_aware` / :func:`padding` (batch
  norms over the real rows), :func:`trimmed_forward` (``trim_to_layer`` on
  per-hop padded batches).
"""

from .half_weights import HalfWeights
from .losses import graph_loss, masked_loss, seed_loss, step_loss
from .padded import padding, padding_aware, trimmed_forward
from .step import CapturedForward, CapturedStep

__all__ = [
    'CapturedStep',
    'CapturedForward',
    'HalfWeights',
    'step_loss',
    'masked_loss',
    'seed_loss',
    'graph_loss',
    'padding',
    'padding_aware',
    'trimmed_forward',
]
