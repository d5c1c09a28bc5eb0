"""tegula.tools.cuda.iket on the GPU: instrumented programs (iket_programs.py) compute what
torch does (float64 from the same fresh inputs, ragged and aligned sizes), and every
thread's records are well formed: the events in program order with the right ids and
payloads, timestamps that never decrease, every element recorded once, nothing dropped;
each launch has its own log, on the current stream or an explicit one; a log too small
counts what it dropped; the trace file holds the launches (the CPU side:
cpu/test_tools_iket.py)."""
import json

import pytest
import torch

import tegula
from tegula.tools.cuda import iket
import iket_programs as ip

pytestmark = pytest.mark.gpu


def _inputs(n):
    return (torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.rand(1, device="cuda") + 0.5)


@pytest.mark.parametrize("n,threads", [(4096, 128), (1000, 128), (333, 64), (96, 256)])
def test_scaled_add_records_every_event(n, threads):
    with iket.session(runtime_payloads=True):
        k = tegula.compile(ip.scaled_add(n, threads), out_idx=-1)
    A, B, S = _inputs(n)
    C = k(A, B, S)
    torch.testing.assert_close(C, ip.expected_scaled_add(A, B, S))
    (launch,) = iket.launches(k)
    assert launch.index == 0 and launch.device == A.device.index
    ip.check_scaled_add_events(launch, n, threads, C)


def test_without_payloads_the_events_still_come_in_order():
    n, threads = 1000, 128
    with iket.session(runtime_payloads=False):
        k = tegula.compile(ip.scaled_add(n, threads), out_idx=-1)
    A, B, S = _inputs(n)
    torch.testing.assert_close(k(A, B, S), ip.expected_scaled_add(A, B, S))
    (launch,) = iket.launches(k)
    assert all(r.payload is None for r in launch.records)
    names = [r.name for r in launch.records]
    assert names.count("before") == n and names.count("after") == n and names.count("enter") == 8 * threads


@pytest.mark.parametrize("M,N,bm,bn", [(256, 256, 64, 64), (300, 170, 64, 32)])
def test_tiled_rows_records_ranges(M, N, bm, bn):
    # (the marks' payloads are recorded only when the session asks for them)
    with iket.session(runtime_payloads=True):
        k = tegula.compile(ip.tiled_rows(M, N, bm, bn), out_idx=-1)
    A = torch.randn(M, N, device="cuda")
    torch.testing.assert_close(k(A), ip.expected_tiled_rows(A))
    (launch,) = iket.launches(k)
    ip.check_tiled_rows_events(launch, -(-M // bm) * -(-N // bn), 128)


def test_each_launch_has_its_own_log_on_its_own_stream():
    n = 512
    with iket.session(runtime_payloads=True):
        k = tegula.compile(ip.scaled_add(n), out_idx=-1)
    A, B, S = _inputs(n)
    first = k(A, B, S)
    stream = torch.cuda.Stream()
    C = torch.empty(n, device="cuda")
    stream.wait_stream(torch.cuda.current_stream())  # A, B and S were made on the current stream
    with torch.cuda.stream(stream):
        A2 = A * 2  # written on `stream`: the launch must see it
        k.launch(A2, B, S, C, stream=stream.cuda_stream)
    stream.synchronize()
    torch.testing.assert_close(C, ip.expected_scaled_add(A2, B, S))
    launches = iket.launches(k)
    assert [launch.index for launch in launches] == [0, 1]
    ip.check_scaled_add_events(launches[0], n, 128, first)
    ip.check_scaled_add_events(launches[1], n, 128, C)
    assert launches[0].start_ns < launches[1].start_ns


def test_a_small_log_keeps_the_first_records_and_counts_the_rest():
    n = 1024
    with iket.session(runtime_payloads=True, capacity=100):
        k = tegula.compile(ip.scaled_add(n), out_idx=-1)
    A, B, S = _inputs(n)
    torch.testing.assert_close(k(A, B, S), ip.expected_scaled_add(A, B, S))
    (launch,) = iket.launches(k)
    assert len(launch.records) == 100 and launch.claimed == 8 * 128 * 4 + 2 * n
    assert launch.dropped == launch.claimed - 100


def test_an_uninstrumented_build_runs_as_before():
    n = 700
    k = tegula.compile(ip.scaled_add(n), out_idx=-1)
    A, B, S = _inputs(n)
    torch.testing.assert_close(k(A, B, S), ip.expected_scaled_add(A, B, S))
    with pytest.raises(ValueError, match="records no iket events"):
        iket.launches(k)


def test_trace_file_holds_the_launches(tmp_path):
    n = 300
    with iket.session(output_dir=tmp_path, runtime_payloads=True):
        k = tegula.compile(ip.scaled_add(n), out_idx=-1)
    A, B, S = _inputs(n)
    k(A, B, S)
    k(A, B, S)
    files = iket.trace_files(directory=tmp_path)
    assert files and files[0].parent == tmp_path.absolute()
    data = json.loads(files[0].read_text())
    assert data["kernel"] == "main" and len(data["launches"]) == 2
    for launch in data["launches"]:
        assert len(launch["markers"]) == 2 * 3 * 128 + 2 * n
        assert len(launch["ranges"]) == 3 * 128 and all(g["end_ns"] >= g["start_ns"] for g in launch["ranges"])
    assert {e["ph"] for e in data["traceEvents"]} == {"M", "i", "X"}
