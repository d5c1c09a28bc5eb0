"""The frontend: a kernel's Python AST evaluated into the C++ tile IR (`tegula._C.ir`).

  errors.py       TegulaCompileError and source positions (file:line:col with a caret)
  dtypes.py       dtype spellings -> canonical names
  values.py       PrimExpr / BufferValue / regions: Python operators that build IR
  builder.py      the statement stack a kernel is built into; the T.* calling convention
  requests.py     what T.* calls hand the parser: allocations, loops, T.Kernel, lets
  params.py       what parameters are declared with: T.Tensor's spec, T.ptr
  evaluator.py    expressions: name resolution, folding of Python values, calls
  parser.py       statements: assignments, lets, loops, branches, T.Kernel, parameters
  parse_with.py   the parser's `with` statements: T.Kernel, T.ws, statement scopes
  parse_eager.py  the body of an eager @tegula.jit function, and the body-declaration form
  prim_func.py    @T.prim_func and the PrimFunc it returns

The frontend is the package's lowest layer above env.py: the language (tegula/language)
builds on it and it imports nothing above itself. What a T.* call asks of the parser is
one of requests.py's classes, which the language makes and extends.
"""
from .errors import TegulaCompileError
from .prim_func import ParamInfo, PrimFunc, parse
from . import parse_eager as _parse_eager  # noqa: F401 (registers the body-declaration form's parser)

# The decorator is T.prim_func (tegula.language): here `prim_func` names its module only.
__all__ = ["TegulaCompileError", "ParamInfo", "PrimFunc", "parse"]
