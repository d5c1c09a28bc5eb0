// The reserved words of generated CUDA C++, as data (cuda_names.h says what they are for).
//
// tests/python/cpu/test_cuda_names.py asks NVRTC which names the device library declares
// in namespace tegula (the generated code says `using namespace tegula;`) or defines as
// macros, and fails when one of them is missing here.
#include "codegen/cuda_names.h"

#include <cctype>
#include <cstdio>
#include <unordered_set>

namespace tegula::codegen {

namespace {

const char* const kReservedWords[] = {
    // C++20's keywords and alternative tokens (NVRTC compiles C++17; the rest costs nothing).
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch",
    "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr",
    "constinit", "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete",
    "do", "double", "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for",
    "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
    "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register", "reinterpret_cast",
    "requires", "restrict", "return", "short", "signed", "sizeof", "static", "static_assert", "static_cast",
    "struct", "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef", "typeid",
    "typename", "union", "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq",
    "final", "override", "import", "module",
    // CUDA's built-in variables and types, and the names of the headers NVRTC includes that a
    // kernel body could meet (fixed-width integers, 16-bit floats, macros).
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "dim3", "clock", "clock64", "assert", "NULL",
    "int8_t", "int16_t", "int32_t", "int64_t", "uint4b_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t",
    "ptrdiff_t", "intptr_t", "uintptr_t", "nullptr_t", "half", "half2", "nv_bfloat16", "nv_bfloat162", "std",
    "fmin", "fmax", "fminf", "fmaxf", "expf", "logf", "sqrtf", "rsqrtf", "fabs", "fabsf", "tegula", "detail",
    "isfinite", "isinf", "isnan",
    // What the device library declares in namespace tegula.
    "AbsMaxOp", "AbsSumOp", "BlockGemm", "BlockWgmma", "MaxOp", "MemoryOrder", "MinOp", "SparseBlockGemm", "SumOp", "Swizzle",
    "TensorMap", "Vec", "abs", "add", "atomic_add", "atomic_add_x2", "atomic_add_x4", "barrier_arrive",
    "barrier_sync", "bfloat16_t", "broadcast_vec", "cast", "ceil", "ceildiv", "cos", "cp_async_16",
    "cp_async_16_pred", "cp_async_4", "cp_async_4_pred", "cp_async_8", "cp_async_8_pred", "cp_async_commit",
    "cp_async_wait", "cp_async_wait_all", "device_assert", "exp", "exp2", "exp2_fast", "exp_fast", "fence_barrier_init",
    "fence_proxy_async", "fence_registers", "floor", "floordiv", "fp4_e2m1_t", "fp8_e4m3_t", "fp8_e5m2_t", "fp8_e8m0_t", "tf32_bits", "tf32_t", "floormod", "fma", "gemm_rs", "gemm_sp_rs", "gemm_sp_ss", "gemm_ss",
    "half_t", "infinity", "int4b_t", "is_pow2", "kPanel", "ldmatrix_x1", "ldmatrix_x1_trans", "ldmatrix_x2",
    "ldmatrix_x2_trans", "ldmatrix_x4", "ldmatrix_x4_trans", "load_vec", "load_vec_pred", "log", "log2",
    "log2_fast", "max", "max_value", "mbar_arrive", "mbar_arrive_expect_tx", "mbar_cp_async_arrive_noinc", "mbar_init", "mbar_wait",
    "mbarrier_arrive", "mbarrier_arrive_expect_tx", "mbarrier_expect_tx", "mbarrier_init", "mbarrier_try_wait",
    "mbarrier_wait", "memory_order_acq_rel", "memory_order_acquire", "memory_order_consume",
    "memory_order_relaxed", "memory_order_release", "memory_order_seq_cst", "min", "min_value", "mma_f32",
    "mma_m16n8k16_bf16f32", "mma_m16n8k16_f16f16", "mma_m16n8k16_f16f32", "mma_m16n8k32_e4m3e5m2f32",
    "mma_m16n8k32_e4m3f32", "mma_m16n8k32_e5m2e4m3f32",
    "mma_m16n8k32_e5m2f32", "mma_m16n8k32_s8s32", "mma_m16n8k32_s8u8s32", "mma_m16n8k32_u8s32",
    "mma_m16n8k32_u8s8s32", "mma_m16n8k64_s4s32", "mma_m16n8k64_s4u4s32", "mma_m16n8k64_u4s32",
    "mma_m16n8k64_u4s4s32", "mma_s32", "pack_nibbles", "mma_m16n8k8_tf32f32", "mma_sp_m16n8k32_bf16f32",
    "mma_sp_m16n8k32_f16f16", "mma_sp_m16n8k32_f16f32", "mma_tile", "ninfinity", "pack2",
    "pack_bf16x2", "pack_f16x2", "packed_load", "packed_store", "panel_byte", "panel_offset", "print", "rcp_fast", "rint", "rsqrt",
    "setmaxnreg_dec", "setmaxnreg_inc", "shfl_xor", "sigmoid", "sin", "smem_addr", "sqrt", "stmatrix_x2",
    "stmatrix_x2_trans", "stmatrix_x4", "stmatrix_x4_trans", "store_vec", "store_vec_pred", "swizzle_offset",
    "sync_async_proxy", "tanh", "tile_at", "tile_at2", "tma_load_1d", "tma_load_2d", "tma_load_3d",
    "tma_load_4d", "tma_load_5d", "tmap_addr", "to_float", "to_tf32", "trunc", "unpack2", "valid_sparse_metadata", "warp_reduce",
    "wgmma_commit", "wgmma_desc", "wgmma_fence", "wgmma_rs", "wgmma_rs_held", "wgmma_ss", "wgmma_wait",
    "wgmma_wait_held", "wgmma_wait_regs",
    // warp.h
    "activemask", "all_sync", "any_sync", "ballot", "ballot_sync", "max_num", "min_num", "pdl_sync",
    "pdl_trigger", "Philox",
    // cluster.h, and the namespace of <cooperative_groups.h> (T.sync_grid)
    "block_rank_in_cluster", "cluster_arrive", "cluster_arrive_relaxed", "cluster_sync", "cluster_wait",
    "cooperative_groups",
    // iket.h
    "IketLog", "IketRecord", "iket_append", "iket_event", "iket_mark", "iket_range_end", "iket_range_start",
    "iket_time", "kIketMark", "kIketRangeEnd", "kIketRangeStart",
    // ldst.h (its load_* / store_* families are prefixes below)
    "reinterpret", "shfl_idx", "shfl_up", "shfl_down", "shfl_bfly", "sync_warp", "ffs", "warp_reduce_bitand", "warp_reduce_bitor", "warp_reduce_max", "warp_reduce_min", "warp_reduce_sum",
};

// CUDA's vector types: char1 ... ulonglong4, double4.
const char* const kVectorTypes[] = {"char",  "uchar",    "short",     "ushort", "int",   "uint",
                                    "long",  "ulong",    "longlong",  "ulonglong", "float", "double"};

// Families of names: the printer's own (tegula_smem, tegula_tmap_0, tegula_by; the wgmma
// instruction structs wgmma_ss_n128_f16), the device library's and the CUDA headers' macros
// (TEGULA_DEVICE, CUDART_VERSION, NV_IF_TARGET, CU_UUID_HAS_BEEN_DEFINED) and the CUDA
// runtime's enumerators (cudaEventDefault). `upper`: the prefix must be followed by a capital.
struct ReservedPrefix {
  const char* prefix;
  bool upper;
};
const ReservedPrefix kReservedPrefixes[] = {
    {"tegula_", false}, {"wgmma_", false}, {"TEGULA_", false}, {"CUDA", false},
    {"CU_", false},     {"NV_", false},    {"cuda", true},
    // ldst.h: load_global_64, store_shared_128_conditional, ...
    {"load_global_", false}, {"store_global_", false}, {"load_shared_", false}, {"store_shared_", false},
};

const std::unordered_set<std::string>& reserved_words() {
  static const std::unordered_set<std::string> words = [] {
    std::unordered_set<std::string> s(std::begin(kReservedWords), std::end(kReservedWords));
    for (const char* v : kVectorTypes) {
      for (int n = 1; n <= 4; ++n) s.insert(v + std::to_string(n));
    }
    return s;
  }();
  return words;
}

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Non-ASCII code points become u<hex>; other characters an identifier cannot hold, '_'.
std::string ascii_identifier(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size();) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x80) {
      out += ident_char(char(c)) ? char(c) : '_';
      ++i;
      continue;
    }
    int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    unsigned cp = c & (0x3F >> extra);
    for (int k = 1; k <= extra && i + k < name.size(); ++k) cp = (cp << 6) | (name[i + k] & 0x3F);
    char buf[16];
    std::snprintf(buf, sizeof buf, "u%x", cp);
    out += buf;
    i += 1 + extra;
  }
  return out;
}

}  // namespace

bool is_reserved_name(const std::string& name) {
  if (name.size() >= 2 && name[0] == '_' && (name[1] == '_' || std::isupper(static_cast<unsigned char>(name[1])))) {
    return true;
  }
  if (reserved_words().count(name)) return true;
  for (const ReservedPrefix& p : kReservedPrefixes) {
    size_t n = std::char_traits<char>::length(p.prefix);
    if (name.compare(0, n, p.prefix) != 0) continue;
    if (!p.upper || (name.size() > n && std::isupper(static_cast<unsigned char>(name[n])))) return true;
  }
  return false;
}

std::string legal_name(const std::string& name) {
  std::string base = ascii_identifier(name);
  if (base.empty() || std::isdigit(static_cast<unsigned char>(base[0]))) return "v_" + base;
  if (!is_reserved_name(base)) return base;
  // A word gets a trailing '_' (do -> do_); a reserved form or family a leading "v" (which
  // no reserved name starts with): __x -> v__x, tegula_smem -> v_tegula_smem.
  if (!is_reserved_name(base + "_") && base[0] != '_') return base + "_";
  return (base[0] == '_' ? "v" : "v_") + base;
}

}  // namespace tegula::codegen
