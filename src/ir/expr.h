// Expressions and buffers of the tile IR.
//
// Nodes are immutable and shared (std::shared_ptr<const T>); Var and Buffer compare
// by identity. Every node keeps the DSL location it was built from.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "support/error.h"

namespace tegula::ir {

enum class NodeKind : uint8_t {
#define EXPR(Name) Name,
#define STMT(Name) Name,
#include "ir/node_kinds.def"
};
const char* node_kind_name(NodeKind k);

struct Node {
  NodeKind kind;
  SourceLoc loc;
  explicit Node(NodeKind k) : kind(k) {}
  virtual ~Node() = default;
};

struct ExprNode : Node {
  DataType dtype;
  ExprNode(NodeKind k, DataType t) : Node(k), dtype(t) {}
};

// A handle to an immutable expression node.
class Expr {
 public:
  Expr() = default;
  Expr(std::shared_ptr<const ExprNode> n) : node_(std::move(n)) {}  // NOLINT
  const ExprNode* get() const { return node_.get(); }
  const ExprNode* operator->() const { return node_.get(); }
  explicit operator bool() const { return node_ != nullptr; }
  bool same_as(const Expr& o) const { return node_ == o.node_; }
  NodeKind kind() const { return node_->kind; }
  DataType dtype() const { return node_->dtype; }
  template <typename T>
  const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }
  const std::shared_ptr<const ExprNode>& ptr() const { return node_; }

 private:
  std::shared_ptr<const ExprNode> node_;
};

enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Mod, FloorDiv, FloorMod, Min, Max,
  EQ, NE, LT, LE, GT, GE, And, Or, BitAnd, BitOr, BitXor, Shl, Shr
};
const char* binary_op_name(BinaryOp op);
bool is_comparison(BinaryOp op);

struct IntImmNode : ExprNode {
  static constexpr NodeKind kKind = NodeKind::IntImm;
  int64_t value;
  IntImmNode(DataType t, int64_t v) : ExprNode(kKind, t), value(v) {}
};
struct FloatImmNode : ExprNode {
  static constexpr NodeKind kKind = NodeKind::FloatImm;
  double value;
  FloatImmNode(DataType t, double v) : ExprNode(kKind, t), value(v) {}
};
struct VarNode : ExprNode {
  static constexpr NodeKind kKind = NodeKind::Var;
  std::string name;
  VarNode(DataType t, std::string n) : ExprNode(kKind, t), name(std::move(n)) {}
};
struct BinaryNode : ExprNode {
  static constexpr NodeKind kKind = NodeKind::Binary;
  BinaryOp op;
  Expr a, b;
  BinaryNode(DataType t, BinaryOp o, Expr x, Expr y) : ExprNode(kKind, t), op(o), a(std::move(x)), b(std::move(y)) {}
};
struct NotNode : ExprNode {
  static constexpr NodeKind kKind = NodeKind::Not;
  Expr a;
  explicit NotNode(Expr x) : ExprNode(kKind, DataType::boolean()), a(std::move(x)) {}
};
struct SelectNode : ExprNode {
  static constexpr NodeKind kKind = NodeKind::Select;
  Expr cond, t, f;
  SelectNode(Expr c, Expr a, Expr b) : ExprNode(kKind, a.dtype()), cond(std::move(c)), t(std::move(a)), f(std::move(b)) {}
};
struct CastNode : ExprNode {
  static constexpr NodeKind kKind = NodeKind::Cast;
  Expr value;
  CastNode(DataType t, Expr v) : ExprNode(kKind, t), value(std::move(v)) {}
};
struct CallNode : ExprNode {
  static constexpr NodeKind kKind = NodeKind::Call;
  std::string op;  // see ir/intrinsics.h
  std::vector<Expr> args;
  CallNode(DataType t, std::string o, std::vector<Expr> a) : ExprNode(kKind, t), op(std::move(o)), args(std::move(a)) {}
};

enum class Scope : uint8_t { Global, Shared, Fragment, Local };
const char* scope_name(Scope s);

