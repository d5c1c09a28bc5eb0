// The CUDA text of the tensor-core calls (cuda_tensor_cores.h).
#include "codegen/cuda_tensor_cores.h"

#include <algorithm>

#include "ir/functor.h"
#include "ir/wide_access.h"
#include "support/text.h"

namespace tegula::codegen {

using namespace ir;

bool wide_panels(const Kernel& k, const Buffer& b) {
  return b->scope == Scope::Shared && k.smem_panelled.count(b.get()) &&
         *as_const_int(b->shape[1]) * b->dtype.bytes() > 128;
}

bool stores_operand(const Kernel& k, const Stmt& x) {
  if (!k.uses_wgmma) return false;
  if (auto* st = x.as<BufferStoreNode>()) return k.smem_panelled.count(st->buffer.get()) > 0;
  auto* ev = x.as<EvaluateNode>();
  auto* c = ev ? ev->value.as<CallNode>() : nullptr;
  if (!c) return false;
  std::optional<WideAccess> w = wide_access(c);
  return w && w->store && w->addr && k.smem_panelled.count(w->addr->buffer.get()) > 0;
}

bool stores_to_operands(const Kernel& k, const Stmt& body) {
  if (!k.uses_wgmma) return false;
  bool found = false;
  post_order(body, [&](const Stmt& x) { found |= stores_operand(k, x); }, nullptr);
  return found;
}

namespace {

// The struct that issues wgmma m64nNk16 (A from shared memory or registers) for
// element types a and b with float accumulators, m64nNk32 for 8-bit ones (8-bit integers
// into int32 accumulators, .s32.s8.u8 ...): its asm names all N / 2 accumulator registers,
// so it is written per N. Returns its name; the definition goes ahead of the kernel. TA /
// TB (transposed, i.e. MN-major, operands) are template immediates; 8-bit operands have
// none (K-major only, which ss asserts), and integer ones no operand scales either.
std::string wgmma_instruction(bool rs, int n, DataType a, DataType b,
                              std::map<std::string, std::string>& instructions) {
  auto type_name = [](DataType t) {
    if (t.is_int()) return t.code == DataType::Int ? "s8" : "u8";
    return t == DataType::bf16() ? "bf16" : t == DataType::f16() ? "f16" : t.code == DataType::Float8E4M3 ? "e4m3" : "e5m2";
  };
  std::string ty = type_name(a), tyb = type_name(b);
  bool i8 = a.is_int(), f8 = a.is_float8() || i8;
  const char* acc = i8 ? "int" : "float";
  std::string nm = std::string("wgmma_") + (rs ? "rs" : "ss") + "_n" + std::to_string(n) + "_" + ty +
                   (tyb != ty ? "_" + tyb : "");
  if (instructions.count(nm)) return nm;
  int regs = n / 2;
  Text os;
  os << "struct " << nm << " {\n  static constexpr int N = " << n << ";\n";
  int pa = regs, pb = rs ? regs + 4 : regs + 1, ps = pb + 1;
  if (rs) {
    os << "  template <int TB>\n  static __device__ __forceinline__ void rs(" << acc << "* d, const uint32_t (&a)[4], "
          "uint64_t b, int scale_d) {\n";
  } else {
    os << "  template <int TA, int TB>\n  static __device__ __forceinline__ void ss(" << acc << "* d, uint64_t a, "
          "uint64_t b, int scale_d) {\n";
    if (f8) os << "    static_assert(!TA && !TB, \"8-bit wgmma reads K-major operands\");\n";
  }
  os << "    asm volatile(\n        \"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << ps << ", 0;\\n\"\n";
  os << "        \"wgmma.mma_async.sync.aligned.m64n" << n << (f8 ? "k32" : "k16") << (i8 ? ".s32." : ".f32.") << ty << "." << tyb
     << " {\"\n";
  for (int i = 0; i < regs; i += 16) {
    os << "        \"";
    for (int j = i; j < std::min(regs, i + 16); ++j) os << "%" << j << (j + 1 < regs ? ", " : "");
    os << "\"\n";
  }
  if (rs) {
    os << "        \"}, {%" << pa << ", %" << pa + 1 << ", %" << pa + 2 << ", %" << pa + 3 << "}, %" << pb
       << ", p, 1, 1, %" << ps + 1 << ";\\n}\\n\"\n";
  } else if (i8) {
    os << "        \"}, %" << pa << ", %" << pb << ", p;\\n}\\n\"\n";
  } else if (f8) {
    os << "        \"}, %" << pa << ", %" << pb << ", p, 1, 1;\\n}\\n\"\n";
  } else {
    os << "        \"}, %" << pa << ", %" << pb << ", p, 1, 1, %" << ps + 1 << ", %" << ps + 2
       << ";\\n}\\n\"\n";
  }
  os << "        :";
  for (int j = 0; j < regs; ++j) os << (j ? "," : "") << (j % 8 == 0 ? "\n          " : " ") << (i8 ? "\"+r\"(d[" : "\"+f\"(d[") << j << "])";
  if (rs) {
    os << "\n        : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b), \"r\"(scale_d), \"n\"(TB));\n";
  } else if (f8) {
    os << "\n        : \"l\"(a), \"l\"(b), \"r\"(scale_d));\n";
  } else {
    os << "\n        : \"l\"(a), \"l\"(b), \"r\"(scale_d), \"n\"(TA), \"n\"(TB));\n";
  }
  os << "  }\n};\n";
  instructions[nm] = os.str();
  return nm;
}

// A gemm call's operands (args 8..10: A, B, C), each by the address of its first element.
// A shared operand's pointer is to the first element of its region's row in column 0
// (a multiple of 8 rows: the swizzle phase starts there), the column a template argument
// (gemm_region_args).
std::string gemm_operands(const CallNode* c, const TensorCorePrinter& p) {
  std::string s;
  for (int i = 8; i < 11; ++i) {
    auto* ld = c->args[i].as<BufferLoadNode>();
    std::vector<Expr> at = ld->indices;
    if (i < 10 && ld->buffer->scope == Scope::Shared) at[1] = make_int(0);
    s += (i > 8 ? ", " : "") + std::string("&") + p.element(ld->buffer, at, true);
  }
  // The thread index the warps count from, when it is not threadIdx.x (a thread scope's).
  if (c->args.size() > 11 && !c->args[11].same_as(p.k.thread_var)) s += ", " + p.expr(c->args[11]);
  return s;
}

// ", LDA, OA, LDB, OB" of a gemm call whose shared operand is a region of its buffer:
// stored row lengths and the column each region starts at (gemm.h); empty when both
// operands are whole buffers.
std::string gemm_region_args(const CallNode* c) {
  bool ta = !is_const_int(c->args[5], 0), tb = !is_const_int(c->args[6], 0);
  int64_t m = *as_const_int(c->args[0]), n = *as_const_int(c->args[1]), k = *as_const_int(c->args[2]);
  int64_t own[2] = {ta ? m : k, tb ? k : n};
  std::string s;
  bool whole = true;
  for (int i = 8; i < 10; ++i) {
    auto* ld = c->args[i].as<BufferLoadNode>();
    if (ld->buffer->scope != Scope::Shared) {
      s += ", 0, 0";
      continue;
    }
    const int64_t* col = as_const_int(ld->indices[1]);
    internal_assert(col) << "a gemm operand's column offset is a constant";
    int64_t cols = *as_const_int(ld->buffer->shape[1]);
    whole = whole && *col == 0 && cols == own[i - 8];
    s += ", " + std::to_string(cols) + ", " + std::to_string(*col);
  }
  return whole ? "" : s;
}

}  // namespace

std::string tensor_core_call(const CallNode* c, const TensorCorePrinter& p) {
  if (c->op == "gemm_ss" || c->op == "gemm_rs") {
    // gemm_{ss,rs}<M, N, K, WM, WN, TA, TB, CLEAR, SA, SB>(A, B, C): operands by address;
    // SA/SB say whether A/B are stored swizzled (a register A never is).
    // A shared operand that a wgmma gemm of the kernel also reads is stored in panels:
    // PA / PB then give its stored rows.
    std::string s = "tegula::" + c->op + "<";
    for (int i = 0; i < 8; ++i) s += (i ? ", " : "") + p.expr(c->args[i]);
    std::string panels;
    for (int i = 8; i < 10; ++i) {
      const Buffer& b = c->args[i].as<BufferLoadNode>()->buffer;
      s += p.k.smem_swizzled.count(b.get()) || p.k.smem_panelled.count(b.get()) ? ", true" : ", false";
      panels += ", " + (wide_panels(p.k, b) ? p.expr(b->shape[0]) : std::string("0"));
    }
    std::string regions = gemm_region_args(c);
    if (panels != ", 0, 0") s += (regions.empty() ? std::string(", 0, 0, 0, 0") : regions) + panels;
    else s += regions;
    return s + ">(" + gemm_operands(c, p) + ")";
  }
  if (c->op == "gemm_sp_ss" || c->op == "gemm_sp_rs") {
    // gemm_sp_{ss,rs}<M, N, K, WM, WN, TA, TB, TE, CLEAR, SA, SE, SB, PA, PB>(A, E, B, C):
    // the operands by address (gemm_sp.h); S* whether each is stored swizzled (a register
    // A never is), P* the stored rows of an operand kept in wgmma's panels (0: not panelled).
    std::string s = "tegula::" + c->op + "<";
    for (int i = 0; i < 9; ++i) s += (i ? ", " : "") + p.expr(c->args[i]);
    std::string operands;
    for (int i = 9; i < 13; ++i) {
      auto* ld = c->args[i].as<BufferLoadNode>();
      const Buffer& b = ld->buffer;
      if (i < 12) s += p.k.smem_swizzled.count(b.get()) || p.k.smem_panelled.count(b.get()) ? ", true" : ", false";
      operands += (i > 9 ? ", &" : "&") + p.element(b, ld->indices, true);
    }
    for (int i : {9, 11}) {
      const Buffer& b = c->args[i].as<BufferLoadNode>()->buffer;
      s += ", " + (wide_panels(p.k, b) ? p.expr(b->shape[0]) : std::string("0"));
    }
    if (!c->args[13].same_as(p.k.thread_var)) operands += ", " + p.expr(c->args[13]);
    return s + ">(" + operands + ")";
  }
  if (c->op == "wgmma_ss" || c->op == "wgmma_rs") {
    // wgmma_{ss,rs}<M, N, K, WGM, WGN, TA, TB, CLEAR, RA, RB, Inst>(A, B, C): RA / RB are
    // the stored rows of the shared operands (0 for a register A).
    std::string s = "tegula::" + c->op + "<";
    for (int i = 0; i < 8; ++i) s += (i ? ", " : "") + p.expr(c->args[i]);
    for (int i = 8; i < 10; ++i) {
      auto* ld = c->args[i].as<BufferLoadNode>();
      s += ", " + (ld->buffer->scope == Scope::Shared ? p.expr(ld->buffer->shape[0]) : std::string("0"));
    }
    int64_t tn = *as_const_int(c->args[1]) / *as_const_int(c->args[4]);
    s += ", " + wgmma_instruction(c->op == "wgmma_rs", int(tn), c->args[8].as<BufferLoadNode>()->buffer->dtype,
                                  c->args[9].as<BufferLoadNode>()->buffer->dtype, p.instructions);
    s += gemm_region_args(c) + ">(" + gemm_operands(c, p);
    if (c->args.size() == 13) {
      // Its wait was moved (gemm_waits.cc): A is packed into registers of its own, held
      // until then. The thread index (argument 11) is threadIdx.x, so not printed.
      auto* held = c->args[12].as<BufferLoadNode>();
      s.replace(0, std::string("tegula::wgmma_rs<").size(), "tegula::wgmma_rs_held<");
      s += ", &" + p.element(held->buffer, held->indices, false);
    }
    return s + ")";
  }
  if (c->op == "wgmma_wait") {
    // Waits until at most args[1] of this thread's latest wgmma groups are running; pins
    // C's registers so that nothing reads them earlier, and those A was packed into for a
    // moved wait (args[2], gemm_waits.cc).
    auto* ld = c->args[0].as<BufferLoadNode>();
    std::string regs = p.expr(c->args[1]) + ", " + p.expr(ld->buffer->shape[0]);
    std::string operands = "&" + p.element(ld->buffer, ld->indices, false);
    if (c->args.size() == 4) {
      auto* held = c->args[2].as<BufferLoadNode>();
      return "tegula::wgmma_wait_held<" + regs + ", " + p.expr(held->buffer->shape[0]) + ">(" + operands + ", &" +
             p.element(held->buffer, held->indices, false) + ")";
    }
    return "tegula::wgmma_wait_regs<" + regs + ">(" + operands + ")";
  }
  return "";
}

}  // namespace tegula::codegen
