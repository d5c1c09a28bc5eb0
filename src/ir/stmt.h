// Statements of the tile IR, tile ops, and the kernel (prim_func) itself.
#pragma once
#include <map>
#include <set>
#include <variant>

#include "ir/expr.h"

namespace tegula::ir {

struct StmtNode : Node {
  explicit StmtNode(NodeKind k) : Node(k) {}
};

class Stmt {
 public:
  Stmt() = default;
  Stmt(std::shared_ptr<const StmtNode> n) : node_(std::move(n)) {}  // NOLINT
  const StmtNode* get() const { return node_.get(); }
  const StmtNode* operator->() const { return node_.get(); }
  explicit operator bool() const { return node_ != nullptr; }
  bool same_as(const Stmt& o) const { return node_ == o.node_; }
  NodeKind kind() const { return node_->kind; }
  template <typename T>
  const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }

 private:
  std::shared_ptr<const StmtNode> node_;
};

struct EvaluateNode : StmtNode {
  static constexpr NodeKind kKind = NodeKind::Evaluate;
  Expr value;
  explicit EvaluateNode(Expr v) : StmtNode(kKind), value(std::move(v)) {}
};
struct BufferStoreNode : StmtNode {
  static constexpr NodeKind kKind = NodeKind::BufferStore;
  Buffer buffer;
  std::vector<Expr> indices;
  Expr value;  // value.dtype().lanes > 1 stores that many contiguous elements
  BufferStoreNode(Buffer b, std::vector<Expr> i, Expr v)
      : StmtNode(kKind), buffer(std::move(b)), indices(std::move(i)), value(std::move(v)) {}
};

enum class ForKind : uint8_t { Serial, Unrolled, Parallel, Pipelined, Vectorized };
const char* for_kind_name(ForKind k);

struct ForNode : StmtNode {
  static constexpr NodeKind kKind = NodeKind::For;
  Expr var;  // a Var
  Expr min, extent;
  ForKind for_kind;
  Stmt body;
  int num_stages = 0;  // T.Pipelined(num_stages=)
  ForNode(Expr v, Expr m, Expr e, ForKind k, Stmt b, int stages)
      : StmtNode(kKind), var(std::move(v)), min(std::move(m)), extent(std::move(e)), for_kind(k), body(std::move(b)), num_stages(stages) {}
};
struct IfThenElseNode : StmtNode {
  static constexpr NodeKind kKind = NodeKind::IfThenElse;
  Expr cond;
  Stmt then_case, else_case;  // else_case may be empty
  IfThenElseNode(Expr c, Stmt t, Stmt e) : StmtNode(kKind), cond(std::move(c)), then_case(std::move(t)), else_case(std::move(e)) {}
};
struct SeqNode : StmtNode {
  static constexpr NodeKind kKind = NodeKind::Seq;
  std::vector<Stmt> seq;
  explicit SeqNode(std::vector<Stmt> s) : StmtNode(kKind), seq(std::move(s)) {}
};
struct LetStmtNode : StmtNode {
  static constexpr NodeKind kKind = NodeKind::LetStmt;
  Expr var, value;
  Stmt body;
  LetStmtNode(Expr v, Expr val, Stmt b) : StmtNode(kKind), var(std::move(v)), value(std::move(val)), body(std::move(b)) {}
};

// `while cond: body`: runs body as long as cond (a bool of kernel values, evaluated by
// each thread before every iteration) holds.
struct WhileNode : StmtNode {
  static constexpr NodeKind kKind = NodeKind::While;
  Expr cond;
  Stmt body;
  WhileNode(Expr c, Stmt b) : StmtNode(kKind), cond(std::move(c)), body(std::move(b)) {}
};

// An attribute of a tile op: an integer, a float or a string.
using TileAttr = std::variant<int64_t, double, std::string>;

// A tile-level operation. `op` names an implementation in src/ops (see ops/tile_op.h):
//   copy(src, dst)  fill(dst; value)  reduce(src, dst; kind, dim, clear)
//   gemm(A, B, C; transpose_A, transpose_B, policy, clear_accum[; clear_if])  atomic_add(dst, src)
struct TileOpNode : StmtNode {
  static constexpr NodeKind kKind = NodeKind::TileOp;
  std::string op;
  std::vector<BufferRegion> regions;
  std::vector<Expr> args;
  std::map<std::string, TileAttr> attrs;
  TileOpNode(std::string o, std::vector<BufferRegion> r, std::vector<Expr> a, std::map<std::string, TileAttr> at)
      : StmtNode(kKind), op(std::move(o)), regions(std::move(r)), args(std::move(a)), attrs(std::move(at)) {}
  int64_t attr_int(const std::string& k, int64_t dflt) const;
  std::string attr_str(const std::string& k, const std::string& dflt) const;
};
// A barrier among the block's threads, or, with `threads` set, among the threads of a
// thread scope alone (named barrier `barrier`, 1..15; insert_barriers assigns them).
struct SyncNode : StmtNode {
  static constexpr NodeKind kKind = NodeKind::Sync;
  int barrier = 0;
  int threads = 0;  // 0: the whole block
  SyncNode() : StmtNode(kKind) {}
  SyncNode(int b, int t) : StmtNode(kKind), barrier(b), threads(t) {}
};

