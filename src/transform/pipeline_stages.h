// T.Pipelined hand schedules whose computations run in several stages (FlashAttention-3's):
// the marks the frontend leaves in the loop body (frontend/pipeline_schedule.py) and the
// warp-specialised consumer that runs the stages shifted, for pipeline_ws.cc.
#pragma once
#include <functional>
#include <vector>

#include "ir/stmt.h"
#include "transform/gemm_waits.h"

namespace tegula::transform {

// A computation's stage, relative to the first computation's, and its place among the
// statements that run at one time (TileLang's `order`).
struct StageMark {
  int64_t stage = 0, order = -1;
};

// The frontend puts a pipeline_stage(stage, order) call before each computation's
// statements. Drops the marks from a loop body; `marks` gets each remaining top-level
// statement's mark (copies, which the marks do not cover, get (0, -1)), or stays empty
// when the body has none.
ir::Stmt take_stage_marks(const ir::Stmt& body, std::vector<StageMark>* marks);

// What the shifted consumer needs of its warp-specialised loop.
struct ShiftedLoop {
  const ir::ForNode* loop;               // its variable, start and trip count
  std::vector<ir::Stmt> compute;         // its computations, in body order
  std::vector<StageMark> marks;          // each one's mark
  std::vector<std::vector<bool>> reads;  // reads[g][j]: computation j reads group g's tiles
  // Computation j for iteration `iter` (counted from 0), on that iteration's stage.
  std::function<ir::Stmt(size_t j, ir::Expr iter)> at;
  // The wait for group g's tiles of iteration `iter`, and their release.
  std::function<ir::Stmt(int64_t g, ir::Expr iter)> wait, release;
};

// The consumer of a loop whose computations run D >= 1 stages apart (pipeline_stages.cc
// says how); `hold` as for sink_gemm_waits.
ir::Stmt shifted_consumer(const ShiftedLoop& loop, const ir::Kernel& k, const HoldRegisters& hold);

}  // namespace tegula::transform
