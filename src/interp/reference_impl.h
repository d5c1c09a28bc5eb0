// Internals of the reference interpreter, shared by reference.cc (statements and
// expressions) and reference_ops.cc (tile ops).
//
// A kernel is compiled once per call into closures over numbered slots: every Var gets a
// slot in Frame::vars and every buffer one in Frame::bufs, so running an element loop
// does no hashing and no allocation. Values are doubles holding what the IR's dtype holds
// (see interp.h); an unwritten element of an allocated buffer is NaN.
#pragma once
#include <optional>
#include <functional>
#include <unordered_map>
#include <vector>

#include <map>

#include "interp/block_scheduler.h"
#include "interp/coop.h"
#include "interp/interp.h"
#include "ir/thread_guard.h"
#include "support/error.h"

namespace tegula::interp::ref {

constexpr size_t kMaxRank = 8;

struct Aliases;
struct Buf {
  const ir::BufferNode* node = nullptr;
  double* data = nullptr;
  std::vector<int64_t> shape;
  bool global = false;
  const ir::IndexMap* map = nullptr;  // a global tensor's T.Layout (ir/index_map.h)
  double safe = 0;  // what a read past a global tensor's edge gives (T.annotate_safe_value)
  // A buffer with views of another dtype, or one of those views (see Aliases).
  Aliases* aliases = nullptr;
  int alias = -1;  // which view of aliases this is; -1 for the buffer and its same-dtype views
  // A tensor at a run-time address (T.make_tensor), bound where its address is: its
  // strides (empty: row-major), the elements its memory has from `data` on, and why its
  // address reads nothing when it does not (an access then fails with that reason).
  std::vector<int64_t> strides;
  int64_t limit = -1;
  std::string unresolved;
};

// The reference holds each element as a double, so a view of another dtype
// (T.view(buf, dtype=...)) cannot share its buffer's storage: each such view keeps its own
// elements, made from the bits of the buffer's `ratio` elements when read and written
// back to them before anything else in the family is accessed. element() keeps the two
// in step: an access through one member first writes back every other view's elements it
// may have changed (those handed out since), and a view's element is made afresh from the
// buffer unless handed out since.
struct Aliases {
  struct View {
    ir::DataType type, from;  // the view's element type; `ratio` lanes of the buffer's
    int ratio = 1;
    std::vector<double> own;
    std::vector<char> out;  // handed out (maybe written) since the last write-back
    std::vector<int64_t> handed;
  };
  double* root = nullptr;
  std::vector<View> views;
  void write_back(int except);
};

// One mbarrier of T.alloc_barrier: `pending` arrivals complete the current phase, after
// `phases` completed ones (reference_barriers.cc).
struct Mbarrier {
  int64_t count = 0, pending = 0, phases = 0;
};

struct Frame {
  std::vector<double> vars;
  std::vector<Buf> bufs;
  const BlockTicket* ticket = nullptr;  // how the block meets the others at grid and cluster barriers
  // A kernel with T.alloc_barrier: the block's warpgroups (the sides of thread branches) run
  // as coroutines, and its mbarriers by (buffer slot, index).
  Coop* coop = nullptr;
  std::map<std::pair<int, int64_t>, Mbarrier>* mbarriers = nullptr;
  // A break (1) or continue (2) taken in the innermost loop running: the statements
  // after it in the iteration are skipped, then the loop ends or goes on.
  int jump = 0;
};

using ExprFn = std::function<double(Frame&)>;
using StmtFn = std::function<void(Frame&)>;
// A value of several lanes (T.reinterpret's and the explicit-width loads'), written to out.
using VecFn = std::function<void(Frame&, double* out)>;

// An index value as an integer. A NaN index (computed from an unwritten value) is the
// user's error at loc.
int64_t to_index(double v, const Buf& b, size_t dim, const SourceLoc& loc);
// The element at idx (one entry per dimension of b). Past a global tensor's edge the
// access is masked, as the language's element loops mask it: nullptr (a load gives 0, a
// store is skipped). Outside a shared, fragment or local buffer it has no meaning:
// UserError at loc.
double* element(Buf& b, const int64_t* idx, const SourceLoc& loc);
// UserError at loc: element idx of a tensor at a run-time address lies outside the memory
// its address points into, or the address points into none (Buf::unresolved).
void address_error(const Buf& b, const int64_t* idx, const SourceLoc& loc);

// A reducer's combination (language/reducers.py's codes: sum, max, min, bitand, bitor,
// bitxor); max and min carry a NaN, as the generated code's do.
double combine_reducer(int64_t code, double a, double b);

// A tile op's region: its buffer's slot, and per dimension min and extent. `unit` says
// which extents are the constant 1, which decides corner form and the dimensions a copy
// pairs, as the language defines them statically.
struct RegionFn {
  int buf = -1;
  std::vector<ExprFn> mins, extents;
  std::vector<bool> unit;
};
// A region evaluated for one execution.
struct RegionVal {
  Buf* b = nullptr;
  size_t rank = 0;
  int64_t min[kMaxRank] = {}, ext[kMaxRank] = {};
};

class Compiler {
 public:
  explicit Compiler(const ir::Kernel& k);
  bool has_mbarriers() const { return has_mbarriers_; }
  // Slots of the call's signature (parameters, dynamic dims) and the block indices.
  // A vector variable takes one slot per lane, from the one returned.
  int declare_var(const ir::ExprNode* var, int lanes = 1);
  int declare_buffer(const ir::Buffer& b);
  int var_slot(const ir::ExprNode* var) const;  // -1 when unbound
  int buffer_slot(const ir::Buffer& b, const SourceLoc& loc) const;
  size_t num_vars() const { return size_t(next_slot_); }
  size_t num_bufs() const { return bufs_.size(); }

