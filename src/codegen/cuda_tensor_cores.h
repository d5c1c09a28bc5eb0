// The CUDA text of the tensor-core calls the passes lower T.gemm and T.gemm_sp to
// (gemm_ss / gemm_rs, gemm_sp_ss / gemm_sp_rs, wgmma_ss / wgmma_rs, wgmma_wait), for the printer
// (cuda_printer.cc), which lends them its spellings of expressions and elements.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/stmt.h"

namespace tegula::codegen {

struct TensorCorePrinter {
  const ir::Kernel& k;
  std::function<std::string(const ir::Expr&)> expr;
  // An element as an lvalue (`A_s[swizzle_offset<64, 2>(r, c)]`), read or written.
  std::function<std::string(const ir::Buffer&, const std::vector<ir::Expr>&, bool read)> element;
  // The wgmma instruction structs the kernel uses, by name: printed ahead of it.
  std::map<std::string, std::string>& instructions;
};

// The call's text; empty for a call that is not a tensor core's.
std::string tensor_core_call(const ir::CallNode* c, const TensorCorePrinter& p);

// Whether b is stored in wgmma's panels with more than one panel to a row.
bool wide_panels(const ir::Kernel& k, const ir::Buffer& b);
// Whether statement x writes a wgmma operand buffer of a wgmma kernel with an ordinary
// (generic-proxy) store: an element store, or an explicit-width store call (T.sts*, a
// store through a view of another dtype) whose address is in one. Such a store must be
// fenced from the wgmma reads (the printer's barriers do it).
bool stores_operand(const ir::Kernel& k, const ir::Stmt& x);
// Whether any statement of body does.
bool stores_to_operands(const ir::Kernel& k, const ir::Stmt& body);

}  // namespace tegula::codegen
