// Where a global tensor's elements live: T.annotate_layout({A: T.Layout(A.shape, f)}) on a
// kernel parameter says element A[i0, ..] is stored at the row-major position of f(i0, ..)
// in a tensor of f's range. Kernels that share the tensor and the annotation agree on the
// order (a backward pass writes dQ in the order its gemm fragments hold it, another kernel
// reads it back); the tensor keeps its shape at the call.
//
// Example: T.Layout((B, L, H, D), lambda b, l, h, d: [b, l // 8, h, d // 8, d % 2,
// 4 * (l % 8) + (d % 8) // 2]) has the range (B, L / 8, H, D / 8, 2, 32).
#pragma once
#include <map>

#include "ir/stmt.h"

namespace tegula::ir {

// (IndexMap itself is declared in stmt.h, where the kernel holds its maps.)

// The T.Layout annotations of a kernel's global tensors, checked: the map must be a
// bijection of the tensor's elements onto its range (UserError at the annotation).
std::map<const BufferNode*, IndexMap> index_maps(const Kernel& k);

}  // namespace tegula::ir
