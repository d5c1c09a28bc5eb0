// T.gemm(A, B, C, transpose_A, transpose_B, policy, clear_accum) on tensor cores.
//
// Layout (strict): C takes the mma.sync accumulator layout, tiled over the warps as the
// policy says (layout/mma.h). An A that is a fragment takes the accumulator layout of an
// M x K tile with the warps split along M only: the registers an mma's A operand needs
// are then exactly those of an accumulator, so P = cast(Q Kᵀ) feeds P V in place.
// Lowering: one call of the device library's block GEMM (kernels/include/tegula/gemm.h),
// gemm_ss (A and B through ldmatrix) or gemm_rs (A from registers), issuing mma.sync
// m16n8k16 into C's registers.
#include "layout/mma.h"
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

struct GemmShape {
  int64_t m, n, k;
  int wm, wn;
  bool ta, tb;
};

GemmShape shape_of(const TileOpNode* op, const Kernel& k) {
  const SourceLoc& loc = op->loc;
  user_assert(op->regions.size() == 3, loc) << "T.gemm takes A, B and C";
  const Buffer& A = op->regions[0].buffer;
  const Buffer& B = op->regions[1].buffer;
  const Buffer& C = op->regions[2].buffer;
  GemmShape g;
  g.ta = op->attr_int("transpose_A", 0) != 0;
  g.tb = op->attr_int("transpose_B", 0) != 0;
  auto a = const_shape(A, loc, "T.gemm"), b = const_shape(B, loc, "T.gemm"), c = const_shape(C, loc, "T.gemm");
  user_assert(a.size() == 2 && b.size() == 2 && c.size() == 2, loc) << "T.gemm takes 2-D A, B and C";
  g.m = g.ta ? a[1] : a[0];
  g.k = g.ta ? a[0] : a[1];
  g.n = g.tb ? b[0] : b[1];
  int64_t kb = g.tb ? b[1] : b[0];
  user_assert(kb == g.k && c[0] == g.m && c[1] == g.n, loc)
      << "T.gemm: shapes do not agree: A gives " << g.m << "x" << g.k << ", B gives " << kb << "x" << g.n
      << ", C is " << c[0] << "x" << c[1];
  std::string policy = op->attr_str("policy", "Square");
  user_assert(k.threads % 32 == 0, loc) << "T.gemm needs a whole number of warps (threads=" << k.threads << ")";
  user_assert(layout::gemm_warps(g.m, g.n, k.threads / 32, policy, &g.wm, &g.wn), loc)
      << "T.gemm: " << k.threads / 32 << " warps cannot split a " << g.m << "x" << g.n << " tile with policy "
      << policy << " into whole 16x8 mma tiles per warp";
  return g;
}

class Gemm : public TileOp {
 public:
  bool infer_layout(const TileOpNode* op, InferLevel level, transform::LayoutMap& layouts,
                    const Kernel& k) const override {
    if (level != InferLevel::Strict) return false;
    const Buffer& C = op->regions.at(2).buffer;
    user_assert(C->scope == Scope::Fragment, op->loc) << "T.gemm accumulates into a fragment ('" << C->name
                                                      << "' is " << scope_name(C->scope) << ")";
    GemmShape g = shape_of(op, k);
    bool changed = require(layout::make_mma_accumulator(g.m, g.n, g.wm, g.wn), C, op, layouts);
    const Buffer& A = op->regions.at(0).buffer;
    if (A->scope == Scope::Fragment) {
      user_assert(g.wn == 1 && !g.ta, op->loc)
          << "T.gemm with A in registers ('" << A->name << "') needs every warp to own whole rows of C and no "
          << "transpose_A: use policy=T.GemmWarpPolicy.FullRow (this split is " << g.wm << "x" << g.wn << ")";
      changed |= require(layout::make_mma_accumulator(g.m, g.k, g.wm, 1), A, op, layouts);
    }
    return changed;
  }