  // `at` is the location of the enclosing statement, for errors about a Var (a Var's own
  // location is where it was declared).
  ExprFn expr(const ir::Expr& e, const SourceLoc& at);
  StmtFn stmt(const ir::Stmt& s);
  RegionFn region(const ir::BufferRegion& r, const SourceLoc& at);
  // reference_bits.cc: values of any number of lanes, the explicit-width accesses.
  VecFn vexpr(const ir::Expr& e, const SourceLoc& at);
  StmtFn wide_store(const ir::CallNode* c, const SourceLoc& loc);
  StmtFn vector_store(const ir::BufferStoreNode* s);
  // reference_address.cc: a statement pointing every tensor at the address `var` holds
  // (T.make_tensor) at its memory; null when no tensor is at it. `args`: the call's memory.
  StmtFn bind_addresses(const ir::Expr& var, const SourceLoc& at);
  void set_call(const CallArgs* args) { args_ = args; }

 private:
  ExprFn binary(const ir::BinaryNode* b, const SourceLoc& at);
  // T.sync_grid, the cluster barrier and T.block_rank_in_cluster; null for other calls.
  ExprFn block_call(const ir::CallNode* c);
  StmtFn reducer_update(const ir::CallNode* call, const SourceLoc& loc);
  ExprFn load(const ir::BufferLoadNode* l, const SourceLoc& at);
  ExprFn atomic_add(const ir::CallNode* c, const SourceLoc& at);
  StmtFn store(const ir::BufferStoreNode* s);
  StmtFn loop(const ir::ForNode* f);
  StmtFn thread_branch(const ir::IfThenElseNode* i, const SourceLoc& loc);
  // reference_barriers.cc: T.alloc_barrier's mbarriers and T.ptx_cp_async; null for other calls.
  ExprFn barrier_call(const ir::CallNode* c, const SourceLoc& loc);

  const ir::Kernel& k_;
  const CallArgs* args_ = nullptr;
  ir::ThreadRange range_;                              // the threads that reach the code compiled now
  bool has_mbarriers_ = false;                         // the kernel's threads meet at mbarriers
  std::optional<ir::ThreadRange> loop_range_;          // range_ at the innermost loop's start
  std::vector<std::pair<ir::Expr, ir::Expr>> lets_;   // the lets around it
  std::unordered_map<const ir::ExprNode*, int> vars_;
  int next_slot_ = 0;
  std::unordered_map<const ir::BufferNode*, int> bufs_;
};

RegionVal eval_region(const RegionFn& r, Frame& f, const SourceLoc& loc);
// The statement a tile op is (copy, fill, reduce, gemm, atomic_add; annotations do
// nothing).
StmtFn compile_tile_op(const ir::TileOpNode* op, Compiler& c);

}  // namespace tegula::interp::ref
