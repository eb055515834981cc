"""Drop-in PyG convolution layers backed by pyg_tc kernels."""
from .conv import GCNConv, GINConv, SAGEConv, gcn_norm_csr

__all__ = ['GCNConv', 'SAGEConv', 'GINConv', 'gcn_norm_csr']
