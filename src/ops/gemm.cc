// T.gemm(A, B, C, transpose_A, transpose_B, policy, clear_accum) on tensor cores.
//
// Two instruction paths, chosen per group of gemms sharing accumulators (wgmma_accumulators):
// - mma.sync m16n8k16 (sm_80 on): C takes the mma.sync accumulator layout, tiled over the
//   warps as the policy says (layout/mma.h). An A that is a fragment takes the
//   accumulator layout of an M x K tile with the warps split along M only, held again by
//   each column of the split: the registers an mma's A operand needs are then exactly
//   those of an accumulator, so P = cast(Q Kᵀ) feeds P V in place (or, when Q Kᵀ split
//   its columns, through the exchange layout inference inserts). Lowers to gemm_ss (A and B through ldmatrix) or
//   gemm_rs (A from registers) of the device library (kernels/include/tegula/gemm.h).
// - wgmma m64nNk16 (sm_90a): the policy splits warpgroups (4 warps) instead of warps;
//   each warpgroup's tile is whole m64 instructions. C's layout is the same per-warp
//   register order with a warpgroup's m-tiles 64 rows apart (group 4). Shared operands
//   are stored in the canonical 32/64/128-byte swizzled layouts a wgmma descriptor
//   names, in 128-byte-wide panels when a row is longer (ctx.panelled), so the
//   instruction reads them straight from shared memory. Lowers to wgmma_ss / wgmma_rs
//   (kernels/include/tegula/wgmma.h).
// B in a fragment is staged through shared memory first (expand), for either path.
//
// A shared operand may be a region of its buffer (T.gemm(Q_shared[:, :D], ...)): the call
// names the region's first element; the printer passes the buffer's row length and the
// region's column to the device code, which reads the region through the buffer's layout
// (check_regions says which regions the instructions can start at). A register A with
// transpose_A (stored K x M) takes the transposed layout of the A it would have, so the
// instruction reads Aᵀ from the same registers (mma.sync only).
//
// 8-bit float operands (float8_e4m3fn / float8_e5m2, either of each, float32 C) take the
// same paths with the instruction's K doubled (m16n8k32 on sm_89 on, m64nNk32 on sm_90a):
// a k-step is 32 bytes of a row either way, so the swizzled layouts, ldmatrix addresses
// and descriptors are the 16-bit ones counted in bytes. The tensor cores read 8-bit
// operands K-major only, so A is M x K in shared memory and B is N x K (transpose_B).
//
// Integer operands into an int32 C, products summed exactly and wrapping as int32 does:
// 8-bit ones (int8 / uint8, either of each) take the 8-bit floats' paths and forms
// (mma.sync m16n8k32 .s32 on sm_80 on, wgmma m64nNk32 .s32 on sm_90a where the warpgroup
// tile's N is one the integer instruction has: 8, 16, 24 or a multiple of 16). Packed
// 4-bit ones (int4 / uint4, a byte each in shared memory) run mma.sync m16n8k64 on every
// target (wgmma has no 4-bit integer form): a k-step is 64 elements, two 8-bit k-steps
// whose registers the device code packs into nibbles (gemm.h).
//
// 32-bit float operands (float32 or tfloat32, either of each, float32 C) run mma.sync
// m16n8k8 tf32, TileLang's meaning of a float32 gemm: a float32 operand is rounded to tf32
// (to nearest, ties away, as a conversion to tfloat32 is) on its way into a register. Every
// transpose and a register A take the 16-bit paths' layouts (gemm.h says how). wgmma is not
// used for them: a kernel with such a gemm runs all its gemms on mma.sync.
#include <map>
#include <set>

#include "ir/analyzer.h"
#include "layout/mma.h"
#include "ir/functor.h"
#include "ir/printer.h"
#include "ir/thread_guard.h"
#include "ops/region.h"
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

struct GemmShape {
  int64_t m, n, k;
  int wm, wn;    // warps along m and n (mma.sync path)
  int wgm, wgn;  // warpgroups along m and n (wgmma path), 0 when the tile does not fit
  bool ta, tb;
};

// Whether a shared operand's stored rows (cols elements of `bytes` bytes) form one of the
// swizzled layouts wgmma reads: 32, 64 or a multiple of 128 bytes. panel_elems: elements in
// a row of one 128-byte-wide panel (kPanel in wgmma.h).
bool wgmma_rows_fit(int64_t cols, int bytes) {
  int64_t row = cols * bytes;
  return row == 32 || row == 64 || (row > 0 && row % 128 == 0);
}
int64_t panel_elems(int64_t cols, int bytes) { return std::min<int64_t>(cols, 128 / bytes); }

