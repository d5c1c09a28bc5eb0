// How the generated CUDA spells the IR's intrinsic calls: the device library's function for
// each call name (types are spelled by cuda_type / memory_vector_type, cuda_printer.h).
#pragma once
#include <functional>
#include <map>
#include <string>

#include "ir/stmt.h"

namespace tegula::codegen {

struct CallSpelling {
  const char* name;
  bool typed = false;  // template argument is the call's type, e.g. tegula::infinity<float>()
  // The result converted to this type, where CUDA's function returns a narrower one than
  // the call's dtype: ((unsigned long long)__ballot_sync(mask, p)) for a uint64 ballot.
  const char* widened = nullptr;
  // An argument printed ahead of the call's own: the full-warp mask of T.ballot.
  const char* leading = nullptr;
};

// Call name ("exp", "infinity", "warp_reduce_sum", ...) -> its spelling.
const std::map<std::string, CallSpelling>& call_table();

// A conversion of two lanes at once (transform/pack_casts.cc makes them):
//   *reinterpret_cast<to_type*>(&r[c]) = open *reinterpret_cast<const from_type*>(&s[d]) close;
// e.g. __half2 = __float22half2_rn(float2).
struct PairConversion {
  const char* to_type;
  const char* from_type;
  std::string open, close;
};
// False when CUDA has no such conversion.
bool pair_conversion(ir::DataType from, ir::DataType to, PairConversion* out);

// An `a && b` / `a || b` whose right operand this is may be spelled `a & b` / `a | b`:
// evaluating it when `a` alone decides reads no memory, calls nothing and divides by
// nothing, and it is small. nvcc compiles the short-circuit form into a branch around each
// right operand (BSSY / BRA / BSYNC), which in an attention mask of 64 elements a thread
// is most of the loop's instructions.
bool evaluates_eagerly(const ir::Expr& e);

// A float literal of exactly its type: 17 significant digits for a double, 9 and an f
// suffix for a float, a narrower float through cast<>; infinities as tegula::infinity<T>().
std::string float_literal(double v, ir::DataType t);
// An integer literal of exactly its type: unsigned ones with their suffix (a uint64 is held
// as its bit pattern: 18446744073709551615ull), and the most negative int32 and int64
// spelled so that no literal is past its type (-2147483648 would be a long). wide_ints:
// int32 literals as long long (a kernel with a dimension past 2^31).
std::string int_literal(const ir::IntImmNode* n, bool wide_ints);

// `text` as a C string literal: quoted, with its quotes, backslashes and newlines escaped.
std::string string_literal(const std::string& text);

// T.rng_*: one generator state per thread (tegula_rng); rng_init's args[3] names
// TileLang's generator (0 Philox4_32_10, 1 MRG32k3a, 2 XORWOW), one per kernel. The
// state's type, "" when the kernel draws no random numbers.
std::string rng_state_type(const ir::Kernel& k);
// The text of an rng_* call, its arguments spelled by `expr`.
std::string rng_call(const ir::CallNode* c, const std::function<std::string(const ir::Expr&)>& expr);

}  // namespace tegula::codegen
