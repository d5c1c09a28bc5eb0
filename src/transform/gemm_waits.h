// The asynchronous gemm (wgmma) units pipeline_loops.cc moves around: an issue
// (wgmma_ss / wgmma_rs) and its wait (wgmma_wait(acc, pending)), and the rule that moves a
// wait down past the work that does not need its result (sink_gemm_waits).
#pragma once
#include <functional>
#include <vector>

#include "ir/stmt.h"

namespace tegula::transform {

// A unit that starts with the issue of an asynchronous gemm (its wait later in the unit):
// that issue, and the unit without it.
bool split_async_issue(const ir::Stmt& unit, ir::Stmt* issue, ir::Stmt* rest);
// A unit that is only an asynchronous gemm's wait: that wait statement.
bool only_wait(const ir::Stmt& unit, ir::Stmt* wait);
// The wait, letting `pending` of the latest groups still run.
ir::Stmt with_pending(const ir::Stmt& wait, int pending);
// Whether s is an Evaluate of a call to `op`.
bool is_call_stmt(const ir::Stmt& s, const char* op);
// Moves each shared-operand gemm's wait in `body` (one iteration's compute) down to just
// before the first statement that needs its accumulator (gemm_waits.cc says what it may
// pass). issued_first: body[0] may be the lone wait of a gemm issued before the body.
// A gemm with A in registers moves only with `hold`, which makes the local buffer its A
// is packed into while it runs (gemm_waits.cc); thread_var is the kernel's thread index.
using HoldRegisters = std::function<ir::Buffer(const ir::Buffer& a)>;
void sink_gemm_waits(std::vector<ir::Stmt>& body, const ir::Expr& thread_var, const HoldRegisters& hold = nullptr,
                     bool issued_first = false);

}  // namespace tegula::transform
