"""Barriers between blocks without a GPU: T.sync_grid (a cooperative launch) and thread
block clusters (T.ClusterKernel / T.Kernel(cluster_dims=), T.cluster_arrive / _wait /
_sync, T.block_rank_in_cluster, T.get_cluster_*). The programs (tests/python/
launch_programs.py) compile with NVRTC; the reference and the simulator run their blocks
as coroutines that meet at the barriers, and agree with torch on fresh random inputs,
outputs poisoned, ragged and aligned sizes. Misuse is refused at the DSL line, or
reported by the simulator."""
import re

import pytest
import torch

import launch_programs as lp
import tegula
import tegula.language as T
import tegula.testing as tt
from tegula import env


def nan(*shape):
    return torch.full(shape, float("nan"))


def cubin(kernel):
    assert kernel.cubin()[:4] == b"\x7fELF"
    return kernel.get_kernel_source()


def compile_error(program, target="sm_90a"):
    with pytest.raises(tegula.TegulaCompileError) as err:
        tegula.compile(program(), target=target)
    return str(err.value)


# ------------------------------------------------------------------ T.sync_grid

@pytest.mark.parametrize("N", [1024, 1000])
def test_grid_barrier_exchanges_between_blocks(N):
    kernel = tegula.compile(lp.mirror_program(N), target="sm_90a")
    x = torch.randn(N)
    for run in (tt.reference, tt.simulate):
        a = nan(N)
        run(kernel, x, a)
        torch.testing.assert_close(a, lp.mirror_expected(x), rtol=0, atol=0)


@pytest.mark.parametrize("N", [4096, 1000])
def test_grid_barrier_after_a_reduction(N):
    kernel = tegula.compile(lp.centre_program(N), out_idx=[-1], target="sm_90a")
    x = torch.randn(N)
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(kernel, x), lp.centre_expected(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_grid_barrier_source(target):
    kernel = tegula.compile(lp.mirror_program(1024), target=target)
    source = cubin(kernel)
    assert "#include <cooperative_groups.h>" in source
    # The barrier inside the T.Parallel loop is met once per thread: the loop is split.
    assert source.count("cooperative_groups::this_grid().sync();") == 2
    assert "cooperative_groups" not in tegula.compile(lp.ranks_program((4, 2), (2, 1)), target=target
                                                       if target != "sm_80" else "sm_90a").get_kernel_source()


def test_program_launches_cooperatively_and_saves_it():
    C = env.native()
    program = tegula.compile(lp.mirror_program(1024), target="sm_90a")._build()
    assert [l["cooperative"] for l in program.launches] == [True]
    assert C.load_program(program.save()).launches == program.launches
    plain = tegula.compile(lp.ranks_program((4, 2), (2, 1)), out_idx=[-1], target="sm_90a")._build()
    assert plain.launches[0]["cooperative"] is False and plain.launches[0]["cluster_dims"] == [2, 1, 1]
    assert C.load_program(plain.save()).launches == plain.launches


def test_barrier_in_a_parallel_body_splits_the_loop():
    @T.prim_func
    def split(X: T.Tensor((256,), "float32"), Y: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((256,), "float32")
            for i in T.Parallel(256):
                s[i] = X[i]
                T.sync_threads()
                Y[i] = s[255 - i]

    kernel = tegula.compile(split, target="sm_90a")
    x = torch.randn(256)
    for run in (tt.reference, tt.simulate):
        y = nan(256)
        run(kernel, x, y)
        torch.testing.assert_close(y, x.flip(0), rtol=0, atol=0)
    assert "parallel" in kernel.get_ir("input") and kernel.get_ir("input").count("for ") == 2


def test_barrier_nested_in_a_parallel_body_is_refused():
    def program():
        @T.prim_func
        def f(A: T.Tensor((64,), "float32")):
            with T.Kernel(4, threads=64) as bx:
                for i in T.Parallel(64):
                    if i < 32:
                        T.sync_grid()
                    A[i] = 1.0
        return f

    message = compile_error(program)
    assert "T.sync_grid inside a T.Parallel loop must be a statement of the loop body itself" in message
    assert "T.sync_grid()" in message  # the caret's line


def test_grid_barrier_not_reached_by_every_block():
    @T.prim_func
    def partial(A: T.Tensor((4, 32), "float32")):
        with T.Kernel(4, threads=32) as bx:
            for i in T.Parallel(32):
                A[bx, i] = 1.0
            if bx < 2:
                T.sync_grid()
            for i in T.Parallel(32):
                A[bx, i] = A[(bx + 1) % 4, i]

    kernel = tegula.compile(partial, target="sm_90a")
    with pytest.raises(tegula.TegulaCompileError, match="can never complete.*block \\(2, 0, 0\\) ended"):
        tt.reference(kernel, nan(4, 32))
    with pytest.raises(tt.SimulationError, match="can never complete"):
        tt.simulate(kernel, nan(4, 32))


def test_grid_barrier_reached_by_part_of_a_block():
    @T.prim_func
    def half(A: T.Tensor((2, 64), "float32")):
        with T.Kernel(2, threads=64) as bx:
            tx = T.get_thread_binding()
            A[bx, tx] = 1.0
            if tx < 32:
                T.sync_grid()
            A[bx, tx] = A[1 - bx, tx]

    with pytest.raises(tt.SimulationError, match="T.sync_grid reached by 32 of 64 threads"):
        tt.simulate(tegula.compile(half, target="sm_90a"), nan(2, 64))


# ------------------------------------------------------------------ clusters

@pytest.mark.parametrize("grid,cluster", [((8, 4), (2, 2)), ((8, 2), (4,)), ((6, 3), (3, 1, 1))])
def test_rank_in_cluster(grid, cluster):
    kernel = tegula.compile(lp.ranks_program(grid, cluster), out_idx=[-1], target="sm_90a")
    dims = tuple(cluster) + (1,) * (3 - len(cluster))
    assert f"__cluster_dims__({dims[0]}, {dims[1]}, {dims[2]})" in cubin(kernel)
    assert "tegula::block_rank_in_cluster()" in kernel.get_kernel_source()
    want = lp.ranks_expected(grid, cluster)
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(kernel), want, rtol=0, atol=0)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("blocks,cluster", [(8, 4), (6, 2)])
def test_cluster_barrier_exchanges_within_a_cluster(blocks, cluster, split):
    kernel = tegula.compile(lp.exchange_program(blocks, cluster, split=split), out_idx=[-1], target="sm_90a")
    source = cubin(kernel)
    assert ("tegula::cluster_arrive();" in source) == split and ("tegula::cluster_sync();" in source) != split
    x = torch.randn(blocks, 128)
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(kernel, x, nan(blocks, 128)), lp.exchange_expected(x, cluster), rtol=0, atol=0)


