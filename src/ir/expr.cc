#include "ir/expr.h"

#include <algorithm>

namespace tegula::ir {

const char* node_kind_name(NodeKind k) {
  switch (k) {
#define EXPR(Name) \
  case NodeKind::Name: return #Name;
#define STMT(Name) \
  case NodeKind::Name: return #Name;
#include "ir/node_kinds.def"
  }
  return "?";
}

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"+",  "-",  "*",  "/",  "%",  "floordiv", "floormod", "min",
                                "max", "==", "!=", "<",  "<=", ">",        ">=",       "&&",
                                "||", "&",  "|",  "^",  "<<", ">>"};
  return names[static_cast<int>(op)];
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::EQ && op <= BinaryOp::Or; }

const char* scope_name(Scope s) {
  switch (s) {
    case Scope::Global: return "global";
    case Scope::Shared: return "shared";
    case Scope::Fragment: return "fragment";
    case Scope::Local: return "local";
  }
  return "?";
}

int64_t BufferNode::num_elements_const() const {
  int64_t n = 1;
  for (const Expr& d : shape) {
    const int64_t* v = as_const_int(d);
    if (!v) return -1;
    n *= *v;
  }
  return n;
}

namespace {

template <typename T, typename... Args>
Expr make_node(SourceLoc loc, Args&&... args) {
  auto n = std::make_shared<T>(std::forward<Args>(args)...);
  n->loc = std::move(loc);
  return Expr(std::move(n));
}

// The type both operands are converted to: float beats int, wider beats narrower.
DataType promote(DataType a, DataType b) {
  if (a == b) return a;
  if (a.is_float() != b.is_float()) return a.is_float() ? a : b;
  if (a.is_bool()) return b;
  if (b.is_bool()) return a;
  if (a.is_float() && a.bits == b.bits) return DataType::f32();  // fp16 with bf16
  return a.bits >= b.bits ? a : b;
}

}  // namespace

Expr make_int(int64_t v, DataType t, SourceLoc loc) { return make_node<IntImmNode>(std::move(loc), t, v); }
Expr make_float(double v, DataType t, SourceLoc loc) { return make_node<FloatImmNode>(std::move(loc), t, v); }
Expr make_bool(bool v) { return make_int(v ? 1 : 0, DataType::boolean()); }
Expr make_var(const std::string& name, DataType t, SourceLoc loc) { return make_node<VarNode>(std::move(loc), t, name); }

Expr make_binary(BinaryOp op, Expr a, Expr b, SourceLoc loc) {
  internal_assert(bool(a) && bool(b)) << "null operand of " << binary_op_name(op);
  DataType t = promote(a.dtype(), b.dtype());
  if (op == BinaryOp::And || op == BinaryOp::Or) {
    t = DataType::boolean();
  } else {
    // Constants adopt the other side's type, so `x + 1` stays an int64 or a half.
    if (a.dtype() != t && (a.as<IntImmNode>() || a.as<FloatImmNode>())) {
      a = a.as<IntImmNode>() && t.is_float() ? make_float(double(a.as<IntImmNode>()->value), t, a->loc)
                                             : make_cast(t, a, a->loc);
    } else if (a.dtype() != t) {
      a = make_cast(t, a, a->loc);
    }
    if (b.dtype() != t && (b.as<IntImmNode>() || b.as<FloatImmNode>())) {
      b = b.as<IntImmNode>() && t.is_float() ? make_float(double(b.as<IntImmNode>()->value), t, b->loc)
                                             : make_cast(t, b, b->loc);
    } else if (b.dtype() != t) {
      b = make_cast(t, b, b->loc);
    }
    if (is_comparison(op)) t = DataType::boolean();
  }
  return make_node<BinaryNode>(std::move(loc), t, op, std::move(a), std::move(b));
}

Expr make_not(Expr a, SourceLoc loc) { return make_node<NotNode>(std::move(loc), std::move(a)); }

Expr make_select(Expr c, Expr a, Expr b, SourceLoc loc) {
  DataType t = promote(a.dtype(), b.dtype());
  if (a.dtype() != t) a = make_cast(t, a);
  if (b.dtype() != t) b = make_cast(t, b);
  return make_node<SelectNode>(std::move(loc), std::move(c), std::move(a), std::move(b));
}

