"""tegula.tools.cuda.iket on the CPU: instrumented programs (iket_programs.py) compute what
torch does in the reference interpreter and the simulator, ragged and aligned, with and
without payloads; the generated source records each event where the program has it and
compiles for sm_80 / sm_89 / sm_90a; outside a session the calls compile to nothing; the
session keeps and restores its state; the JIT keeps instrumented kernels apart; a log is
decoded into records, markers, ranges and a trace file; bad arguments are errors at the
DSL line naming the argument. The GPU side: gpu/test_tools_iket_gpu.py."""
import contextlib
import json
import os
import struct
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
from tegula.frontend.errors import TegulaCompileError
from tegula.tools.cuda import iket
from tegula.tools.cuda.iket import records, state

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import iket_programs as ip  # noqa: E402

RUNS = [tt.reference, tt.simulate]
IDS = ["reference", "simulate"]


def _inputs(n, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=gen), torch.randn(n, generator=gen), torch.rand(1, generator=gen) + 0.5


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("n,threads", [(256, 128), (200, 128), (97, 64)])
@pytest.mark.parametrize("payloads", [True, False], ids=["payloads", "no_payloads"])
def test_scaled_add_matches_torch(run, n, threads, payloads):
    with iket.session(runtime_payloads=payloads):
        k = tegula.compile(ip.scaled_add(n, threads), out_idx=-1, target="sm_90a")
    A, B, S = _inputs(n, n + threads)
    torch.testing.assert_close(run(k, A, B, S), ip.expected_scaled_add(A, B, S))


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("M,N,bm,bn", [(64, 64, 32, 32), (70, 50, 32, 16)])
def test_tiled_rows_matches_torch(run, M, N, bm, bn):
    with iket.session():
        k = tegula.compile(ip.tiled_rows(M, N, bm, bn), out_idx=-1, target="sm_80")
    A = torch.randn(M, N, generator=torch.Generator().manual_seed(M + N))
    torch.testing.assert_close(run(k, A), ip.expected_tiled_rows(A))


def test_source_records_each_event_in_program_order():
    with iket.session(runtime_payloads=True):
        k = tegula.compile(ip.scaled_add(200), out_idx=-1, target="sm_90a")
    src = k.get_kernel_source()
    assert "tegula::IketLog* tegula_iket_log)" in src  # the last parameter
    for line in ['// iket event 1: range "block"', '// iket event 2: mark "enter"',
                 '// iket event 3: mark "before"', '// iket event 4: mark "after"', '// iket event 5: mark "exit"']:
        assert line in src, line
    calls = [line.strip() for line in src.splitlines() if line.strip().startswith("tegula::iket_")]
    assert calls[:2] == ["tegula::iket_range_start(tegula_iket_log, 1);",
                         "tegula::iket_mark(tegula_iket_log, 2, (unsigned)(bx));"]
    assert calls[-2:] == ["tegula::iket_mark(tegula_iket_log, 5, cast<unsigned>(bx));",
                          "tegula::iket_range_end(tegula_iket_log, 1);"]
    middle = calls[2:-2]
    assert middle and all(c.startswith(("tegula::iket_mark(tegula_iket_log, 3, (unsigned)(",
                                        "tegula::iket_mark(tegula_iket_log, 4, __float_as_uint(")) for c in middle)
    assert k._lowered_all[0].records_events
    assert "tegula_iket_log" in k.get_host_source()


def test_without_runtime_payloads_events_carry_no_value():
    with iket.session(runtime_payloads=False):
        k = tegula.compile(ip.scaled_add(256), out_idx=-1, target="sm_80")
    src = k.get_kernel_source()
    assert "tegula::iket_mark(tegula_iket_log, 2);" in src and "(unsigned)(" not in src
    table = {e["name"]: e for e in iket.event_table()}
    assert table["enter"]["payload_type"] == "int32" and not table["enter"]["runtime_payload"]


