#include "ir/stmt.h"

namespace tegula::ir {

const char* for_kind_name(ForKind k) {
  switch (k) {
    case ForKind::Serial: return "serial";
    case ForKind::Unrolled: return "unrolled";
    case ForKind::Parallel: return "parallel";
    case ForKind::Pipelined: return "pipelined";
    case ForKind::Vectorized: return "vectorized";
  }
  return "?";
}

int64_t TileOpNode::attr_int(const std::string& k, int64_t dflt) const {
  auto it = attrs.find(k);
  if (it == attrs.end()) return dflt;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  if (auto* d = std::get_if<double>(&it->second)) return static_cast<int64_t>(*d);
  return dflt;
}

std::string TileOpNode::attr_str(const std::string& k, const std::string& dflt) const {
  auto it = attrs.find(k);
  if (it == attrs.end()) return dflt;
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  return dflt;
}

std::string Param::name() const { return buffer ? buffer->name : var.as<VarNode>()->name; }

namespace {
template <typename T, typename... Args>
Stmt make_node(SourceLoc loc, Args&&... args) {
  auto n = std::make_shared<T>(std::forward<Args>(args)...);
  n->loc = std::move(loc);
  return Stmt(std::move(n));
}
}  // namespace

Stmt make_evaluate(Expr v, SourceLoc loc) { return make_node<EvaluateNode>(std::move(loc), std::move(v)); }
Stmt make_store(Buffer b, std::vector<Expr> indices, Expr value, SourceLoc loc) {
  DataType want = b->dtype.with_lanes(value.dtype().lanes);
  if (value.dtype() != want) value = make_cast(want, value, value->loc);
  return make_node<BufferStoreNode>(std::move(loc), std::move(b), std::move(indices), std::move(value));
}
Stmt make_for(Expr var, Expr min, Expr extent, ForKind k, Stmt body, int num_stages, SourceLoc loc) {
  return make_node<ForNode>(std::move(loc), std::move(var), std::move(min), std::move(extent), k, std::move(body),
                            num_stages);
}
Stmt make_if(Expr cond, Stmt then_case, Stmt else_case, SourceLoc loc) {
  return make_node<IfThenElseNode>(std::move(loc), std::move(cond), std::move(then_case), std::move(else_case));
}
Stmt make_while(Expr cond, Stmt body, SourceLoc loc) {
  return make_node<WhileNode>(std::move(loc), std::move(cond), std::move(body));
}
Stmt make_seq(std::vector<Stmt> stmts, SourceLoc loc) {
  std::vector<Stmt> flat;
  for (Stmt& s : stmts) {
    if (!s) continue;
    if (auto* q = s.as<SeqNode>()) {
      flat.insert(flat.end(), q->seq.begin(), q->seq.end());
    } else {
      flat.push_back(std::move(s));
    }
  }
  if (flat.size() == 1) return flat[0];
  return make_node<SeqNode>(std::move(loc), std::move(flat));
}
Stmt make_let(Expr var, Expr value, Stmt body, SourceLoc loc) {
  return make_node<LetStmtNode>(std::move(loc), std::move(var), std::move(value), std::move(body));
}
Stmt make_tile_op(const std::string& op, std::vector<BufferRegion> regions, std::vector<Expr> args,
                  std::map<std::string, TileAttr> attrs, SourceLoc loc) {
  return make_node<TileOpNode>(std::move(loc), op, std::move(regions), std::move(args), std::move(attrs));
}
Stmt make_sync(SourceLoc loc) { return make_node<SyncNode>(std::move(loc)); }
Stmt make_loop_jump(bool is_continue, SourceLoc loc) { return make_node<LoopJumpNode>(std::move(loc), is_continue); }
Stmt make_scoped_sync(int barrier, int threads, SourceLoc loc) {
  return make_node<SyncNode>(std::move(loc), barrier, threads);
}

}  // namespace tegula::ir
