"""Pass configuration: TileLang's `PassConfigKey` names, and what Tegula does with each.

`tegula.compile(f, pass_configs={PassConfigKey.TL_ENABLE_FAST_MATH: True})` (or the same
key as the string "tl.enable_fast_math") becomes the options dict handed to
`tegula._C.lower(kernel, target, options)` and `Lowered.build(options)`:
{"fast_math": True}. Keys that name a TVM/TileLang pass Tegula does not have are
accepted and ignored, so TileLang code ports unchanged; `describe(key)` says why.
"""
from __future__ import annotations

import enum


class PassConfigKey(str, enum.Enum):
    TL_SIMPLIFY = "tl.Simplify"
    TL_SIMPLIFY_TRANSITIVELY_PROVE_INEQUALITIES = "transitively_prove_inequalities"
    TL_SIMPLIFY_CONVERT_BOOLEAN_TO_AND_OF_ORS = "convert_boolean_to_and_of_ors"
    TL_SIMPLIFY_APPLY_CONSTRAINTS_TO_BOOLEAN_BRANCHES = "apply_constraints_to_boolean_branches"
    TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_PROVE_CONDITIONAL = "propagate_knowns_to_prove_conditional"
    TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_SIMPLIFY_EXPRESSIONS = "propagate_knowns_to_simplify_expressions"
    TL_SIMPLIFY_ENABLE_LET_INLINE = "enable_simplify_let_inline"
    TL_DISABLE_BUFFER_INIT_CHECK = "tl.disable_buffer_init_check"
    TL_DISABLE_DATA_RACE_CHECK = "tl.disable_data_race_check"
    TL_DISABLE_PRELOWER_SEMANTIC_CHECK = "tl.disable_prelower_semantic_check"
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    TL_ENABLE_AUTO_WARP_SPECIALIZATION = "tl.enable_auto_warp_specialization"
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    TL_DISABLE_FAST_MATH = "tl.disable_fast_math"
    TL_PTXAS_REGISTER_USAGE_LEVEL = "tl.ptxas_register_usage_level"
    TL_ENABLE_PTXAS_VERBOSE_OUTPUT = "tl.enable_ptxas_verbose_output"
    TL_DEVICE_COMPILE_FLAGS = "tl.device_compile_flags"
    TL_EMIT_LINE_DIRECTIVES = "tl.emit_line_directives"
    TL_CONFIG_INDEX_BITWIDTH = "tl.config_index_bitwidth"
    TL_ENABLE_REDUCER_PLAN_VERBOSE = "tl.enable_reducer_plan_verbose"
    TL_LAYOUT_COST_MODEL = "tl.layout_cost_model"
    TL_REDUCER_FORCE_BASELINE = "tl.reducer_force_baseline"
    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    TL_DISABLE_SAFE_MEMORY_ACCESS = "tl.disable_safe_memory_legalize"
    TL_DISABLE_VECTORIZE_256 = "tl.disable_vectorize_256"
    TL_DISABLE_WGMMA = "tl.disable_wgmma"
    # Tegula's own: lower on exactly the threads T.Kernel declares, never on two warpgroups
    # for one whose fragments do not fit its registers (src/transform/widen_threads.h).
    TEGULA_KEEP_THREADS = "tegula.keep_threads"
    TL_ENABLE_ASYNC_COPY = "tl.enable_async_copy"
    TL_ENABLE_LOWER_LDGSTG = "tl.enable_lower_ldgstg"
    TL_ENABLE_LOWER_LDGSTG_PREDICATED = "tl.enable_lower_ldgstg_predicated"
    TL_ENABLE_VECTORIZE_PLANNER_VERBOSE = "tl.enable_vectorize_planner_verbose"
    TL_DISABLE_DYNAMIC_TAIL_SPLIT = "tl.disable_dynamic_tail_split"
    TL_DYNAMIC_ALIGNMENT = "tl.dynamic_alignment"
    TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS = "tl.debug_merge_shared_memory_allocations"
    TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE = "tl.enable_aggressive_shared_memory_merge"
    TL_DISABLE_SHARED_MEMORY_REUSE = "tl.disable_shared_memory_reuse"
    TL_DISABLE_SHUFFLE_ELECT = "tl.disable_shuffle_elect"
    TL_DISABLE_LOOP_UNSWITCHING = "tl.disable_loop_unswitching"
    TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE = "tl.loop_unswitching_allow_non_trivial_else"
    TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS = "tl.if_stmt_binding_inline_replayable_binds"
    TL_DISABLE_THREAD_STORAGE_SYNC = "tl.disable_thread_storage_sync"
    TL_FORCE_LET_INLINE = "tl.force_let_inline"
    TL_AST_PRINT_ENABLE = "tl.ast_print_enable"
    TL_LAYOUT_VISUALIZATION_ENABLE = "tl.layout_visualization_enable"
    TL_LAYOUT_VISUALIZATION_FORMATS = "tl.layout_visualization_formats"
    TL_STORAGE_REWRITE_DETECT_INPLACE = "tl.storage_rewrite_detect_inplace"
    TL_DISABLE_OUT_OF_BOUND_WARNING = "tl.disable_out_of_bound_warning"
    TL_ENABLE_DUMP_IR = "tl.enable_dump_ir"
    TL_DUMP_IR_DIR = "tl.dump_ir_path"
    TL_PASS_PROFILE = "tl.pass_profile"
    TL_PASS_PROFILE_THRESHOLD_MS = "tl.pass_profile_threshold_ms"
    TIR_ENABLE_EQUIV_TERMS_IN_CSE = "tir.enable_equiv_terms_in_cse_tir"
    TIR_DISABLE_CSE = "tir.disable_cse_tir"
    TIR_SIMPLIFY = "tir.Simplify"
    TIR_DISABLE_STORAGE_REWRITE = "tir.disable_storage_rewrite"
    TIR_DISABLE_VECTORIZE = "tir.disable_vectorize"
    TIR_USE_ASYNC_COPY = "tir.use_async_copy"
    TIR_ENABLE_DEBUG = "tir.enable_debug"
    TIR_MERGE_STATIC_SMEM = "tir.merge_static_smem"
    TIR_ADD_LOWER_PASS = "tir.add_lower_pass"
    TIR_NOALIAS = "tir.noalias"
    CUDA_KERNELS_OUTPUT_DIR = "cuda.kernels_output_dir"


