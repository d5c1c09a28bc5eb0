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
  int dynamic_alignment = 1;  // elements every dynamic dimension is assumed to be a multiple of
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
  // wgmma operands among them: stored in panels of 128-byte rows, 1024-byte aligned (the
  // canonical layouts a wgmma descriptor describes; see tegula::panel_offset).
  std::set<const ir::BufferNode*> panelled;
  bool wgmma = false;  // the kernel's gemms run on wgmma (ops::kernel_uses_wgmma)
  int fresh_id = 0;
  std::string fresh_name(const std::string& base) { return base + "_" + std::to_string(fresh_id++); }
};

// An analyzer that knows the ranges of the kernel's thread and block indices.
ir::Analyzer kernel_analyzer(const ir::Kernel& k);

}  // namespace tegula::transform
