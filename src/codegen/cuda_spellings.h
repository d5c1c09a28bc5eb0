// How the generated CUDA spells the IR's intrinsic calls: the device library's function for
// each call name (types are spelled by cuda_type / memory_vector_type, cuda_printer.h).
#pragma once
#include <map>
#include <string>

namespace tegula::codegen {

struct CallSpelling {
  const char* name;
  bool typed;  // template argument is the call's type, e.g. tegula::infinity<float>()
};

// Call name ("exp", "infinity", "warp_reduce_sum", ...) -> its spelling.
const std::map<std::string, CallSpelling>& call_table();

}  // namespace tegula::codegen
