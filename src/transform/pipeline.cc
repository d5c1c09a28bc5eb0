// The passes, in order. Each one's contract is at the top of its file.
#include "transform/pipeline.h"

#include <iostream>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "transform/passes.h"
#include "transform/widen_threads.h"

namespace tegula::transform {

namespace {
using Pass = void (*)(ir::Kernel&, PassContext&);
struct Step {
  const char* name;
  Pass run;
};

const Step kPipeline[] = {
    {"simplify", simplify},
    {"check_loop_jumps", check_loop_jumps},
    {"bound_parallel_extents", bound_parallel_extents},
    {"read_annotations", read_annotations},
    {"check_user_barriers", check_user_barriers},
    {"run_warp_groups_apart", run_warp_groups_apart},
    {"unroll_gemm_offsets", unroll_gemm_offsets},
    {"flatten_stage_buffers", flatten_stage_buffers},
    {"inline_loop_lets", inline_loop_lets},
    {"plan_bulk_copies", plan_bulk_copies},
    {"expand_tile_ops", expand_tile_ops},
    {"resolve_views", resolve_views},
    {"apply_safe_values", apply_safe_values},
    {"scope_thread_guards", scope_thread_guards},
    {"infer_layout", infer_layout},
    {"lower_fragments", lower_fragments},
    {"partition_loops", partition_loops},
    {"lower_tile_ops", lower_tile_ops},
    {"vectorize_loops", vectorize_loops},
    {"pack_casts", pack_casts},
    {"forward_locals", forward_locals},
    {"pipeline_loops", pipeline_loops},
    {"warp_specialize", warp_specialize},
    {"plan_storage", plan_storage},
    {"insert_barriers", insert_barriers},
    {"final_simplify", simplify},
    {"roll_loops", roll_loops},
};
}  // namespace

namespace {
Lowered lower_once(const ir::Kernel& k, const Target& target, const Options& options, bool dump) {
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

Lowered lower_as_declared(const ir::Kernel& k, const Target& target, const Options& options, bool dump) {
  try {
    return lower_once(k, target, options, dump);
  } catch (const WarpSpecializationRefused&) {
    // A later pass found the warp-specialised form unworkable (shared memory over the
    // limit without the lifetime reuse the cp.async form may use): today's path.
    Options o = options;
    o.disable_warp_specialized = true;
    return lower_once(k, target, o, dump);
  }
}
}  // namespace

Lowered lower(const ir::Kernel& k, const Target& target, const Options& options, bool dump) {
  // widen_threads.h: one warpgroup of wgmma tiles over its registers runs on two.
  if (!options.keep_threads && !options.disable_wgmma && target.sm >= 90 && k.threads == 128 &&
      has_gemm(k) && fragment_registers(k) > kWidenAboveRegisters && thread_count_free(k)) {
    ir::Kernel wide = k;
    wide.threads = 2 * k.threads;
    try {
      return lower_as_declared(wide, target, options, dump);
    } catch (const UserError&) {
      // A tile the wider layouts cannot split: the kernel as declared.
    }
  }
  return lower_as_declared(k, target, options, dump);
}

}  // namespace tegula::transform
