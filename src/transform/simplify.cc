// Pass: simplify. Folds constants and index arithmetic with the ranges of the thread and
// block indices known. Expects nothing; guarantees the same program, simpler.
#include "transform/passes.h"

namespace tegula::transform {

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