 private:
  static bool require(layout::FragmentPtr want, const Buffer& buf, const TileOpNode* op, transform::LayoutMap& layouts) {
    auto have = layouts.fragment.find(buf.get());
    if (have != layouts.fragment.end()) {
      user_assert(have->second->same_as(*want), op->loc)
          << "layout conflict: T.gemm needs " << want->describe() << " for '" << buf->name << "', which already has "
          << have->second->describe() << " (decided at line " << layouts.decided_at[buf.get()].line << ")";
      return false;
    }
    layouts.fragment[buf.get()] = want;
    layouts.decided_at[buf.get()] = op->loc;
    return true;
  }

 public:

  Stmt lower(const TileOpNode* op, transform::PassContext& ctx, const Kernel& k) const override {
    const SourceLoc& loc = op->loc;
    const Buffer& A = op->regions[0].buffer;
    const Buffer& B = op->regions[1].buffer;
    const Buffer& C = op->regions[2].buffer;
    GemmShape g = shape_of(op, k);
    bool a_regs = A->scope == Scope::Fragment;
    user_assert((A->scope == Scope::Shared || a_regs) && B->scope == Scope::Shared, loc)
        << "T.gemm reads A from shared memory or a fragment and B from shared memory ('" << A->name << "' is "
        << scope_name(A->scope) << ", '" << B->name << "' is " << scope_name(B->scope) << ")";
    user_assert(A->dtype == B->dtype && (A->dtype == DataType::f16() || A->dtype == DataType::bf16()), loc)
        << "T.gemm takes float16 or bfloat16 A and B of one type (got " << A->dtype.name() << " and "
        << B->dtype.name() << ")";
    user_assert(C->dtype == DataType::f32() || (C->dtype == DataType::f16() && A->dtype == DataType::f16()), loc)
        << "T.gemm accumulates in float32, or in float16 for float16 operands ('" << C->name << "' is "
        << C->dtype.name() << ", A is " << A->dtype.name() << ")";
    user_assert(g.k % 16 == 0, loc) << "T.gemm needs K a multiple of 16 (got " << g.k << ")";
    user_assert(ctx.target.sm >= 80, loc) << "T.gemm needs sm_80 or newer (target " << ctx.target.arch << ")";
    // Operand tiles whose rows are whole 16-byte chunks, a power of two of them, are
    // stored swizzled so ldmatrix reads them without bank conflicts.
    for (const Buffer& b : {A, B}) {
      if (b->scope != Scope::Shared) continue;
      int64_t cols = *as_const_int(b->shape[1]);
      int64_t chunks = cols * b->dtype.bytes() / 16;
      if ((cols * b->dtype.bytes()) % 16 == 0 && chunks >= 2 && (chunks & (chunks - 1)) == 0) ctx.swizzled.insert(b.get());
    }
    Buffer creg = ctx.registers.at(C.get());
    std::vector<Stmt> body;
    // clear_accum: the first k-step's mma takes 0 for C, so no register is cleared first.
    std::vector<Expr> args = {make_int(g.m), make_int(g.n), make_int(g.k), make_int(g.wm), make_int(g.wn),
                              make_int(g.ta), make_int(g.tb), make_int(op->attr_int("clear_accum", 0) != 0),
                              a_regs ? make_load(ctx.registers.at(A.get()), {make_int(0)}, loc)
                                     : make_load(A, {make_int(0), make_int(0)}, loc),
                              make_load(B, {make_int(0), make_int(0)}, loc), make_load(creg, {make_int(0)}, loc)};
    body.push_back(make_evaluate(make_call(a_regs ? "gemm_rs" : "gemm_ss", args, DataType::i32(), loc), loc));
    return make_seq(body, loc);
  }
};

}  // namespace

const TileOp* gemm_op() {
  static Gemm op;
  return &op;
}

}  // namespace tegula::ops
