"""TileLang's hand schedule of a T.Pipelined loop (`order`, `stage`, `group`, `sync`),
checked against what Tegula's pipeline does and applied to the loop body before it
becomes IR.

TileLang's meaning: the loop body's top-level statements, or with `group` runs of them
counted as one, each get a stage and an order. Stage s of iteration i runs at pipeline
time i + s, so a lower stage runs ahead; `order[j]` is statement j's place among the
statements that run at one time. For

    for k in T.Pipelined(n, order=[1, 0, 2], stage=[0, 0, 1]):
        T.copy(A[.., k * bK], A_s)     # stage 0, emitted second
        T.copy(B[k * bK, ..], B_s)     # stage 0, emitted first
        T.gemm(A_s, B_s, C)            # stage 1: one iteration behind the copies

one iteration's statements take effect by stage, then by order: copy B, copy A, gemm.

Tegula's pipeline (src/transform/pipeline_loops.cc) runs the global->shared T.copy
statements of the loop ahead (cp.async on sm_80, a producer warpgroup on sm_90a), so a
schedule gives the copies the lowest stage, or gives every statement one stage (nothing
runs ahead; num_stages 1). The copies run num_stages - 1 iterations ahead, where
num_stages, unless given, is max(stage) - min(stage) + 1 (TileLang's max(stage) + 1).

The other statements may take several stages: a computation ahead of another, as in
FlashAttention-3, whose stage 0 is Q Kᵀ and the softmax and whose stage 1 is the rescale
of the output and P V, so that at one time the tensor cores run Q Kᵀ of iteration k
while the softmax of k - 1 ends, and P V of k - 1 during the softmax of k:

    for k in T.Pipelined(n, num_stages=2, order=[-1, 0, 3, 1, -1, 2],
                         stage=[-1, 0, 0, 1, -1, 1], group=[[0], [1, 2], [3, ..., 11], [12], [13], [14]]):

Such a schedule must not change what the loop computes: two statements that touch one
buffer (one of them writing it) keep their order, within an iteration ((stage, order) of
the first below the second's) and between consecutive ones (the second's (stage, order)
below the first's with one stage added); it is an error at `order` or `stage` naming
both otherwise. No buffer is given a second copy: a statement that rewrites a fragment
a later stage still reads is an error. On sm_90a the warp-specialised consumer runs the
stages shifted (src/transform/pipeline_loops.cc) and waits for each wgmma only where its
result is needed; elsewhere the loop runs in the schedule's order, one iteration at a time,
which means the same.

The body is emitted in the order one iteration's statements take effect (by stage, then
by order); two statements of one stage change places only where both are seen to touch
different buffers. Where the next copies are issued relative to the compute stays
Tegula's choice, as without `order`.

`sync` is accepted and has no effect, as in TileLang, whose passes no longer read it:
Tegula places the pipeline's barriers itself.
"""
from __future__ import annotations

import inspect
import numbers

from .errors import ArgError
from .values import PrimExpr, ir, region_of

_FN = "T.Pipelined"

# What a statement no T.* call emitted is, by its IR node kind.
_KIND_LABELS = {
    "For": "a loop", "IfThenElse": "an if", "BufferStore": "a store", "LetStmt": "a name bound to a buffer read",
    "TileOp": "a tile op", "Evaluate": "an expression statement", "Sync": "a barrier", "Seq": "statements",
}


def _int_list(value, arg: str, what: str) -> list[int]:
    if not isinstance(value, (list, tuple)):
        raise ArgError(arg, f"{_FN}: {arg} must be a list of ints ({what}), got {value!r}")
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise ArgError(arg, f"{_FN}: {arg} must be a list of ints ({what}), got {item!r} at index {index}",
                           item=index)
    return [int(item) for item in value]


def _list_of_int_lists(value, arg: str, what: str) -> list[list[int]]:
    if not isinstance(value, (list, tuple)):
        raise ArgError(arg, f"{_FN}: {arg} must be a list of lists of ints ({what}), got {value!r}")
    out = []
    for index, item in enumerate(value):
        if not isinstance(item, (list, tuple)) or any(isinstance(x, bool) or not isinstance(x, numbers.Integral)
                                                     for x in item):
            raise ArgError(arg, f"{_FN}: {arg} must be a list of lists of ints ({what}), got {item!r} at index "
                           f"{index}", item=index)
        out.append([int(x) for x in item])
    return out


