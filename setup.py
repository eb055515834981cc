# The kernel sources live in kernels/ at the repository root (the layout is
# fixed by the design). They ship inside the wheel as the package data of
# pyg_tc.kernels, so `pip install .` works, not only `pip install -e .`.
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=['pyg_tc', 'pyg_tc.*']) + ['pyg_tc.kernels'],
    package_dir={'pyg_tc.kernels': 'kernels'},
)
