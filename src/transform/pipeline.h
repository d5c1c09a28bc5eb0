// The lowering pipeline: frontend IR in, CUDA-ready IR out.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/stmt.h"
#include "transform/context.h"

namespace tegula::transform {

struct Lowered {
  ir::Kernel kernel;                                       // after the last pass
  // The kernel after each pass. Nodes are shared between stages, so keeping them costs
  // little; they are printed only when someone asks (kernel.get_ir(stage)).
  std::vector<std::pair<std::string, ir::Kernel>> stages;
  // The layout of the fragment each register array of the final kernel replaced: which
  // element of the tile thread t keeps in register s. The IR no longer says; the SIMT
  // simulator needs it to run tile-level calls (gemm) on the threads' registers.
  std::map<const ir::BufferNode*, layout::FragmentPtr> register_layouts;
};

// Runs every pass in order on a copy of k. With dump, prints each stage to stderr.
Lowered lower(const ir::Kernel& k, const Target& target, const Options& options, bool dump);

}  // namespace tegula::transform
