// The passes, in the order pipeline.cc runs them. Each file's header comment states its
// contract: what it expects of the kernel and what it guarantees after.
#pragma once
#include "ir/stmt.h"
#include "transform/context.h"

namespace tegula::transform {

void simplify(ir::Kernel& k, PassContext& ctx);
void read_annotations(ir::Kernel& k, PassContext& ctx);
void expand_tile_ops(ir::Kernel& k, PassContext& ctx);
void infer_layout(ir::Kernel& k, PassContext& ctx);
void partition_loops(ir::Kernel& k, PassContext& ctx);
void lower_tile_ops(ir::Kernel& k, PassContext& ctx);
void lower_fragments(ir::Kernel& k, PassContext& ctx);
void pipeline_loops(ir::Kernel& k, PassContext& ctx);
void plan_storage(ir::Kernel& k, PassContext& ctx);
void insert_barriers(ir::Kernel& k, PassContext& ctx);
// The same placement over one statement list, for a pass that builds a region it keeps
// closed to insert_barriers (pipeline_loops' loop body).
ir::Stmt place_barriers(const std::vector<ir::Stmt>& seq);

}  // namespace tegula::transform