def _index_bitwidth(value) -> None:
    # Ignoring a request for 64-bit indexing would silently overflow on huge tensors.
    if int(value) != 32:
        raise ValueError("only 32-bit indexing is supported by Tegula so far")


K = PassConfigKey
# key -> (option name, converter) for keys Tegula acts on; a None name only validates.
# The option names are those `tegula._C.lower` accepts (src/bindings/compile.cc).
_OPTIONS = {
    K.TL_ENABLE_FAST_MATH: ("fast_math", bool),
    K.TL_DISABLE_FAST_MATH: ("fast_math", lambda v: not bool(v)),
    K.TIR_DISABLE_VECTORIZE: ("disable_vectorize", bool),
    K.TL_DISABLE_SAFE_MEMORY_ACCESS: ("disable_safe_memory", bool),
    K.TL_DYNAMIC_ALIGNMENT: ("dynamic_alignment", int),
    K.TL_DISABLE_WGMMA: ("disable_wgmma", bool),
    # sm_90a: bulk tensor copies and the warp-specialised pipeline they feed; either key
    # gives the cp.async pipeline (the path for other targets too).
    K.TL_DISABLE_TMA_LOWER: ("disable_tma", bool),
    K.TL_DISABLE_WARP_SPECIALIZED: ("disable_warp_specialized", bool),
    K.TEGULA_KEEP_THREADS: ("keep_threads", bool),
    K.TL_CONFIG_INDEX_BITWIDTH: (None, _index_bitwidth),
    # Read by jit.py, not by the C++ side (see PYTHON_SIDE).
    K.TL_ENABLE_DUMP_IR: ("dump_ir", bool),
    K.CUDA_KERNELS_OUTPUT_DIR: ("kernels_output_dir", str),
}