def test_cluster_kernel_compiles_for_blackwell():
    kernel = tegula.compile(lp.exchange_program(8, 2), out_idx=[-1], target="sm_100a")
    assert "__cluster_dims__(2, 1, 1)" in cubin(kernel)


def test_kernel_takes_cluster_dims_too():
    @T.prim_func
    def f(A: T.Tensor((8,), "int32")):
        with T.Kernel(8, threads=32, cluster_dims=2) as bx:
            A[bx] = T.block_rank_in_cluster()

    kernel = tegula.compile(f, target="sm_90a")
    assert "__cluster_dims__(2, 1, 1)" in kernel.get_kernel_source()
    a = torch.zeros(8, dtype=torch.int32)
    tt.simulate(kernel, a)
    assert a.tolist() == [0, 1] * 4


def test_cluster_shape_helpers():
    seen = {}

    @T.prim_func
    def f(A: T.Tensor((16, 6), "int32")):
        with T.ClusterKernel(16, 6, threads=32, cluster_dims=(4, 2)) as (bx, by):
            seen["dims"] = T.get_cluster_dims()
            seen["size"] = T.get_cluster_size()
            seen["extents"] = T.get_cluster_extents()
            A[bx, by] = T.get_cluster_ids()[0] * 10 + T.get_cluster_id(1)

    assert seen == {"dims": [4, 2, 1], "size": 8, "extents": [4, 3, 1]}
    a = torch.zeros(16, 6, dtype=torch.int32)
    tt.reference(tegula.compile(f, target="sm_90a"), a)
    want = torch.tensor([[bx // 4 * 10 + by // 2 for by in range(6)] for bx in range(16)], dtype=torch.int32)
    assert torch.equal(a, want)


def test_without_clusters_a_block_is_its_own_cluster():
    @T.prim_func
    def f(A: T.Tensor((4,), "int32")):
        with T.Kernel(4, threads=32) as bx:
            T.cluster_sync()
            A[bx] = T.block_rank_in_cluster() + T.get_cluster_size()

    kernel = tegula.compile(f, target="sm_90a")
    assert "__cluster_dims__" not in cubin(kernel)
    for run in (tt.reference, tt.simulate):
        a = torch.zeros(4, dtype=torch.int32)
        run(kernel, a)
        assert a.tolist() == [1, 1, 1, 1]


def test_cluster_wait_without_arrive():
    @T.prim_func
    def f(A: T.Tensor((4,), "int32")):
        with T.ClusterKernel(4, threads=32, cluster_dims=2) as bx:
            T.cluster_wait()
            A[bx] = 1

    kernel = tegula.compile(f, target="sm_90a")
    with pytest.raises(tegula.TegulaCompileError, match="waits at the cluster barrier without having arrived"):
        tt.reference(kernel, torch.zeros(4, dtype=torch.int32))
    with pytest.raises(tt.SimulationError, match="without having arrived"):
        tt.simulate(kernel, torch.zeros(4, dtype=torch.int32))


# ------------------------------------------------------------------ refusals

def _cluster_kernel(grid, cluster, swizzle=False):
    def program():
        @T.prim_func
        def f(A: T.Tensor((64, 64), "float32")):
            with T.ClusterKernel(*grid, threads=64, cluster_dims=cluster) as (bx, by):
                if swizzle:
                    T.use_swizzle(4)
                A[bx, by] = 1.0
        return f
    return program


@pytest.mark.parametrize("grid,cluster,match", [
    ((6, 4), (4, 1), "cluster_dims=\\(4, 1, 1\\) must divide the grid, but grid dimension 0 is 6"),
    ((8, 3), (1, 2), "grid dimension 1 is 3, not a multiple of 2"),
    ((16, 4), (4, 4), "at most 8 blocks"),
    ((8, 4), (2, 0), "positive constant ints"),
    ((8, 4), "2", "positive constant ints"),
    ((8, 4), (1, 1, 1, 2), "an int or 1 to 3 ints"),
])
def test_bad_cluster_dims(grid, cluster, match):
    message = compile_error(_cluster_kernel(grid, cluster))
    assert "cluster_dims" in message
    assert any(line.strip().startswith("^") for line in message.splitlines())
    assert re.search(match, message), message


def test_clusters_need_sm90():
    message = compile_error(_cluster_kernel((8, 4), (2, 1)), target="sm_80")
    assert "cluster_dims=(2, 1, 1) needs thread block clusters, which sm_90 and newer have; the target is sm_80" \
        in message
    assert "T.ClusterKernel(*grid" in message  # at the kernel's line

    def barrier():
        @T.prim_func
        def f(A: T.Tensor((4,), "int32")):
            with T.Kernel(4, threads=32) as bx:
                T.cluster_sync()
                A[bx] = 1
        return f

    assert "T.cluster_sync: thread block clusters need sm_90 or newer" in compile_error(barrier, target="sm_80")


def test_clusters_refuse_use_swizzle():
    message = compile_error(_cluster_kernel((8, 4), (2, 1), swizzle=True))
    assert "T.use_swizzle: not supported in a kernel with cluster_dims=(2, 1, 1)" in message


def test_cluster_kernel_needs_cluster_dims():
    def program():
        @T.prim_func
        def f(A: T.Tensor((4,), "int32")):
            with T.ClusterKernel(4, threads=32) as bx:
                A[bx] = 1
        return f

    assert "cluster_dims" in compile_error(program)


def test_wide_barrier_in_a_pipelined_loop_is_refused():
    def program():
        @T.prim_func
        def f(A: T.Tensor((4, 64), "float32"), B: T.Tensor((4, 64), "float32")):
            with T.Kernel(4, threads=64) as bx:
                s = T.alloc_shared((64,), "float32")
                for k in T.Pipelined(4, num_stages=2):
                    T.copy(A[k, :], s)
                    T.sync_grid()
                    for i in T.Parallel(64):
                        B[bx, i] = s[i]
        return f

    assert "T.sync_grid inside a T.Pipelined loop" in compile_error(program)


def test_cluster_grid_of_a_call_must_divide():
    n = T.dynamic("n")

    @T.prim_func
    def f(A: T.Tensor((n,), "float32")):
        with T.ClusterKernel(T.ceildiv(n, 64), threads=64, cluster_dims=2) as bx:
            for i in T.Parallel(64):
                A[bx * 64 + i] = T.block_rank_in_cluster()

    kernel = tegula.compile(f, target="sm_90a")
    a = torch.zeros(256)
    tt.simulate(kernel, a)
    assert a.view(4, 64)[:, 0].tolist() == [0, 1, 0, 1]
    with pytest.raises(tegula.TegulaCompileError, match="must divide the grid, but the grid is \\(3, 1, 1\\)"):
        tt.reference(kernel, torch.zeros(192))
    with pytest.raises(tt.SimulationError, match="must divide the grid"):
        tt.simulate(kernel, torch.zeros(192))
