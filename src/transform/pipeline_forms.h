// What the two forms of a T.Pipelined loop share: pipeline_loops.cc builds the cp.async
// form and calls pipeline_ws.cc for the warp-specialised one. Both stack each buffer the
// loop's copies fill one stage deep per stage, and move each statement's accesses of those
// buffers onto one stage's rows.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/functor.h"
#include "transform/context.h"
#include "transform/pipeline_stages.h"

namespace tegula::transform {

// buffer -> (the buffer stacked S deep along its first dimension, the rows of one stage).
using StagedBuffers = std::map<const ir::BufferNode*, std::pair<ir::Buffer, int64_t>>;

// Each buffer stacked S deep, declared in the kernel's place (keeping its swizzle).
StagedBuffers stack_buffers(ir::Kernel& k, PassContext& ctx, const std::vector<ir::Buffer>& filled, int S);

inline ir::Stmt call(const std::string& op, std::vector<ir::Expr> args = {}) {
  return ir::make_evaluate(ir::make_call(op, std::move(args), ir::DataType::i32()));
}

// Accesses of staged buffers move to the rows of one stage.
class Restage : public ir::IRMutator {
 public:
  Restage(const StagedBuffers& staged, ir::Expr stage) : staged_(staged), stage_(std::move(stage)) {}
  ir::Expr mutate_BufferLoad(const ir::Expr& self, const ir::BufferLoadNode* op) override {
    ir::Expr e = IRMutator::mutate_BufferLoad(self, op);
    auto it = staged_.find(op->buffer.get());
    if (it == staged_.end()) return e;
    auto idx = e.as<ir::BufferLoadNode>()->indices;
    idx[0] = idx[0] + stage_ * it->second.second;
    return ir::make_load(it->second.first, idx, op->loc, op->dtype.lanes);
  }
  ir::Stmt mutate_BufferStore(const ir::Stmt& self, const ir::BufferStoreNode* op) override {
    ir::Stmt s = IRMutator::mutate_BufferStore(self, op);
    auto* st = s.as<ir::BufferStoreNode>();
    auto it = staged_.find(op->buffer.get());
    if (it == staged_.end()) return s;
    auto idx = st->indices;
    idx[0] = idx[0] + stage_ * it->second.second;
    return ir::make_store(it->second.first, idx, st->value, op->loc);
  }

 private:
  const StagedBuffers& staged_;
  ir::Expr stage_;
};

bool reads_buffer(const ir::Stmt& s, const ir::BufferNode* b);

// The warp-specialised form of loop `op` (pipeline_ws.cc); marks: its computations'
// stages (take_stage_marks), empty when it has none.
ir::Stmt warp_specialized_loop(const ir::ForNode* op, const std::vector<StageMark>& marks, ir::Kernel& k,
                               PassContext& ctx);

}  // namespace tegula::transform