// A multi-dimensional array. Global buffers are kernel parameters (row-major,
// contiguous); the others are allocated by the kernel. Fragment buffers are tiles
// spread over the block's threads by a layout; Local ones are private to a thread.
struct BufferNode {
  std::string name;
  Scope scope;
  DataType dtype;
  std::vector<Expr> shape;
  // T.StridedTensor parameters: the step between neighbours of each dimension, in
  // elements (constants or T.dynamic vars bound at launch from tensor.stride()). Empty:
  // row-major and contiguous, what every other buffer is.
  std::vector<Expr> strides;
  SourceLoc loc;
  // Set on a view (T.reshape, T.view, T.Tensor(shape, dtype, buf.data)): no storage of its
  // own, the elements of view_of (same scope) read in row-major order under this shape;
  // resolve_views rewrites every access into one of view_of's. A view of another dtype
  // (T.view(buf, dtype=...), a whole number of view_of's elements each) reads their bytes.
  std::shared_ptr<const BufferNode> view_of;
  // A T.alloc_var: one element of a thread's own, which the CUDA printer declares as a
  // plain variable (`float x;`, read and written as `x`) rather than a 1-element array.
  bool scalar = false;
  // A global tensor over a run-time address (T.make_tensor of a T.ptr parameter, or of an
  // address read from a pointer table): the Var holding the address, a pointer parameter
  // (dtype handle) or a let of a 64-bit integer, in scope wherever the tensor is accessed.
  // Not a kernel parameter: the launch knows neither its shape nor its memory.
  Expr address;
  int64_t num_elements_const() const;  // -1 when a dimension is symbolic
};
using Buffer = std::shared_ptr<const BufferNode>;

struct BufferLoadNode : ExprNode {
  static constexpr NodeKind kKind = NodeKind::BufferLoad;
  Buffer buffer;
  std::vector<Expr> indices;
  BufferLoadNode(DataType t, Buffer b, std::vector<Expr> i) : ExprNode(kKind, t), buffer(std::move(b)), indices(std::move(i)) {}
};

// A rectangular piece of a buffer: T.copy(A[by*bM, k*bK], A_shared) names the
// region starting at (by*bM, k*bK) whose extents are taken from the other side.
struct BufferRegion {
  Buffer buffer;
  std::vector<Expr> mins;
  std::vector<Expr> extents;
};

// ---- constructors (each takes the DSL location of the node) ----
Expr make_int(int64_t v, DataType t = DataType::i32(), SourceLoc loc = {});
Expr make_float(double v, DataType t = DataType::f32(), SourceLoc loc = {});
Expr make_bool(bool v);
Expr make_var(const std::string& name, DataType t = DataType::i32(), SourceLoc loc = {});
// Type-promoting binary op (int + float -> float, i32 + i64 -> i64, comparisons -> bool).
Expr make_binary(BinaryOp op, Expr a, Expr b, SourceLoc loc = {});
Expr make_not(Expr a, SourceLoc loc = {});
Expr make_select(Expr c, Expr a, Expr b, SourceLoc loc = {});
Expr make_cast(DataType t, Expr v, SourceLoc loc = {});
Expr make_call(const std::string& op, std::vector<Expr> args, DataType t, SourceLoc loc = {});
Expr make_load(Buffer b, std::vector<Expr> indices, SourceLoc loc = {}, int lanes = 1);
Buffer make_buffer(const std::string& name, Scope s, DataType t, std::vector<Expr> shape, SourceLoc loc = {});
// A global tensor parameter of the given strides (T.StridedTensor).
Buffer make_strided_buffer(const std::string& name, DataType t, std::vector<Expr> shape, std::vector<Expr> strides,
                           SourceLoc loc = {});
// A global tensor at the address `address` holds (see BufferNode::address); strides in
// elements, empty for row-major.
Buffer make_address_buffer(const std::string& name, DataType t, std::vector<Expr> shape, std::vector<Expr> strides,
                           Expr address, SourceLoc loc = {});
// A view of `base` under another shape (same element count): see BufferNode::view_of.
// dtype (none: base's) may be wider than base's, a whole number of its elements: the view
// reinterprets base's bytes (resolve_views).
Buffer make_view(const std::string& name, Buffer base, std::vector<Expr> shape, SourceLoc loc = {},
                 std::optional<DataType> dtype = std::nullopt);

// Convenience arithmetic for passes (no location).
Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator<(Expr a, Expr b);
Expr operator&&(Expr a, Expr b);
Expr floordiv(Expr a, Expr b);
Expr floormod(Expr a, Expr b);
Expr operator+(Expr a, int64_t b);
Expr operator*(Expr a, int64_t b);

// The dimension a vector access (lanes > 1) of b moves along, one element a lane: the last,
// or for a T.StridedTensor whose last stride is not 1 the dimension of constant stride 1
// (neighbours there are neighbours in memory; the CUDA printer addresses by strides).
size_t vector_dim(const BufferNode& b);

// The value of an integer constant, or nullptr.
const int64_t* as_const_int(const Expr& e);
bool is_const_int(const Expr& e, int64_t v);

}  // namespace tegula::ir
