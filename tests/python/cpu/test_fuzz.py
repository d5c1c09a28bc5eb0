"""Differential fuzzing on the CPU (no GPU): generated programs compile (lower + NVRTC),
and, where tegula.testing's interpreters are built, the lowered code simulated thread by
thread computes what the reference interpreter says the program means. Invalid programs
fail with TegulaCompileError at the line of their mistake (test_invalid_programs.py).
The generator is tegula.testing.fuzz; a failure shows the whole program, shrunk by
hypothesis."""
import os
import subprocess
import sys
import zlib

import pytest
import torch

tegula = pytest.importorskip("tegula")
pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

from tegula.testing import fuzz  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SETTINGS = dict(derandomize=True, deadline=None, database=None, print_blob=False,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate, Phase.shrink])
_SEEN = {"valid": 0}


@settings(max_examples=420, **SETTINGS)
@given(fuzz.programs())
def test_generated_programs_compile_and_agree(program):
    _SEEN["valid"] += 1
    # Fresh inputs per program, the same ones every run. check raises fuzz.Mismatch (with the
    # program) on any disagreement or compile failure.
    outcome = fuzz.check(program, seed=zlib.crc32(program.source.encode()))
    assert outcome == ("agreed" if fuzz.interpreters_available() else "compiled"), outcome


def test_enough_programs_were_checked():
    # Runs after the test above in file order; on its own it has nothing to count.
    if not _SEEN["valid"]:
        pytest.skip("run with the fuzz test above")
    assert _SEEN["valid"] >= 400, _SEEN