class PipelineSchedule:
    """The checked order/stage/group of a T.Pipelined call; `apply` fits it to the body."""

    def __init__(self, order: list[int], stage: list[int], group: list[list[int]] | None):
        self.order = order
        self.stage = stage
        self.group = group

    @staticmethod
    def from_arguments(order, stage, sync, group) -> PipelineSchedule | None:
        """The schedule of T.Pipelined's arguments (None without order and stage), their
        shapes checked; what the body holds is checked by `apply`."""
        if sync is not None:
            _list_of_int_lists(sync, "sync", "synchronisation points; Tegula places barriers itself")
        # An empty list is no list, as in TileLang (which then sets no annotation).
        order, stage, group = (None if isinstance(v, (list, tuple)) and not v else v for v in (order, stage, group))
        if order is None and stage is None:
            if group is not None:
                raise ArgError("group", f"{_FN}: group needs order and stage (one entry per group)")
            return None
        if order is None or stage is None:
            given, missing = ("order", "stage") if stage is None else ("stage", "order")
            raise ArgError(given, f"{_FN}: {given} needs {missing} too (one entry each per statement of the loop "
                           f"body): give both, or neither for Tegula's own schedule")
        order = _int_list(order, "order", "each statement's position in the loop body")
        stage = _int_list(stage, "stage", "each statement's pipeline stage")
        if len(stage) != len(order):
            raise ArgError("stage", f"{_FN}: order has {len(order)} entries and stage {len(stage)}: give one of "
                           "each per statement of the loop body")
        for index, (place, value) in enumerate(zip(order, stage)):
            if value < -1 or (value == -1) != (place == -1):
                raise ArgError("stage", f"{_FN}: stage values must be >= 0, or -1 where order is -1 too (a "
                               f"producer copy, in TileLang's warp-specialised form), got stage {value} and order "
                               f"{place} at index {index}", item=index)
        placed = [value for value in order if value != -1]
        seen = {}
        for index, value in enumerate(order):
            if value == -1 or (0 <= value < len(placed) and value not in seen):
                seen[value] = index
                continue
            why = f"{value} is out of range" if value not in seen else f"{value} is also at index {seen[value]}"
            raise ArgError("order", f"{_FN}: order must be a permutation of 0..{len(placed) - 1} (each "
                           f"statement's position; -1 for a producer copy), got {order}: {why}", item=index)
        if group is not None:
            group = _list_of_int_lists(group, "group", "runs of statements counted as one")
            flat = [i for run in group for i in run]
            if any(not run for run in group) or flat != list(range(len(flat))):
                raise ArgError("group", f"{_FN}: group must split the loop body's statements 0, 1, 2, ... into "
                               f"runs in source order, e.g. [[0, 1], [2]], got {group}")
            if len(group) != len(order):
                raise ArgError("group", f"{_FN}: group makes {len(group)} units but order and stage have "
                               f"{len(order)} entries: give one entry per group")
        return PipelineSchedule(order, stage, group)

    def apply(self, trace: list, depth: int, num_stages: int) -> tuple[list, int]:
        """The loop body's statements in the order the schedule emits them, and the
        loop's num_stages. `trace` is what the body emitted (Builder.trace), `depth` the
        loop body's block depth. Raises ArgError about the argument at fault."""
        stmts = _statements(trace, depth)
        for s in stmts:
            if s.kind == "LetStmt":
                raise ArgError(None, f"{_FN}: order and stage schedule the loop body's top-level statements, but "
                               f"the name bound at line {s.line} reads a buffer, so the statements after it are "
                               "nested under it: read the buffer where the value is used, or drop order and stage")
            if s.opaque is not None:
                raise ArgError(None, f"{_FN}: order and stage schedule the loop body's top-level statements, and "
                               "Tegula must see which of them are global->shared T.copy calls (it runs those "
                               f"ahead wherever they sit), but {s.opaque}: write the copies as top-level T.copy "
                               "calls of the loop body (a T.macro's are too), or drop order and stage")
        units = self._units(stmts)
        lo, hi = min(self.stage), max(self.stage)
        has_copies = any(s.ahead for s in stmts)
        compute = [u for u, members in enumerate(units) if not any(s.ahead for s in members)]
        if lo < hi:
            self._check_stages(units, lo)
            if has_copies and num_stages == 1:
                raise ArgError("num_stages", f"{_FN}: stage runs the copies {hi - lo} iteration(s) ahead of the "
                               "rest, but num_stages=1 leaves them one buffer: drop num_stages (it is then "
                               f"max(stage) - min(stage) + 1 = {hi - lo + 1}) or give at least 2")
            num_stages = num_stages or (hi - lo + 1 if has_copies else 1)
        else:
            if has_copies and num_stages >= 2:
                raise ArgError("num_stages", f"{_FN}: stage puts every statement in stage {lo}, so nothing runs "
                               f"ahead, but num_stages={num_stages} asks for the copies to run {num_stages - 1} "
                               "iteration(s) ahead: drop num_stages, or give the global->shared copies a lower "
                               "stage than the rest")
            num_stages = num_stages or 1
        emitted = sorted(range(len(units)), key=lambda u: (self.stage[u], self.order[u]))
        self._check_swaps(units, emitted)
        shifted = len({self.stage[u] for u in compute}) > 1
        if shifted:
            self._check_shifts(units, compute)
        out = []
        first = min((self.stage[u] for u in compute), default=0)
        for u in emitted:
            if shifted and u in compute:
                # Where the engine sees each computation's stage (relative to the first) and
                # place: pipeline_loops reads and drops these marks.
                mark = ir().call("pipeline_stage", [ir().int_imm(self.stage[u] - first, "int32"),
                                                    ir().int_imm(self.order[u], "int32")], "int32")
                out.append(ir().evaluate(mark))
            out.extend(s.stmt for s in units[u])
        return out, num_stages

    # ---- checks ----
    def _units(self, stmts: list) -> list[list]:
        listing = ", ".join(f"{s.label} (line {s.line})" for s in stmts) or "nothing"
        if self.group is None:
            if len(self.order) != len(stmts):
                raise ArgError("order", f"{_FN}: order and stage have {len(self.order)} entries, but the loop body "
                               f"has {len(stmts)} statement(s): {listing}")
            return [[s] for s in stmts]
        covered = sum(len(run) for run in self.group)
        if covered != len(stmts):
            raise ArgError("group", f"{_FN}: group covers {covered} statement(s), but the loop body has "
                           f"{len(stmts)}: {listing}")
        return [[stmts[i] for i in run] for run in self.group]

    def _check_stages(self, units: list, lo: int) -> None:
        """The lowest stage holds the global->shared copies (when there are any), and
        only them; the other statements take any later stages."""
        if not any(s.ahead for members in units for s in members):
            return
        for u, members in enumerate(units):
            compute = next((s for s in members if not s.ahead), None)
            if self.stage[u] == lo and compute is not None:
                raise ArgError("stage", f"{_FN}: stage gives {compute.label} (line {compute.line}) stage {lo}, "
                               "the stage of the copies that run ahead; Tegula runs only global->shared T.copy "
                               "statements ahead of the rest: give it a later stage, or drop order and stage",
                               item=u)
        for u, members in enumerate(units):
            copy = next((s for s in members if s.ahead), None)
            if self.stage[u] != lo and copy is not None:
                raise ArgError("stage", f"{_FN}: stage gives {copy.label} (line {copy.line}) stage {self.stage[u]}, "
                               f"after stage {lo}; Tegula runs every global->shared T.copy ahead, in the first "
                               f"stage: give it stage {lo}, or drop order and stage", item=u)

    def _check_shifts(self, units: list, compute: list) -> None:
        """Computations in different stages: every pair that touches one buffer keeps its
        order within an iteration and between consecutive ones."""
        for i, b in enumerate(compute):
            for a in compute[:i]:
                why = _conflict(units[a], units[b])
                if why is None:
                    continue
                ka, kb = (self.stage[a], self.order[a]), (self.stage[b], self.order[b])
                if not ka < kb:
                    raise ArgError("stage", f"{_FN}: stage and order run {_describe(units[b])} before "
                                   f"{_describe(units[a])} of the same iteration, but {why}: keep their source "
                                   "order (a lower stage, or the same stage and a lower order, for the first)",
                                   item=b)
                if not kb < (self.stage[a] + 1, self.order[a]):
                    raise ArgError("stage", f"{_FN}: stage and order run {_describe(units[b])} (stage "
                                   f"{self.stage[b]}) of one iteration after {_describe(units[a])} (stage "
                                   f"{self.stage[a]}) of the next, but {why}; Tegula gives no buffer a second "
                                   "copy: give the two stages at most one apart, and the later statement a lower "
                                   "order than the earlier one", item=b)

    def _check_swaps(self, units: list, emitted: list) -> None:
        """Two statements of one stage that the order swaps must be independent."""
        place = {u: i for i, u in enumerate(emitted)}
        for b in range(len(units)):
            for a in range(b):
                if self.stage[a] != self.stage[b] or place[a] < place[b]:
                    continue
                why = _conflict(units[a], units[b])
                if why is not None:
                    raise ArgError("order", f"{_FN}: order puts {_describe(units[b])} before {_describe(units[a])} "
                                   f"in stage {self.stage[a]}, but {why}; Tegula swaps two statements of one stage "
                                   "only where it sees they are independent: keep their source order", item=b)


