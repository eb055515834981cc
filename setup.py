# The kernel sources live in kernels/ at the repository root (the layout is
# fixed by the design), one folder per kernel family. They ship inside the
# wheel as the package data of pyg_tc.kernels (the family folders as its
# subpackages), so `pip install .` works, not only `pip install -e .`.
import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = sorted(
    d
    for d in os.listdir(os.path.join(HERE, 'kernels'))
    if os.path.isdir(os.path.join(HERE, 'kernels', d)) and not d.startswith(('.', '_'))
)

setup(
    packages=(
        find_packages(include=['pyg_tc', 'pyg_tc.*']) + ['pyg_tc.kernels'] + [f'pyg_tc.kernels.{d}' for d in FAMILIES]
    ),
    package_dir={'pyg_tc.kernels': 'kernels'},
)
