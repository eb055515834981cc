"""``HeteroConv``: PyG's heterogeneous wrapper, with less memory traffic
around pyg_tc's layers."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.nn.conv.hetero_conv import group

from ..ops import dispatch
from ..ops.dense import Term, biased_sum
from ._base import TCLayer, has_hooks


class HeteroConv(pyg_nn.HeteroConv):
    r"""Drop-in :class:`torch_geometric.nn.HeteroConv`: one bipartite layer
    per edge type, the results of the edge types that share a destination
    node type aggregated by ``aggr``. Same arguments, the same arguments
    routed to each layer, the same outputs and gradients. Any
    ``MessagePassing`` layer works; pyg_tc's layers are the ones it speeds
    up:

    * ``aggr='sum'`` and ``'mean'`` add the edge types' outputs pairwise
      (as :func:`torch_geometric.nn.to_hetero` does), with no ``[R, N, F]``
      stacked copy and no copy of the gradient per edge type in the backward
      pass. The other aggregations are PyG's.
    * Inside ``torch.autocast('cuda')``, fp32 features of a node type that
      is read only by layers whose inputs feed nothing but ``Linear``\ s
      (pyg_tc's ``GATConv`` and ``GATv2Conv``) are cast to half once for all
      of its edge types, where each layer would cast its own copy. The
      values are those the layers' ``Linear``\ s compute from fp32 inputs.

    Args:
        convs (Dict[Tuple[str, str, str], torch.nn.Module]): a bipartite
            layer for each edge type.
        aggr (str, optional): how the results of the edge types that share
            a destination are combined (:obj:`"sum"`, :obj:`"mean"`,
            :obj:`"min"`, :obj:`"max"`, :obj:`"cat"`, :obj:`None`).
            (default: :obj:`"sum"`)

    Shapes:
        - **input:** node features per node type :math:`(|\mathcal{V}_t|,
          F_t)`, ``edge_index`` per edge type :math:`(2, |\mathcal{E}_r|)`
        - **output:** per destination node type :math:`(|\mathcal{V}_t|,
          F_{out})` (``'cat'``: the edge types' outputs side by side;
          :obj:`None`: stacked, :math:`(|\mathcal{V}_t|, R_t, F_{out})`)

    Example::

        conv = pyg_tc.nn.HeteroConv({
            ('author', 'writes', 'paper'): pyg_tc.nn.GATConv((-1, -1), 64, heads=4, add_self_loops=False),
            ('paper', 'rev_writes', 'author'): pyg_tc.nn.GATConv((-1, -1), 64, heads=4, add_self_loops=False),
        }, aggr='sum')
        out_dict = conv(batch.x_dict, batch.edge_index_dict)
    """

    def forward(self, *args_dict: Any, **kwargs_dict: Any) -> Dict[str, Tensor]:
        """Runs each edge type's layer and aggregates per destination type.

        Args:
            x_dict (Dict[str, torch.Tensor]): node features per node type.
            edge_index_dict (Dict[Tuple[str, str, str], torch.Tensor]): the
                connectivity per edge type (``edge_index`` or a sparse
                tensor).
            *args_dict (optional): further positional arguments of the
                layers, as dictionaries per node or edge type.
            **kwargs_dict (optional): further keyword arguments of the
                layers, named ``<argument>_dict``, per node or edge type.
        """
        for arg in kwargs_dict:
            if not arg.endswith('_dict'):
                raise ValueError(f"Keyword arguments in '{type(self).__name__}' need to end with '_dict' (got '{arg}')")
        args_dict = tuple(self._cast_once(d) for d in args_dict)
        defer = self.aggr in ('sum', 'mean') and 'return_attention_weights_dict' not in kwargs_dict
        out_dict: Dict[str, List[Term]] = {}
        for edge_type, conv in self.convs.items():
            routed = _route(edge_type, args_dict, kwargs_dict)
            if routed is None:  # no argument names this edge type: PyG skips it
                continue
            args, kwargs = routed
            out_dict.setdefault(edge_type[-1], []).append(_call(conv, args, kwargs, defer))
        return {key: _aggregate(value, self.aggr) for key, value in out_dict.items()}

    def _cast_once(self, value_dict: Any) -> Any:
        """``value_dict`` with, under CUDA autocast, the fp32 tensors of the
        node types that only Linear-input layers read in the autocast dtype."""
        if not isinstance(value_dict, dict) or not torch.is_autocast_enabled('cuda'):
            return value_dict
        out = dict(value_dict)
        for key, value in value_dict.items():
            if isinstance(key, str) and self._read_by_linears_only(key):
                out[key] = dispatch.autocast_features(value)
        return out

    def _read_by_linears_only(self, node_type: str) -> bool:
        readers = [c for e, c in self.convs.items() if node_type in (e[0], e[-1])]
        return bool(readers) and all(getattr(c, '_LINEAR_INPUTS', False) for c in readers)


def _route(edge_type: Tuple[str, str, str], args_dict: tuple, kwargs_dict: dict) -> Optional[Tuple[list, dict]]:
    """PyG's ``HeteroConv`` rule for one edge type's arguments: an entry for
    the edge type itself, else the node type's value (``src == dst``), else
    the ``(source, destination)`` pair. None when no dictionary has an entry
    for the edge type (PyG then skips its layer)."""
    src, _, dst = edge_type
    has_edge_level_arg = False

    def pick(value_dict: dict) -> Any:
        nonlocal has_edge_level_arg
        if edge_type in value_dict:
            has_edge_level_arg = True
            return value_dict[edge_type]
        if src == dst and src in value_dict:
            return value_dict[src]
        if src in value_dict or dst in value_dict:
            return value_dict.get(src, None), value_dict.get(dst, None)
        return _MISSING

    args = [v for v in (pick(d) for d in args_dict) if v is not _MISSING]
    kwargs = {}
    for arg, value_dict in kwargs_dict.items():
        v = pick(value_dict)
        if v is not _MISSING:
            kwargs[arg[:-5]] = v
    return (args, kwargs) if has_edge_level_arg else None


_MISSING = object()


def _call(conv: torch.nn.Module, args: list, kwargs: dict, defer: bool) -> Term:
    """One edge type's layer: its output, and the bias it left to the sum
    (pyg_tc's layers without hooks, when ``defer``), as a
    :func:`~pyg_tc.ops.dense.biased_sum` term."""
    if not (defer and isinstance(conv, TCLayer)) or has_hooks(conv) or _global_forward_hooks():
        out = conv(*args, **kwargs)
        return out, None, getattr(out, 'dtype', None)
    conv._defer_bias = True
    try:
        out = conv(*args, **kwargs)
    finally:
        del conv._defer_bias
    deferred = conv.__dict__.pop('_deferred_bias', None)
    if deferred is None:  # (the layer ran PyG's path, which added its bias)
        return out, None, out.dtype
    return out, deferred[0], deferred[1]


def _global_forward_hooks() -> bool:
    """Whether a global module forward hook is registered (it would see a
    layer's output without its deferred bias)."""
    m = torch.nn.modules.module
    return bool(m._global_forward_hooks or m._global_forward_hooks_always_called)


def _aggregate(terms: List[Term], aggr: Optional[str]) -> Optional[Tensor]:
    """PyG's ``group`` of the edge types' outputs, with ``'sum'`` and
    ``'mean'`` as one :func:`~pyg_tc.ops.dense.biased_sum` that adds the
    biases the layers deferred (the backward hands every input the same
    gradient, no copies). The other aggregations defer no bias."""
    if aggr in ('sum', 'mean'):
        out = biased_sum(terms)
        return out / len(terms) if aggr == 'mean' and len(terms) > 1 else out
    return group([t[0] for t in terms], aggr)