# Options jit.py consumes itself and does not pass to _C.
PYTHON_SIDE = frozenset({"dump_ir", "kernels_output_dir"})

_NO_TVM = "no-op in Tegula (there is no TVM pass of that name)"
_NO_SWITCH = "no-op in Tegula (accepted; its pipeline has no switch for this yet)"
# key -> why Tegula accepts it and does nothing.
_IGNORED = {
    K.TL_SIMPLIFY: _NO_TVM,
    K.TIR_SIMPLIFY: _NO_TVM,
    K.TIR_ENABLE_EQUIV_TERMS_IN_CSE: _NO_TVM,
    K.TIR_DISABLE_CSE: "no-op in Tegula (NVRTC does common-subexpression elimination)",
    K.TIR_DISABLE_STORAGE_REWRITE: _NO_TVM,
    K.TIR_ADD_LOWER_PASS: "no-op in Tegula (the pass list is fixed, in src/transform/pipeline.cc)",
    K.TIR_NOALIAS: "no-op in Tegula (kernel pointers are always __restrict__)",
    K.TIR_ENABLE_DEBUG: "no-op in Tegula (use TEGULA_DUMP_IR and T.print)",
    K.TIR_MERGE_STATIC_SMEM: "no-op in Tegula (shared memory is always one dynamic allocation)",
    K.TIR_USE_ASYNC_COPY: _NO_SWITCH,
    K.TL_ENABLE_ASYNC_COPY: _NO_SWITCH,
    K.TL_DISABLE_VECTORIZE_256: _NO_SWITCH,
    K.TL_DISABLE_DYNAMIC_TAIL_SPLIT: _NO_SWITCH,
    K.TL_DISABLE_THREAD_STORAGE_SYNC: _NO_SWITCH,
    K.TL_ENABLE_PTXAS_VERBOSE_OUTPUT: "no-op in Tegula (NVRTC compiles in memory; no ptxas output)",
    K.TL_PTXAS_REGISTER_USAGE_LEVEL: "no-op in Tegula (NVRTC flags are fixed by the target)",
    K.TL_DEVICE_COMPILE_FLAGS: "no-op in Tegula (NVRTC flags are fixed by the target)",
    K.TL_DISABLE_BUFFER_INIT_CHECK: "no-op in Tegula (no such check yet)",
    K.TL_DISABLE_DATA_RACE_CHECK: "no-op in Tegula (no such check yet)",
    K.TL_DISABLE_PRELOWER_SEMANTIC_CHECK: "no-op in Tegula (the frontend always checks)",
    K.TL_ENABLE_AUTO_WARP_SPECIALIZATION: "no-op in Tegula (warp specialisation is decided by the pipeline pass)",
    K.TL_EMIT_LINE_DIRECTIVES: "no-op in Tegula (no #line directives yet)",
    K.TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS: "no-op in Tegula (the storage plan is printed by TEGULA_DUMP_IR)",
    K.TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE: "no-op in Tegula (one storage planner, no aggressive mode)",
    K.TL_DISABLE_SHARED_MEMORY_REUSE: "no-op in Tegula (one storage planner, no switch)",
    K.TL_DISABLE_SHUFFLE_ELECT: "no-op in Tegula (no elect-one lowering to switch off)",
    K.TL_DISABLE_LOOP_UNSWITCHING: _NO_TVM,
    K.TL_FORCE_LET_INLINE: "no-op in Tegula (lets are kept; NVRTC inlines them)",
    K.TL_AST_PRINT_ENABLE: "no-op in Tegula (use TEGULA_DUMP_IR=1)",
    K.TL_LAYOUT_VISUALIZATION_ENABLE: "no-op in Tegula (layouts appear in the IR dump)",
    K.TL_LAYOUT_VISUALIZATION_FORMATS: "no-op in Tegula (layouts appear in the IR dump)",
    K.TL_STORAGE_REWRITE_DETECT_INPLACE: _NO_TVM,
    K.TL_DISABLE_OUT_OF_BOUND_WARNING: "no-op in Tegula (no out-of-bound warnings are printed)",
    K.TL_DUMP_IR_DIR: "no-op in Tegula (TEGULA_DUMP_IR prints to stderr)",
    K.TL_PASS_PROFILE: "no-op in Tegula (no per-pass timing yet)",
    K.TL_PASS_PROFILE_THRESHOLD_MS: "no-op in Tegula (no per-pass timing yet)",
    # Sub-keys of TileLang's simplifier: they make it prove more, never change a result.
    K.TL_SIMPLIFY_TRANSITIVELY_PROVE_INEQUALITIES: _NO_TVM,
    K.TL_SIMPLIFY_CONVERT_BOOLEAN_TO_AND_OF_ORS: _NO_TVM,
    K.TL_SIMPLIFY_APPLY_CONSTRAINTS_TO_BOOLEAN_BRANCHES: _NO_TVM,
    K.TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_PROVE_CONDITIONAL: _NO_TVM,
    K.TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_SIMPLIFY_EXPRESSIONS: _NO_TVM,
    K.TL_SIMPLIFY_ENABLE_LET_INLINE: _NO_TVM,
    K.TL_ENABLE_REDUCER_PLAN_VERBOSE: "no-op in Tegula (reductions have one plan, shown by TEGULA_DUMP_IR)",
    K.TL_LAYOUT_COST_MODEL: "no-op in Tegula (layout inference has one cost order; the choice changes speed, not results)",
    K.TL_REDUCER_FORCE_BASELINE: "no-op in Tegula (it picks among TileLang's reduction plans, which agree in their results; Tegula has its own single lowering)",
    K.TL_ENABLE_LOWER_LDGSTG: "no-op in Tegula (global loads and stores are printed as C++ accesses; NVRTC picks the instructions)",
    K.TL_ENABLE_LOWER_LDGSTG_PREDICATED: "no-op in Tegula (global loads and stores are printed as C++ accesses; NVRTC picks the instructions)",
    K.TL_ENABLE_VECTORIZE_PLANNER_VERBOSE: "no-op in Tegula (vector widths appear in the IR dump)",
    K.TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE: _NO_TVM,
    K.TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS: _NO_TVM,
}

