// Peephole rewrites of statement lists, shared by the passes that replace a run of
// neighbouring statements by one (pack_casts: two conversions as a pair; forward_locals:
// a vector staged through registers, stored directly).
#pragma once
#include <functional>
#include <vector>

#include "ir/functor.h"

namespace tegula::transform {

// What a window rewrite returns at position i of a list: the statement that replaces
// in[i .. i + used - 1], or null (and `used` untouched) to keep in[i].
using WindowRewrite = std::function<ir::Stmt(const std::vector<ir::Stmt>& in, size_t i, size_t* used)>;

// `op`'s statements mutated by `m` (children first), then rewritten left to right by
// `at`, a replaced run never revisited; `self` when nothing changed.
inline ir::Stmt rewrite_windows(ir::IRMutator& m, const ir::Stmt& self, const ir::SeqNode* op,
                                const WindowRewrite& at) {
  std::vector<ir::Stmt> in;
  bool changed = false;
  for (const ir::Stmt& s : op->seq) {
    in.push_back(m.mutate(s));
    changed |= !in.back().same_as(s);
  }
  std::vector<ir::Stmt> out;
  for (size_t i = 0; i < in.size(); ++i) {
    size_t used = 0;
    if (ir::Stmt s = at(in, i, &used)) {
      out.push_back(s);
      i += used - 1;
      changed = true;
      continue;
    }
    out.push_back(in[i]);
  }
  return changed ? ir::make_seq(out, op->loc) : self;
}

}  // namespace tegula::transform
