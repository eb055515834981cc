"""TC-GNN benchmarks (pyg_tc/bench/tcgnn.py has the protocol): TCU vs cuSPARSE / CSR /
PyG SpMM and SDDMM in native and RCM order, warps and auto rules, SGT build cost,
Table 6, GCN / AGNN training epoch and accuracy against PyG.

    python benchmarks/tcgnn.py --out tcgnn_out [--sections kernels,auto,build,table6,train,accuracy] \
        [--graphs cora,reddit,...] [--widths 16,32,64,128] [--dtypes float32,float16] [--quick]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyg_tc.bench.tcgnn import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
