// Which let values may be computed anywhere in the block: those that read only global
// tensors no statement of the kernel writes (offsets from cu_seqlens, a paged cache's
// block table). inline_loop_lets substitutes them into pipelined loop bodies and
// plan_bulk_copies lifts them above the warp-specialised split.
#pragma once
#include <set>

#include "ir/stmt.h"

namespace tegula::transform {

// The buffers any statement of s writes (stores, tile ops' destinations, atomics).
std::set<const ir::BufferNode*> written_buffers(const ir::Stmt& s);
// Whether value reads only global tensors outside `written`.
bool block_invariant(const ir::Expr& value, const std::set<const ir::BufferNode*>& written);

}  // namespace tegula::transform
