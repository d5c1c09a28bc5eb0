// The passes, in order. Each one's contract is at the top of its file.
#include "transform/pipeline.h"

#include <iostream>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {
using Pass = void (*)(ir::Kernel&, PassContext&);
struct Step {
  const char* name;
  Pass run;
};

const Step kPipeline[] = {
    {"simplify", simplify},
    {"read_annotations", read_annotations},
    {"expand_tile_ops", expand_tile_ops},
    {"infer_layout", infer_layout},
    {"lower_fragments", lower_fragments},
    {"partition_loops", partition_loops},
    {"lower_tile_ops", lower_tile_ops},
    {"pipeline_loops", pipeline_loops},
    {"plan_storage", plan_storage},
    {"insert_barriers", insert_barriers},
    {"final_simplify", simplify},
};
}  // namespace

Lowered lower(const ir::Kernel& k, const Target& target, const Options& options, bool dump) {
  Lowered out;
  out.kernel = k;
  PassContext ctx;
  ctx.target = target;
  ctx.options = options;
  out.stages.push_back({"input", out.kernel});
  for (const Step& step : kPipeline) {
    step.run(out.kernel, ctx);
    out.stages.push_back({step.name, out.kernel});
    if (dump) std::cerr << "==== after " << step.name << " ====\n" << ir::to_string(out.kernel) << "\n";
  }
  for (auto& [frag, reg] : ctx.registers) {
    auto it = ctx.layouts.fragment.find(frag);
    if (it != ctx.layouts.fragment.end()) out.register_layouts[reg.get()] = it->second;
  }
  ir::verify(out.kernel, "final");
  return out;
}

}  // namespace tegula::transform
