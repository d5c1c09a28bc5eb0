// T.gemm_sp(A_sparse, E, B, C, transpose_A, transpose_E, transpose_B, policy, clear_accum):
// C (+)= A @ B where A (M x K) is 2:4 structured-sparse along K and given compressed.
//
// Operands (shapes as stored; transposes as in T.gemm):
//   A_sparse  M x K/2 (K/2 x M with transpose_A): of each group of 4 consecutive elements
//             of a row of A along K, the 2 kept, in order.
//   E         M x K/F (K/F x M with transpose_E), integers of 8, 16 or 32 bits, F = their
//             bits (get_e_factor of tegula.cuda.intrinsics.sparse_layout): each group
//             takes 4 bits of its row of E, groups packed from an element's low bits up;
//             bits 0-1 are the position in the group (0..3) of the first kept element, bits
//             2-3 that of the second. A group naming one position twice (0b0000, which
//             zero padding past a tensor's edge gives) is read as positions 0 and 1.
//   B         K x N (N x K with transpose_B), C an M x N fragment.
// So C[i, j] += sum over groups g and kept s of A_sparse[i, 2g + s] * B[4g + pos(i, g, s), j].
//
// Lowers to mma.sp m16n8k32 (sm_80+; on sm_90 too, no wgmma.sp) for float16 / bfloat16 A
// and B, accumulating in float32 (or float16 for float16 operands), E and B whole 2-D
// shared buffers, A_sparse one too or a whole fragment. C takes the accumulator layout of
// T.gemm's mma.sync path, split over the warps as the policy says (layout/mma.h); the kept
// elements are read as the A of an M x N x K/2 T.gemm (through ldmatrix from shared
// memory; a fragment takes the layout T.gemm gives a register A), B as T.gemm reads it,
// and E element by element (kernels/include/tegula/gemm_sp.h).
#include "layout/mma.h"
#include "ops/region.h"
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

struct SparseShape {
  int64_t m, n, k;
  int wm, wn;
  bool ta, tb, te;
};

const char* kNames[] = {"A_sparse", "E", "B", "C"};

std::vector<int64_t> tile_shape(const BufferRegion& r, int i, const SourceLoc& loc) {
  const_shape(r.buffer, loc, "T.gemm_sp");
  user_assert(r.buffer->shape.size() == 2, loc) << "T.gemm_sp: " << kNames[i] << " ('" << r.buffer->name
                                                << "') must be a 2-D tile";
  user_assert(is_whole(r), loc) << "T.gemm_sp: " << kNames[i] << " must be a whole buffer, not a region of '"
                                << r.buffer->name << "'";
  return {*as_const_int(r.buffer->shape[0]), *as_const_int(r.buffer->shape[1])};
}

bool is_half(DataType t) { return t == DataType::f16() || t == DataType::bf16(); }

// Shapes, types and scopes, checked at the op's line.
SparseShape shape_of(const TileOpNode* op, const Kernel& k) {
  const SourceLoc& loc = op->loc;
  user_assert(op->regions.size() == 4, loc) << "T.gemm_sp takes A_sparse, E, B and C";
  const Buffer &A = op->regions[0].buffer, &E = op->regions[1].buffer, &B = op->regions[2].buffer,
               &C = op->regions[3].buffer;
  SparseShape g;
  g.ta = op->attr_int("transpose_A", 0) != 0;
  g.te = op->attr_int("transpose_E", 0) != 0;
  g.tb = op->attr_int("transpose_B", 0) != 0;
  user_assert(is_half(A->dtype) && A->dtype == B->dtype, loc)
      << "T.gemm_sp takes float16 or bfloat16 A_sparse and B of one type (got " << A->dtype.name() << " and "
      << B->dtype.name() << ")";
  user_assert(E->dtype.is_int() && (E->dtype.bits == 8 || E->dtype.bits == 16 || E->dtype.bits == 32), loc)
      << "T.gemm_sp: E (the metadata) must be an integer of 8, 16 or 32 bits (got " << E->dtype.name() << ")";
  user_assert(C->scope == Scope::Fragment, loc) << "T.gemm_sp accumulates into a fragment ('" << C->name << "' is "
                                                << scope_name(C->scope) << ")";
  user_assert(C->dtype == DataType::f32() || (C->dtype == DataType::f16() && A->dtype == DataType::f16()), loc)
      << "T.gemm_sp accumulates in float32, or in float16 for float16 operands ('" << C->name << "' is "
      << C->dtype.name() << ")";
  user_assert(A->scope == Scope::Shared || A->scope == Scope::Fragment, loc)
      << "T.gemm_sp reads A_sparse from shared memory or a fragment ('" << A->name << "' is " << scope_name(A->scope)
      << ")";
  for (int i = 1; i < 3; ++i) {
    const Buffer& b = op->regions[i].buffer;
    user_assert(b->scope == Scope::Shared, loc) << "T.gemm_sp reads " << kNames[i] << " from shared memory ('"
                                                << b->name << "' is " << scope_name(b->scope) << ")";
  }
  auto a = tile_shape(op->regions[0], 0, loc), e = tile_shape(op->regions[1], 1, loc),
       b = tile_shape(op->regions[2], 2, loc), c = tile_shape(op->regions[3], 3, loc);
  g.m = c[0], g.n = c[1];
  g.k = 2 * (g.ta ? a[0] : a[1]);
  int64_t am = g.ta ? a[1] : a[0], kb = g.tb ? b[1] : b[0], bn = g.tb ? b[0] : b[1];
  user_assert(am == g.m && kb == g.k && bn == g.n, loc)
      << "T.gemm_sp: shapes do not agree: A_sparse is " << a[0] << "x" << a[1] << " (A is " << am << "x" << g.k
      << "), B gives " << kb << "x" << bn << ", C is " << g.m << "x" << g.n;
  user_assert(g.k % 32 == 0, loc) << "T.gemm_sp needs K a multiple of 32, the sparse instruction's K (got K = "
                                  << g.k << ")";
  const int64_t f = E->dtype.bits;  // dense elements of a row one element of E covers
  int64_t em = g.te ? e[1] : e[0], ek = g.te ? e[0] : e[1];
  user_assert(em == g.m && ek * f == g.k, loc)
      << "T.gemm_sp: E must be " << (g.te ? std::to_string(g.k / f) + "x" + std::to_string(g.m)
                                          : std::to_string(g.m) + "x" + std::to_string(g.k / f))
      << " (M x K/" << f << " for " << E->dtype.name() << " metadata" << (g.te ? ", transposed" : "") << "), got '"
      << E->name << "' " << e[0] << "x" << e[1];
  std::string policy = op->attr_str("policy", "Square");
  user_assert(k.threads % 32 == 0, loc) << "T.gemm_sp needs a whole number of warps (threads=" << k.threads << ")";
  user_assert(layout::gemm_warps(g.m, g.n, k.threads / 32, policy, &g.wm, &g.wn), loc)
      << "T.gemm_sp: " << k.threads / 32 << " warps cannot split a " << g.m << "x" << g.n << " tile with policy "
      << policy << " into whole 16x8 mma tiles per warp";
  return g;
}

