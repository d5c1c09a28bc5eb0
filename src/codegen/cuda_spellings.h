// How the generated CUDA spells the IR's intrinsic calls: the device library's function for
// each call name (types are spelled by cuda_type / memory_vector_type, cuda_printer.h).
#pragma once
#include <map>
#include <string>

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

}  // namespace tegula::codegen