def test_generator_covers_the_language():
    features = set()
    for seed in range(2000):  # cheap (generation only); more families share the seeds
        features |= fuzz.program_from_seed(seed).features
    wanted = ["alloc_shared", "alloc_fragment", "alloc_local", "alloc_var", "copy_tile_tile", "parallel_math",
              "read_replicated", "write_replicated", "reduce_of_replicated", "reduce_accumulate_in_loop", "loop_pipelined", "loop_serial",
              "loop_range", "atomic_element", "atomic_tile", "atomic_tile_half", "gemm_a_registers", "gemm_b_registers", "scalar_int32", "scalar_float32",
              "dynamic", "grid1d", "grid2d", "bitwise", "int_floordiv", "int_floormod", "select", "div",
              "select_and", "select_or"]
    # tensor-core programs (fuzz_families_tc.py)
    wanted += ["attention_causal", "attention_mask", "attention_online_max", "attention_p_registers", "attention_key_bias_row",
               "attention_p_shared", "attention_pipelined", "attention_sm_90a", "chain_h_registers", "chain_h_shared",
               "chain_inner_k_loop", "tc_split_k_atomic", "tc_two_accumulators", "tc_bias_fragment"]
    # control flow, scopes, grids and casts (fuzz_families_control.py)
    wanted += ["loop_break", "loop_continue", "mask_select_nested", "branch_on_scalar", "tile_ops_under_branch", "serial_in_parallel",
               "local_in_parallel", "loop_in_loop_parallel", "grid3d", "dynamic_2d", "copy_changes_dtype",
               "copy_in_parts", "copy_shifted_parts", "fill_region_shared", "fill_local", "use_swizzle",
               "annotate_swizzled", "atomic_shared_histogram", "atomic_shared_tile", "disjoint_writes",
               "shared_loop_tree", "shared_loop_chunks", "shared_reduce", "persistent", "while",
               "reduce_of_shared", "reduce_into_shared", "reduce_into_fragment", "reduce_shared_accumulate",
               "reduce_general_form"]
    # names the generated CUDA renames (fuzz_families_names.py)
    wanted += ["names"]
    # tile code under thread guards (fuzz_families_guards.py)
    wanted += ["guard_one", "guard_nested", "guard_halves", "guard_prefix", "guard_suffix", "guard_window", "guard_group",
               "guard_with_block", "guard_fill_chain", "guard_reduce", "guard_reduce_shared", "guard_barrier_inside"]
    # views and T.im2col (fuzz_families_views.py)
    wanted += ["view_global", "view_shared", "view_fragment", "view_reduce", "im2col_shared", "im2col_fragment"]
    # gemms of 8-bit floats (fuzz_families_fp8.py)
    wanted += ["gen_gemm_fp8", "fp8_two_accumulators", "fp8_scaled_relu", "fp8_clear_accum_every_step"]
    # TileLang's T.transpose, T.annotate_safe_value, T.let and T.isfinite (fuzz_families_tilelang.py)
    wanted += ["transpose", "safe_value", "let_declared", "float_tests", "reducer_first_form"]
    # conversions between float types (fuzz_families_casts.py)
    wanted += ["convert_global_copy", "convert_registers_plain", "convert_registers_cast", "convert_registers_computed",
               "convert_vectorized", "convert_float32_float8_e4m3fn", "convert_float8_e5m2_float16",
               "convert_bfloat16_float32"]
    # gemms on regions of shared buffers (fuzz_families_regions.py)
    wanted += ["gen_gemm_regions"]
    # one warpgroup over its registers, lowered on two (fuzz_families_widen.py)
    wanted += ["widen_sm_90a_128x256", "widen_sm_90a_256x128"]
    # T.cumsum (fuzz_families_scan.py)
    wanted += ["cumsum_shared_shared", "cumsum_fragment_fragment", "cumsum_shared_fragment", "cumsum_fragment_shared",
               "cumsum_dim0", "cumsum_dim1", "cumsum_reverse", "cumsum_band", "cumsum_1d", "cumsum_after_parallel"]
    # producer and consumer sides ordered by explicit mbarriers (fuzz_families_barriers.py)
    wanted += ["gen_barrier_ring", "barrier_producer_copy", "barrier_producer_tma_copy", "barrier_producer_ptx",
               "barrier_stages_3", "barrier_whole_block_arrival", "barrier_set_max_nreg"]
    # fragments indexed by a loop's row-major position (fuzz_families_flat.py)
    wanted += ["flat_write", "flat_read"]
    wanted += ["tc_block_mask_branch"]
    # warp shuffles in both spellings (fuzz_families_warp.py)
    wanted += ["warp_shuffle_idx", "warp_shuffle_up", "warp_shuffle_down", "warp_shuffle_xor", "warp_shuffle_tvm",
               "warp_shuffle_shfl"]
    # programs instrumented with tegula.tools.cuda.iket (fuzz_families_iket.py)
    wanted += ["gen_instrumented", "iket_mark", "iket_mark_nested", "iket_range"]
    # warp-group scopes and run-time clear_accum (fuzz_families_ws.py)
    wanted += ["gen_ws_ring", "ws_order_producer_first", "ws_order_consumer_first", "ws_order_loops_inside",
               "ws_order_pipelined", "ws_producer_copy", "ws_producer_tma_copy", "ws_consumer_gemm",
               "ws_consumer_parallel", "ws_union", "gen_ws_split", "ws_split_tile_2", "ws_split_tile_3",
               "ws_split_gemm_2", "ws_split_gemm_3", "ws_every_group", "gen_clear_accum_runtime", "clear_accum_first",
               "clear_accum_last", "clear_accum_odd", "clear_accum_flag", "clear_accum_in_ws"]
    # T.gemm_sp (fuzz_families_sparse.py)
    wanted += ["gen_gemm_sp", "gemm_sp_clear_accum", "gemm_sp_epilogue", "gemm_sp_a_registers"]
    # rows too wide for the registers, rolled into loops (fuzz_families_wide.py)
    wanted += ["gen_wide_rows", "wide_rows_reduce_sum", "wide_rows_reduce_max"]
    # T.Pipelined schedules with computations in several stages (fuzz_families_stages.py)
    wanted += ["gen_stage_shift", "stage_shift_fa3", "stage_shift_value_first", "stage_shift_one_stage",
               "stage_shift_sm_90a", "stage_shift_sm_80", "stage_shift_two_apart"]
    # persistent GEMMs warp specialised across their tiles (fuzz_families_persistent.py)
    wanted += ["gen_persistent_gemm", "persistent_sm_90a", "persistent_sm_80", "persistent_blocks_one",
               "persistent_blocks_some", "persistent_blocks_all", "persistent_blocks_over",
               "persistent_staged_swizzled", "persistent_staged_padded", "persistent_direct_epilogue",
               "persistent_second_compute", "persistent_one_stage", "persistent_bulk_copies"]
    # one-kernel split-K whose last block adds the slices (fuzz_families_lastblock.py)
    wanted += ["gen_last_block_reduce", "lastblock_sm_90a", "lastblock_sm_80", "lastblock_one_slice",
               "lastblock_slices", "lastblock_weight_nk", "lastblock_weight_kn", "lastblock_ragged",
               "lastblock_epilogue"]
    # registers written as the two halves of one 32-bit word (fuzz_families_halves.py)
    wanted += ["gen_halves", "halves_store", "halves_subtract", "halves_gemm", "halves_float16", "halves_bfloat16",
               "halves_sm_90a", "halves_sm_80", "halves_masked", "halves_magic"]
    # copies the program groups and waits for itself (fuzz_families_async.py)
    wanted += ["gen_async_groups", "async_stages_2", "async_stages_3", "async_sm_90a", "async_sm_80",
               "async_parallel", "async_annotated", "async_copy"]
    # wide rows over blocks of threads that are not a power of two (fuzz_families_rows.py)
    wanted += ["gen_odd_block_rows", "rows_threads_96", "rows_threads_448", "rows_threads_896", "rows_sum", "rows_absmax",
               "rows_bm_2"]
    missing = [w for w in wanted if w not in features]
    assert not missing, missing
    assert any(f.startswith("gemm_sm_80") for f in features) and any(f.startswith("gemm_sm_90a") for f in features)
    for policy in ("Square", "FullRow", "FullCol"):
        assert any(f.startswith(f"tc_{policy}_") for f in features), policy
    for kind in ("sum", "max", "min", "abssum", "absmax"):
        assert any(f.startswith(f"reduce_{kind}_") for f in features), kind
    for types in ("float8_e4m3fn_float8_e4m3fn", "float8_e5m2_float8_e5m2", "float8_e4m3fn_float8_e5m2"):
        assert any(f.startswith(f"fp8_{types}_") for f in features), types
    for target in ("sm_89", "sm_90a"):
        assert any(f.startswith("fp8_") and f"_{target}_" in f for f in features), target
    for part in ("_bfloat16_", "_float16_float16_", "_int8_", "_uint8_", "_int32_", "_sm_80_", "_sm_90a_", "_tA", "_tB"):
        assert any(f.startswith("gemm_sp_") and part in f for f in features), part


