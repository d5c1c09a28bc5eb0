#include "ir/dtype.h"

#include <unordered_map>

namespace tegula::ir {

std::string DataType::name() const {
  std::string base;
  switch (code) {
    case Int: base = "int" + std::to_string(bits); break;
    case UInt: base = "uint" + std::to_string(bits); break;
    case Float: base = "float" + std::to_string(bits); break;
    case BFloat: base = "bfloat" + std::to_string(bits); break;
    case Bool: base = "bool"; break;
    case Handle: base = "handle"; break;
    case Float8E4M3: base = "float8_e4m3fn"; break;
    case Float8E5M2: base = "float8_e5m2"; break;
    case Float8E8M0: base = "float8_e8m0fnu"; break;
    case Float4E2M1: base = "float4_e2m1fn"; break;
    case TFloat32: base = "tfloat32"; break;
  }
  return lanes == 1 ? base : base + "x" + std::to_string(lanes);
}

bool DataType::parse(const std::string& s, DataType* out) {
  static const std::unordered_map<std::string, DataType> table = {
      {"float16", {Float, 16}},  {"half", {Float, 16}},     {"fp16", {Float, 16}},
      {"float32", {Float, 32}},  {"float", {Float, 32}},    {"fp32", {Float, 32}},
      {"float64", {Float, 64}},  {"double", {Float, 64}},   {"bfloat16", {BFloat, 16}},
      {"bf16", {BFloat, 16}},    {"int8", {Int, 8}},        {"int16", {Int, 16}},
      {"int32", {Int, 32}},      {"int", {Int, 32}},        {"int64", {Int, 64}},
      {"uint8", {UInt, 8}},      {"uint16", {UInt, 16}},    {"uint32", {UInt, 32}},
      {"uint64", {UInt, 64}},    {"bool", {Bool, 8}},       {"handle", {Handle, 64}},
      {"float8_e4m3fn", {Float8E4M3, 8}}, {"float8_e4m3", {Float8E4M3, 8}}, {"e4m3_float8", {Float8E4M3, 8}},
      {"float8_e5m2", {Float8E5M2, 8}},   {"e5m2_float8", {Float8E5M2, 8}},
      {"float8_e8m0fnu", {Float8E8M0, 8}}, {"float4_e2m1fn", {Float4E2M1, 4}},
      {"int4", {Int, 4}},                  {"uint4", {UInt, 4}},
      {"tfloat32", {TFloat32, 32}},        {"tf32", {TFloat32, 32}},
  };
  auto it = table.find(s);
  if (it != table.end()) {
    *out = it->second;
    return true;
  }
  // A vector of lanes: "uint32x4", "float32x2" (the values T.reinterpret and the
  // explicit-width loads give), lanes 2 to 32.
  size_t x = s.rfind('x');
  if (x == std::string::npos || x + 1 >= s.size() || s.find_first_not_of("0123456789", x + 1) != std::string::npos) {
    return false;
  }
  auto base = table.find(s.substr(0, x));
  int lanes = s.size() - x > 3 ? 0 : std::stoi(s.substr(x + 1));
  if (base == table.end() || lanes < 2 || lanes > 32 || base->second.code == Bool || base->second.bits < 8) return false;
  *out = base->second.with_lanes(lanes);
  return true;
}

}  // namespace tegula::ir
