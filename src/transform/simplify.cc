// Pass: simplify. Folds constants and index arithmetic with the ranges of the thread and
// block indices known. Expects nothing; guarantees the same program, simpler.
#include "transform/passes.h"

namespace tegula::transform {

ir::Analyzer kernel_analyzer(const ir::Kernel& k) {
  ir::Analyzer an;
  an.bind(k.thread_var, 0, k.threads);
  for (size_t d = 0; d < k.block_vars.size(); ++d) {
    ir::Interval g = an.bound(k.grid[d]);
    an.bind(k.block_vars[d], ir::Interval{0, g.hi - 1});
  }
  for (auto& v : k.dynamic_vars) an.bind(v, ir::Interval{0, (int64_t(1) << 31) - 1});
  return an;
}

void simplify(ir::Kernel& k, PassContext&) { k.body = kernel_analyzer(k).simplify(k.body); }

Target Target::parse(const std::string& s) {
  Target t;
  t.arch = s;
  size_t p = s.find("sm_");
  user_assert(p != std::string::npos, SourceLoc{}) << "unknown target '" << s << "' (expected sm_80, sm_90a, sm_100a, ...)";
  t.sm = std::atoi(s.c_str() + p + 3);
  user_assert(t.sm >= 70, SourceLoc{}) << "unknown target '" << s << "' (expected sm_80, sm_90a, sm_100a, ...)";
  return t;
}

}  // namespace tegula::transform