def _describe(members: list) -> str:
    if len(members) == 1:
        return f"{members[0].label} (line {members[0].line})"
    labels = list(dict.fromkeys(s.label for s in members))
    return f"the group of lines {members[0].line}-{members[-1].line} ({', '.join(labels)})"


class _Statement:
    """A top-level statement of the loop body: what it is, where, what it touches."""

    def __init__(self, stmt, call, nested: list):
        self.stmt = stmt
        self.kind = stmt.kind
        self.line = stmt.loc[1]
        self.label = _label(stmt, call)
        self.ahead = self.kind == "TileOp" and _is_global_to_shared_copy(call)
        self.reads, self.writes = _accesses(stmt, call)
        # Why it is unknown whether Tegula runs this statement (or part of it) ahead.
        self.opaque = None
        if self.kind == "TileOp" and call is None:
            self.opaque = f"the tile op at line {self.line} comes from a Python function called in the loop body"
        for inner, inner_call in nested:
            if inner.kind == "TileOp" and inner_call is None:
                self.opaque = (f"{self.label} at line {self.line} holds a tile op from a Python function "
                               f"(line {inner.loc[1]})")
            elif inner.kind == "TileOp" and _is_global_to_shared_copy(inner_call):
                self.opaque = (f"{self.label} at line {self.line} holds a global->shared T.copy "
                               f"(line {inner.loc[1]})")
            if self.opaque is not None:
                break