def test_programs_are_reproducible():
    assert fuzz.program_from_seed(11).source == fuzz.program_from_seed(11).source
    p = fuzz.program_from_seed(11)
    a, b = fuzz.make_inputs(p, 3), fuzz.make_inputs(p, 3)
    assert all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def test_compare_catches_what_it_must():
    ref = torch.tensor([1.0, 2.0, float("nan")])
    assert fuzz.compare(ref, ref.clone(), 1e-5) is None
    assert "NaN" in fuzz.compare(ref, torch.tensor([1.0, float("nan"), float("nan")]), 1e-5)
    assert "NaN" in fuzz.compare(ref, torch.tensor([1.0, 2.0, 3.0]), 1e-5)
    assert "relative error" in fuzz.compare(ref, torch.tensor([1.0, 2.1, float("nan")]), 1e-5)
    ints = torch.tensor([3, -4], dtype=torch.int32)
    assert fuzz.compare(ints, torch.tensor([3, -5], dtype=torch.int32), 0.0) is not None


def test_check_invalid_rejects_a_valid_program():
    program = fuzz.program_from_seed(5)
    program.error_line, program.error_kind = 1, "not_really_invalid"
    with pytest.raises(fuzz.Mismatch, match="compiled"):
        fuzz.check_invalid(program)


def test_gpu_script_dry_run(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fuzz_gpu.py"), "--dry-run", "--count", "4",
                          "--workers", "2", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("fuzz_gpu: programs=4 mismatches=0 errors=0 seconds="), out.stdout + out.stderr
    assert out.returncode == 0


def test_halves_family_stores_whole_words():
    """The family of 16-bit registers written as the halves of one word reaches the rule of
    pack_casts it is there for: every form of it stores the word whole, on both targets."""
    seen = set()
    for seed in range(3000):
        program = fuzz.program_from_seed(seed)
        if "gen_halves" not in program.features:
            continue
        form = next(f for f in ("halves_store", "halves_subtract", "halves_gemm") if f in program.features)
        target = "sm_90a" if "halves_sm_90a" in program.features else "sm_80"
        if (form, target) in seen:
            continue
        source = program.build().get_kernel_source()
        assert "*reinterpret_cast<int*>(&h" in source, program.source
        seen.add((form, target))
    assert len(seen) == 6, seen
