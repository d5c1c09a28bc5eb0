// The lowering pipeline: frontend IR in, CUDA-ready IR out.
#pragma once
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
};

// Runs every pass in order on a copy of k. With dump, prints each stage to stderr.
Lowered lower(const ir::Kernel& k, const Target& target, const Options& options, bool dump);

}  // namespace tegula::transform
