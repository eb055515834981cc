"""Train ReLU and MaxK GNNs full-batch on real graphs; accuracy / ROC-AUC and epoch
time per k (pyg_tc/bench/maxk_train.py has the protocol).

    python benchmarks/maxk_train.py --datasets cora,citeseer,tolokers,minesweeper --conv sage \
        --ks 4,8,16,32,64 --seeds 5 --epochs 300 --hidden 256 --layers 3 --out maxk_out [--device cuda]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyg_tc.bench.maxk_train import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
