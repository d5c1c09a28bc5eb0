#include "analysis/lane_values.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace tegula::analysis {

using ir::BinaryOp;

Val Val::of_int(int64_t v) {
  Val out;
  out.kind_ = Int;
  out.int_ = v;
  return out;
}

Val Val::of_float(double v) {
  Val out;
  out.kind_ = Float;
  out.float_ = v;
  return out;
}

Val Val::int_lanes(std::vector<int64_t> v) {
  Val out;
  out.kind_ = Int;
  out.ints_ = std::make_shared<const std::vector<int64_t>>(std::move(v));
  return out;
}

Val Val::float_lanes(std::vector<double> v) {
  Val out;
  out.kind_ = Float;
  out.floats_ = std::make_shared<const std::vector<double>>(std::move(v));
  return out;
}

Val Val::at(size_t lane) const {
  if (kind_ == Unknown || !per_lane()) return *this;
  return kind_ == Int ? of_int(i(lane)) : of_float(f(lane));
}

namespace {

size_t lanes_of(const Val& a, const Val& b) { return std::max(a.lanes(), b.lanes()); }

// A value's entry in a lane, read as an integer or a double.
template <typename T>
T entry(const Val& v, size_t lane) {
  if constexpr (std::is_same_v<T, double>) {
    return v.f(lane);
  } else {
    return v.i(lane);
  }
}

template <typename T>
Val held_once(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return Val::of_float(v);
  } else {
    return Val::of_int(v);
  }
}

template <typename T>
Val lane_values(std::vector<T> v) {
  if constexpr (std::is_same_v<T, double>) {
    return Val::float_lanes(std::move(v));
  } else {
    return Val::int_lanes(std::move(v));
  }
}

// f over the lanes of a and b, their entries read as In, its results kept as Out; held
// once when both are.
template <typename In, typename Out, typename F>
Val map2(const Val& a, const Val& b, F f) {
  if (!a.per_lane() && !b.per_lane()) return held_once<Out>(f(entry<In>(a, 0), entry<In>(b, 0)));
  std::vector<Out> out(lanes_of(a, b));
  for (size_t k = 0; k < out.size(); ++k) out[k] = f(entry<In>(a, k), entry<In>(b, k));
  return lane_values(std::move(out));
}

// c ? a : b in every lane, the entries read as T.
template <typename T>
Val choose(const Val& c, const Val& a, const Val& b) {
  if (!c.per_lane() && !a.per_lane() && !b.per_lane()) return held_once<T>(c.truth(0) ? entry<T>(a, 0) : entry<T>(b, 0));
  std::vector<T> out(std::max({c.lanes(), a.lanes(), b.lanes()}));
  for (size_t k = 0; k < out.size(); ++k) out[k] = c.truth(k) ? entry<T>(a, k) : entry<T>(b, k);
  return lane_values(std::move(out));
}

template <typename F>
Val map_int(const Val& a, const Val& b, F f) {
  return map2<int64_t, int64_t>(a, b, f);
}

template <typename F>
Val map_float(const Val& a, const Val& b, F f) {
  return map2<double, double>(a, b, f);
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) return 0;
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

double float_floor_mod(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

double nan_min(double a, double b) { return (a != a || b != b) ? std::numeric_limits<double>::quiet_NaN() : std::min(a, b); }
double nan_max(double a, double b) { return (a != a || b != b) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, b); }

template <typename F>
Val map_unary_float(const Val& a, F f) {
  if (!a.per_lane()) return Val::of_float(f(a.f(0)));
  std::vector<double> out(a.lanes());
  for (size_t k = 0; k < out.size(); ++k) out[k] = f(a.f(k));
  return Val::float_lanes(std::move(out));
}

template <typename F>
Val map_unary_int(const Val& a, F f) {
  if (!a.per_lane()) return Val::of_int(f(a, 0));
  std::vector<int64_t> out(a.lanes());
  for (size_t k = 0; k < out.size(); ++k) out[k] = f(a, k);
  return Val::int_lanes(std::move(out));
}

bool is_float_dtype_name(const std::string& name) { return name.rfind("float", 0) == 0 || name.rfind("bfloat", 0) == 0; }

