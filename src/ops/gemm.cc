// T.gemm(A, B, C, transpose_A, transpose_B, policy, clear_accum) on tensor cores.
//
// Layout (strict): C takes the mma.sync accumulator layout, tiled over the warps as the
// policy says (layout/mma.h). Lowering: one call of the device library's block GEMM
// (kernels/include/tegula/gemm.h), which loads A and B from shared memory with ldmatrix
// and issues mma.sync m16n8k16 into C's registers.
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
    auto want = layout::make_mma_accumulator(g.m, g.n, g.wm, g.wn);
    auto have = layouts.fragment.find(C.get());
    if (have != layouts.fragment.end()) {
      user_assert(have->second->same_as(*want), op->loc)
          << "layout conflict: T.gemm needs " << want->describe() << " for '" << C->name << "', which already has "
          << have->second->describe();
      return false;
    }
    layouts.fragment[C.get()] = want;
    layouts.decided_at[C.get()] = op->loc;
    return true;
  }

  Stmt lower(const TileOpNode* op, transform::PassContext& ctx, const Kernel& k) const override {
    const SourceLoc& loc = op->loc;
    const Buffer& A = op->regions[0].buffer;
    const Buffer& B = op->regions[1].buffer;
    const Buffer& C = op->regions[2].buffer;
    GemmShape g = shape_of(op, k);
    user_assert(A->scope == Scope::Shared && B->scope == Scope::Shared, loc)
        << "T.gemm reads A and B from shared memory in this version ('" << A->name << "' is "
        << scope_name(A->scope) << ", '" << B->name << "' is " << scope_name(B->scope) << ")";
    user_assert(!g.ta, loc) << "T.gemm with transpose_A=True is not supported yet";
    user_assert(A->dtype == B->dtype && (A->dtype == DataType::f16() || A->dtype == DataType::bf16()), loc)
        << "T.gemm takes float16 or bfloat16 A and B of one type (got " << A->dtype.name() << " and "
        << B->dtype.name() << ")";
    user_assert(C->dtype == DataType::f32(), loc)
        << "T.gemm accumulates in float32 in this version ('" << C->name << "' is " << C->dtype.name() << ")";
    user_assert(g.k % 16 == 0, loc) << "T.gemm needs K a multiple of 16 (got " << g.k << ")";
    user_assert(ctx.target.sm >= 80, loc) << "T.gemm needs sm_80 or newer (target " << ctx.target.arch << ")";
    // Operand tiles whose rows are whole 16-byte chunks, a power of two of them, are
    // stored swizzled so ldmatrix reads them without bank conflicts.
    for (const Buffer& b : {A, B}) {
      int64_t cols = *as_const_int(b->shape[1]);
      int64_t chunks = cols * b->dtype.bytes() / 16;
      if ((cols * b->dtype.bytes()) % 16 == 0 && chunks >= 2 && (chunks & (chunks - 1)) == 0) ctx.swizzled.insert(b.get());
    }
    Buffer creg = ctx.registers.at(C.get());
    std::vector<Stmt> body;
    if (op->attr_int("clear_accum", 0)) {
      int64_t n = creg->num_elements_const();
      for (int64_t i = 0; i < n; ++i) body.push_back(make_store(creg, {make_int(i)}, make_float(0.0), loc));
    }
    std::vector<Expr> args = {make_int(g.m), make_int(g.n), make_int(g.k), make_int(g.wm), make_int(g.wn),
                              make_int(g.ta), make_int(g.tb), make_load(A, {make_int(0), make_int(0)}, loc),
                              make_load(B, {make_int(0), make_int(0)}, loc), make_load(creg, {make_int(0)}, loc)};
    body.push_back(make_evaluate(make_call("gemm_ss", args, DataType::i32(), loc), loc));
    return make_seq(body, loc);
  }
};

}  // namespace

const TileOp* gemm_op() {
  static Gemm op;
  return &op;
}

}  // namespace tegula::ops
