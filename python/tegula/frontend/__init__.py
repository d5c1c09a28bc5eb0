"""The frontend: a kernel's Python AST evaluated into the C++ tile IR (`tegula._C.ir`).

  errors.py     TegulaCompileError and source positions (file:line:col with a caret)
  dtypes.py     dtype spellings -> canonical names
  values.py     PrimExpr / BufferValue / regions: Python operators that build IR
  builder.py    the statement stack a kernel is built into; the T.* calling convention
  evaluator.py  expressions: name resolution, folding of Python values, calls
  parser.py     statements: assignments, lets, loops, branches, T.Kernel, parameters
  prim_func.py  @T.prim_func and the PrimFunc it returns
"""
from .errors import TegulaCompileError
from .prim_func import ParamInfo, PrimFunc, parse, prim_func
from . import eager as _eager  # noqa: F401 (registers the body-declaration form's parser)

__all__ = ["TegulaCompileError", "ParamInfo", "PrimFunc", "parse", "prim_func"]
