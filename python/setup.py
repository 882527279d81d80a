"""setup.py -- the attn package: pure Python over libattn.so (ctypes), so
there is nothing to compile. A setup.py rather than a pyproject.toml keeps
`pip install ./python` offline: pip then builds with the setuptools it has
(Debian's python3-setuptools) instead of fetching one. NumPy, PyTorch and
matplotlib come from Debian too (python3-numpy, python3-torch,
python3-matplotlib), so none is declared here."""
import os
import re

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "attn", "_version.py")) as fh:
    VERSION = re.search(r'__version__ = "([^"]+)"', fh.read()).group(1)

setup(name="attn", version=VERSION, description="Scaled dot-product attention in C (libattn), from NumPy and PyTorch",
      packages=["attn"], python_requires=">=3.9")