// Warpgroups per the policy for the wgmma path: each warpgroup's tile is whole m64
// instructions of N <= 256 columns. Square prefers the widest N, then splitting along M;
// FullRow and FullCol fall back as gemm_warps does.
bool gemm_warpgroups(int64_t m, int64_t n, int groups, const std::string& policy, int* gm, int* gn) {
  auto fits = [&](int a, int b) {
    return m % (int64_t(a) * 64) == 0 && n % b == 0 && (n / b) % 8 == 0 && n / b <= 256;
  };
  if (policy == "FullRow" || policy == "FullCol") {
    return layout::split_by_policy(groups, policy, fits, [](int, int) { return 1.0; }, gm, gn);
  }
  for (int b = 1; b <= groups; b *= 2) {
    int a = groups / b;
    if (a * b == groups && fits(a, b)) return *gm = a, *gn = b, true;
  }
  return false;
}

// The extents of a gemm operand's region: 2-D, of constants. A region may be part of its
// buffer (T.gemm(Q_shared[:, :D], ...)); the whole buffer is the common case.
std::vector<int64_t> region_shape(const BufferRegion& r, const SourceLoc& loc) {
  const_shape(r.buffer, loc, "T.gemm");
  user_assert(r.buffer->shape.size() == 2 && r.extents.size() == 2, loc) << "T.gemm takes 2-D A, B and C";
  std::vector<int64_t> out;
  for (const Expr& e : r.extents) {
    const int64_t* v = as_const_int(e);
    user_assert(v, loc) << "T.gemm: the region of '" << r.buffer->name << "' must have constant extents";
    out.push_back(*v);
  }
  return out;
}

GemmShape shape_of(const TileOpNode* op, const Kernel& k) {
  const SourceLoc& loc = op->loc;
  user_assert(op->regions.size() == 3, loc) << "T.gemm takes A, B and C";
  GemmShape g;
  g.ta = op->attr_int("transpose_A", 0) != 0;
  g.tb = op->attr_int("transpose_B", 0) != 0;
  auto a = region_shape(op->regions[0], loc), b = region_shape(op->regions[1], loc),
       c = region_shape(op->regions[2], loc);
  g.m = g.ta ? a[1] : a[0];
  g.k = g.ta ? a[0] : a[1];
  g.n = g.tb ? b[0] : b[1];
  int64_t kb = g.tb ? b[1] : b[0];
  user_assert(kb == g.k && c[0] == g.m && c[1] == g.n, loc)
      << "T.gemm: shapes do not agree: A gives " << g.m << "x" << g.k << ", B gives " << kb << "x" << g.n
      << ", C is " << c[0] << "x" << c[1];
  std::string policy = op->attr_str("policy", "Square");
  user_assert(k.threads % 32 == 0, loc) << "T.gemm needs a whole number of warps (threads=" << k.threads << ")";
  if (!layout::gemm_warps(g.m, g.n, k.threads / 32, policy, &g.wm, &g.wn)) g.wm = g.wn = 0;
  if (k.threads % 128 != 0 || !gemm_warpgroups(g.m, g.n, k.threads / 128, policy, &g.wgm, &g.wgn)) g.wgm = g.wgn = 0;
  return g;
}

// Where a shared operand's region starts in its buffer, as stored: (row, col) of its first
// element, and the buffer's stored row length. The instruction reads the region through
// the buffer's own layout (swizzle, panels): the row offset moves the operand's base
// address, the column offset is a constant of the device code.
struct Placement {
  int64_t row = 0, col = 0, cols = 0;
};

Placement placement(const BufferRegion& r, const SourceLoc& loc) {
  Placement p;
  p.cols = *as_const_int(r.buffer->shape[1]);
  const int64_t* row = as_const_int(r.mins.at(0));
  const int64_t* col = as_const_int(r.mins.at(1));
  // A row that varies (a stage of stacked tiles, flatten_stage_buffers.cc) must be a known
  // multiple of 8 that the region's rows leave room for; it counts as row 0 of the checks.
  int64_t div = row ? 0 : Analyzer().known_divisor(r.mins[0]);
  bool stacked = !row && div > 0 && div % 8 == 0 && div >= *as_const_int(r.extents[0]);
  user_assert((row || stacked) && col, loc) << "T.gemm: the region of '" << r.buffer->name
                               << "' must start at a constant offset in it (got [" << to_string(r.mins[0]) << ", "
                               << to_string(r.mins[1]) << "])";
  p.row = row ? *row : 0, p.col = *col;
  return p;
}

