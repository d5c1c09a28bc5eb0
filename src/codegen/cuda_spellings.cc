// How the generated CUDA spells the IR's types and intrinsic calls (cuda_spellings.h).
#include "codegen/cuda_spellings.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "codegen/cuda_printer.h"
#include "ir/functor.h"

namespace tegula::codegen {

using namespace ir;

// The type one vector access of memory moves: CUDA's own float2 / float4 / int4 / uint2 ...
// where one has the width (the names a CUDA reader expects), else Vec<T, N>.
std::string memory_vector_type(DataType t, int lanes) {
  if (t.bits == 32 && (lanes == 2 || lanes == 4)) {
    const char* base = t.code == DataType::Float ? "float" : t.code == DataType::Int ? "int" : t.code == DataType::UInt ? "uint" : nullptr;
    if (base) return base + std::to_string(lanes);
  }
  return "Vec<" + cuda_type(t) + ", " + std::to_string(lanes) + ">";
}

std::string cuda_type(DataType t) {
  if (t.lanes > 1) return "Vec<" + cuda_type(t.element()) + ", " + std::to_string(t.lanes) + ">";
  switch (t.code) {
    case DataType::Float: return t.bits == 16 ? "half_t" : t.bits == 64 ? "double" : "float";
    case DataType::BFloat: return "bfloat16_t";
    case DataType::Int: return t.bits == 4 ? "int4b_t" : t.bits == 8 ? "signed char" : t.bits == 16 ? "short" : t.bits == 64 ? "long long" : "int";
    case DataType::UInt: return t.bits == 4 ? "uint4b_t" : t.bits == 8 ? "unsigned char" : t.bits == 16 ? "unsigned short" : t.bits == 64 ? "unsigned long long" : "unsigned";
    case DataType::Bool: return "bool";
    case DataType::Handle: return "void*";
    case DataType::Float8E4M3: return "fp8_e4m3_t";
    case DataType::Float8E5M2: return "fp8_e5m2_t";
    case DataType::Float8E8M0: return "fp8_e8m0_t";
    case DataType::Float4E2M1: return "fp4_e2m1_t";
    case DataType::TFloat32: return "tf32_t";
  }
  return "int";
}

const std::map<std::string, CallSpelling>& call_table() {
  static const std::map<std::string, CallSpelling> t = {
      {"exp", {"tegula::exp", false}},         {"exp2", {"tegula::exp2", false}},
      {"log", {"tegula::log", false}},         {"log2", {"tegula::log2", false}},
      {"rsqrt", {"tegula::rsqrt", false}},     {"sqrt", {"tegula::sqrt", false}},
      {"abs", {"tegula::abs", false}},         {"shfl_xor", {"tegula::shfl_xor", false}},
      {"infinity", {"tegula::infinity", true}}, {"ninfinity", {"tegula::ninfinity", true}},
      {"max_value", {"tegula::max_value", true}}, {"min_value", {"tegula::min_value", true}},
      {"sigmoid", {"tegula::sigmoid", false}}, {"tanh", {"tegula::tanh", false}},
      {"sin", {"tegula::sin", false}},         {"cos", {"tegula::cos", false}},
      // A grid barrier: CUDA's own (the kernel includes <cooperative_groups.h> and is launched
      // cooperatively); cluster.h: the cluster barrier and rank.
      {"sync_grid", {"cooperative_groups::this_grid().sync", false}},
      // T.fence_proxy_async (async.h, sm_90+).
      {"fence_proxy_async", {"fence_proxy_async", false}},
      {"cluster_arrive", {"tegula::cluster_arrive", false}},
      {"cluster_arrive_relaxed", {"tegula::cluster_arrive_relaxed", false}},
      {"cluster_wait", {"tegula::cluster_wait", false}}, {"cluster_sync", {"tegula::cluster_sync", false}},
      {"block_rank_in_cluster", {"tegula::block_rank_in_cluster", false}},
      // warp.h: NaN-ignoring max / min, warp reductions and shuffles.
      {"max_num", {"tegula::max_num", false}}, {"min_num", {"tegula::min_num", false}},
      {"warp_reduce_sum", {"tegula::warp_reduce_sum", false}}, {"warp_reduce_max", {"tegula::warp_reduce_max", false}},
      {"warp_reduce_min", {"tegula::warp_reduce_min", false}},
      {"warp_reduce_bitand", {"tegula::warp_reduce_bitand", false}},
      {"warp_reduce_bitor", {"tegula::warp_reduce_bitor", false}},
      {"shfl_idx", {"tegula::shfl_idx", false}}, {"shfl_up", {"tegula::shfl_up", false}},
      {"shfl_down", {"tegula::shfl_down", false}}, {"shfl_bfly", {"tegula::shfl_bfly", false}},
      {"sync_warp", {"tegula::sync_warp", false}},
      // async.h: a named barrier whose id is computed at run time (T.sync_threads(id, n)).
      {"barrier_sync", {"tegula::barrier_sync", false}},
      // CUDA's own: warp votes (a ballot is a uint64 here, TileLang's type: the upper 32 bits
      // zero), warp match, bit search, block votes, programmatic dependent launch (warp.h
      // defines the last two where NVRTC does not).
      {"any_sync", {"__any_sync"}}, {"all_sync", {"__all_sync"}},
      {"ballot_sync", {"__ballot_sync", false, "unsigned long long"}},
      {"ballot", {"__ballot_sync", false, "unsigned long long", "0xffffffffu"}},
      {"activemask", {"__activemask", false, "unsigned long long"}},
      {"match_any_sync", {"__match_any_sync"}}, {"fns", {"__fns"}},
      {"syncthreads_count", {"__syncthreads_count", false}}, {"syncthreads_and", {"__syncthreads_and", false}},
      {"syncthreads_or", {"__syncthreads_or", false}},
      {"pdl_trigger", {"cudaTriggerProgrammaticLaunchCompletion"}}, {"pdl_sync", {"cudaGridDependencySynchronize"}},
      {"assume", {"__builtin_assume", false}},
  };
  return t;
}

bool pair_conversion(DataType from, DataType to, PairConversion* out) {
  DataType f32 = DataType::f32(), f16 = DataType::f16(), bf16 = DataType::bf16();
  // cuda_fp8.h names the 8-bit format by an argument; conversions to it saturate as ours do.
  auto fp8 = [](DataType t) { return std::string(t.code == DataType::Float8E4M3 ? "__NV_E4M3" : "__NV_E5M2"); };
  if (from == f32 && to == f16) *out = {"__half2", "float2", "__float22half2_rn(", ")"};
  else if (from == f16 && to == f32) *out = {"float2", "__half2", "__half22float2(", ")"};
  else if (from == f32 && to == bf16) *out = {"__nv_bfloat162", "float2", "__float22bfloat162_rn(", ")"};
  else if (from == bf16 && to == f32) *out = {"float2", "__nv_bfloat162", "__bfloat1622float2(", ")"};
  else if (from == f32 && to.is_float8()) {
    *out = {"__nv_fp8x2_storage_t", "float2", "__nv_cvt_float2_to_fp8x2(", ", __NV_SATFINITE, " + fp8(to) + ")"};
  } else if (from == f16 && to.is_float8()) {
    *out = {"__nv_fp8x2_storage_t", "__half2_raw", "__nv_cvt_halfraw2_to_fp8x2(", ", __NV_SATFINITE, " + fp8(to) + ")"};
  } else if (from.is_float8() && to == f16) {
    *out = {"__half2_raw", "__nv_fp8x2_storage_t", "__nv_cvt_fp8x2_to_halfraw2(", ", " + fp8(from) + ")"};
  } else if (from.is_float8() && to == f32) {
    // Through half2, exactly: every 8-bit float is a float16.
    *out = {"float2", "__nv_fp8x2_storage_t", "__half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(",
            ", " + fp8(from) + ")))"};
  } else {
    return false;
  }
  return true;
}

std::string string_literal(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch == '\n' ? std::string("\\n") : std::string(1, ch);
  }
  return out + "\"";
}

