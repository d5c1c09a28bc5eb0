// The T.assume statements a host can check before a launch: those at the top of a kernel
// body (not under a branch or in a loop, where they hold only there) whose condition reads
// only the dynamic sizes and the integer scalar parameters. The launcher checks them on
// every call (bindings/program.cc), and so do the CPU interpreters, so a call that breaks
// one is a RuntimeError quoting it rather than a kernel relying on a false fact.
//
//   T.assume(N % 4 == 0)    -> a call with N = 2: "main: Assume: N % 4 == 0 does not hold for this call (N = 2) ..."
#pragma once
#include <string>
#include <vector>

#include "ir/analyzer.h"
#include "ir/stmt.h"

namespace tegula::ir {

struct HostCheck {
  Expr cond;
  std::string text;  // as the author writes it: "N % 4 == 0"
};

std::vector<HostCheck> host_checks(const Kernel& k);

// "" when every check holds for these values of the variables (or cannot be evaluated for
// them, a division by 0); else the message of the first that fails.
std::string failed_assumption(const std::vector<HostCheck>& checks, const VarValues& vars,
                              const std::string& kernel_name);

}  // namespace tegula::ir