bool is_half(DataType t) { return t == DataType::f16() || t == DataType::bf16(); }

// Elements of K one instruction takes: 32 bytes of a row; 64 packed 4-bit elements (64
// bytes of a row in shared memory, a byte each).
int64_t k_step(DataType t) { return t.is_int() && t.bits == 4 ? 64 : 32 / t.bytes(); }

// Integer operands the tensor cores multiply into int32: 8-bit (int8, uint8) or packed
// 4-bit (int4, uint4), A and B of one width.
bool is_int8_operand(DataType t) { return t.is_int() && t.bits == 8 && t.lanes == 1; }
bool is_int4_operand(DataType t) { return t.is_int() && t.bits == 4 && t.lanes == 1; }

// The operand types T.gemm multiplies: 16-bit floats of one type; 8-bit floats (e4m3
// and e5m2 mix), these read K-major from shared memory into float32 on sm_89 on; 32-bit
// floats (tf32); 8-bit or packed 4-bit integers (signed and unsigned mix), read K-major
// from shared memory into int32 on sm_80 on.
void check_operands(const TileOpNode* op, const GemmShape& g, const transform::Target& target) {
  const SourceLoc& loc = op->loc;
  const Buffer& A = op->regions[0].buffer;
  const Buffer& B = op->regions[1].buffer;
  const Buffer& C = op->regions[2].buffer;
  bool f8 = A->dtype.is_float8() && B->dtype.is_float8();
  bool tf32 = A->dtype.is_tf32_operand() && B->dtype.is_tf32_operand();
  bool i8 = is_int8_operand(A->dtype) && is_int8_operand(B->dtype);
  bool i4 = is_int4_operand(A->dtype) && is_int4_operand(B->dtype);
  user_assert((A->dtype == B->dtype && is_half(A->dtype)) || f8 || tf32 || i8 || i4, loc)
      << "T.gemm takes float16 or bfloat16 A and B of one type, 8-bit float A and B (float8_e4m3fn, "
         "float8_e5m2), float32 / tfloat32 A and B (tf32 tensor cores), 8-bit integer A and B (int8, uint8) "
         "or packed 4-bit integer A and B (int4, uint4) (got "
      << A->dtype.name() << " and " << B->dtype.name() << ")";
  if (i8 || i4) {
    const char* what = i8 ? "8-bit integers" : "4-bit integers";
    user_assert(target.sm >= 80, loc) << "T.gemm on " << what << " needs sm_80 or newer: target " << target.arch
                                      << " has no integer tensor-core instruction";
    user_assert(C->dtype == DataType::i32(), loc) << "T.gemm on " << what << " accumulates in int32 ('" << C->name
                                                  << "' is " << C->dtype.name() << ")";
    user_assert(A->scope == Scope::Shared, loc) << "T.gemm on " << what << " reads A from shared memory ('"
                                                << A->name << "' is " << scope_name(A->scope) << ")";
    user_assert(!g.ta && g.tb, loc) << "T.gemm on " << what << " takes A as M x K and B as N x K (transpose_A=False, "
                                       "transpose_B=True; got transpose_A="
                                    << (g.ta ? "True" : "False") << ", transpose_B=" << (g.tb ? "True" : "False")
                                    << "): the tensor cores read integer operands K-major only; store the operand "
                                       "transposed instead";
    int64_t step = k_step(A->dtype);
    user_assert(g.k % step == 0, loc) << "T.gemm on " << what << " needs K a multiple of " << step << " (got "
                                      << g.k << ")";
    return;
  }
  user_assert(C->dtype != DataType::i32(), loc) << "T.gemm accumulates in int32 only for integer A and B ('"
                                                << C->name << "' is int32, A and B are " << A->dtype.name()
                                                << " and " << B->dtype.name() << ")";
  if (tf32) {
    user_assert(C->dtype == DataType::f32(), loc) << "T.gemm on float32 / tfloat32 accumulates in float32 ('"
                                                  << C->name << "' is " << C->dtype.name() << ")";
    user_assert(g.k % 8 == 0, loc) << "T.gemm on float32 / tfloat32 needs K a multiple of 8 (got " << g.k << ")";
    return;
  }
  if (!f8) return;
  user_assert(target.sm >= 89, loc) << "T.gemm on 8-bit floats needs sm_89 or newer (sm_90a for wgmma): target "
                                    << target.arch << " has no 8-bit tensor-core instruction";
  user_assert(C->dtype == DataType::f32(), loc) << "T.gemm on 8-bit floats accumulates in float32 ('" << C->name
                                                << "' is " << C->dtype.name() << ")";
  user_assert(A->scope == Scope::Shared, loc) << "T.gemm on 8-bit floats reads A from shared memory ('" << A->name
                                              << "' is " << scope_name(A->scope) << ")";
  user_assert(!g.ta && g.tb, loc) << "T.gemm on 8-bit floats takes A as M x K and B as N x K (transpose_A=False, "
                                     "transpose_B=True; got transpose_A="
                                  << (g.ta ? "True" : "False") << ", transpose_B=" << (g.tb ? "True" : "False")
                                  << "): the tensor cores read 8-bit operands K-major only; store the operand "
                                     "transposed instead";
  user_assert(g.k % 32 == 0, loc) << "T.gemm on 8-bit floats needs K a multiple of 32 (got " << g.k << ")";
}