// T.rng_*: one generator state per thread (tegula_rng); rng_init's args[3] names
// TileLang's generator (0 Philox4_32_10, 1 MRG32k3a, 2 XORWOW), one per kernel. "" when
// the kernel draws no random numbers.
std::string rng_state_type(const Kernel& k) {
  static const char* const kStates[] = {"curandStatePhilox4_32_10_t", "curandStateMRG32k3a_t", "curandStateXORWOW_t"};
  int generator = -1;
  const CallNode* draw = nullptr;
  post_order(k.body, [](const Stmt&) {}, [&](const Expr& e) {
    auto* c = e.as<CallNode>();
    if (!c || c->op.rfind("rng_", 0) != 0) return;
    if (c->op != "rng_init") {
      draw = draw ? draw : c;
      return;
    }
    int g = int(*as_const_int(c->args.at(3)));
    user_assert(generator < 0 || generator == g, c->loc)
        << "T.rng_init: a kernel draws from one generator; this one initialises " << kStates[generator] << " and "
        << kStates[g];
    generator = g;
  });
  if (draw) {
    user_assert(generator >= 0, draw->loc) << "T.rng_rand / T.rng_rand_float: the kernel calls no T.rng_init";
  }
  // Every generator draws from the device library's Philox (random.h): curand's Philox
  // numbers; TileLang's other generators give other numbers of the same distributions.
  return generator < 0 ? "" : "tegula::Philox";
}

