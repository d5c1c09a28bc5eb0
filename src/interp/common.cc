// What both interpreters share: binding a call's arguments to the kernel's variables, and
// rounding values to dtypes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "interp/interp.h"
#include "ir/thread_guard.h"
#include "support/error.h"

namespace tegula::interp {

using namespace ir;

namespace {

// Rounds to a binary float with `mant` explicit mantissa bits and exponent range
// [emin, emax] (subnormals below emin), ties to even, overflow to inf.
double round_float(double v, int mant, int emin, int emax) {
  if (!std::isfinite(v) || v == 0) return v;
  int e;
  std::frexp(v, &e);  // v = m * 2^e, 0.5 <= |m| < 1: the leading bit has exponent e-1
  int lead = std::max(e - 1, emin);
  double quantum = std::ldexp(1.0, lead - mant);
  double r = std::nearbyint(v / quantum) * quantum;  // FE_TONEAREST: ties to even
  double max = std::ldexp(2.0 - std::ldexp(1.0, -mant), emax);
  if (std::fabs(r) > max) return v > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  return r;
}

// An 8-bit float (3 or 2 explicit mantissa bits), ties to even, saturating to +-max as
// CUDA's __NV_SATFINITE conversions do; NaN stays NaN. An infinity stays one in e5m2, which
// holds it (T.infinity of it; conversions saturate it, cast_to_dtype), and saturates in
// e4m3fn, which has none.
double round_fp8(double v, int mant, int emin, double max, bool holds_inf) {
  if (std::isnan(v)) return v;
  if (std::isinf(v)) return holds_inf ? v : v > 0 ? max : -max;
  double r = round_float(v, mant, emin, 1023);
  return std::fabs(r) > max ? (v > 0 ? max : -max) : r;
}

// float8_e8m0fnu as torch rounds (c10's fp8e8m0fnu_from_fp32_value): from float32 bits, the
// exponent, one up when the mantissa is past half or exactly half with the implicit bit set;
// the sign dropped; inf and NaN give NaN; bits 0 is 2^-127.
double round_e8m0(double v) {
  float f = float(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t e = (u >> 23) & 0xff;
  if (e == 0xff) return std::nan("");
  bool g = u & 0x400000, rest = u & 0x3fffff;
  e += g && (rest || e > 0);
  return e == 0xff ? std::nan("") : std::ldexp(1.0, int(e) - 127);
}

// float4_e2m1fn: to nearest, ties to even, saturating to +-6; NaN gives 6 (device cvt).
double round_e2m1(double v) {
  if (std::isnan(v)) return 6.0;
  double a = std::fabs(v);
  double r = a <= 0.25 ? 0 : a < 0.75 ? 0.5 : a <= 1.25 ? 1 : a < 1.75 ? 1.5 : a <= 2.5 ? 2 : a < 3.5 ? 3 : a <= 5 ? 4 : 6;
  return std::signbit(v) ? -r : r;
}

}  // namespace

// tfloat32 as cvt.rna.tf32.f32 rounds: the float32 value to 10 mantissa bits, to nearest,
// ties away from zero (half an ulp added to the magnitude's bits, the low 13 dropped), past
// the largest tf32 to infinity; infinities and NaN stay.
double round_tf32(double v) {
  float f = float(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (((u >> 23) & 0xff) == 0xff) return f;
  u = (u + 0x1000u) & ~0x1fffu;
  std::memcpy(&f, &u, 4);
  return f;
}

double round_to_dtype(const DataType& t, double v) {
  switch (t.code) {
    case DataType::Float:
      if (t.bits == 64) return v;
      if (t.bits == 32) return double(float(v));
      if (t.bits == 16) return round_float(v, 10, -14, 15);
      return v;
    case DataType::BFloat: return round_float(v, 7, -126, 127);
    case DataType::Float8E4M3: return round_fp8(v, 3, -6, 448.0, false);
    case DataType::Float8E5M2: return round_fp8(v, 2, -14, 57344.0, true);
    case DataType::Float8E8M0: return round_e8m0(v);
    case DataType::Float4E2M1: return round_e2m1(v);
    case DataType::TFloat32: return round_tf32(v);
    case DataType::Bool: return v != 0 ? 1.0 : 0.0;
    case DataType::Int:
    case DataType::UInt: {
      if (std::isnan(v)) return 0;
      double tr = std::trunc(v);
      if (t.bits >= 64) return tr;
      // Wrap to the width, as the integer arithmetic of the generated code does.
      double span = std::ldexp(1.0, t.bits);
      double m = std::fmod(tr, span);
      if (m < 0) m += span;
      if (t.code == DataType::Int && m >= span / 2) m -= span;
      return m;
    }
    default: return v;
  }
}

double cast_to_dtype(const DataType& from, const DataType& to, double v) {
  if (from.is_float() && to.is_int()) {
    if (std::isnan(v)) return 0;
    bool sign = to.code == DataType::Int;
    double hi = std::ldexp(1.0, to.bits - sign) - 1, lo = sign ? -std::ldexp(1.0, to.bits - 1) : 0.0;
    return std::min(hi, std::max(lo, std::trunc(v)));
  }
  // A conversion to an 8-bit float saturates infinities too (__NV_SATFINITE).
  if (std::isinf(v) && (to.code == DataType::Float8E4M3 || to.code == DataType::Float8E5M2)) {
    return round_to_dtype(to, v > 0 ? 1e300 : -1e300);
  }
  return round_to_dtype(to, v);
}

VarValues bind_call(const Kernel& k, const CallArgs& args) {
  VarValues out;
  internal_assert(args.tensors.size() == k.params.size() && args.shapes.size() == k.params.size() &&
                  args.scalars.size() == k.params.size())
      << "interp: " << args.tensors.size() << " arguments for " << k.params.size() << " parameters";
  for (size_t i = 0; i < k.params.size(); ++i) {
    const Param& p = k.params[i];
    if (!p.buffer) {
      if (p.var.dtype().is_int()) out[p.var.get()] = int64_t(args.scalars[i]);
      continue;
    }
    const auto& shape = args.shapes[i];
    user_assert(shape.size() == p.buffer->shape.size(), p.buffer->loc)
        << "argument '" << p.name() << "' has " << shape.size() << " dimensions, the kernel declares "
        << p.buffer->shape.size();
    for (size_t d = 0; d < shape.size(); ++d) {
      const Expr& dim = p.buffer->shape[d];
      if (const int64_t* c = as_const_int(dim)) {
        user_assert(*c == shape[d], p.buffer->loc) << "argument '" << p.name() << "' dimension " << d << " is "
                                                   << shape[d] << ", the kernel declares " << *c;
      } else if (dim.as<VarNode>()) {
        auto it = out.find(dim.get());
        user_assert(it == out.end() || it->second == shape[d], p.buffer->loc)
            << "argument '" << p.name() << "' dimension " << d << " is " << shape[d]
            << " but the same dynamic size was " << (it == out.end() ? 0 : it->second) << " before";
        out[dim.get()] = shape[d];
      }
    }
  }
  return out;
}

std::string resolve_address(const CallArgs& args, double address, const DataType& dtype, double** data,
                            int64_t* left) {
  auto hex = [](uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  if (std::isnan(address) || address < 0) return "the address is not a number (it was computed from a value never written)";
  uint64_t a = uint64_t(address);
  for (const Region& r : args.memory) {
    uint64_t bytes = uint64_t(r.dtype.bytes());
    if (a < r.base || a >= r.base + bytes * r.data->size()) continue;
    if (r.dtype != dtype) {
      return "address " + hex(a) + " is in a tensor of " + r.dtype.name() + ", read as " + dtype.name() +
             " (the interpreters hold elements, not bytes: the dtypes must agree)";
    }
    if ((a - r.base) % bytes != 0) return "address " + hex(a) + " falls between two elements of the tensor holding it";
    int64_t first = int64_t((a - r.base) / bytes);
    *data = r.data->data() + first;
    *left = int64_t(r.data->size()) - first;
    return "";
  }
  return "address " + hex(a) + " is in none of the tensors of the call (give the tensors a pointer table points "
         "into as memory=[...] to tegula.testing.reference / simulate)";
}

std::unordered_map<const ExprNode*, double> bind_call_values(const Kernel& k, const CallArgs& args) {
  std::unordered_map<const ExprNode*, double> out;
  for (auto& [var, v] : bind_call(k, args)) out[var] = double(v);
  for (size_t i = 0; i < k.params.size(); ++i) {
    const Param& p = k.params[i];
    if (!p.buffer && !p.var.dtype().is_int()) out[p.var.get()] = round_to_dtype(p.var.dtype(), args.scalars[i]);
  }
  return out;
}

}  // namespace tegula::interp

namespace tegula::interp {

double eval_binary(BinaryOp op, double x, double y, const DataType& operand, const DataType& result) {
  bool ints = operand.is_int() || operand.is_bool();
  // Converting NaN (an unwritten value) or a huge float to int64 is undefined behaviour.
  auto as_int = [ints](double v) { return ints && std::fabs(v) < 9.2e18 ? int64_t(v) : int64_t(0); };
  int64_t p = as_int(x), q = as_int(y);
  auto floordiv = [&] { return p / q - ((p % q != 0) && ((p < 0) != (q < 0))); };
  double nan = std::numeric_limits<double>::quiet_NaN();
  double r = 0;
  switch (op) {
    case BinaryOp::Add: r = x + y; break;
    case BinaryOp::Sub: r = x - y; break;
    case BinaryOp::Mul: r = ints ? double(int64_t(uint64_t(p) * uint64_t(q))) : x * y; break;
    case BinaryOp::Div: r = ints ? (q ? double(p / q) : 0) : x / y; break;
    case BinaryOp::Mod: r = ints ? (q ? double(p % q) : 0) : std::fmod(x, y); break;
    case BinaryOp::FloorDiv: r = ints ? (q ? double(floordiv()) : 0) : std::floor(x / y); break;
    case BinaryOp::FloorMod: r = ints ? (q ? double(p - floordiv() * q) : 0) : x - std::floor(x / y) * y; break;
    case BinaryOp::Min: r = std::isnan(x) || std::isnan(y) ? nan : std::min(x, y); break;
    case BinaryOp::Max: r = std::isnan(x) || std::isnan(y) ? nan : std::max(x, y); break;
    case BinaryOp::EQ: r = x == y; break;
    case BinaryOp::NE: r = x != y; break;
    case BinaryOp::LT: r = x < y; break;
    case BinaryOp::LE: r = x <= y; break;
    case BinaryOp::GT: r = x > y; break;
    case BinaryOp::GE: r = x >= y; break;
    case BinaryOp::And: r = x != 0 && y != 0; break;
    case BinaryOp::Or: r = x != 0 || y != 0; break;
    case BinaryOp::BitAnd: r = double(p & q); break;
    case BinaryOp::BitOr: r = double(p | q); break;
    case BinaryOp::BitXor: r = double(p ^ q); break;
    case BinaryOp::Shl: r = double(int64_t(uint64_t(p) << (q & 63))); break;
    case BinaryOp::Shr: r = double(p >> (q & 63)); break;
  }
  return round_to_dtype(result, r);
}

bool eval_intrinsic(const std::string& name, const std::vector<double>& a, const DataType& result, double* out) {
  double inf = std::numeric_limits<double>::infinity();
  auto arg = [&](size_t i) { return i < a.size() ? a[i] : 0.0; };
  double x = arg(0), r;
  if (name == "exp") r = std::exp(x);
  else if (name == "exp2") r = std::exp2(x);
  else if (name == "log") r = std::log(x);
  else if (name == "log2") r = std::log2(x);
  else if (name == "sqrt") r = std::sqrt(x);
  else if (name == "rsqrt") r = 1.0 / std::sqrt(x);
  else if (name == "tanh") r = std::tanh(x);
  else if (name == "sin") r = std::sin(x);
  else if (name == "cos") r = std::cos(x);
  else if (name == "floor") r = std::floor(x);
  else if (name == "ceil") r = std::ceil(x);
  else if (name == "trunc") r = std::trunc(x);
  else if (name == "rint") r = std::nearbyint(x);
  else if (name == "abs") r = std::fabs(x);
  else if (name == "sigmoid") r = 1.0 / (1.0 + std::exp(-x));
  else if (name == "isfinite") r = std::isfinite(x);
  else if (name == "isinf") r = std::isinf(x);
  else if (name == "isnan") r = std::isnan(x);
  else if (name == "max_num" || name == "min_num") {
    // IEEE maxNum / minNum (fmaxf): a NaN operand is dropped.
    double y = arg(1);
    if (std::isnan(x) || std::isnan(y)) r = std::isnan(x) ? y : x;
    else r = name == "max_num" ? std::max(x, y) : std::min(x, y);
  }
  else if (name == "pdl_trigger" || name == "pdl_sync") r = 0;  // ordering between kernels only
  else if (name == "ffs") {
    uint64_t bits = uint64_t(int64_t(x));
    r = 0;
    for (int b = 0; b < 64; ++b) {
      if ((bits >> b) & 1) {
        r = b + 1;
        break;
      }
    }
  }
  else if (name == "fns") {
    // CUDA's __fns(mask, base, offset): the offset-th set bit from base, 0xffffffff if none.
    uint32_t mask = uint32_t(int64_t(x));
    int64_t pos = int64_t(arg(1)), offset = int64_t(arg(2));
    r = 4294967295.0;
    if (offset == 0) {
      if (pos >= 0 && pos < 32 && ((mask >> pos) & 1)) r = double(pos);
    } else {
      int64_t count = std::llabs(offset) - 1, step = offset > 0 ? 1 : -1;
      for (; pos >= 0 && pos < 32; pos += step) {
        if (!((mask >> pos) & 1)) continue;
        if (count-- == 0) {
          r = double(pos);
          break;
        }
      }
    }
  }
  else if (name == "ldg") r = x;  // a read-only load: the element
  else if (name == "assume") r = 0;  // T.assume: a hint (the simulator checks it holds)
  else if (name == "infinity") r = inf;
  else if (name == ir::kThreadScope) r = x - arg(1);  // the thread's index in its scope
  else if (name == "ninfinity") r = -inf;
  else if (name == "max_value" || name == "min_value") {
    double m;
    if (result.is_float8()) {
      m = result.code == DataType::Float8E4M3 ? 448.0 : 57344.0;
      r = name == "max_value" ? m : -m;
    } else if (result.is_float()) {
      int mant = result.code == DataType::BFloat ? 7 : result.bits == 16 ? 10 : result.bits == 32 ? 23 : 52;
      int emax = result.code == DataType::BFloat ? 127 : result.bits == 16 ? 15 : result.bits == 32 ? 127 : 1023;
      m = std::ldexp(2.0 - std::ldexp(1.0, -mant), emax);
      r = name == "max_value" ? m : -m;
    } else if (result.is_bool()) {
      r = name == "max_value" ? 1 : 0;
    } else {
      bool sign = result.code == DataType::Int;
      double span = std::ldexp(1.0, result.bits - sign);
      r = name == "max_value" ? span - 1 : (sign ? -span : 0);
    }
  } else {
    return false;
  }
  *out = round_to_dtype(result, r);
  return true;
}

}  // namespace tegula::interp
