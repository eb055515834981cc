"""One call of each MaxK kernel on the Reddit-shaped graph (k=16, width 256),
for Nsight Compute:

    ncu --clock-control none -k regex:"maxk_select|cbsr_" --section SpeedOfLight \
        --section Occupancy --section WarpStateStats python benchmarks/probes/ncu_cbsr.py
"""

import torch

from pyg_tc.bench.graphs import load_graph
from pyg_tc.formats import CSRGraph
from pyg_tc.ops import cbsr_spmm_graph, maxk

bg = load_graph('reddit', 'cuda')
N = bg.num_nodes
g = CSRGraph.from_coo(bg.edge_index[0], bg.edge_index[1], N, N)
x = torch.randn(N, 256, device='cuda')
G = torch.randn(N, 256, device='cuda')
c = maxk(x, 16)
cbsr_spmm_graph(g, c)
s = g.sched
torch.ops.pyg_tc.cbsr_sspmm(
    g.rowptr, g.col, None, G, c.indices, s.units, s.heavy_rows, s.heavy_ptr, s.num_slots, None, 'sum'
)
torch.cuda.synchronize()
