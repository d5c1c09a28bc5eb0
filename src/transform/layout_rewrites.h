// The rewrites infer_layout (layout_inference.cc) makes around its inference: nests
// normalised before it (layout_nests.cc), and fragments crossing through shared memory
// after it (layout_exchanges.cc).
#pragma once
#include <map>
#include <vector>

#include "transform/passes.h"

namespace tegula::transform {

// `for i, j in T.Parallel(2, 4): t[i, j] = ...` on a (4, 4) fragment: the nest runs over
// the fragment's whole shape, the rest masked off, so it can take the fragment's layout.
ir::Stmt pad_nests_to_fragments(const ir::Stmt& body);

// A T.Parallel nest that touches no fragment and stores only into local buffers runs whole
// in every thread, as unrolled loops (TileLang's rule).
ir::Stmt run_thread_private_nests(const ir::Stmt& body);

// Each loop in `reads` reads the fragments listed through a fresh shared copy, stored with
// the fragment's layout just before it; each loop in `writes` stores its fragment into a
// fresh shared buffer, which a nest with the fragment's layout loads back after it.
// insert_barriers later fences the stores from the reads.
ir::Stmt insert_exchanges(const ir::Stmt& body, const std::map<const ir::StmtNode*, std::vector<ir::Buffer>>& reads,
                          const std::map<const ir::StmtNode*, ir::Buffer>& writes, PassContext& ctx);

// A reduction into a fragment held in a layout other than its rows' reduces into a fresh
// fragment in the rows' layout (initialised from the output when it accumulates), and the
// rows reach the output through a fresh shared buffer, each side copied with its own layout.
ir::Stmt insert_reduce_exchanges(const ir::Stmt& body,
                                 const std::map<const ir::TileOpNode*, layout::FragmentPtr>& todo, ir::Kernel& k,
                                 PassContext& ctx);

}  // namespace tegula::transform