class GemmSp : public TileOp {
 public:
  bool infer_layout(const TileOpNode* op, InferLevel level, transform::PassContext& ctx,
                    const Kernel& k) const override {
    if (level != InferLevel::Strict) return false;
    SparseShape g = shape_of(op, k);
    bool changed = require(layout::make_mma_accumulator(g.m, g.n, g.wm, g.wn), op->regions[3].buffer, op, ctx);
    const Buffer& A = op->regions[0].buffer;
    if (A->scope == Scope::Fragment) {
      // The kept elements in registers as T.gemm holds a register A (an M x K/2 A): the
      // accumulator layout of the warps' split along M, held again by each column of the
      // split; with transpose_A (K/2 x M stored) its transpose.
      layout::FragmentPtr a = layout::make_mma_accumulator(g.m, g.k / 2, g.wm, 1);
      if (g.ta) a = layout::make_transposed(a);
      changed |= require(layout::make_group_replicated(a, g.wn), A, op, ctx);
    }
    return changed;
  }

 private:
  static bool require(layout::FragmentPtr want, const Buffer& buf, const TileOpNode* op, transform::PassContext& ctx) {
    return require_fragment_layout(ctx.layouts, buf, std::move(want), op);
  }

 public:

  // gemm_sp_{ss,rs}(M, N, K, WM, WN, TA, TB, TE, CLEAR; A, E, B, C, tid): the operands by
  // their first element (A's register for _rs), then the index the warps count from (a
  // thread scope's under a guard).
  Stmt lower(const TileOpNode* op, transform::PassContext& ctx, const Kernel& k) const override {
    const SourceLoc& loc = op->loc;
    SparseShape g = shape_of(op, k);
    user_assert(ctx.target.sm >= 80, loc) << "T.gemm_sp needs sm_80 or newer (target " << ctx.target.arch
                                          << "): mma.sp is the sparse tensor cores' instruction";
    const Buffer &A = op->regions[0].buffer, &E = op->regions[1].buffer, &B = op->regions[2].buffer;
    // A and B swizzled where T.gemm would swizzle them (rows of a power of two of 16-byte
    // chunks, two or more), for conflict-free ldmatrix; E is read element by element.
    bool a_regs = A->scope == Scope::Fragment;
    for (const Buffer& b : {A, B}) {
      if (b->scope != Scope::Shared) continue;
      int64_t bytes = *as_const_int(b->shape[1]) * b->dtype.bytes(), chunks = bytes / 16;
      if (bytes % 16 == 0 && chunks >= 2 && (chunks & (chunks - 1)) == 0) ctx.swizzled.insert(b.get());
    }
    auto first = [&](const Buffer& b) { return make_load(b, {make_int(0), make_int(0)}, loc); };
    std::vector<Expr> args = {make_int(g.m), make_int(g.n), make_int(g.k), make_int(g.wm), make_int(g.wn),
                              make_int(g.ta), make_int(g.tb), make_int(g.te),
                              make_int(op->attr_int("clear_accum", 0) != 0),
                              a_regs ? make_load(ctx.registers.at(A.get()), {make_int(0)}, loc) : first(A), first(E),
                              first(B),
                              make_load(ctx.registers.at(op->regions[3].buffer.get()), {make_int(0)}, loc),
                              k.thread_var};
    return make_evaluate(make_call(a_regs ? "gemm_sp_rs" : "gemm_sp_ss", args, DataType::i32(), loc), loc);
  }
};

}  // namespace

const TileOp* gemm_sp_op() {
  static GemmSp op;
  return &op;
}

}  // namespace tegula::ops