// `break` (leave the innermost enclosing loop) or `continue` (go on with its next
// iteration), TileLang's meaning; only in serial loops (T.serial, range).
struct LoopJumpNode : StmtNode {
  static constexpr NodeKind kKind = NodeKind::LoopJump;
  bool is_continue = false;
  explicit LoopJumpNode(bool c) : StmtNode(kKind), is_continue(c) {}
};

Stmt make_evaluate(Expr v, SourceLoc loc = {});
Stmt make_store(Buffer b, std::vector<Expr> indices, Expr value, SourceLoc loc = {});
Stmt make_for(Expr var, Expr min, Expr extent, ForKind k, Stmt body, int num_stages = 0, SourceLoc loc = {});
Stmt make_if(Expr cond, Stmt then_case, Stmt else_case = {}, SourceLoc loc = {});
Stmt make_while(Expr cond, Stmt body, SourceLoc loc = {});
// Flattens nested Seqs and drops empty statements; a single statement is returned as is.
Stmt make_seq(std::vector<Stmt> stmts, SourceLoc loc = {});
Stmt make_let(Expr var, Expr value, Stmt body, SourceLoc loc = {});
Stmt make_tile_op(const std::string& op, std::vector<BufferRegion> regions, std::vector<Expr> args,
                  std::map<std::string, TileAttr> attrs, SourceLoc loc = {});
Stmt make_sync(SourceLoc loc = {});
Stmt make_loop_jump(bool is_continue, SourceLoc loc = {});
Stmt make_scoped_sync(int barrier, int threads, SourceLoc loc = {});

// A scalar kernel parameter (T.int32 argument) or a tensor (T.Tensor).
struct Param {
  Buffer buffer;  // set for tensors
  Expr var;       // set for scalars
  std::string name() const;
};

// A global tensor's T.Layout (index_map.h): A[idx] is stored at the row-major position of
// outs(idx) in a tensor of `shape`.
struct IndexMap {
  std::vector<Expr> vars;   // one per dimension of the tensor
  std::vector<Expr> outs;   // the position, in terms of vars
  std::vector<Expr> shape;  // the range of each output
  std::vector<int> moved;   // per output: the dimension it is (its range that size), or -1
  SourceLoc loc;            // the annotation

  // The flat element offset of A[idx]: in expressions, or in numbers for a tensor of the
  // given shape (the call's sizes, for dimensions known only at launch).
  Expr offset(const std::vector<Expr>& idx) const;
  int64_t offset(const int64_t* idx, const int64_t* tensor_shape) const;
};

// T.prim_func + T.Kernel: one CUDA kernel.
struct Kernel {
  std::string name;
  std::vector<Param> params;
  std::vector<Expr> dynamic_vars;  // T.dynamic dims, passed as arguments of their type (int32, or int64)
  std::vector<Expr> grid;          // 1..3 extents
  std::vector<Expr> block_vars;    // bx, by, bz
  Expr thread_var;                 // threadIdx.x
  int threads = 128;
  // T.ClusterKernel / T.Kernel(cluster_dims=): the blocks run in clusters of x * y * z
  // (sm_90+); empty without clusters.
  std::vector<int64_t> cluster_dims;
  std::vector<Buffer> allocs;      // shared / fragment / local buffers, in declaration order
  std::vector<Buffer> views;       // views of parameters and allocations (gone after resolve_views)
  std::vector<Buffer> addressed;   // global tensors over run-time addresses (BufferNode::address)
  Stmt body;
  SourceLoc loc;

  // Filled by the later passes:
  std::map<const BufferNode*, int64_t> smem_offset;  // storage plan of shared buffers
  int64_t smem_bytes = 0;
  // Shared buffers stored with 16-byte chunks XOR-swizzled by row (tegula::swizzle_offset),
  // so that the 8 rows one ldmatrix reads fall in different banks.
  std::set<const BufferNode*> smem_swizzled;
  // wgmma operands among them: rows longer than 128 bytes are stored as 128-byte-wide
  // panels (tegula::panel_offset), and the pool is 1024-byte aligned.
  std::set<const BufferNode*> smem_panelled;
  bool uses_wgmma = false;  // barriers then also order generic writes before wgmma reads
  // Bulk tensor copies (sm_90a): one tensor map per (global tensor, box, swizzle), each
  // passed as a __grid_constant__ parameter after the dynamic sizes; the launcher encodes
  // them from the tensors of the call (plan_bulk_copies.cc).
  struct TensorMap {
    int param = 0;               // index into params: the global tensor it describes
    std::vector<int64_t> box;    // box extents, innermost dimension first
    int swizzle = 0;             // 0 none, 1: 32-byte, 2: 64-byte, 3: 128-byte rows
  };
  std::vector<TensorMap> tensor_maps;
  // Warp specialised (warp_specialize.cc): threads [0, consumer_threads) run the program,
  // the last warpgroup, [consumer_threads, threads), only issues its bulk copies. 0: not.
  int consumer_threads = 0;
  // Global tensors with a T.Layout (read_annotations): every access goes through the map.
  std::map<const BufferNode*, IndexMap> global_layouts;
  int panel_size = 0;          // T.use_swizzle
  int min_blocks_per_sm = 0;   // T.annotate_min_blocks_per_sm: __launch_bounds__'s second argument (0: none)
  bool swizzle_row_major = true;
};

}  // namespace tegula::ir
