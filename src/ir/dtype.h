// Scalar data types of the tile IR: a code, a bit width and a vector lane count.
#pragma once
#include <cstdint>
#include <string>

namespace tegula::ir {

struct DataType {
  // Float8E4M3: e4m3fn (no infinities, max 448); Float8E5M2: e5m2 (max 57344). Storage
  // types: conversions saturate to the largest finite value, as CUDA's __NV_SATFINITE.
  // Float8E8M0: e8m0fnu, an unsigned power of two 2^(bits - 127) (255 is NaN), rounded as
  // torch rounds. Float4E2M1: e2m1fn (max 6). Int and UInt also come 4 bits wide.
  // TFloat32: tfloat32, a float32 with 10 mantissa bits (the tensor cores' tf32), stored in
  // 32 bits as a float32 whose low 13 bits are zero; conversions into it round to nearest,
  // ties away from zero (cvt.rna.tf32.f32); arithmetic on it computes in float32.
  // 4-bit types are packed two to a byte in global memory (the low nibble first) and take
  // a byte each on chip (shared, fragment, local).
  enum Code : uint8_t { Int, UInt, Float, BFloat, Bool, Handle, Float8E4M3, Float8E5M2, Float8E8M0, Float4E2M1, TFloat32 };
  Code code = Int;
  int bits = 32;
  int lanes = 1;

  static DataType i32() { return {Int, 32, 1}; }
  static DataType i64() { return {Int, 64, 1}; }
  static DataType f32() { return {Float, 32, 1}; }
  static DataType f16() { return {Float, 16, 1}; }
  static DataType bf16() { return {BFloat, 16, 1}; }
  static DataType boolean() { return {Bool, 8, 1}; }

  bool is_int() const { return code == Int || code == UInt; }
  bool is_float() const { return code == Float || code == BFloat || is_float8() || code == Float8E8M0 || code == Float4E2M1 ||
                                code == TFloat32; }
  bool is_float8() const { return code == Float8E4M3 || code == Float8E5M2; }
  bool is_bool() const { return code == Bool; }
  // The operand types of a tf32 tensor-core gemm: float32 (rounded on the way in) and tfloat32.
  bool is_tf32_operand() const { return (code == Float && bits == 32) || code == TFloat32; }
  // Packed in global memory: two elements a byte.
  bool is_packed() const { return bits == 4; }
  // Bytes of a value (one element a byte for 4-bit types: their on-chip storage).
  int bytes() const { return (bits < 8 ? 1 : bits / 8) * lanes; }
  DataType with_lanes(int n) const { return {code, bits, n}; }
  DataType element() const { return with_lanes(1); }

  bool operator==(const DataType& o) const { return code == o.code && bits == o.bits && lanes == o.lanes; }
  bool operator!=(const DataType& o) const { return !(*this == o); }

  // TileLang spelling: "float16", "bfloat16", "float32", "int32", "bool", ...
  std::string name() const;
  // Accepts TileLang/torch spellings ("float", "half", "fp16", "float16", ...).
  // Returns false when the name is unknown.
  static bool parse(const std::string& s, DataType* out);
};

}  // namespace tegula::ir