Expr make_cast(DataType t, Expr v, SourceLoc loc) {
  if (v.dtype() == t) return v;
  if (const int64_t* i = as_const_int(v)) {
    if (t.is_int() || t.is_bool()) return make_int(t.is_bool() ? (*i != 0) : *i, t, loc);
    if (t.is_float()) return make_float(double(*i), t, loc);
  }
  if (auto* f = v.as<FloatImmNode>()) {
    if (t.is_float()) return make_float(f->value, t, loc);
  }
  return make_node<CastNode>(std::move(loc), t, std::move(v));
}

Expr make_call(const std::string& op, std::vector<Expr> args, DataType t, SourceLoc loc) {
  return make_node<CallNode>(std::move(loc), t, op, std::move(args));
}

Expr make_load(Buffer b, std::vector<Expr> indices, SourceLoc loc, int lanes) {
  DataType t = b->dtype.with_lanes(lanes);
  return make_node<BufferLoadNode>(std::move(loc), t, std::move(b), std::move(indices));
}

Buffer make_buffer(const std::string& name, Scope s, DataType t, std::vector<Expr> shape, SourceLoc loc) {
  auto b = std::make_shared<BufferNode>();
  b->name = name;
  b->scope = s;
  b->dtype = t;
  b->shape = std::move(shape);
  b->loc = std::move(loc);
  return b;
}

Buffer make_strided_buffer(const std::string& name, DataType t, std::vector<Expr> shape, std::vector<Expr> strides,
                           SourceLoc loc) {
  auto b = std::make_shared<BufferNode>();
  b->name = name;
  b->scope = Scope::Global;
  b->dtype = t;
  b->shape = std::move(shape);
  b->strides = std::move(strides);
  b->loc = std::move(loc);
  return b;
}

Buffer make_address_buffer(const std::string& name, DataType t, std::vector<Expr> shape, std::vector<Expr> strides,
                           Expr address, SourceLoc loc) {
  Buffer strided = make_strided_buffer(name, t, std::move(shape), std::move(strides), std::move(loc));
  auto b = std::make_shared<BufferNode>(*strided);
  b->address = std::move(address);
  return b;
}

Buffer make_view(const std::string& name, Buffer base, std::vector<Expr> shape, SourceLoc loc,
                 std::optional<DataType> dtype) {
  auto b = std::make_shared<BufferNode>();
  b->name = name;
  b->scope = base->scope;
  b->dtype = dtype ? *dtype : base->dtype;
  b->shape = std::move(shape);
  b->loc = std::move(loc);
  b->view_of = std::move(base);
  return b;
}

Expr operator+(Expr a, Expr b) { return make_binary(BinaryOp::Add, std::move(a), std::move(b)); }
Expr operator-(Expr a, Expr b) { return make_binary(BinaryOp::Sub, std::move(a), std::move(b)); }
Expr operator*(Expr a, Expr b) { return make_binary(BinaryOp::Mul, std::move(a), std::move(b)); }
Expr operator<(Expr a, Expr b) { return make_binary(BinaryOp::LT, std::move(a), std::move(b)); }
Expr operator&&(Expr a, Expr b) { return make_binary(BinaryOp::And, std::move(a), std::move(b)); }
Expr floordiv(Expr a, Expr b) { return make_binary(BinaryOp::FloorDiv, std::move(a), std::move(b)); }
Expr floormod(Expr a, Expr b) { return make_binary(BinaryOp::FloorMod, std::move(a), std::move(b)); }
Expr operator+(Expr a, int64_t b) { return a + make_int(b, a.dtype().is_int() ? a.dtype() : DataType::i32()); }
Expr operator*(Expr a, int64_t b) { return a * make_int(b, a.dtype().is_int() ? a.dtype() : DataType::i32()); }

const int64_t* as_const_int(const Expr& e) {
  auto* n = e.as<IntImmNode>();
  return n ? &n->value : nullptr;
}

bool is_const_int(const Expr& e, int64_t v) {
  const int64_t* p = as_const_int(e);
  return p && *p == v;
}

size_t vector_dim(const BufferNode& b) {
  size_t last = b.shape.size() - 1;
  if (b.strides.empty()) return last;
  auto unit = [&](size_t d) {
    const int64_t* v = as_const_int(b.strides[d]);
    return v && *v == 1;
  };
  if (unit(last)) return last;
  for (size_t d = 0; d < b.strides.size(); ++d) {
    if (unit(d)) return d;
  }
  return last;
}

}  // namespace tegula::ir
