"""Drop-in PyG convolution layers backed by pyg_tc kernels, MaxK and models."""
from .agnn import AGNNConv
from .conv import GCNConv, GINConv, SAGEConv, gcn_norm_csr
from .maxk import MaxK
from . import models
from .models import MaxKGNN

__all__ = ['AGNNConv', 'GCNConv', 'SAGEConv', 'GINConv', 'gcn_norm_csr', 'MaxK', 'MaxKGNN', 'models']