bool is_int_cast(const std::string& name) {
  static const char* names[] = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"};
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return name == n; });
}

// The math functions the count evaluates (and counts as one FLOP each: work_counts.cc).
double (*math_function(const std::string& name))(double) {
  static const std::pair<const char*, double (*)(double)> table[] = {
      {"exp", [](double x) { return std::exp(x); }},     {"exp2", [](double x) { return std::exp2(x); }},
      {"log", [](double x) { return std::log(x); }},     {"log2", [](double x) { return std::log2(x); }},
      {"sqrt", [](double x) { return std::sqrt(x); }},   {"rsqrt", [](double x) { return 1.0 / std::sqrt(x); }},
      {"tanh", [](double x) { return std::tanh(x); }},   {"sin", [](double x) { return std::sin(x); }},
      {"cos", [](double x) { return std::cos(x); }},     {"floor", [](double x) { return std::floor(x); }},
      {"ceil", [](double x) { return std::ceil(x); }},   {"trunc", [](double x) { return std::trunc(x); }},
      {"rint", [](double x) { return std::nearbyint(x); }}, {"abs", [](double x) { return std::fabs(x); }},
      {"sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
  };
  for (auto& [n, f] : table) {
    if (name == n) return f;
  }
  return nullptr;
}

// A call by name (an intrinsic, or a cast spelled by its dtype) of known arguments.
Val call_named(const std::string& name, const std::vector<Val>& args) {
  for (const Val& a : args) {
    if (!a.known()) return Val();
  }
  if ((name == "min" || name == "max") && args.size() == 2) {
    return apply_binary(name == "min" ? BinaryOp::Min : BinaryOp::Max, args[0], args[1]);
  }
  if (name == "truncmod" && args.size() == 2) return apply_binary(BinaryOp::Mod, args[0], args[1]);
  if (args.size() != 1) return Val();
  const Val& x = args[0];
  if (auto* f = math_function(name)) return map_unary_float(x, f);
  if (is_int_cast(name)) {
    if (x.is_int()) return x;
    return map_unary_int(x, [](const Val& v, size_t k) { return int64_t(std::trunc(v.f(k))); });
  }
  if (name == "bool") return map_unary_int(x, [](const Val& v, size_t k) { return int64_t(v.truth(k) ? 1 : 0); });
  if (is_float_dtype_name(name)) return map_unary_float(x, [](double v) { return v; });
  return Val();  // a call with no value the count needs (print, ...)
}

}  // namespace

