"""Drop-in PyG convolution layers backed by pyg_tc kernels, MaxK and models."""

from .agnn import AGNNConv
from .conv import GCNConv, GINConv, SAGEConv, gcn_norm_csr
from .gat import GATConv, GATv2Conv
from .hetero import HeteroConv
from .hgt import HGTConv
from .maxk import MaxK
from .rgat import RGATConv
from .rgcn import RGCNConv
from . import models
from .models import MaxKGNN

__all__ = [
    'AGNNConv',
    'GATConv',
    'GATv2Conv',
    'GCNConv',
    'SAGEConv',
    'GINConv',
    'HeteroConv',
    'HGTConv',
    'RGATConv',
    'RGCNConv',
    'gcn_norm_csr',
    'MaxK',
    'MaxKGNN',
    'models',
]