// Operands that are regions of their buffers: C and a register A are whole fragments; a
// shared region starts at a constant offset inside its buffer, a multiple of 8 rows (whole
// swizzle phases) and, along its stored row, of the K step (along K) or of a 16-byte chunk
// (along M or N), and the buffer's rows are whole chunks (ldmatrix reads 16-byte rows).
void check_regions(const TileOpNode* op, const GemmShape& g) {
  const SourceLoc& loc = op->loc;
  static const char* names[] = {"A", "B", "C"};
  for (int i = 0; i < 3; ++i) {
    const BufferRegion& r = op->regions[i];
    if (r.buffer->scope != Scope::Shared) {
      user_assert(is_whole(r), loc) << "T.gemm: " << names[i] << " ('" << r.buffer->name << "', in "
                                    << scope_name(r.buffer->scope) << ") must be a whole buffer, not a region of it";
      continue;
    }
    Placement p = placement(r, loc);
    const int e = r.buffer->dtype.bytes();
    bool col_is_k = i == 0 ? !g.ta : g.tb;
    int64_t col_step = col_is_k ? k_step(r.buffer->dtype) : 16 / e;
    int64_t rows = *as_const_int(r.buffer->shape[0]);
    int64_t ext_r = *as_const_int(r.extents[0]), ext_c = *as_const_int(r.extents[1]);
    user_assert(p.row >= 0 && p.col >= 0 && p.row + ext_r <= rows && p.col + ext_c <= p.cols, loc)
        << "T.gemm: " << names[i] << " region [" << p.row << ":" << p.row + ext_r << ", " << p.col << ":"
        << p.col + ext_c << "] is outside '" << r.buffer->name << "' (" << rows << "x" << p.cols << ")";
    if (is_whole(r)) continue;
    user_assert(p.row % 8 == 0 && p.col % col_step == 0 && (p.cols * e) % 16 == 0, loc)
        << "T.gemm: " << names[i] << " region of '" << r.buffer->name << "' starts at [" << p.row << ", " << p.col
        << "]: the tensor cores read a region that starts at a multiple of 8 rows and of " << col_step
        << " columns (" << (col_is_k ? "the instruction's K step" : "a 16-byte chunk")
        << "), in a buffer whose rows are whole 16-byte chunks (" << p.cols << " x " << e << " bytes)";
  }
}

// The mma.sync path needs a warp split into whole 16 x 8 tiles.
void require_warp_split(const GemmShape& g, const TileOpNode* op, const Kernel& k) {
  user_assert(g.wm > 0, op->loc) << "T.gemm: " << k.threads / 32 << " warps cannot split a " << g.m << "x" << g.n
                                 << " tile with policy " << op->attr_str("policy", "Square")
                                 << " into whole 16x8 mma tiles per warp";
}

}  // namespace

