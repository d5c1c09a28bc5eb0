"""Two GPUs in one process: every kernel runs on the device its tensors are on, whichever
device is current, and leaves the current device as it found it.

- every shipped operator (the opcheck tables of _op_cases.py), forward and, where it has
  one, backward, on cuda:1 while cuda:0 is current: the same numbers as on cuda:0;
- a raw @jit kernel: right on cuda:1, then on cuda:0 and back (one module loaded per
  device, one compile); mixed devices refused by the argument's name;
- the current stream of the tensors' device, not of the current device;
- tensor maps (the warp-specialised TMA GEMM) encoded for each device's pointers;
- a CUDA graph captured and replayed on cuda:1;
- the JIT index and disk cache: a kernel compiled in a process on cuda:0 is a disk hit
  in a new process on cuda:1 (same architecture, no NVRTC);
- two threads driving the two devices at once, compiling and launching."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import tegula
import tegula.kernels as K

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lang_kernels import gemm_relu_program  # noqa: E402

from _op_cases import MODEL_OPCHECK, OPCHECK, QUANT_OPCHECK, case, scale_add as _scale_add  # noqa: E402
from _util import randn, rel_err  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.gpu2]

FA = __import__("importlib").import_module("tegula.kernels.flash_attention")
ZERO, ONE = torch.device("cuda", 0), torch.device("cuda", 1)


@pytest.fixture(autouse=True)
def _device_zero_current():
    """Every test starts, and must end, with cuda:0 current."""
    torch.cuda.set_device(0)
    yield
    assert torch.cuda.current_device() == 0, "a call left another device current"


def _to(value, device):
    """value with its tensors on `device` (leaves keep requires_grad)."""
    if isinstance(value, torch.Tensor):
        moved = value.detach().to(device)
        return moved.requires_grad_(value.requires_grad) if value.is_floating_point() else moved
    if isinstance(value, (tuple, list)):
        return type(value)(_to(v, device) for v in value)
    return value


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _run(op, args):
    """(outputs, grads of every requires_grad input) of op(*args) with a fixed upstream
    gradient, on the arguments' device."""
    out = op(*args)
    outs = _tensors(out)
    leaves = [t for t in _tensors(args) if t.requires_grad]
    differentiable = [o for o in outs if o.requires_grad]
    grads = []
    if leaves and differentiable:
        loss = sum((o.float() * torch.linspace(-1, 1, o.numel(), device=o.device).view(o.shape)).sum()
                   for o in differentiable)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return outs, list(grads)


@pytest.mark.parametrize("name", OPCHECK + MODEL_OPCHECK + QUANT_OPCHECK)
def test_every_operator_runs_on_its_tensors_device(name):
    op, args = case(name)
    moved = _to(args, ONE)                           # before the call: some ops write their inputs
    want_outs, want_grads = _run(op, args)           # on cuda:0, current
    got_outs, got_grads = _run(op, moved)            # on cuda:1, cuda:0 still current
    assert torch.cuda.current_device() == 0
    assert len(got_outs) == len(want_outs) and len(got_grads) == len(want_grads)
    for i, (got, want) in enumerate(zip(got_outs + got_grads, want_outs + want_grads)):
        if want is None:
            assert got is None
            continue
        assert got.device == ONE, f"output {i} is on {got.device}"
        if got.is_floating_point() and got.element_size() == 1:      # float8: compare as float32
            got, want = got.float(), want.float()
        torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-3, atol=1e-3, equal_nan=True,
                                   msg=lambda m: f"{name}, output {i} (outputs then grads): {m}")


def _xy(device, seed, rows=37, n=300):
    return randn((rows, n), torch.float32, seed, device=device), randn((rows, n), torch.float32, seed + 1,
                                                                        device=device)


def test_a_raw_kernel_runs_where_its_tensors_are_and_keeps_one_compile():
    kernel = _scale_add(300)
    for device in (ONE, ZERO, ONE):
        x, y = _xy(device, 3)
        z = kernel(x, y, 1.5)
        assert z.device == device and torch.cuda.current_device() == 0
        torch.testing.assert_close(z, x * 1.5 + y, rtol=1e-6, atol=1e-6)   # the kernel fuses the multiply-add
    # The same kernel object served both devices: one compiled image, loaded per device.
    assert _scale_add(300) is kernel


def test_the_device_context_does_not_move_the_launch():
    """With cuda:1 current, tensors on cuda:0 run on cuda:0."""
    kernel = _scale_add(300)
    x, y = _xy(ZERO, 5)
    with torch.cuda.device(1):
        z = kernel(x, y, -2.0)
        assert torch.cuda.current_device() == 1
    assert z.device == ZERO
    torch.testing.assert_close(z, x * -2.0 + y, rtol=1e-6, atol=1e-6)


def test_mixed_devices_are_refused_by_name():
    kernel = _scale_add(300)
    x, _ = _xy(ZERO, 7)
    _, y = _xy(ONE, 7)
    with pytest.raises(Exception, match=r"'Y'.*cuda:1.*cuda:0"):
        kernel(x, y, 1.0)
    w = torch.ones(300, dtype=torch.float16, device=ONE)
    with pytest.raises(ValueError, match=r"weight"):
        K.rms_norm(x.half(), w)
    # Both devices still work afterwards.
    for device in (ZERO, ONE):
        a, b = _xy(device, 8)
        torch.testing.assert_close(kernel(a, b, 1.0), a + b, rtol=1e-6, atol=1e-6)


