"""Run a pyg_tc benchmark suite from a checkout: the same as ``pyg-tc bench``.

python benchmarks/run_suite.py --out bench_out [--graphs reddit,arxiv] [--widths 32,256]
                               [--dtypes fp32,bf16] [--no-training] [--quick] [--budget 480]
python benchmarks/run_suite.py SUITE [suite options]      # e.g. maxk --help; --list lists them
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyg_tc.cli import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main(['bench', *sys.argv[1:]]))