// Whether this gemm can run on wgmma: operand types, a warpgroup split, operand rows in a
// layout the descriptors name, instructions covering whole swizzle atoms of an MN-major
// operand, and (A in registers) no transpose.
bool wgmma_fits(const TileOpNode* op, const Kernel& k) {
  const Buffer& A = op->regions.at(0).buffer;
  const Buffer& B = op->regions.at(1).buffer;
  const Buffer& C = op->regions.at(2).buffer;
  bool half = is_half(A->dtype) && A->dtype == B->dtype;
  bool i8 = is_int8_operand(A->dtype) && is_int8_operand(B->dtype);
  bool f8 = (A->dtype.is_float8() && B->dtype.is_float8()) || i8;
  if (!(half || f8) || C->dtype != (i8 ? DataType::i32() : DataType::f32()) || C->scope != Scope::Fragment) {
    return false;
  }
  if (B->scope != Scope::Shared || (A->scope != Scope::Shared && A->scope != Scope::Fragment)) return false;
  GemmShape g = shape_of(op, k);
  if (g.wgm == 0 || g.k % k_step(A->dtype) != 0) return false;
  if (f8 && (A->scope != Scope::Shared || g.ta || !g.tb)) return false;
  const int e = A->dtype.bytes();
  int64_t tn = g.n / g.wgn;
  // The integer instruction's N: 8, 16, 24, then multiples of 16.
  if (i8 && tn != 8 && tn != 24 && tn % 16 != 0) return false;
  // A region of a buffer: the descriptors name the buffer's layout, starting a K-major
  // operand at a K step inside a swizzle row, an MN-major one at a panel.
  auto region_fits = [&](const BufferRegion& r, bool k_major, int64_t inst_width) {
    Placement p = placement(r, op->loc);
    if (!wgmma_rows_fit(p.cols, e) || p.row % 8 != 0) return false;
    int64_t panel = panel_elems(p.cols, e);
    if (k_major) return p.col % k_step(A->dtype) == 0;
    return p.col % panel == 0 && inst_width % panel == 0;
  };
  if (A->scope == Scope::Fragment) {
    if (g.ta) return false;
  } else if (!region_fits(op->regions[0], !g.ta, 64)) {
    return false;
  }
  return region_fits(op->regions[1], g.tb, tn);  // N-major B: whole atoms per instruction
}

namespace {

// The mma.sync warp split of a gemm: the policy's, or wgmma's (ctx.warpgroup_split).
GemmShape mma_shape(const TileOpNode* op, const Kernel& k, const transform::PassContext& ctx) {
  GemmShape g = shape_of(op, k);
  if (ctx.warpgroup_split.count(op->regions.at(2).buffer.get()) && g.wgm > 0) g.wm = 4 * g.wgm, g.wn = g.wgn;
  return g;
}

template <typename F>
void for_each_gemm(const Kernel& k, F f) {
  post_order(k.body, [&](const Stmt& s) {
    if (auto* op = s.as<TileOpNode>()) {
      if (op->op == "gemm") f(op);
    }
  }, [](const Expr&) {});
}

class Gemm : public TileOp {
 public:
  // clear_accum as a run-time condition (TileLang's `clear_accum=(k == 0)`), the op's one
  // argument: C is cleared where it holds, then the gemm accumulates.
  //   gemm(A, B, C; cond)  ->  if cond: fill(C, 0)        (expanded, as T.clear is)
  //                             gemm(A, B, C; clear_accum=0)
  // B in a fragment (TileLang's gemm_sr / gemm_rr): the tensor cores read B from shared
  // memory on both paths, so B is staged there through a buffer the op allocates,
  //   T.copy(B, B_shared); T.gemm(A, B_shared, C)
  // a T.Parallel nest like the author's, which insert_barriers fences from the gemm's reads.
  Stmt expand(const TileOpNode* op, Kernel& k, transform::PassContext& ctx) const override {
    user_assert(op->regions.size() == 3, op->loc) << "T.gemm takes A, B and C";
    if (!op->args.empty()) {
      user_assert(op->args.size() == 1 && op->attr_int("clear_accum", 0) == 0, op->loc)
          << "T.gemm takes one run-time clear_accum condition";
      user_assert(!k.thread_var || !reads_var(op->args[0], k.thread_var), op->loc)
          << "T.gemm: clear_accum (" << to_string(op->args[0]) << ") reads the thread index, but the threads of a "
          << "gemm share its accumulator: the condition must be the same in all of them";
      const BufferRegion& c = op->regions.at(2);
      Stmt fill = make_tile_op("fill", {c}, {make_int(0)}, {}, op->loc);
      Stmt clear = find_tile_op("fill")->expand(fill.as<TileOpNode>(), k, ctx);
      Stmt gemm = make_tile_op("gemm", op->regions, {}, op->attrs, op->loc);
      Stmt staged = expand(gemm.as<TileOpNode>(), k, ctx);
      return make_seq({make_if(op->args[0], clear, {}, op->loc), staged ? staged : gemm}, op->loc);
    }
    const BufferRegion& b = op->regions[1];
    if (b.buffer->scope != Scope::Fragment) return {};
    user_assert(is_whole(b), op->loc) << "T.gemm: B ('" << b.buffer->name
                                      << "', in fragment) must be a whole buffer, not a region of it";
    region_shape(b, op->loc);  // 2-D, constant
    Buffer staged = make_buffer(ctx.fresh_name(b.buffer->name + "_shared"), Scope::Shared, b.buffer->dtype,
                                b.buffer->shape, op->loc);
    k.allocs.push_back(staged);
    BufferRegion to{staged, b.mins, b.extents};
    std::vector<BufferRegion> regions = op->regions;
    regions[1] = to;
    return make_seq({make_tile_op("copy", {b, to}, {}, {}, op->loc),
                     make_tile_op(op->op, regions, op->args, op->attrs, op->loc)},
                    op->loc);
  }