def test_the_tensors_device_current_stream_orders_the_launch():
    """A kernel reads what the current stream of its tensors' device wrote before it, while
    that stream is still busy: it runs on that stream, not on cuda:1's default one."""
    kernel = _scale_add(4096)
    x, y = _xy(ONE, 11, rows=512, n=4096)
    fresh = randn(x.shape, torch.float32, 12, device=ONE)
    stream = torch.cuda.Stream(device=ONE)
    stream.wait_stream(torch.cuda.current_stream(ONE))
    with torch.cuda.stream(stream):
        torch.cuda._sleep(20_000_000)                 # about 10 ms of this stream's time
        x.copy_(fresh)
        z = kernel(x, y, 1.0)
    torch.cuda.synchronize(ONE)
    assert torch.cuda.current_device() == 0
    torch.testing.assert_close(z, fresh + y, rtol=1e-6, atol=1e-6)


def test_tensor_maps_are_encoded_for_each_device():
    if torch.cuda.get_device_capability(0)[0] != 9 or torch.cuda.get_device_capability(1)[0] != 9:
        pytest.skip("the TMA path needs sm_90 on both devices")
    M = N = K_ = 256
    kernel = tegula.compile(gemm_relu_program(M, N, K_, 128, 128, 32), out_idx=[-1])
    assert kernel._lowered.tensor_maps >= 2
    for device in (ZERO, ONE, ZERO, ONE):
        seed = device.index * 10
        a = randn((M, K_), torch.float16, seed, device=device)
        b = randn((K_, N), torch.float16, seed + 1, device=device)
        c = kernel(a, b)
        assert c.device == device
        assert rel_err(c, torch.relu(a.float() @ b.float())) < 1e-3
    # The shipped GEMM and attention (bulk copies at these sizes) on cuda:1.
    a = randn((1024, 512), torch.bfloat16, 21, device=ONE)
    b = randn((512, 768), torch.bfloat16, 22, device=ONE)
    assert rel_err(K.matmul(a, b), a.float() @ b.float()) < 1e-2
    q = randn((2, 512, 8, 128), torch.bfloat16, 23, device=ONE)
    out = FA.flash_attention(q, q, q, causal=True, layout="bshd")
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).float(), q.transpose(1, 2).float(), q.transpose(1, 2).float(), is_causal=True)
    assert out.device == ONE and rel_err(out, ref.transpose(1, 2)) < 1e-2


def test_a_cuda_graph_captures_and_replays_on_the_second_device():
    x = randn((64, 1024), torch.float16, 31, device=ONE)
    w = randn((1024,), torch.float16, 32, offset=1.0, device=ONE)
    b = randn((1024, 256), torch.float16, 33, scale=1024 ** -0.5, device=ONE)
    q = randn((1, 100, 2, 64), torch.float16, 34, device=ONE)

    def step():
        h = K.rms_norm(x, w)
        return K.matmul(h, b, None, "relu"), FA.flash_attention(q, q, q, causal=True), K.softmax(x)

    with torch.cuda.device(1):
        eager = step()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = step()
        for out in captured:
            out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
    for got, want in zip(captured, eager):
        assert got.device == ONE and torch.equal(got, want)


_CHILD = textwrap.dedent("""
    import sys, torch
    import tegula.kernels as K
    device = torch.device("cuda", int(sys.argv[1]))
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(8, 2816, device=device, generator=g).half()
    w = torch.randn(2816, device=device, generator=g).half()
    y = K.rms_norm(x, w, 1e-6)
    ref = torch.nn.functional.rms_norm(x.float(), (2816,), w.float(), 1e-6)
    err = ((y.float() - ref).norm() / ref.norm()).item()
    assert y.device == device and err < 2e-3, (y.device, err)
    assert torch.cuda.current_device() == 0
    print("ok")
""")


def test_the_disk_cache_serves_the_second_device_in_a_new_process(tmp_path):
    env = dict(os.environ, TEGULA_CACHE_DIR=str(tmp_path / "cache"), TEGULA_LOG="compile")
    (tmp_path / "child.py").write_text(_CHILD)
    logs = []
    for device in ("0", "1"):
        proc = subprocess.run([sys.executable, str(tmp_path / "child.py"), device], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
        logs.append(proc.stderr)
    assert "nvrtc" in logs[0], logs[0]                   # compiled on cuda:0
    assert "nvrtc" not in logs[1] and ("disk hit" in logs[1] or "index" in logs[1]), logs[1]


def test_two_threads_drive_both_devices_at_once():
    """Each thread compiles kernels of its own sizes and launches them on its own device,
    both at once; every result is right and each thread's current device is its own."""
    errors = []
    barrier = threading.Barrier(2)

    def work(index):
        try:
            device = torch.device("cuda", index)
            torch.cuda.set_device(index)
            barrier.wait()
            for step in range(12):
                n = 256 + 32 * (2 * step + index)               # a new compile each step, both threads
                x, y = _xy(device, 100 * index + step, rows=19, n=n)
                z = _scale_add(n)(x, y, 0.5)
                h = K.rms_norm(x.half(), torch.ones(n, dtype=torch.float16, device=device))
                ref = torch.nn.functional.rms_norm(x.float(), (n,), None, 1e-6)
                if rel_err(z, x * 0.5 + y) > 1e-6 or rel_err(h, ref) > 2e-3 or z.device != device:
                    errors.append(f"thread {index}, step {step}: wrong result")
                if torch.cuda.current_device() != index:
                    errors.append(f"thread {index}: current device moved to {torch.cuda.current_device()}")
            torch.cuda.synchronize(device)
        except Exception as e:   # noqa: BLE001 - reported below with the thread's name
            errors.append(f"thread {index}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors
