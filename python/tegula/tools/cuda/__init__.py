"""Tools for CUDA kernels (`tilelang.tools.cuda.*`): `iket`, events a kernel records."""
from . import iket  # noqa: F401