  bool infer_layout(const TileOpNode* op, InferLevel level, transform::PassContext& ctx,
                    const Kernel& k) const override {
    if (level != InferLevel::Strict) return false;
    transform::LayoutMap& layouts = ctx.layouts;
    const Buffer& C = op->regions.at(2).buffer;
    user_assert(C->scope == Scope::Fragment, op->loc) << "T.gemm accumulates into a fragment ('" << C->name
                                                      << "' is " << scope_name(C->scope) << ")";
    GemmShape g = shape_of(op, k);
    check_operands(op, g, ctx.target);
    check_regions(op, g);
    const Buffer& A = op->regions.at(0).buffer;
    if (ctx.wgmma_accumulators.count(C.get())) {
      bool changed = require(layout::make_mma_accumulator(g.m, g.n, 4 * g.wgm, g.wgn, 4), C, op, layouts);
      if (A->scope == Scope::Fragment) {
        // With the output's columns split over warpgroups (FullCol, Square), each column
        // of groups needs all of A: a copy in each (a T.copy into A from a layout that
        // splits it otherwise is an exchange through shared memory, which layout inference
        // inserts).
        changed |= require(layout::make_group_replicated(layout::make_mma_accumulator(g.m, g.k, 4 * g.wgm, 1, 4),
                                                         g.wgn),
                           A, op, layouts);
      }
      return changed;
    }
    g = mma_shape(op, k, ctx);
    require_warp_split(g, op, k);
    bool changed = require(layout::make_mma_accumulator(g.m, g.n, g.wm, g.wn), C, op, layouts);
    if (A->scope == Scope::Fragment) {
      // Each column of the warp split (WM warps) holds all of A; with transpose_A (A
      // stored K x M), Aᵀ where that layout holds A (a copy into A from another layout
      // is an exchange layout inference inserts).
      layout::FragmentPtr a = layout::make_mma_accumulator(g.m, g.k, g.wm, 1);
      if (g.ta) a = layout::make_transposed(a);
      changed |= require(layout::make_group_replicated(a, g.wn), A, op, layouts);
    }
    return changed;
  }