def test_outside_a_session_marks_compile_to_nothing():
    assert not iket.is_enabled()
    instrumented = tegula.compile(ip.scaled_add(200), out_idx=-1, target="sm_90a")
    plain = tegula.compile(ip.plain_scaled_add(200), out_idx=-1, target="sm_90a")
    assert instrumented.get_kernel_source() == plain.get_kernel_source()
    assert "iket" not in instrumented.get_ir("input")
    assert instrumented.prim_func.launch_hooks == []
    with pytest.raises(ValueError, match="records no iket events"):
        iket.launches(instrumented)


@pytest.mark.parametrize("target", ["sm_80", "sm_89", "sm_90a"])
def test_instrumented_code_compiles(target):
    with iket.session(runtime_payloads=True):
        k = tegula.compile(ip.scaled_add(300), out_idx=-1, target=target)
        k2 = tegula.compile(ip.tiled_rows(70, 50, 32, 16), out_idx=-1, target=target)
    assert len(k.cubin()) > 0 and len(k2.cubin()) > 0


def test_event_table_numbers_names_per_session():
    with iket.session(runtime_payloads=True):
        ip.scaled_add(64)
        ip.scaled_add(32)  # the same names keep their numbers
        table = iket.event_table()
    assert [(e["name"], e["event_id"], e["kind"], e["payload_type"]) for e in table] == [
        ("block", 1, "range", None), ("enter", 2, "mark", "int32"), ("before", 3, "mark", "int32"),
        ("after", 4, "mark", "float32"), ("exit", 5, "mark", "uint32")]
    with iket.session():
        ip.tiled_rows(32, 32, 32, 32)
        assert [e["name"] for e in iket.event_table()] == ["copy_in", "compute", "half"]
        assert iket.event_table()[0]["event_id"] == 1


def test_session_sets_and_restores_its_state(tmp_path):
    cache_before = tegula.is_cache_enabled()
    iket.set_output_dir(None)
    outer = iket.session(output_dir=tmp_path / "out", runtime_payloads=True, capacity=1000)
    with outer:
        assert iket.is_enabled() and iket.runtime_payloads_enabled() and iket.capacity() == 1000
        assert iket.output_dir() == (tmp_path / "out").absolute() and (tmp_path / "out").is_dir()
        assert not tegula.is_cache_enabled()
        assert iket.output_path("x.cu") == (tmp_path / "out" / "x.cu").absolute()
        with iket.session(runtime_payloads=False):
            assert iket.is_enabled() and not iket.runtime_payloads_enabled()
        assert iket.is_enabled() and iket.runtime_payloads_enabled()
        with pytest.raises(RuntimeError, match="cannot be entered"):
            with outer:
                pass
    assert not iket.is_enabled() and not iket.runtime_payloads_enabled()
    assert iket.capacity() == state.DEFAULT_CAPACITY and iket.output_dir() is None
    assert tegula.is_cache_enabled() == cache_before
    with pytest.raises(RuntimeError, match="no output directory"):
        iket.output_path("x")
    with pytest.raises(ValueError, match="capacity"):
        iket.set_capacity(0)


def test_jit_keeps_instrumented_kernels_apart(monkeypatch):
    @tegula.jit(out_idx=-1, target="sm_80")
    def make(n):
        return ip.scaled_add(n)

    outside = make(128)
    with iket.session():
        inside = make(128)
        assert make(128) is inside
    assert make(128) is outside and inside is not outside
    assert "iket" not in outside.get_kernel_source() and "iket_mark" in inside.get_kernel_source()

    def refuse(*args):
        raise AssertionError("an instrumented kernel must not come from the persistent index")

    monkeypatch.setattr(tegula.jit_index, "lookup", refuse)
    monkeypatch.setattr(tegula.jit_index, "store", refuse)
    with iket.session(disable_cache=False, runtime_payloads=True):  # the disk cache and the index stay on
        assert "__float_as_uint" in make(64).get_kernel_source()


