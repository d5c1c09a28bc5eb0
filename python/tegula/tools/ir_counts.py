"""What one lowered kernel does over its whole grid, counted from its IR: tensor-core FLOPs,
CUDA-core FLOPs, and the bytes it loads from and stores to global memory.

The count reads stage `expand_tile_ops` of the lowered kernel (STAGE): the last stage at
which the program is still written per block (T.Parallel nests whole, T.gemm and
T.reduce tile ops) while every copy has become the element accesses it performs. The
stages after it spread the same accesses over threads and make the masks at the tensors'
edges explicit, which the in-bounds rule below reproduces. A kernel whose copies became
bulk tensor copies (TMA, sm_90a) is counted from the same program lowered without them:
the copy engine moves the same in-bounds elements, and its zero fill reads nothing.

Every block of the grid is counted, every trip of every loop: loop bounds, branch
conditions and indices are evaluated for each block (vectorised over the blocks), so a
causal key loop whose length depends on the block counts each block's own trips.

- Tensor-core FLOPs: a `T.gemm` whose C tile is M x N, reducing K, counts 2·M·N·K each time
  it runs.
- CUDA-core FLOPs: each floating-point +, -, *, /, min and max, each math function call
  (exp, exp2, log, log2, sqrt, rsqrt, tanh, sigmoid, abs, ...) and each atomic add count 1;
  casts, selects (if_then_else), comparisons and integer (index) arithmetic count nothing.
  A statement counts each time it runs: once per block outside T.Parallel, once per element
  of the nest inside it, padding included (the lowered code computes the whole tile and
  masks only its memory accesses), under any branch of the nest only where it is taken.
  A `T.reduce` of n elements into each of its outputs counts n - 1 per output, one more
  when it accumulates into the output (clear=False), and n more for abssum/absmax's |x|.
- Bytes: each access of a global tensor (a parameter or a T.alloc_global workspace) counts
  its element size each time it runs, and only where its index lies inside the tensor:
  the lowered code masks every access at the tensor's edges, so a ragged tile moves its
  in-bounds part. Reading one element again counts again (a weight row read by each of a
  block's rows counts once per row), as the lowered code issues those loads; the same
  access twice in one statement counts once. An atomic add counts a load and a store.
  The lowered code may run one access in several threads at once (a statement outside
  T.Parallel, a loop over a fragment replicated across threads): they read one address,
  which the hardware serves as one request per warp, so the program's single access is
  what is counted.
- A nest whose guards or indices are not intervals of its loop variables (an im2col's
  padding) is counted by enumerating its points in every block; past DENSE_LIMIT points,
  in a seeded random sample of the blocks, scaled to all of them (a note says so).
- A branch whose condition depends on values in registers or shared memory counts as
  taken (a note says so). A bound or index read from a tensor (sequence lengths, a block
  table) is evaluated from that tensor's values, which must then be given.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

import numpy as np

from .ir_eval import UNKNOWN, Affine, Deferred, Evaluator, NeedsData, affine, names_in, subscript_indices, \
    subscript_lanes
from .ir_text import KernelText, dtype_bits, is_float_dtype, parse_kernel

STAGE = "expand_tile_ops"
LANE_CHUNK = 1 << 20        # blocks evaluated together
DENSE_ELEMENTS = 1 << 22    # nest points x blocks enumerated at once when a count is not affine
DENSE_LIMIT = 1 << 22       # past this many points, a sample of the blocks is enumerated
_ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)


class AnalysisError(ValueError):
    """A kernel the count cannot follow (a loop bound computed from registers, ...)."""


@dataclass
class Counts:
    tensor_flops: int = 0
    cuda_flops: int = 0
    loads: dict = field(default_factory=dict)    # buffer -> bytes
    stores: dict = field(default_factory=dict)
    sizes: dict = field(default_factory=dict)    # global tensor -> its bytes
    notes: set = field(default_factory=set)

    @property
    def load_bytes(self) -> int:
        return sum(self.loads.values())

    @property
    def store_bytes(self) -> int:
        return sum(self.stores.values())


class _InBounds:
    """The condition that access `sub` of a tensor of `shape` lies inside it."""

    def __init__(self, sub: ast.Subscript, shape: list):
        self.sub, self.shape = sub, shape


def _sum(x) -> int:
    return int(np.sum(x))


class _Walker:
    def __init__(self, kt: KernelText, values: dict, data: dict):
        self.kt, self.data = kt, data
        self.counts = Counts()
        self.ev = Evaluator(self._load)
        self.float_lets = set()
        env = dict(values)
        self.shapes = {}
        for name, buf in kt.buffers.items():
            if buf.scope == "global":
                self.shapes[name] = [int(self._static(d, env, f"dimension of {name}")) for d in buf.shape]
                self.counts.sizes[name] = math.prod(self.shapes[name]) * dtype_bits(buf.dtype) // 8
        self.grid = [int(self._static(g, env, "grid size")) for g in kt.grid]
        self.values = env
        # Set by count(): the lanes of thread 0 when the program reads its thread index.
        self.first_thread = None
        self.thread_names = {kt.thread_var}

    def _static(self, node, env, what):
        try:
            v = self.ev.ev(node, env)
        except KeyError as err:
            raise AnalysisError(f"kernel {self.kt.name}: the {what} {ast.unparse(node)} needs the value of "
                                f"{err.args[0]!r}") from None
        if v is UNKNOWN:
            raise AnalysisError(f"kernel {self.kt.name}: the {what} {ast.unparse(node)} is not known before the run")
        return v

    # ---- memory ----
    def _load(self, name, indices):
        """An element of global tensor `name` whose contents decide control flow."""
        buf = self.kt.buffers.get(name)
        if buf is None or buf.scope != "global" or name not in self.data:
            return UNKNOWN
        array = self.data[name]()
        if array is None:
            raise NeedsData(name)
        shape = self.shapes[name]
        clipped = [np.clip(np.asarray(i, dtype=np.int64), 0, max(s - 1, 0)) for i, s in zip(indices, shape)]
        return array[tuple(clipped)]

    def _accesses(self, nodes, store=None):
        """(subscript, is_store) of every global access in `nodes` (loads) and `store`,
        each distinct access once."""
        seen, out = set(), []
        loads = [(sub, False) for node in nodes for sub in ast.walk(node)]
        for sub, is_store in loads + ([(store, True)] if store is not None else []):
            if not isinstance(sub, ast.Subscript) or not isinstance(sub.value, ast.Name):
                continue
            buf = self.kt.buffers.get(sub.value.id)
            key = (ast.dump(sub), is_store)
            if buf is not None and buf.scope == "global" and key not in seen:
                seen.add(key)
                out.append((sub, is_store))
        return out

    def _add_bytes(self, sub, is_store, count):
        name = sub.value.id
        nbytes = count * subscript_lanes(sub) * dtype_bits(self.kt.buffers[name].dtype) // 8
        table = self.counts.stores if is_store else self.counts.loads
        table[name] = table.get(name, 0) + nbytes

    # ---- flops ----
    def _is_float(self, node, env) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, float)
        if isinstance(node, ast.Name):
            v = env.get(node.id)
            if isinstance(v, Deferred):
                return self._is_float(v.node, env)
            if node.id in self.kt.scalars:
                return is_float_dtype(self.kt.scalars[node.id])
            return node.id in self.float_lets or node.id in ("inf", "nan")
        if isinstance(node, ast.Subscript):
            buf = self.kt.buffers.get(node.value.id)
            return buf is not None and is_float_dtype(buf.dtype)
        if isinstance(node, ast.BinOp):
            return self._is_float(node.left, env) or self._is_float(node.right, env)
        if isinstance(node, ast.UnaryOp):
            return not isinstance(node.op, ast.Not) and self._is_float(node.operand, env)
        if isinstance(node, ast.Call):
            fn = node.func.id
            if fn in ("infinity", "ninfinity", "max_value", "min_value") or fn in _MATH_FLOPS:
                return True
            if is_float_dtype(fn):
                return True
            if fn in ("min", "max", "truncmod"):
                return any(self._is_float(a, env) for a in node.args)
            if fn == "if_then_else":
                return any(self._is_float(a, env) for a in node.args[1:])
        return False

    def _flops(self, node, env) -> int:
        """CUDA-core FLOPs of one evaluation of `node` (the module's rule)."""
        if isinstance(node, ast.BinOp):
            own = 1 if isinstance(node.op, _ARITH) and self._is_float(node, env) else 0
            return own + self._flops(node.left, env) + self._flops(node.right, env)
        if isinstance(node, ast.UnaryOp):
            own = 1 if (isinstance(node.op, ast.USub) and not isinstance(node.operand, ast.Constant)
                        and self._is_float(node.operand, env)) else 0
            return own + self._flops(node.operand, env)
        if isinstance(node, ast.Call):
            fn = node.func.id
            own = 1 if fn in _MATH_FLOPS or (fn in ("min", "max") and self._is_float(node, env)) else 0
            return own + sum(self._flops(a, env) for a in node.args)
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            return sum(self._flops(c, env) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr))
        return 0

    # ---- statements, once per block ----
    # A program that reads its thread index outside T.Parallel (T.get_thread_binding) runs
    # those statements in every thread: its lanes are (block, thread) pairs; a statement
    # that depends on the thread index (through a value, a branch or a loop bound) counts
    # in every thread, any other once per block (in thread 0's lane), as do the nests.
    def run(self, stmts, env, mask, threaded=False):
        env = dict(env)
        for st in stmts:
            if not mask.any():
                return
            try:
                self.statement(st, env, mask, threaded)
            except NeedsData as err:
                raise AnalysisError(f"kernel {self.kt.name}: `{st.line}` depends on the values of {err.buffer!r}: "
                                    "pass the tensor itself, not its shape") from None

    def _per_thread(self, nodes, env, threaded) -> bool:
        return threaded or (self.first_thread is not None
                            and any(names_in(n, env) & self.thread_names for n in nodes))

    def _counted(self, mask, per_thread):
        """The lanes a statement counts in: every active one, or one per active block."""
        return mask if per_thread or self.first_thread is None else mask & self.first_thread

    def statement(self, st, env, mask, threaded):
        """One statement for the active lanes; a let binds in `env`, the caller's scope."""
        if st.kind == "for" and st.loop_kind == "parallel":
            self.nest(st, env, self._counted(mask, False))
        elif st.kind == "for":
            self.loop(st, env, mask, self._per_thread(st.args, env, threaded))
        elif st.kind == "if":
            self.branch(st, env, mask, threaded)
        elif st.kind == "let":
            per_thread = self._per_thread([st.node], env, threaded)
            self.lane_statement([st.node], None, env, self._counted(mask, per_thread))
            env[st.var] = self.ev.ev(st.node, env)
            if per_thread:
                self.thread_names.add(st.var)
            if self._is_float(st.node, env):
                self.float_lets.add(st.var)
        elif st.kind == "store":
            target = st.node.targets[0]
            exprs = [st.node.value, *subscript_indices(target)]
            self.lane_statement(exprs, target, env, self._counted(mask, self._per_thread(exprs, env, threaded)))
        elif st.kind == "tile":
            self.tile_op(st, env, self._counted(mask, False))
        else:
            self.call(st, env, self._counted(mask, self._per_thread(st.node.args, env, threaded)))

    def loop(self, st, env, mask, threaded):
        lo = self._control(st.args[0], env, st)
        extent = np.broadcast_to(np.asarray(self._control(st.args[1], env, st, upper=True)), mask.shape)
        trips = int(extent[mask].max(initial=0))
        for k in range(trips):
            active = mask & (k < extent)
            if not active.any():
                break
            inner = dict(env)
            inner[st.var] = lo + k
            self.run(st.body, inner, active, threaded)

    def _control(self, node, env, st, upper=False):
        """A loop bound's value; with `upper`, a trip count that depends on values computed
        in the kernel is taken at its largest where a select gives one (a note says so)."""
        v = self.ev.ev(node, env)
        if v is UNKNOWN and upper:
            v = self.ev.ev(node, env, upper=True)
            if v is not UNKNOWN:
                self.counts.notes.add(f"the trip count of `{st.line}` depends on values computed in the kernel: "
                                      "counted at its largest")
        if v is UNKNOWN:
            raise AnalysisError(f"kernel {self.kt.name}: the bound of `{st.line}` depends on values computed "
                                "while the kernel runs, which a static count cannot follow")
        return v

    def branch(self, st, env, mask, threaded):
        rest = mask
        earlier = []
        for cond, body in zip(st.args, st.branches):
            if cond is None:
                taken = rest
            else:
                earlier.append(cond)
                c = self.ev.ev(cond, env)
                if c is UNKNOWN:
                    self.counts.notes.add(f"`if {ast.unparse(cond)}` depends on values computed in the kernel: "
                                          "counted as taken")
                    taken, rest = rest, np.zeros_like(rest)
                else:
                    c = np.broadcast_to(np.asarray(c, dtype=bool), rest.shape)
                    taken, rest = rest & c, rest & ~c
            self.run(body, env, taken, self._per_thread(earlier, env, threaded))

    def lane_statement(self, exprs, target, env, mask, atomic=False):
        active = _sum(mask)
        self.counts.cuda_flops += active * (sum(self._flops(e, env) for e in exprs) + (1 if atomic else 0))
        for sub, is_store in self._accesses(exprs, target):
            ok = mask & self._inside_lanes(sub, env)
            n = _sum(ok)
            self._add_bytes(sub, is_store, n)
            if atomic and is_store:
                self._add_bytes(sub, False, n)

    def _inside_lanes(self, sub, env):
        name, width = sub.value.id, subscript_lanes(sub)
        ok = True
        shape = self.shapes[name]
        for d, (node, size) in enumerate(zip(subscript_indices(sub), shape)):
            idx = self.ev.ev(node, env)
            if idx is UNKNOWN:
                self.counts.notes.add(f"an index of {name} depends on values computed in the kernel: counted "
                                      "as inside the tensor")
                continue
            last = width - 1 if d == len(shape) - 1 else 0
            ok = ok & (np.asarray(idx) >= 0) & (np.asarray(idx) + last < size)
        return ok

    def tile_op(self, st, env, mask):
        op, call = st.var, st.node
        attrs = {k.arg: k.value.value for k in call.keywords}
        active = _sum(mask)
        if op == "gemm":
            a, _, c = (self._extents(r, env) for r in call.args[:3])
            k = a[0] if attrs.get("transpose_A") else a[-1]
            self.counts.tensor_flops += 2 * c[0] * c[1] * k * active
        elif op == "gemm_sp":  # the dense product's count, as TileLang's sparse examples report it
            a, c = self._extents(call.args[0], env), self._extents(call.args[3], env)
            k = 2 * (a[0] if attrs.get("transpose_A") else a[-1])
            self.counts.tensor_flops += 2 * c[0] * c[1] * k * active
        elif op == "reduce":
            src = self._extents(call.args[0], env)
            dim = int(attrs.get("dim", len(src) - 1))
            n, outputs = src[dim], math.prod(src) // max(src[dim], 1)
            per = n - 1 + (0 if attrs.get("clear", 1) else 1) + (n if attrs.get("kind") in ("abssum", "absmax") else 0)
            self.counts.cuda_flops += outputs * per * active
        elif op == "use_swizzle":
            pass
        else:
            self.counts.notes.add(f"T.{op} is not counted")

    def _extents(self, region, env) -> list:
        items = region.slice.elts if isinstance(region.slice, ast.Tuple) else [region.slice]
        out = []
        for item in items:
            upper = item.upper.operand if isinstance(item.upper, ast.UnaryOp) else item.upper
            out.append(int(self._static(upper, env, "tile extent")))
        return out

    def call(self, st, env, mask):
        fn, call = st.var, st.node
        if fn == "tma_copy":
            raise AnalysisError(f"kernel {self.kt.name}: bulk tensor copies are counted from the kernel lowered "
                                "without them")
        if fn == "atomic_add":
            self.lane_statement(call.args[1:2], call.args[0], env, mask, atomic=True)
        elif fn != "sync_threads":
            self.lane_statement(call.args, None, env, mask)

    # ---- T.Parallel nests: once per element ----
    def nest(self, st, env, mask):
        leaves = []
        self._collect(st, (), [], dict(env), leaves)
        for leaf, loops, guards, scope in leaves:
            if leaf.kind == "let":
                exprs, target, atomic = [leaf.node], None, False
            elif leaf.kind == "store":
                target = leaf.node.targets[0]
                exprs, atomic = [leaf.node.value, *subscript_indices(target)], False
            elif leaf.var == "atomic_add":
                exprs, target, atomic = leaf.node.args[1:2], leaf.node.args[0], True
            else:
                exprs, target, atomic = list(leaf.node.args), None, False
            flops = sum(self._flops(e, scope) for e in exprs) + (1 if atomic else 0)
            if flops:
                self.counts.cuda_flops += flops * self._count(loops, guards, scope, mask)
            for sub, is_store in self._accesses(exprs, target):
                n = self._count(loops, guards + [_InBounds(sub, self.shapes[sub.value.id])], scope, mask)
                self._add_bytes(sub, is_store, n)
                if atomic and is_store:
                    self._add_bytes(sub, False, n)

    def _collect(self, st, loops, guards, scope, leaves):
        """The nest's statements with their loops, their branch conditions and their lets."""
        if st.kind == "for":
            nest = {name for name, _, _ in loops}
            for node in st.args:
                if names_in(node, scope) & nest:
                    raise AnalysisError(f"kernel {self.kt.name}: `{st.line}` has bounds that depend on an "
                                        "enclosing T.Parallel variable, which the count does not follow")
            lo, extent = (self._control(n, scope, st) for n in st.args)
            inner = dict(scope)
            for child in st.body:
                self._collect(child, loops + ((st.var, lo, extent),), guards, inner, leaves)
        elif st.kind == "if":
            earlier = []
            for cond, body in zip(st.args, st.branches):
                here = guards + [ast.UnaryOp(ast.Not(), c) for c in earlier] + ([cond] if cond is not None else [])
                inner = dict(scope)
                for child in body:
                    self._collect(child, loops, here, inner, leaves)
                if cond is not None:
                    earlier.append(cond)
        elif st.kind == "tile":
            self.counts.notes.add(f"T.{st.var} inside a T.Parallel nest is not counted")
        else:
            if st.kind == "let":
                scope[st.var] = Deferred(st.node)
            leaves.append((st, loops, guards, dict(scope)))

    def _count(self, loops, conds, scope, mask) -> int:
        """How many (block, nest point) pairs of the active blocks satisfy every condition."""
        if not conds:
            per = 1
            for _, _, extent in loops:
                per = per * np.maximum(extent, 0)
            return _sum(per * mask)
        nest = {name for name, _, _ in loops}
        lo = {name: low for name, low, _ in loops}
        hi = {name: low + extent - 1 for name, low, extent in loops}
        ok = mask
        for cond in conds:
            cs = self._constraints(cond, scope, nest)
            if cs is None or any(len(c.coeffs) > 1 for c in cs if isinstance(c, Affine)):
                return self._dense_count(loops, conds, scope, mask)
            for c in cs:
                if not isinstance(c, Affine):
                    ok = ok & c
                elif not c.coeffs:
                    ok = ok & (np.asarray(c.base) >= 0)
                else:
                    (var, k), = c.coeffs.items()
                    if k > 0:
                        lo[var] = np.maximum(lo[var], -(c.base // k))
                    else:
                        hi[var] = np.minimum(hi[var], c.base // -k)
        per = 1
        for name in lo:
            per = per * np.maximum(hi[name] - lo[name] + 1, 0)
        return _sum(per * ok)

    def _constraints(self, cond, scope, nest):
        """`cond` as a list of Affine >= 0 and per-block boolean masks; None when it is not
        a conjunction of such (then the points are enumerated)."""
        if isinstance(cond, _InBounds):
            out = []
            width = subscript_lanes(cond.sub)
            for d, (node, size) in enumerate(zip(subscript_indices(cond.sub), cond.shape)):
                a = affine(self.ev, node, scope, nest)
                if a is None:
                    return None
                if a is UNKNOWN:
                    self.counts.notes.add(f"an index of {cond.sub.value.id} depends on values computed in the "
                                          "kernel: counted as inside the tensor")
                    continue
                last = width - 1 if d == len(cond.shape) - 1 else 0
                out += [a, Affine({}, size - 1 - last).plus(a, -1)]
            return out
        if not (names_in(cond, scope) & nest):
            v = self.ev.ev(cond, scope)
            if v is UNKNOWN:
                self._unknown_branch(cond)
                return []
            return [np.asarray(v, dtype=bool)]
        if isinstance(cond, ast.BoolOp) and isinstance(cond.op, ast.And):
            out = []
            for part in cond.values:
                cs = self._constraints(part, scope, nest)
                if cs is None:
                    return None
                out += cs
            return out
        negate = isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Not)
        cmp = cond.operand if negate else cond
        if not isinstance(cmp, ast.Compare):
            return None
        op = type(cmp.ops[0])
        if negate:
            op = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq,
                  ast.NotEq: ast.Eq}[op]
        a, b = affine(self.ev, cmp.left, scope, nest), affine(self.ev, cmp.comparators[0], scope, nest)
        if a is UNKNOWN or b is UNKNOWN:
            self._unknown_branch(cond)
            return []
        if a is None or b is None:
            return None
        one = Affine({}, 1)
        forms = {ast.Lt: [b.plus(a, -1).plus(one, -1)], ast.LtE: [b.plus(a, -1)],
                 ast.Gt: [a.plus(b, -1).plus(one, -1)], ast.GtE: [a.plus(b, -1)],
                 ast.Eq: [a.plus(b, -1), b.plus(a, -1)]}
        return forms.get(op)

    def _unknown_branch(self, cond):
        self.counts.notes.add(f"`if {ast.unparse(cond)}` depends on values computed in the kernel: counted as taken")

    def _dense_count(self, loops, conds, scope, mask) -> int:
        """The points enumerated: every nest point of every active block, in chunks."""
        rank = len(loops)
        blocks = np.nonzero(mask)[0]
        sizes = [int(np.max(np.broadcast_to(extent, mask.shape)[blocks], initial=0)) for _, _, extent in loops]
        volume = math.prod(sizes)
        if volume == 0 or blocks.size == 0:
            return 0
        scale = 1.0
        if volume * blocks.size > DENSE_LIMIT:
            # Too many points to enumerate (an im2col's padding over a million blocks): the
            # blocks of a seeded random sample are, and the count scales to all of them.
            keep = max(1, DENSE_LIMIT // volume)
            scale = blocks.size / keep
            self.counts.notes.add(f"a nest's masked accesses are estimated from {keep} of {blocks.size} blocks")
            blocks = np.sort(np.random.default_rng(0).choice(blocks, keep, replace=False))
        chunk = max(1, DENSE_ELEMENTS // volume)
        total = 0
        for start in range(0, blocks.size, chunk):
            pick = blocks[start:start + chunk]

            def per_block(v):
                if isinstance(v, np.ndarray) and v.shape == mask.shape:
                    return v[pick].reshape((-1,) + (1,) * rank)
                return v

            env = {k: per_block(v) for k, v in scope.items()}
            ok = np.ones((pick.size,) + (1,) * rank, dtype=bool)
            for axis, ((name, low, extent), size) in enumerate(zip(loops, sizes)):
                shape = [1] * (rank + 1)
                shape[axis + 1] = size
                step = np.arange(size).reshape(shape)
                env[name] = per_block(np.broadcast_to(low, mask.shape) if isinstance(low, np.ndarray) else low) + step
                ok = ok & (step < per_block(np.broadcast_to(extent, mask.shape)
                                            if isinstance(extent, np.ndarray) else extent))
            for cond in conds:
                ok = ok & self._dense_condition(cond, env)
            total += _sum(np.broadcast_to(ok, (pick.size, *sizes)))
        return total if scale == 1.0 else round(total * scale)

    def _dense_condition(self, cond, env):
        if isinstance(cond, _InBounds):
            return self._inside_lanes(cond.sub, env)
        v = self.ev.ev(cond, env)
        if v is UNKNOWN:
            self._unknown_branch(cond)
            return True
        return np.asarray(v, dtype=bool)


_MATH_FLOPS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sin", "cos", "floor", "ceil", "trunc",
               "rint", "abs", "sigmoid")


def _reads_thread_index(kt: KernelText) -> bool:
    if not kt.thread_var:
        return False

    def nodes(stmts):
        for st in stmts:
            yield from (n for n in (st.node, *st.args) if n is not None)
            yield from nodes(st.body)
            for branch in st.branches:
                yield from nodes(branch)

    return any(isinstance(n, ast.Name) and n.id == kt.thread_var for node in nodes(kt.body) for n in ast.walk(node))


def count(text: str, values: dict, data: dict, per_thread: bool = False) -> tuple[Counts, list]:
    """Counts of the kernel printed as `text` (stage STAGE) over its whole grid, and the
    grid's extents. `values`: name -> int for the dynamic sizes and scalar parameters;
    `data`: tensor name -> a function returning its contents (a numpy array) or None when
    only its shape is known. per_thread: `text` is a per-thread stage (after
    partition_loops, e.g. "final") and every thread of every block is counted, statement by
    statement; the bytes then are what the lowered code's own masks let through, which the
    tests compare with the per-block count (tile ops of that stage are not counted)."""
    kt = parse_kernel(text)
    walker = _Walker(kt, values, data)
    # Every grid dimension is a factor of the blocks, named by the kernel or not.
    dims = [(kt.block_vars[i] if i < len(kt.block_vars) else f"<grid {i}>", size)
            for i, size in enumerate(walker.grid)]
    threaded = not per_thread and _reads_thread_index(kt)
    if per_thread or threaded:
        dims.append((kt.thread_var, kt.threads))
    lanes = math.prod(size for _, size in dims) if dims else 1
    for start in range(0, lanes, LANE_CHUNK):
        ids = np.arange(start, min(lanes, start + LANE_CHUNK), dtype=np.int64)
        env = dict(walker.values)
        stride = 1
        for name, size in dims:
            env[name] = (ids // stride) % size
            stride *= size
        if threaded:
            walker.first_thread = env[kt.thread_var] == 0
        try:
            walker.run(kt.body, env, np.ones(ids.shape, dtype=bool))
        except KeyError as err:
            raise AnalysisError(f"kernel {kt.name}: the count needs the value of {err.args[0]!r} (a dynamic size or "
                                "a scalar parameter)") from None
    return walker.counts, walker.grid