 private:
  static bool require(layout::FragmentPtr want, const Buffer& buf, const TileOpNode* op, transform::LayoutMap& layouts) {
    return require_fragment_layout(layouts, buf, std::move(want), op);
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
        << "T.gemm reads A and B from shared memory or fragments ('" << A->name << "' is "
        << scope_name(A->scope) << ", '" << B->name << "' is " << scope_name(B->scope) << ")";
    check_operands(op, g, ctx.target);
    user_assert(C->dtype == DataType::f32() || (C->dtype == DataType::f16() && A->dtype == DataType::f16()) ||
                    (C->dtype == DataType::i32() && A->dtype.is_int()),
                loc)
        << "T.gemm accumulates in float32, in float16 for float16 operands, or in int32 for integer ones ('"
        << C->name << "' is " << C->dtype.name() << ", A is " << A->dtype.name() << ")";
    user_assert(g.k % 16 == 0 || A->dtype.is_tf32_operand(), loc) << "T.gemm needs K a multiple of 16 (got " << g.k << ")";
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
    if (ctx.wgmma_accumulators.count(C.get())) return lower_wgmma(op, g, ctx);
    g = mma_shape(op, k, ctx);
    require_warp_split(g, op, k);
    std::vector<Stmt> body;
    // clear_accum: the first k-step's mma takes 0 for C, so no register is cleared first.
    std::vector<Expr> args = {make_int(g.m), make_int(g.n), make_int(g.k), make_int(g.wm), make_int(g.wn),
                              make_int(g.ta), make_int(g.tb), make_int(op->attr_int("clear_accum", 0) != 0),
                              a_regs ? make_load(ctx.registers.at(A.get()), {make_int(0)}, loc)
                                     : make_load(A, op->regions[0].mins, loc),
                              make_load(B, op->regions[1].mins, loc), make_load(creg, {make_int(0)}, loc),
                              // the index the warps count from: a thread scope's under a thread guard
                              k.thread_var};
    body.push_back(make_evaluate(make_call(a_regs ? "gemm_rs" : "gemm_ss", args, DataType::i32(), loc), loc));
    return make_seq(body, loc);
  }

 private:
  // wgmma_{ss,rs}(M, N, K, WGM, WGN, TA, TB, CLEAR; A, B, C), operands by their first
  // element; the printer adds the rows of A's and B's buffers as stored (a panel spans all
  // the rows of a buffer, stacked stages included) and the instruction to issue.
  static Stmt lower_wgmma(const TileOpNode* op, const GemmShape& g, transform::PassContext& ctx) {
    const SourceLoc& loc = op->loc;
    const Buffer& A = op->regions[0].buffer;
    const Buffer& B = op->regions[1].buffer;
    const Buffer& C = op->regions[2].buffer;
    bool a_regs = A->scope == Scope::Fragment;
    for (const Buffer& b : {A, B}) {
      if (b->scope != Scope::Shared) continue;
      ctx.swizzled.insert(b.get());
      ctx.panelled.insert(b.get());
    }
    std::vector<Expr> args = {make_int(g.m), make_int(g.n), make_int(g.k), make_int(g.wgm), make_int(g.wgn),
                              make_int(g.ta), make_int(g.tb), make_int(op->attr_int("clear_accum", 0) != 0),
                              a_regs ? make_load(ctx.registers.at(A.get()), {make_int(0)}, loc)
                                     : make_load(A, op->regions[0].mins, loc),
                              make_load(B, op->regions[1].mins, loc),
                              make_load(ctx.registers.at(C.get()), {make_int(0)}, loc)};
    // Issue, then wait: two statements, so pipeline_loops can issue the next stage's
    // copies while the tensor cores run.
    Stmt issue = make_evaluate(make_call(a_regs ? "wgmma_rs" : "wgmma_ss", args, DataType::i32(), loc), loc);
    Stmt wait = make_evaluate(
        make_call("wgmma_wait", {make_load(ctx.registers.at(C.get()), {make_int(0)}, loc), make_int(0)},
                  DataType::i32(), loc),
        loc);
    return make_seq({issue, wait}, loc);
  }
};

}  // namespace

std::set<const BufferNode*> wgmma_accumulators(const Kernel& k, const transform::PassContext& ctx,
                                               const std::function<const BufferNode*(const BufferNode*)>& group_of,
                                               const std::set<const TileOpNode*>& guarded) {
  std::set<const BufferNode*> out;
  if (ctx.target.arch != "sm_90a" || ctx.options.disable_wgmma) return out;
  // A group runs on wgmma when every gemm in it can; its fragments then all take the
  // warpgroup layouts, and no other group's gemm reads them.
  std::map<const BufferNode*, bool> group_fits;
  for_each_gemm(k, [&](const TileOpNode* op) {
    const BufferNode* g = group_of(op->regions.at(2).buffer.get());
    auto it = group_fits.emplace(g, true).first;
    it->second = it->second && !guarded.count(op) && wgmma_fits(op, k);
  });
  for_each_gemm(k, [&](const TileOpNode* op) {
    const BufferNode* c = op->regions.at(2).buffer.get();
    if (group_fits.at(group_of(c))) out.insert(c);
  });
  return out;
}

const TileOp* gemm_op() {
  static Gemm op;
  return &op;
}

}  // namespace tegula::ops