def _log(records_, capacity=None, claimed=None):
    """A log as a launch leaves it: the header, then 32-byte records."""
    capacity = len(records_) if capacity is None else capacity
    claimed = len(records_) if claimed is None else claimed
    data = struct.pack("<II24x", claimed, capacity)
    for time, event, phase, payload, block, thread in records_[:capacity]:
        data += struct.pack("<QIIIIII", time, event | phase << 16, payload & 0xFFFFFFFF, block, thread, 3, 0)
    data += bytes(32 * (capacity - min(capacity, len(records_))))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _hook():
    hook = records.KernelEvents("demo", 8, None)
    events = [iket.Event("outer", 1, "range"), iket.Event("v", 2, "mark", "float32"),
              iket.Event("i", 3, "mark", "int32"), iket.Event("u", 4, "mark", "uint32")]
    for e in events:
        hook.add(e, recorded_payload=True)
    return hook


def test_a_log_decodes_into_records_markers_and_ranges(tmp_path):
    hook = _hook()
    one = struct.unpack("<I", struct.pack("<f", 1.5))[0]
    log = _log([(100, 1, 1, 0, 0, 5), (110, 2, 0, one, 0, 5), (120, 3, 0, -7, 1, 0), (130, 1, 1, 0, 0, 5),
                (150, 1, 2, 0, 0, 5), (160, 4, 0, 2**32 - 1, 1, 0), (170, 1, 2, 0, 0, 5)], capacity=8)
    launch = hook._decode(log, 0)
    assert launch.dropped == 0 and len(launch.records) == 7
    assert [r.payload for r in launch.records if r.phase == "mark"] == [1.5, -7, 2**32 - 1]
    assert launch.by_thread()[(0, 5)][0] == records.Record("outer", 1, "range_start", 100, 0, 5, 3, None)
    ranges = sorted((g["start_ns"], g["end_ns"]) for g in launch.ranges)
    assert ranges == [(100, 170), (130, 150)]  # nested: the inner one closes first
    assert [m["name"] for m in launch.markers] == ["v", "i", "u"]
    hook._pending.append((log, 0, type("Done", (), {"synchronize": lambda self: None})()))
    path = hook.write(tmp_path)
    assert path == tmp_path.absolute() / "demo.trace.json"
    data = json.loads(path.read_text())
    assert data["kernel"] == "demo" and len(data["launches"]) == 1
    assert data["launches"][0]["markers"][0]["time_ns"] == 10  # from the trace's first record
    kinds = [e["ph"] for e in data["traceEvents"]]
    assert kinds.count("X") == 2 and kinds.count("i") == 3


def test_a_full_log_counts_what_it_dropped():
    hook = _hook()
    log = _log([(i, 2, 0, 0, 0, i) for i in range(5)], capacity=3, claimed=9)
    launch = hook._decode(log, 0)
    assert len(launch.records) == 3 and launch.claimed == 9 and launch.dropped == 6


class _FakeProgram:
    records_events = True

    def __init__(self):
        self.addresses = []

    def set_event_log(self, address):
        self.addresses.append(address)