std::string rng_call(const CallNode* c, const std::function<std::string(const Expr&)>& expr) {
  if (c->op == "rng_init") {
    return "tegula_rng.init(" + expr(c->args[0]) + ", " + expr(c->args[1]) + ", " + expr(c->args[2]) + ")";
  }
  std::string wide = c->dtype.bits == 64 ? "_double" : "";
  if (c->op == "rng_rand") return "tegula_rng.next()";
  if (c->op == "rng_uniform") return "tegula_rng.uniform" + wide + "()";
  if (c->op == "rng_normal") return "tegula_rng.normal" + wide + "()";
  internal_error << "unknown random-number call '" << c->op << "'";
  return "";
}

std::string float_literal(double v, DataType t) {
  std::string ct = cuda_type(t);
  if (std::isinf(v)) return std::string(v > 0 ? "infinity" : "ninfinity") + "<" + ct + ">()";
  char buf[64];
  snprintf(buf, sizeof buf, t.bits == 64 ? "%.17g" : "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  if (t.bits == 64) return s;
  s += "f";
  return t.bits == 32 ? s : "cast<" + ct + ">(" + s + ")";
}

std::string int_literal(const IntImmNode* n, bool wide_ints) {
  DataType t = n->dtype;
  if (t.is_bool()) return n->value ? "true" : "false";
  if (t.bits == 4) return "cast<" + cuda_type(t) + ">(" + std::to_string(n->value) + ")";  // int4b_t, uint4b_t
  if (t.code == DataType::UInt) {
    uint64_t v = static_cast<uint64_t>(n->value);
    if (t.bits < 64) v &= (uint64_t(1) << t.bits) - 1;
    return std::to_string(v) + (t.bits == 64 ? "ull" : t.bits == 32 ? "u" : "");
  }
  bool wide = t.bits == 64 || (wide_ints && t.bits == 32);
  const char* suffix = wide ? "LL" : "";
  if (n->value == std::numeric_limits<int64_t>::min()) return "(-9223372036854775807LL - 1)";
  if (n->value == std::numeric_limits<int32_t>::min()) return std::string("(-2147483647") + suffix + " - 1)";
  return std::to_string(n->value) + suffix;
}

bool evaluates_eagerly(const Expr& e) {
  int nodes = 0;
  bool ok = true;
  post_order(make_evaluate(e), nullptr, [&](const Expr& x) {
    ++nodes;
    switch (x.kind()) {
      case NodeKind::IntImm:
      case NodeKind::FloatImm:
      case NodeKind::Var:
      case NodeKind::Not:
      case NodeKind::Select:
      case NodeKind::Cast: break;
      case NodeKind::Binary: {
        auto* b = x.as<BinaryNode>();
        bool divides = b->op == BinaryOp::Div || b->op == BinaryOp::Mod || b->op == BinaryOp::FloorDiv ||
                       b->op == BinaryOp::FloorMod;
        const int64_t* d = as_const_int(b->b);
        if (divides && !(d && *d > 0)) ok = false;
        break;
      }
      default: ok = false;  // loads, calls
    }
  });
  return ok && nodes <= 24;
}

}  // namespace tegula::codegen
