// The passes, in the order pipeline.cc runs them. Each file's header comment states its
// contract: what it expects of the kernel and what it guarantees after.
#pragma once
#include "ir/stmt.h"
#include "transform/context.h"

namespace tegula::transform {

void simplify(ir::Kernel& k, PassContext& ctx);
// Refuses a break / continue some threads take in a loop holding barriers (its file says which).
void check_loop_jumps(ir::Kernel& k, PassContext& ctx);
// A T.Parallel loop of a run-time but bounded extent: the loop over the bound, guarded.
void bound_parallel_extents(ir::Kernel& k, PassContext& ctx);
void scope_thread_guards(ir::Kernel& k, PassContext& ctx);
// Inside a thread scope (scope_thread_guards.cc), the kernel's thread count and index are
// the scope's: what layouts and lowering read of k while they work on the scope's body.
class ScopedThreads {
 public:
  ScopedThreads(ir::Kernel& k, const ir::Expr& var, int64_t count);
  ~ScopedThreads();
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  ir::Kernel& k_;
  ir::Expr var_;
  int threads_;
};
void read_annotations(ir::Kernel& k, PassContext& ctx);
void flatten_stage_buffers(ir::Kernel& k, PassContext& ctx);
// Kernels with T.alloc_barrier: checks, and none of the compiler's own warp specialisation.
void check_user_barriers(ir::Kernel& k, PassContext& ctx);
// Kernels with T.alloc_barrier: each warp group's branches and loops apart (ir/warp_groups.h).
void run_warp_groups_apart(ir::Kernel& k, PassContext& ctx);
// A T.unroll loop whose gemm operand regions start at its variable: unrolled.
void unroll_gemm_offsets(ir::Kernel& k, PassContext& ctx);
void expand_tile_ops(ir::Kernel& k, PassContext& ctx);
void resolve_views(ir::Kernel& k, PassContext& ctx);
void apply_safe_values(ir::Kernel& k, PassContext& ctx);
void infer_layout(ir::Kernel& k, PassContext& ctx);
void partition_loops(ir::Kernel& k, PassContext& ctx);
void lower_tile_ops(ir::Kernel& k, PassContext& ctx);
void lower_fragments(ir::Kernel& k, PassContext& ctx);
void vectorize_loops(ir::Kernel& k, PassContext& ctx);
void pack_casts(ir::Kernel& k, PassContext& ctx);
// Whether pack_casts turns two conversions from -> to into one of a pair on target sm_<sm>
// (the printer spells each such pair, codegen/cuda_spellings.h).
bool converts_pairs(ir::DataType from, ir::DataType to, int sm);
// A vector staged through register arrays only to be stored: stored directly
// (forward_locals.cc).
void forward_locals(ir::Kernel& k, PassContext& ctx);
void pipeline_loops(ir::Kernel& k, PassContext& ctx);
void plan_storage(ir::Kernel& k, PassContext& ctx);
void insert_barriers(ir::Kernel& k, PassContext& ctx);
// The same placement over one statement list, for a pass that builds a region it keeps
// closed to insert_barriers (pipeline_loops' loop body).
ir::Stmt place_barriers(const std::vector<ir::Stmt>& seq, const ir::Kernel& k);
// The same over a loop: inside its body, and at its end when an iteration writes shared
// memory the next may touch.
ir::Stmt place_barriers_in_loop(const ir::Stmt& loop, const ir::Kernel& k);
void inline_loop_lets(ir::Kernel& k, PassContext& ctx);
void plan_bulk_copies(ir::Kernel& k, PassContext& ctx);
// tma_copy(dst, src, map, rows, cols[, mbarrier]) statements, which plan_bulk_copies makes
// and pipeline_loops / warp_specialize hand to the producer: whether s is one, the bytes
// it lands (the whole box, zero-filled parts included), and the copy completing on bar.
bool is_tma_copy(const ir::Stmt& s);
int64_t tma_bytes(const ir::Stmt& copy);
ir::Stmt with_barrier(const ir::Stmt& copy, ir::Expr bar);
// Thrown by a pass when the warp-specialised form cannot work for this kernel; lower()
// then lowers it again without (transform/pipeline.cc).
struct WarpSpecializationRefused {};
void warp_specialize(ir::Kernel& k, PassContext& ctx);
// A kernel with a thread's array past the register file: its repeating straight-line runs
// over that array rolled into loops (roll_loops.cc).
void roll_loops(ir::Kernel& k, PassContext& ctx);

}  // namespace tegula::transform
