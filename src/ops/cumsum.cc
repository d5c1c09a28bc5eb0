// T.cumsum(src, dst, dim, reverse): the inclusive prefix sum of a shared-memory region
// along `dim` (a suffix sum with reverse), written to a region of the same extents.
// (Fragments are staged through shared memory by the frontend, as TileLang does.)
//
// Expands to a T.Parallel loop over the other dimensions, each line scanned serially by
// the thread that owns it, the running sum kept in dst itself:
//   for i in T.Parallel(M):            # cumsum of an (M, N) tile along dim 1
//     dst[i, 0] = src[i, 0]
//     for k in T.serial(1, N): dst[i, k] = dst[i, k - 1] + src[i, k]
// Reading back the thread's own store needs no barrier; in place (src is dst) works the
// same. The sum is kept in dst's dtype, as TileLang's scan keeps it in the buffer's.
#include "ir/hash.h"
#include "ops/region.h"
#include "ops/tile_op.h"

namespace tegula::ops {
namespace {

using namespace ir;

class CumSum : public TileOp {
 public:
  Stmt expand(const TileOpNode* op, Kernel&, transform::PassContext&) const override {
    const SourceLoc& loc = op->loc;
    user_assert(op->regions.size() == 2, loc) << "T.cumsum takes a source and a destination";
    const BufferRegion& src = op->regions[0];
    const BufferRegion& dst = op->regions[1];
    for (const BufferRegion* r : {&src, &dst}) {
      user_assert(r->buffer->scope == Scope::Shared, loc)
          << "T.cumsum scans shared-memory buffers here ('" << r->buffer->name << "' is "
          << scope_name(r->buffer->scope) << ")";
    }
    size_t rank = src.extents.size();
    user_assert(dst.extents.size() == rank, loc)
        << "T.cumsum: '" << dst.buffer->name << "' must have the rank of '" << src.buffer->name << "'";
    std::vector<int64_t> ext;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t* a = as_const_int(src.extents[d]);
      const int64_t* b = as_const_int(dst.extents[d]);
      user_assert(a && b, loc) << "T.cumsum: region extents must be constants (dimension " << d << ")";
      user_assert(*a == *b, loc) << "T.cumsum: the region of '" << dst.buffer->name << "' spans " << *b
                                 << " in dimension " << d << ", the region of '" << src.buffer->name << "' "
                                 << *a;
      ext.push_back(*a);
    }
    int64_t dim = op->attr_int("dim", 0);
    user_assert(dim >= 0 && dim < int64_t(rank), loc) << "T.cumsum: dim " << dim << " of a " << rank << "-d region";
    bool reverse = op->attr_int("reverse", 0) != 0;
    int64_t n = ext[size_t(dim)];

    std::vector<Expr> outer;
    for (size_t d = 0; d < rank; ++d) {
      if (int64_t(d) != dim) outer.push_back(make_int(ext[d]));
    }
    bool no_outer = outer.empty();
    if (no_outer) outer.push_back(make_int(1));  // one line: a loop of one, run by one thread
    DataType t = dst.buffer->dtype;
    bool in_place = src.buffer.get() == dst.buffer.get();
    for (size_t d = 0; in_place && d < rank; ++d) in_place = structural_equal(src.mins[d], dst.mins[d]);
    if (n == 0 || (n == 1 && in_place)) return make_seq({}, loc);  // nothing to add
    return make_parallel_nest(
        outer,
        [&](const std::vector<Expr>& v) {
          // Indices of position p along dim in a region, the other dimensions from v.
          auto at = [&](const BufferRegion& r, const Expr& p) {
            std::vector<Expr> idx;
            size_t o = 0;
            for (size_t d = 0; d < rank; ++d) {
              idx.push_back(offset(r.mins[d], int64_t(d) == dim ? p : (no_outer ? make_int(0) : v[o++])));
            }
            return idx;
          };
          Expr first = make_int(reverse ? n - 1 : 0);
          // In place, the first element is its own sum already.
          Stmt head = in_place ? Stmt() : make_store(dst.buffer, at(dst, first),
                                                     make_cast(t, make_load(src.buffer, at(src, first), loc)), loc);
          if (n == 1) return head;
          Expr k = make_var("scan_k", DataType::i32(), loc);
          // forward: p = k, previous p - 1; reverse: p = n - 1 - k, previous p + 1 (k >= 1).
          Expr p = reverse ? make_int(n - 1) - k : k;
          Expr prev = reverse ? p + 1 : p - make_int(1);
          Expr sum = make_binary(BinaryOp::Add, make_load(dst.buffer, at(dst, prev), loc),
                                 make_cast(t, make_load(src.buffer, at(src, p), loc)), loc);
          Stmt step = make_store(dst.buffer, at(dst, p), make_cast(t, sum), loc);
          Stmt loop = make_for(k, make_int(1), make_int(n - 1), ForKind::Serial, step, 0, loc);
          return make_seq({head, loop}, loc);
        },
        loc);
  }
};

}  // namespace

const TileOp* cumsum_op() {
  static CumSum op;
  return &op;
}

}  // namespace tegula::ops
