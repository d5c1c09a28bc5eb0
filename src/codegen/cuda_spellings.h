// How the generated CUDA spells the IR's intrinsic calls: the device library's function for
// each call name (types are spelled by cuda_type / memory_vector_type, cuda_printer.h).
#pragma once
#include <map>
#include <string>

#include "ir/dtype.h"

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

}  // namespace tegula::codegen
