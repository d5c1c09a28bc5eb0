// The fragment accesses layout inference reads (layout_accesses.h).
#include "transform/layout_accesses.h"

#include <algorithm>

#include "ir/analyzer.h"

namespace tegula::transform::layout_infer {

using namespace ir;

void Collector::visit_LetStmt(const LetStmtNode* op) {
  auto r = thread_scope_range(op->value);
  if (!r) return IRVisitor::visit_LetStmt(op);
  ScopeRef saved = scope_;
  scope_ = ScopeRef{op->var, r->count(), *r};
  IRVisitor::visit_LetStmt(op);
  scope_ = saved;
}

void Collector::visit_For(const ForNode* op) {
  if (op->for_kind != ForKind::Parallel) {
    const int64_t* lo = as_const_int(op->min);
    const int64_t* ext = as_const_int(op->extent);
    bool bounded = lo && ext && *ext > 0;
    if (bounded) around_[op->var.get()] = {*lo, *lo + *ext - 1};
    IRVisitor::visit_For(op);
    if (bounded) around_.erase(op->var.get());
    return;
  }
  Nest n{op, {}, {}, {}, 0, scope_, around_};
  const ForNode* f = op;
  Stmt body;
  while (true) {
    const int64_t* ext = as_const_int(f->extent);
    user_assert(ext && is_const_int(f->min, 0), f->loc) << "T.Parallel extents must be constants";
    n.vars.push_back(f->var);
    n.extents.push_back(*ext);
    body = f->body;
    auto* inner = body.as<ForNode>();
    if (!inner || inner->for_kind != ForKind::Parallel) break;
    f = inner;
  }
  current_ = &n;
  visit(body);
  current_ = nullptr;
  nests.push_back(std::move(n));
}

void Collector::visit_TileOp(const TileOpNode* op) {
  ops.push_back(op);
  op_scope[op] = scope_;
  for (auto& r : op->regions) {
    if (r.buffer->scope == Scope::Fragment) used_by_scope(r.buffer, op->loc);
  }
}

void Collector::visit_BufferLoad(const BufferLoadNode* op) {
  note(op->buffer, op->indices, false);
  IRVisitor::visit_BufferLoad(op);
}

void Collector::visit_BufferStore(const BufferStoreNode* op) {
  note(op->buffer, op->indices, true);
  IRVisitor::visit_BufferStore(op);
}

void Collector::note(const Buffer& b, const std::vector<Expr>& idx, bool store) {
  if (!current_) return;
  if (b->scope == Scope::Global || b->scope == Scope::Shared) {
    int bytes = b->dtype.bytes();
    current_->min_mem_bytes = current_->min_mem_bytes ? std::min(current_->min_mem_bytes, bytes) : bytes;
    current_->scattered |= k_.global_layouts.count(b.get()) > 0;
    return;
  }
  if (b->scope != Scope::Fragment) return;
  used_by_scope(b, current_->outer->loc);
  Access a{b, {}, false, false, store, idx, false, {}};
  for (auto& e : idx) {
    post_order(make_evaluate(e), nullptr, [&](const Expr& x) {
      if (!x.as<VarNode>()) return;
      bool mine = std::any_of(current_->vars.begin(), current_->vars.end(), [&](const Expr& v) { return v.same_as(x); });
      a.outer |= !mine;
    });
  }
  if (a.outer) {
    int next = 0;
    for (auto& e : idx) {
      auto it = std::find_if(current_->vars.begin(), current_->vars.end(), [&](const Expr& v) { return v.same_as(e); });
      int pos = it == current_->vars.end() ? -1 : int(it - current_->vars.begin());
      if (pos >= 0 && pos != next) {
        a.extend.clear();
        break;
      }
      if (pos < 0 && !e.as<VarNode>()) {
        a.extend.clear();
        break;
      }
      next += pos >= 0;
      a.extend.push_back(pos);
    }
    if (next != int(current_->vars.size())) a.extend.clear();
  }
  std::vector<int> keep;
  int last = -1;
  bool ok = true;
  for (size_t d = 0; d < idx.size(); ++d) {
    const Expr& e = idx[d];
    // s[0] of a fragment whose dimension is 1 names the same element as s[i] for i in
    // T.Parallel(1): the dimension constrains nothing.
    const int64_t* extent = as_const_int(b->shape[d]);
    if (is_const_int(e, 0) && extent && *extent == 1) continue;
    auto it = std::find_if(current_->vars.begin(), current_->vars.end(), [&](const Expr& v) { return v.same_as(e); });
    int pos = it == current_->vars.end() ? -1 : int(it - current_->vars.begin());
    if (pos < 0 || pos <= last) {
      ok = false;
      break;
    }
    keep.push_back(pos);
    last = pos;
  }
  if (ok) {
    a.keep = keep;
    a.identity = keep.size() == current_->vars.size() && idx.size() == keep.size();
    // A loop over part of the fragment (pad_nests_to_fragments leaves it when it cannot pad)
    // does not run with the fragment's layout, which spans all of it.
    for (size_t d = 0; a.identity && d < idx.size(); ++d) {
      const int64_t* extent = as_const_int(b->shape[d]);
      a.identity = extent && *extent == current_->extents[keep[d]];
    }
  }
  if (!ok && !a.outer) a.flat = flattens(b, idx, *current_);
  current_->fragments.push_back(a);
}

bool Collector::flattens(const Buffer& b, const std::vector<Expr>& idx, const Nest& n) {
  int64_t total = 1;
  for (int64_t e : n.extents) total *= e;
  // A 1-D fragment only: a fragment of more dimensions read at a flattened column
  // (A[i, j * 128 + k] of a view) keeps the loop open, so the loop's own layout (and an
  // exchange) serves what reads the loop's other fragments (a reduction of the view).
  if (idx.size() != 1) return false;
  if (n.vars.size() < 2 || total > (int64_t(1) << 16) || b->num_elements_const() != total) return false;
  std::vector<int64_t> shape;
  for (auto& d : b->shape) shape.push_back(*as_const_int(d));
  VarValues values;
  std::vector<int64_t> at(n.vars.size(), 0);
  for (int64_t k = 0; k < total; ++k) {
    for (size_t v = 0; v < at.size(); ++v) values[n.vars[v].get()] = at[v];
    int64_t flat = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      int64_t x;
      if (!eval_int(idx[d], values, &x) || x < 0 || x >= shape[d]) return false;
      flat = flat * shape[d] + x;
    }
    if (flat != k) return false;
    for (size_t v = at.size(); v-- > 0;) {  // the next iteration, the last variable fastest
      if (++at[v] < n.extents[v]) break;
      at[v] = 0;
    }
  }
  return true;
}

void Collector::used_by_scope(const Buffer& b, const SourceLoc& loc) {
  auto it = frag_scope.find(b.get());
  if (it == frag_scope.end()) {
    frag_scope[b.get()] = {scope_, loc};
    return;
  }
  const ThreadRange& was = it->second.first.range;
  user_assert(was == scope_.range, loc)
      << "fragment '" << b->name << "' is used here by threads [" << scope_.range.lo << ", " << scope_.range.hi
      << ") and at line " << it->second.second.line << " by threads [" << was.lo << ", " << was.hi
      << "): a fragment is held by one set of threads, so it cannot cross a thread guard (copy it through "
      << "shared memory)";
}

}  // namespace tegula::transform::layout_infer