def _statements(trace: list, depth: int) -> list[_Statement]:
    """The top-level statements of a block, each with the statements nested inside it
    (emitted into deeper blocks just before it)."""
    out, nested = [], []
    for stmt_depth, stmt, call in trace:
        if stmt_depth > depth:
            nested.append((stmt, call))
        elif stmt_depth == depth:
            out.append(_Statement(stmt, call, nested))
            nested = []
    return out


def _bound(call) -> dict:
    fn, args, kwargs = call
    bound = inspect.signature(fn).bind(*args, **kwargs)
    return bound.arguments


def _intrinsic(call) -> str | None:
    return None if call is None else getattr(call[0], "__tegula_intrinsic__", None)


def _is_global_to_shared_copy(call) -> bool:
    if _intrinsic(call) != "T.copy":
        return False
    arguments = _bound(call)
    src, dst = region_of(arguments.get("src")), region_of(arguments.get("dst"))
    return src is not None and dst is not None and src.buffer.scope == "global" and dst.buffer.scope == "shared"


# The loop kinds as the IR prints them ("for i in parallel(0, 64)"), as the DSL writes them.
_LOOP_LABELS = {"parallel": "a T.Parallel loop", "serial": "a T.serial loop", "unrolled": "a T.unroll loop",
                "pipelined": "a T.Pipelined loop", "vectorized": "a T.vectorized loop"}


def _label(stmt, call) -> str:
    name = _intrinsic(call)
    if name is None and stmt.kind == "For":
        head = str(stmt).split("\n", 1)[0]
        kind = head.split(" in ", 1)[-1].split("(", 1)[0]
        return _LOOP_LABELS.get(kind, "a loop")
    if name is None:
        return _KIND_LABELS.get(stmt.kind, stmt.kind)
    if name == "T.copy":
        arguments = _bound(call)
        src, dst = region_of(arguments.get("src")), region_of(arguments.get("dst"))
        if src is not None and dst is not None:
            return f"T.copy ({src.buffer.scope} -> {dst.buffer.scope})"
    return name


def _buffers(value) -> set | None:
    """Names of the buffers an argument touches; None where an index reads a buffer."""
    region = region_of(value)
    if region is None:
        if isinstance(value, PrimExpr):
            return None if value.reads else set()
        return set()
    names = {region.buffer.name}
    for e in list(region.mins) + list(region.extents):
        if isinstance(e, PrimExpr) and e.reads:
            return None
    return names


def _accesses(stmt, call) -> tuple:
    """(read, written) buffer names of a statement a T.* tile op emitted; (None, None)
    where unknown. A copy reads its source and writes its destination; any other tile
    op is taken to read and write every buffer it names."""
    if stmt.kind != "TileOp":
        seen = stmt.accesses()
        return (None, None) if seen is None else (set(seen[0]), set(seen[1]))
    if call is None:
        return None, None
    arguments = _bound(call)
    if _intrinsic(call) == "T.copy":
        src, dst = _buffers(arguments.get("src")), _buffers(arguments.get("dst"))
        return (None, None) if src is None or dst is None else (src, dst)
    touched = set()
    for value in arguments.values():
        names = _buffers(value)
        if names is None:
            return None, None
        touched |= names
    return touched, touched


def _conflict(first: list, second: list) -> str | None:
    """Why two units (lists of statements) cannot change places; None when they can."""
    for s in first + second:
        if s.reads is None:
            return f"Tegula cannot see which buffers {s.label} (line {s.line}) touches"
    reads_a = set().union(*(s.reads for s in first))
    writes_a = set().union(*(s.writes for s in first))
    reads_b = set().union(*(s.reads for s in second))
    writes_b = set().union(*(s.writes for s in second))
    shared = sorted((writes_a & (reads_b | writes_b)) | (writes_b & reads_a))
    if shared:
        return f"one writes {' and '.join(shared)}, which the other {'uses' if len(shared) == 1 else 'use'}"
    return None