Val apply_binary(BinaryOp op, const Val& a, const Val& b) {
  if (!a.known() || !b.known()) return Val();
  bool ints = a.is_int() && b.is_int();
  // A comparison or a logical op: 0 or 1, read as doubles where either side is a float.
  auto test = [&](auto fi) -> Val {
    if (!ints) return map2<double, int64_t>(a, b, [&](double x, double y) { return int64_t(fi(x, y) ? 1 : 0); });
    return map_int(a, b, [&](int64_t x, int64_t y) { return int64_t(fi(x, y) ? 1 : 0); });
  };
  switch (op) {
    case BinaryOp::Add:
      return ints ? map_int(a, b, [](int64_t x, int64_t y) { return x + y; })
                  : map_float(a, b, [](double x, double y) { return x + y; });
    case BinaryOp::Sub:
      return ints ? map_int(a, b, [](int64_t x, int64_t y) { return x - y; })
                  : map_float(a, b, [](double x, double y) { return x - y; });
    case BinaryOp::Mul:
      return ints ? map_int(a, b, [](int64_t x, int64_t y) { return x * y; })
                  : map_float(a, b, [](double x, double y) { return x * y; });
    case BinaryOp::Div:
      return ints ? map_int(a, b, [](int64_t x, int64_t y) { return y == 0 ? 0 : x / y; })
                  : map_float(a, b, [](double x, double y) { return x / y; });
    case BinaryOp::Mod:
      return ints ? map_int(a, b, [](int64_t x, int64_t y) { return y == 0 ? 0 : x % y; })
                  : map_float(a, b, [](double x, double y) { return std::fmod(x, y); });
    case BinaryOp::FloorDiv:
      return ints ? map_int(a, b, floor_div) : map_float(a, b, [](double x, double y) { return std::floor(x / y); });
    case BinaryOp::FloorMod:
      return ints ? map_int(a, b, floor_mod) : map_float(a, b, float_floor_mod);
    case BinaryOp::Min:
      return ints ? map_int(a, b, [](int64_t x, int64_t y) { return std::min(x, y); }) : map_float(a, b, nan_min);
    case BinaryOp::Max:
      return ints ? map_int(a, b, [](int64_t x, int64_t y) { return std::max(x, y); }) : map_float(a, b, nan_max);
    case BinaryOp::EQ: return test([](auto x, auto y) { return x == y; });
    case BinaryOp::NE: return test([](auto x, auto y) { return x != y; });
    case BinaryOp::LT: return test([](auto x, auto y) { return x < y; });
    case BinaryOp::LE: return test([](auto x, auto y) { return x <= y; });
    case BinaryOp::GT: return test([](auto x, auto y) { return x > y; });
    case BinaryOp::GE: return test([](auto x, auto y) { return x >= y; });
    case BinaryOp::And: return test([](auto x, auto y) { return x != 0 && y != 0; });
    case BinaryOp::Or: return test([](auto x, auto y) { return x != 0 || y != 0; });
    default: break;
  }
  if (!ints) return Val();  // bit operations of a float: not a value the count follows
  switch (op) {
    case BinaryOp::BitAnd: return map_int(a, b, [](int64_t x, int64_t y) { return x & y; });
    case BinaryOp::BitOr: return map_int(a, b, [](int64_t x, int64_t y) { return x | y; });
    case BinaryOp::BitXor: return map_int(a, b, [](int64_t x, int64_t y) { return x ^ y; });
    case BinaryOp::Shl:
      return map_int(a, b, [](int64_t x, int64_t y) { return y < 0 || y > 63 ? int64_t(0) : int64_t(uint64_t(x) << y); });
    case BinaryOp::Shr: return map_int(a, b, [](int64_t x, int64_t y) { return y < 0 || y > 63 ? (x < 0 ? -1 : 0) : x >> y; });
    default: return Val();
  }
}

Val logical_not(const Val& a) {
  if (!a.known()) return Val();
  return map_unary_int(a, [](const Val& v, size_t k) { return int64_t(v.truth(k) ? 0 : 1); });
}

Val where(const Val& c, const Val& a, const Val& b) {
  return a.is_int() && b.is_int() ? choose<int64_t>(c, a, b) : choose<double>(c, a, b);
}

int64_t count(const Mask& mask) {
  int64_t n = 0;
  for (uint8_t m : mask) n += m;
  return n;
}

bool any(const Mask& mask) { return std::any_of(mask.begin(), mask.end(), [](uint8_t m) { return m != 0; }); }

int64_t sum_where(const Val& counts, const Mask& mask) {
  if (!counts.per_lane()) return counts.i(0) * count(mask);
  int64_t total = 0;
  for (size_t k = 0; k < mask.size(); ++k) total += mask[k] ? counts.i(k) : 0;
  return total;
}

Mask and_truth(const Mask& mask, const Val& v) {
  if (!v.known()) return mask;
  Mask out(mask.size());
  for (size_t k = 0; k < mask.size(); ++k) out[k] = mask[k] && v.truth(k);
  return out;
}

// ---- the evaluator ----

Val Evaluator::eval_upper(const ir::Expr& e) {
  bool saved = upper_;
  upper_ = true;
  try {
    Val v = eval(e);
    upper_ = saved;
    return v;
  } catch (...) {
    upper_ = saved;
    throw;
  }
}

Val Evaluator::var(const ir::VarNode* v) {
  auto it = env_.find(v);
  if (it == env_.end()) throw MissingValue(v);
  if (it->second.deferred) return eval(it->second.deferred);
  return it->second.value;
}

