// T.finalize_reducer(acc, result): the partials every thread keeps of each element of a
// T.alloc_reducer (a local array, updated by T.Parallel loops: partition_loops.cc)
// combined across the block, then with the init's seed once, into result.
//
// Lowering, per element: an xor-shuffle butterfly inside each warp, then (more than one
// warp) lane 0 of each warp writes its warp's value to a shared scratch and every thread
// folds the warps' values; the seed last. Every thread then holds the result, and writes
// the elements of `result` it holds: a fragment's by its layout, a local buffer whole, a
// shared buffer one element per thread. The result may be acc itself (in place).
#include "ops/tile_op.h"
#include "transform/passes.h"

namespace tegula::ops {
namespace {

using namespace ir;

Expr combine(const std::string& op, Expr a, Expr b, const SourceLoc& loc) {
  static const std::map<std::string, BinaryOp> ops = {
      {"sum", BinaryOp::Add},       {"max", BinaryOp::Max},      {"min", BinaryOp::Min},
      {"bitand", BinaryOp::BitAnd}, {"bitor", BinaryOp::BitOr}, {"bitxor", BinaryOp::BitXor},
  };
  auto it = ops.find(op);
  user_assert(it != ops.end(), loc) << "unknown reducer op '" << op << "'";
  return make_binary(it->second, std::move(a), std::move(b), loc);
}

std::vector<Expr> unflatten(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<Expr> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = make_int(flat % shape[d]);
    flat /= shape[d];
  }
  return idx;
}

class FinalizeReducer : public TileOp {
 public:
  Stmt lower(const TileOpNode* op, transform::PassContext& ctx, const Kernel& k) const override {
    const SourceLoc& loc = op->loc;
    const Buffer& acc = op->regions.at(0).buffer;
    const Buffer& seed = op->regions.at(1).buffer;
    const Buffer& res = op->regions.at(2).buffer;
    std::string kind = op->attr_str("op", "sum");
    user_assert(k.threads % 32 == 0 || (k.threads & (k.threads - 1)) == 0, loc)
        << "T.finalize_reducer: the block's " << k.threads << " threads are not whole warps";
    std::vector<int64_t> shape = const_shape(acc, loc, "T.alloc_reducer");
    int64_t E = 1;
    for (int64_t n : shape) E *= n;
    DataType t = acc->dtype;
    const Expr& tx = k.thread_var;
    auto R = [&](int64_t e) { return make_load(acc, unflatten(e, shape), loc); };
    auto set = [&](int64_t e, Expr v) { return make_store(acc, unflatten(e, shape), std::move(v), loc); };
    std::vector<Stmt> body;
    int lanes = std::min(32, k.threads);
    for (int64_t e = 0; e < E; ++e) {
      for (int bit = 1; bit < lanes; bit <<= 1) {
        body.push_back(set(e, combine(kind, R(e), make_call("shfl_xor", {R(e), make_int(bit)}, t, loc), loc)));
      }
    }
    int warps = k.threads / 32;
    if (warps > 1) {
      Buffer scratch = make_buffer(ctx.fresh_name(acc->name + "_warps"), Scope::Shared, t,
                                   {make_int(int64_t(warps) * E)}, loc);
      ctx.extra_shared.push_back(scratch);
      Expr warp = make_binary(BinaryOp::FloorDiv, tx, make_int(32), loc);
      std::vector<Stmt> writes;
      for (int64_t e = 0; e < E; ++e) writes.push_back(make_store(scratch, {warp * E + e}, R(e), loc));
      Expr lane0 = make_binary(BinaryOp::EQ, make_binary(BinaryOp::FloorMod, tx, make_int(32), loc), make_int(0), loc);
      body.push_back(make_if(lane0, make_seq(writes, loc), {}, loc));
      body.push_back(make_sync(loc));
      for (int64_t e = 0; e < E; ++e) {
        Expr v = make_load(scratch, {make_int(e)}, loc);
        for (int w = 1; w < warps; ++w) v = combine(kind, v, make_load(scratch, {make_int(w * E + e)}, loc), loc);
        body.push_back(set(e, v));
      }
    }
    for (int64_t e = 0; e < E; ++e) {
      body.push_back(set(e, combine(kind, make_load(seed, {make_int(0)}, loc), R(e), loc)));
    }
    if (res->scope == Scope::Fragment) {
      auto layout = ctx.layouts.fragment.at(res.get());
      Buffer reg = ctx.registers.at(res.get());
      for (int s = 0; s < layout->slots(); ++s) {
        Expr valid;
        std::vector<Expr> c = layout->coords_expr(tx, s, &valid);
        Stmt st = make_store(reg, {make_int(s)}, make_cast(res->dtype, make_load(acc, c, loc)), loc);
        body.push_back(valid ? make_if(valid, st, {}, loc) : st);
      }
    } else if (res->scope == Scope::Local) {
      // T.finalize_reducer(acc) without a result combines in place: acc already holds it.
      for (int64_t e = 0; e < E && res.get() != acc.get(); ++e) {
        body.push_back(make_store(res, unflatten(e, shape), make_cast(res->dtype, R(e)), loc));
      }
    } else {
      user_assert(res->scope == Scope::Shared, loc)
          << "T.finalize_reducer: result '" << res->name << "' must be a fragment, shared or local buffer";
      for (int64_t e = 0; e < E; ++e) {
        Expr mine = make_binary(BinaryOp::EQ, tx, make_int(e % k.threads), loc);
        body.push_back(make_if(mine, make_store(res, unflatten(e, shape), make_cast(res->dtype, R(e)), loc), {}, loc));
      }
    }
    return make_seq(body, loc);
  }
};

}  // namespace

const TileOp* reducer_op() {
  static FinalizeReducer op;
  return &op;
}

}  // namespace tegula::ops
