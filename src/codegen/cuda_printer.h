// CUDA C++ for a lowered kernel: the only place in the core that builds source text.
#pragma once
#include <string>

#include "ir/stmt.h"
#include "transform/context.h"

namespace tegula::codegen {

struct CudaSource {
  std::string code;        // a translation unit including "tegula/tegula.h"
  std::string entry;       // extern "C" kernel name
};

CudaSource print_cuda(const ir::Kernel& k, const transform::Target& target);

// The C++ spelling of a scalar type ("half_t", "float", ...).
std::string cuda_type(ir::DataType t);

}  // namespace tegula::codegen