Val Evaluator::binary(const ir::BinaryNode* op) {
  Val a = eval(op->a), b = eval(op->b);
  if (op->op == BinaryOp::Min && upper_ && a.known() != b.known()) return a.known() ? a : b;
  return apply_binary(op->op, a, b);
}

Val Evaluator::select(const ir::SelectNode* op) {
  Val c = eval(op->cond), a = eval(op->t), b = eval(op->f);
  if (!a.known() || !b.known()) return Val();
  if (c.known()) return where(c, a, b);
  bool same = true;
  for (size_t k = 0, n = std::max(a.lanes(), b.lanes()); k < n && same; ++k) {
    same = a.is_int() && b.is_int() ? a.i(k) == b.i(k) : a.f(k) == b.f(k);
  }
  return upper_ || same ? apply_binary(BinaryOp::Max, a, b) : Val();
}

Val Evaluator::call(const ir::CallNode* op) {
  if (op->op == "infinity") return Val::of_float(std::numeric_limits<double>::infinity());
  if (op->op == "ninfinity") return Val::of_float(-std::numeric_limits<double>::infinity());
  std::vector<Val> args;
  args.reserve(op->args.size());
  for (const ir::Expr& a : op->args) args.push_back(eval(a));
  if (op->op == "min" && upper_ && args.size() == 2 && args[0].known() != args[1].known()) {
    return args[0].known() ? args[0] : args[1];
  }
  return call_named(op->op, args);
}

Val Evaluator::eval(const ir::Expr& e) {
  switch (e.kind()) {
    case ir::NodeKind::IntImm: return Val::of_int(e.as<ir::IntImmNode>()->value);
    case ir::NodeKind::FloatImm: return Val::of_float(e.as<ir::FloatImmNode>()->value);
    case ir::NodeKind::Var: return var(e.as<ir::VarNode>());
    case ir::NodeKind::Binary: return binary(e.as<ir::BinaryNode>());
    case ir::NodeKind::Not: return logical_not(eval(e.as<ir::NotNode>()->a));
    case ir::NodeKind::Select: return select(e.as<ir::SelectNode>());
    case ir::NodeKind::Cast: return call_named(e.dtype().name(), {eval(e.as<ir::CastNode>()->value)});
    case ir::NodeKind::Call: return call(e.as<ir::CallNode>());
    case ir::NodeKind::BufferLoad: {
      auto* op = e.as<ir::BufferLoadNode>();
      std::vector<Val> indices;
      indices.reserve(op->indices.size());
      for (const ir::Expr& i : op->indices) {
        indices.push_back(eval(i));
        if (!indices.back().known()) return Val();
      }
      return load_(op->buffer.get(), indices);
    }
    default: return Val();
  }
}

bool Evaluator::reads_any(const ir::Expr& e, const std::vector<const ir::VarNode*>& vars) const {
  if (!e) return false;
  switch (e.kind()) {
    case ir::NodeKind::Var: {
      auto* v = e.as<ir::VarNode>();
      if (std::find(vars.begin(), vars.end(), v) != vars.end()) return true;
      auto it = env_.find(v);
      return it != env_.end() && it->second.deferred && reads_any(it->second.deferred, vars);
    }
    case ir::NodeKind::Binary: {
      auto* op = e.as<ir::BinaryNode>();
      return reads_any(op->a, vars) || reads_any(op->b, vars);
    }
    case ir::NodeKind::Not: return reads_any(e.as<ir::NotNode>()->a, vars);
    case ir::NodeKind::Select: {
      auto* op = e.as<ir::SelectNode>();
      return reads_any(op->cond, vars) || reads_any(op->t, vars) || reads_any(op->f, vars);
    }
    case ir::NodeKind::Cast: return reads_any(e.as<ir::CastNode>()->value, vars);
    case ir::NodeKind::Call:
      for (const ir::Expr& a : e.as<ir::CallNode>()->args) {
        if (reads_any(a, vars)) return true;
      }
      return false;
    case ir::NodeKind::BufferLoad:
      for (const ir::Expr& i : e.as<ir::BufferLoadNode>()->indices) {
        if (reads_any(i, vars)) return true;
      }
      return false;
    default: return false;
  }
}

}  // namespace tegula::analysis
