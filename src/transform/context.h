// What the passes share: the target, the options, the layouts inference decided, and
// the register arrays that replace fragments.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/analyzer.h"
#include "layout/fragment.h"

namespace tegula::transform {

struct Target {
  std::string arch = "sm_90a";  // sm_80, sm_90a, sm_100a, ...
  int sm = 90;                  // compute capability as a number
  static Target parse(const std::string& s);
};

struct Options {
  bool fast_math = false;
  bool disable_vectorize = false;
  bool disable_safe_memory = false;
  bool disable_wgmma = false;  // sm_90a gemms on mma.sync instead of wgmma
  bool disable_tma = false;    // tl.disable_tma_lower: no bulk tensor copies (and so no warp specialisation)
  bool disable_warp_specialized = false;  // tl.disable_warp_specialized: today's cp.async pipeline
  int dynamic_alignment = 1;  // elements every dynamic dimension is assumed to be a multiple of
  bool keep_threads = false;  // tegula.keep_threads: never lower on more threads than declared (widen_threads.h)
};

struct LayoutMap {
  std::map<const ir::BufferNode*, layout::FragmentPtr> fragment;    // fragment buffers
  std::map<const ir::StmtNode*, layout::FragmentPtr> loop;          // outermost For of each T.Parallel nest
  std::map<const ir::BufferNode*, SourceLoc> decided_at;            // where each fragment's layout came from
};

struct PassContext {
  Target target;
  Options options;
  LayoutMap layouts;
  std::map<const ir::BufferNode*, ir::Buffer> registers;  // fragment -> per-thread register array
  std::vector<ir::Buffer> extra_locals;   // register arrays the passes add
  std::vector<ir::Buffer> extra_shared;   // shared scratch the passes add
  std::set<const ir::BufferNode*> swizzled;  // shared buffers to store swizzled (plan_storage publishes)
  // T.annotate_safe_value({A: v}) (read_annotations): what a read past global tensor A's
  // edge gives instead of 0 (apply_safe_values).
  std::map<const ir::BufferNode*, ir::Expr> safe_values;
  // wgmma operands among them: stored in panels of 128-byte rows, 1024-byte aligned (the
  // canonical layouts a wgmma descriptor describes; see tegula::panel_offset).
  std::set<const ir::BufferNode*> panelled;
  // The accumulators of the gemms that run on wgmma (ops::wgmma_accumulators).
  std::set<const ir::BufferNode*> wgmma_accumulators;
  // Accumulators of gemms on mma.sync with wgmma's warp split (each warpgroup's 4 warps
  // along M): on sm_90a, gemms under a thread guard that wgmma could run (layout_inference).
  std::set<const ir::BufferNode*> warpgroup_split;
  // Set by plan_bulk_copies when the kernel's T.Pipelined loop will be warp specialised:
  // its global->shared copies (and those ahead of it) became tma_copy calls.
  bool warp_specialize = false;
  // ... and that loop is nested in a serial loop of the body (a persistent kernel's loop
  // over its tiles): its stages and phases count on across the outer iterations, in the
  // counters below, which both warp groups start at 0 (warp_specialize).
  bool ws_nested = false;
  std::vector<ir::Buffer> ws_counters;
  // Set by check_user_barriers: the program's threads meet at its own mbarriers, so it
  // orders what its warp groups do (insert_barriers leaves disjoint ranges of threads alone).
  bool user_mbarriers = false;
  // The mbarriers pipeline_loops and warp_specialize allocate: (buffer, index, arrival count).
  struct Mbarrier {
    ir::Buffer buffer;
    int64_t index;
    int64_t count;
  };
  std::vector<Mbarrier> mbarriers;
  int fresh_id = 0;
  std::string fresh_name(const std::string& base) { return base + "_" + std::to_string(fresh_id++); }
};

using ir::kernel_analyzer;

}  // namespace tegula::transform
