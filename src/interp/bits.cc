// The interpreters' T.reinterpret: values held as doubles, turned into the bits the GPU
// holds and read back as another type.
#include <cmath>
#include <cstring>

#include "interp/interp.h"
#include "support/error.h"

namespace tegula::interp {

using namespace ir;

namespace {

// A small IEEE-style float: exponent bits, mantissa bits; e4m3fn has no infinities and
// one NaN pattern per sign (all exponent and mantissa bits set).
struct MiniFloat {
  int exp_bits, mant_bits;
  bool finite_only;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint64_t top() const { return (uint64_t(1) << exp_bits) - 1; }
};

MiniFloat format_of(const DataType& t) {
  if (t.code == DataType::BFloat) return {8, 7, false};
  if (t.code == DataType::Float8E4M3) return {4, 3, true};
  if (t.code == DataType::Float8E5M2) return {5, 2, false};
  return {5, 10, false};  // float16
}

// A NaN keeps its mantissa bits through a double: they sit just below the double's quiet
// bit (where a conversion to float keeps them too), so that the bits of a view of another
// dtype (T.view(bf16_buffer, dtype="float32")) survive being held as NaNs of the narrow
// type. A NaN without them (std::nan, arithmetic) is the type's usual one.
double nan_with_payload(bool neg, uint64_t mant, int mant_bits) {
  uint64_t b = (uint64_t(0x7FF) << 52) | (uint64_t(1) << 51) | (mant << (51 - mant_bits));
  if (neg) b |= uint64_t(1) << 63;
  double v;
  std::memcpy(&v, &b, 8);
  return v;
}
uint64_t nan_payload(double v, int mant_bits) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return (b >> (51 - mant_bits)) & ((uint64_t(1) << mant_bits) - 1);
}

// v is already a value of the format (the interpreters round on every store and cast).
uint64_t encode_mini(const MiniFloat& f, double v) {
  uint64_t sign = std::signbit(v) ? uint64_t(1) << (f.exp_bits + f.mant_bits) : 0;
  uint64_t mant_all = (uint64_t(1) << f.mant_bits) - 1;
  if (std::isnan(v) && !f.finite_only && nan_payload(v, f.mant_bits) != 0) {
    return sign | (f.top() << f.mant_bits) | nan_payload(v, f.mant_bits);
  }
  if (std::isnan(v)) return sign | (f.top() << f.mant_bits) | (f.finite_only ? mant_all : uint64_t(1) << (f.mant_bits - 1));
  if (std::isinf(v)) return sign | (f.top() << f.mant_bits);
  double a = std::fabs(v);
  if (a == 0) return sign;
  int ex;
  std::frexp(a, &ex);  // a = m * 2^ex, m in [0.5, 1)
  int e = ex - 1 + f.bias();
  if (e <= 0) return sign | uint64_t(std::llround(std::ldexp(a, f.mant_bits - 1 + f.bias())));
  double frac = std::ldexp(a, -(ex - 1)) - 1.0;
  return sign | (uint64_t(e) << f.mant_bits) | uint64_t(std::llround(std::ldexp(frac, f.mant_bits)));
}

double decode_mini(const MiniFloat& f, uint64_t bits) {
  uint64_t mant = bits & ((uint64_t(1) << f.mant_bits) - 1);
  uint64_t e = (bits >> f.mant_bits) & f.top();
  bool neg = (bits >> (f.exp_bits + f.mant_bits)) & 1;
  double v;
  bool special = e == f.top() && (!f.finite_only || mant == (uint64_t(1) << f.mant_bits) - 1);
  if (special) {
    if (mant && !f.finite_only) return nan_with_payload(neg, mant, f.mant_bits);
    v = mant ? std::nan("") : INFINITY;
  } else if (e == 0) {
    v = std::ldexp(double(mant), 1 - f.bias() - f.mant_bits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(double(mant), -f.mant_bits), int(e) - f.bias());
  }
  return neg ? -v : v;
}

uint64_t encode(const DataType& t, double v) {
  switch (t.code) {
    case DataType::Float:
      if (t.bits == 32) {
        float x = float(v);
        uint32_t b;
        std::memcpy(&b, &x, 4);
        return b;
      }
      if (t.bits == 64) {
        uint64_t b;
        std::memcpy(&b, &v, 8);
        return b;
      }
      return encode_mini(format_of(t), v);
    case DataType::BFloat:
    case DataType::Float8E4M3:
    case DataType::Float8E5M2: return encode_mini(format_of(t), v);
    default:
      // Integers: an unsigned value past 2^63 is held as itself, not as its signed pattern.
      if (std::isnan(v)) return 0;
      return v >= 9223372036854775808.0 ? uint64_t(v) : uint64_t(int64_t(v));
  }
}

double decode(const DataType& t, uint64_t b) {
  switch (t.code) {
    case DataType::Float:
      if (t.bits == 32) {
        uint32_t w = uint32_t(b);
        float x;
        std::memcpy(&x, &w, 4);
        return x;
      }
      if (t.bits == 64) {
        double x;
        std::memcpy(&x, &b, 8);
        return x;
      }
      return decode_mini(format_of(t), b);
    case DataType::BFloat:
    case DataType::Float8E4M3:
    case DataType::Float8E5M2: return decode_mini(format_of(t), b);
    case DataType::Int:
      if (t.bits < 64 && ((b >> (t.bits - 1)) & 1)) return double(int64_t(b | ~((uint64_t(1) << t.bits) - 1)));
      return double(int64_t(b));
    case DataType::Bool: return b ? 1.0 : 0.0;
    default: return double(b);
  }
}

}  // namespace

void reinterpret_bits(const DataType& from, const double* in, const DataType& to, double* out) {
  internal_assert(from.bits * from.lanes == to.bits * to.lanes && from.bits * from.lanes <= 2048)
      << "reinterpret " << from.name() << " as " << to.name();
  unsigned char bytes[256] = {};
  int fb = from.bits / 8, tb = to.bits / 8;
  for (int l = 0; l < from.lanes; ++l) {
    uint64_t b = encode(from.element(), in[l]);
    for (int k = 0; k < fb; ++k) bytes[l * fb + k] = (b >> (8 * k)) & 0xFF;
  }
  for (int l = 0; l < to.lanes; ++l) {
    uint64_t b = 0;
    for (int k = 0; k < tb; ++k) b |= uint64_t(bytes[l * tb + k]) << (8 * k);
    out[l] = decode(to.element(), b);
  }
}

}  // namespace tegula::interp