# Spellings newer TileLang uses for the same keys ("tirx." replaced "tir.").
_ALIASES = {k.value.replace("tir.", "tirx.", 1): k for k in PassConfigKey if k.value.startswith("tir.")}

assert set(_OPTIONS) | set(_IGNORED) == set(PassConfigKey), "every key needs a row"


def _key(key) -> PassConfigKey:
    if isinstance(key, PassConfigKey):
        return key
    try:
        return PassConfigKey(key)
    except ValueError:
        if key in _ALIASES:
            return _ALIASES[key]
    known = ", ".join(k.value for k in PassConfigKey)
    raise ValueError(f"unknown pass config key {key!r}; known keys: {known}")


def key_name(key) -> str:
    """A pass config key as its string ("tl.disable_tma_lower"): a PassConfigKey, its string,
    or TileLang's "tirx." spelling; ValueError listing the known keys for any other."""
    return _key(key).value


def describe(key) -> str:
    """What Tegula does with a key, for users porting TileLang code."""
    k = _key(key)
    if k in _OPTIONS:
        name = _OPTIONS[k][0]
        return f"sets option {name!r}" if name else "checked: only its default value is supported"
    return _IGNORED[k]


def to_options(pass_configs: dict | None) -> dict:
    """Pass configs (keys as PassConfigKey members or strings) to the options dict."""
    options: dict = {}
    for key, value in (pass_configs or {}).items():
        k = _key(key)
        row = _OPTIONS.get(k)
        if row is not None:
            name, convert = row
            try:
                converted = convert(value)
            except (TypeError, ValueError) as err:
                raise ValueError(f"pass config {k.value!r}: bad value {value!r} ({err})") from None
            if name is not None:
                options[name] = converted
    return options