def test_each_launch_is_given_a_log_of_its_own(monkeypatch):
    """The launch wrapper with the device stood in for by the CPU: a fresh log per launch,
    its address handed to the program for the launch only, the records read back."""
    logs = []
    new_log = records._new_log
    monkeypatch.setattr(records, "_new_log", lambda device, capacity: logs.append(new_log(device, capacity)) or logs[-1])
    monkeypatch.setattr(records, "_device_of", lambda args: torch.device("cpu"))
    monkeypatch.setattr(records, "_on_device", lambda device, stream: contextlib.nullcontext())
    monkeypatch.setattr(records, "_launch_done", lambda: type("Done", (), {"synchronize": lambda self: None})())
    hook, program = _hook(), _FakeProgram()

    def launch(x):  # what the kernel does: claim a slot, write a record
        log = logs[-1]
        claimed = struct.unpack("<I", bytes(log[:4].tolist()))[0]
        record = struct.pack("<QIIIIII", 1000 + x, 3, x & 0xFFFFFFFF, 0, 7, 1, 0)
        log[32 + 32 * claimed:64 + 32 * claimed] = torch.tensor(list(record), dtype=torch.uint8)
        log[:4] = torch.tensor(list(struct.pack("<I", claimed + 1)), dtype=torch.uint8)
        return x * 2

    wrapped = hook.wrap_launch(None, program, launch, 0)
    assert wrapped(5) == 10 and wrapped(-6) == -12
    assert program.addresses == [logs[0].data_ptr(), 0, logs[1].data_ptr(), 0]
    launches = hook.launches()
    assert [launch.index for launch in launches] == [0, 1]
    assert [[(r.name, r.payload, r.time_ns, r.thread) for r in launch.records] for launch in launches] == [
        [("i", 5, 1005, 7)], [("i", -6, 994, 7)]]
    assert records.KernelEvents("other", 8, None).wrap_launch(None, type("P", (), {"records_events": False})(),
                                                               launch, 0) is launch


def test_an_instrumented_program_is_not_stored_for_later_processes():
    with iket.session():
        k = tegula.compile(ip.scaled_add(128), out_idx=-1, target="sm_80")
    program = k._lowered_all[0].build([3])
    assert program.records_events and program.save() == b""


def _bad(kind):
    @T.prim_func
    def main(A: T.Tensor((64,), T.float32)):
        if kind == "outside":
            iket.mark("early")
        with T.Kernel(1, threads=64) as bx:
            if kind == "dtype":
                iket.mark("x", payload=iket.payload(A[0], dtype="float16"))
            elif kind == "inferred":
                iket.mark("x", payload=T.cast(A[0], "float16"))
            elif kind == "name":
                iket.mark("")
            elif kind == "newline":
                iket.mark("a\nb")
            elif kind == "mismatch":
                iket.mark("x", payload=1)
                iket.mark("x", payload=2.0)
            elif kind == "pop":
                iket.range_pop()
            elif kind == "pop_name":
                iket.range_push("a")
                iket.range_pop("b")
            elif kind == "with":
                with T.serial(4):
                    pass
            elif kind == "expr":
                iket.mark("x", payload=A)
            for i in T.Parallel(64):
                A[i] = A[i] + bx

    return main


@pytest.mark.parametrize("kind,words,exc", [
    ("outside", "inside `with T.Kernel(...)`", Exception),
    ("dtype", "a payload is int32, uint32 or float32, got 'float16'", ValueError),
    ("inferred", "a payload is int32, uint32 or float32, got 'float16'", ValueError),
    ("name", "non-empty string", ValueError),
    ("newline", "printable", ValueError),
    ("mismatch", "first used with payload type int32, here with float32", ValueError),
    ("pop", "no range is open", RuntimeError),
    ("pop_name", "the range open last is 'a'", RuntimeError),
    ("with", "a `with` in a kernel takes `T.Kernel(...) as ...` first", Exception),
    ("expr", "'expr' must be a scalar kernel value", TypeError),
])
@pytest.mark.parametrize("enabled", [True, False], ids=["session", "no_session"])
def test_mistakes_are_errors_at_the_line(kind, words, exc, enabled):
    with pytest.raises(TegulaCompileError) as info:
        if enabled:
            with iket.session():
                _bad(kind)
        else:
            _bad(kind)
    text = str(info.value)
    assert words in text, text
    assert isinstance(info.value, exc)
    assert info.value.file == __file__ and info.value.source_line.strip().startswith(("iket.", "with", "A["))


def test_range_scope_outside_the_kernel_is_an_error():
    with pytest.raises(TegulaCompileError, match="must be inside `with T.Kernel"):
        @T.prim_func
        def main(A: T.Tensor((64,), T.float32)):
            with iket.range("r"):
                pass


def test_profile_command_points_at_tegulas_own_records():
    with pytest.raises(NotImplementedError, match="record their own events"):
        iket.profile_command("python x.py", directory="/tmp/x")
