// The SIMT simulator's entry for a bare kernel (the pass tests build lowered kernels by
// hand, and mutate them, without a transform::Lowered around them).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "interp/interp.h"
#include "layout/fragment.h"

namespace tegula::interp {

// For each register array of the kernel, the layout of the fragment it replaced (see
// transform::Lowered::register_layouts); may be empty for kernels without tensor-core calls.
using RegisterLayouts = std::map<const ir::BufferNode*, layout::FragmentPtr>;

// interp::simulate on a kernel after the last pass.
std::vector<std::string> simulate_kernel(const ir::Kernel& k, const RegisterLayouts& layouts, CallArgs& args);

}  // namespace tegula::interp
