// See register_liveness.h.
#include "analysis/register_liveness.h"

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "ir/functor.h"
#include "ir/hash.h"

namespace tegula::analysis {

using namespace ir;

namespace {

// A set of fragments, by declaration index.
class FragmentSet {
 public:
  explicit FragmentSet(size_t n) : in_(n, false) {}
  void add(int f) { in_[f] = true; }
  void remove(int f) { in_[f] = false; }
  bool has(int f) const { return in_[f]; }
  size_t size() const { return in_.size(); }
  FragmentSet operator|(const FragmentSet& o) const { return combine(o, [](bool a, bool b) { return a || b; }); }
  FragmentSet operator&(const FragmentSet& o) const { return combine(o, [](bool a, bool b) { return a && b; }); }
  FragmentSet operator-(const FragmentSet& o) const { return combine(o, [](bool a, bool b) { return a && !b; }); }
  FragmentSet& operator|=(const FragmentSet& o) { return *this = *this | o; }
  bool subset_of(const FragmentSet& o) const { return (*this - o) == FragmentSet(size()); }
  bool operator==(const FragmentSet& o) const { return in_ == o.in_; }

 private:
  template <typename F>
  FragmentSet combine(const FragmentSet& o, F f) const {
    FragmentSet out(size());
    for (size_t i = 0; i < in_.size(); ++i) out.in_[i] = f(in_[i], o.in_[i]);
    return out;
  }
  std::vector<bool> in_;
};

// What one statement does to the fragments.
struct Effect {
  FragmentSet uses, kills, defs;  // kills: written whole, reading nothing of the old value
  bool elementwise = false;
};

// The fragments an expression or a statement (all of it) loads, stores or names in a
// tile op's regions.
class Mentions : public IRVisitor {
 public:
  Mentions(const std::unordered_map<const BufferNode*, int>& index, FragmentSet* out) : index_(index), out_(out) {}
  using IRVisitor::visit;
  void buffer(const Buffer& b) {
    auto it = index_.find(b.get());
    if (it != index_.end()) out_->add(it->second);
  }
  void region(const BufferRegion& r) { buffer(r.buffer), visit_region(r); }

 protected:
  void visit_BufferLoad(const BufferLoadNode* op) override { buffer(op->buffer), IRVisitor::visit_BufferLoad(op); }
  void visit_BufferStore(const BufferStoreNode* op) override { buffer(op->buffer), IRVisitor::visit_BufferStore(op); }
  void visit_TileOp(const TileOpNode* op) override {
    for (const BufferRegion& r : op->regions) buffer(r.buffer);
    IRVisitor::visit_TileOp(op);
  }

 private:
  const std::unordered_map<const BufferNode*, int>& index_;
  FragmentSet* out_;
};

// One statement of a block, in the order they run: a let is its head, then the statements
// of its body (the printer shows them at the let's depth); an empty block is one empty
// statement (printed `pass`), where a peak may fall like anywhere else.
struct Line {
  Stmt stmt;              // null: the empty statement
  bool let_head = false;  // the let's `let x = value` alone
};

void flatten(const Stmt& s, std::vector<Line>* out) {
  if (!s) return;
  if (auto* seq = s.as<SeqNode>()) {
    for (const Stmt& c : seq->seq) flatten(c, out);
  } else if (auto* let = s.as<LetStmtNode>()) {
    out->push_back({s, true});
    flatten(let->body, out);
  } else {
    out->push_back({s, false});
  }
}

std::vector<Line> lines_of(const Stmt& block) {
  std::vector<Line> out;
  flatten(block, &out);
  if (out.empty()) out.push_back({});
  return out;
}

class Liveness {
 public:
  explicit Liveness(RegisterLiveness& result) : r_(result), n_(result.fragments.size()) {
    for (size_t i = 0; i < n_; ++i) index_[result.fragments[i].fragment.get()] = int(i);
  }

  // What is live before `block`, given what is live after it.
  FragmentSet block(const Stmt& s, const FragmentSet& live_out) {
    std::vector<Line> lines = lines_of(s);
    FragmentSet live = live_out;
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) live = line(*it, live);
    return live;
  }

 private:
  FragmentSet line(const Line& l, const FragmentSet& live_out) {
    if (!l.stmt) return simple(l.stmt, Effect{none(), none(), none()}, live_out);
    if (l.let_head) return simple(l.stmt, Effect{mentions(l.stmt.as<LetStmtNode>()->value), none(), none()}, live_out);
    if (auto* op = l.stmt.as<ForNode>()) {
      if (op->for_kind == ForKind::Parallel) return simple(l.stmt, parallel_nest(l.stmt), live_out);
      return loop(op->body, mentions(op->min) | mentions(op->extent), live_out);
    }
    if (auto* op = l.stmt.as<WhileNode>()) return loop(op->body, mentions(op->cond), live_out);
    if (auto* op = l.stmt.as<IfThenElseNode>()) return branches(op, live_out);
    if (auto* op = l.stmt.as<TileOpNode>()) return simple(l.stmt, tile_op(l.stmt, op), live_out);
    return simple(l.stmt, Effect{mentions(l.stmt), none(), none()}, live_out);
  }

  // Loop-carried: what the body needs at its start is live at its end.
  FragmentSet loop(const Stmt& body, const FragmentSet& head, const FragmentSet& live_out) {
    FragmentSet live = live_out;
    while (true) {
      FragmentSet body_in = block(body, live_out | live);
      if (body_in.subset_of(live)) break;
      live |= body_in;
    }
    return live | head;
  }

  // An if/elif/else chain: live before it is what any arm (or falling through) needs.
  FragmentSet branches(const IfThenElseNode* op, const FragmentSet& live_out) {
    FragmentSet live = op->else_case ? none() : live_out;
    live |= block(op->then_case, live_out) | mentions(op->cond);
    if (auto* elif = op->else_case.as<IfThenElseNode>()) {
      live |= branches(elif, live_out);
    } else if (op->else_case) {
      live |= block(op->else_case, live_out);
    }
    return live;
  }

  FragmentSet simple(const Stmt& s, const Effect& e, const FragmentSet& live_out) {
    FragmentSet live_in = (live_out - e.kills) | e.uses;
    FragmentSet live = live_in | live_out | e.defs;
    if (e.elementwise) {
      FragmentSet dying = live_in - live_out, born = (live_out | e.defs) - live_in;
      live = (live_in & live_out) | (total(dying) >= total(born) ? dying : born);
    }
    int t = total(live);
    if (t >= r_.peak) {  // the walk is backwards: on a tie, keep the earlier statement
      r_.peak = t;
      r_.peak_at = s;
      r_.live_at_peak.clear();
      for (size_t f = 0; f < n_; ++f) {
        if (live.has(int(f))) r_.live_at_peak.push_back(int(f));
      }
    }
    return live_in;
  }

  Effect tile_op(const Stmt& s, const TileOpNode* op) {
    Effect e{mentions(s), none(), none()};
    auto whole_write = [&](int f) {
      e.uses.remove(f);
      e.kills.add(f);
      e.defs.add(f);
    };
    const auto& regions = op->regions;
    if (op->op == "gemm" || op->op == "gemm_sp") {
      size_t c = op->op == "gemm" ? 2 : 3;  // the accumulator
      if (c >= regions.size()) return e;
      int dest = whole(regions[c]);
      if (dest >= 0 && op->attr_int("clear_accum", 0) == 1) {
        whole_write(dest);
      } else {
        e.defs = mentions(regions[c]);
      }
    } else if (op->op == "copy" || op->op == "reduce") {
      e.elementwise = op->op == "copy";
      if (regions.empty()) return e;
      int dest = regions.size() == 2 ? whole(regions[1]) : -1;
      if (dest >= 0 && (op->op == "copy" || op->attr_int("clear", 0) == 1) && !mentions(regions[0]).has(dest)) {
        whole_write(dest);
      } else {
        e.defs = mentions(regions.back());
      }
    } else if (op->op == "fill") {
      e.elementwise = true;
      int dest = regions.empty() ? -1 : whole(regions[0]);
      if (dest >= 0) {
        whole_write(dest);
      } else {
        e.defs = e.uses;
      }
    }
    return e;
  }

  // A T.Parallel nest, one elementwise statement: see the header for what it writes whole.
  Effect parallel_nest(const Stmt& nest) {
    Effect e{none(), none(), none(), true};
    std::vector<const ForNode*> loops;
    std::unordered_map<int, bool> stores;  // fragment -> every store is at the nest's indices, whole
    std::function<void(const Stmt&, bool)> walk = [&](const Stmt& s, bool conditional) {
      if (!s) return;
      if (auto* seq = s.as<SeqNode>()) {
        for (const Stmt& c : seq->seq) walk(c, conditional);
      } else if (auto* let = s.as<LetStmtNode>()) {
        e.uses |= mentions(let->value);
        walk(let->body, conditional);
      } else if (auto* op = s.as<ForNode>()) {
        if (op->for_kind == ForKind::Parallel && is_const_int(op->min, 0) && !conditional) {
          loops.push_back(op);
          walk(op->body, false);
          loops.pop_back();
        } else {
          e.uses |= mentions(op->min) | mentions(op->extent);
          walk(op->body, true);
        }
      } else if (auto* op = s.as<IfThenElseNode>()) {
        e.uses |= mentions(op->cond);
        walk(op->then_case, true);
        walk(op->else_case, true);
      } else if (auto* op = s.as<WhileNode>()) {
        e.uses |= mentions(op->cond);
        walk(op->body, true);
      } else if (auto* op = s.as<BufferStoreNode>(); op && index_.count(op->buffer.get())) {
        int f = index_.at(op->buffer.get());
        for (const Expr& i : op->indices) e.uses |= mentions(i);
        e.uses |= mentions(op->value);
        bool at_indices = !conditional && op->value.dtype().lanes == 1 && op->indices.size() == loops.size() &&
                          loops.size() == op->buffer->shape.size();
        for (size_t d = 0; at_indices && d < loops.size(); ++d) {
          at_indices = op->indices[d].same_as(loops[d]->var) &&
                       structural_equal(loops[d]->extent, op->buffer->shape[d]);
        }
        auto [it, first] = stores.emplace(f, at_indices);
        if (!first) it->second = it->second && at_indices;
      } else {
        e.uses |= mentions(s);
      }
    };
    walk(nest, false);
    for (auto& [f, at_indices] : stores) {
      e.defs.add(f);
      if (at_indices && !e.uses.has(f)) e.kills.add(f);
    }
    e.uses |= e.defs - e.kills;
    return e;
  }

  // The fragment a region covers whole (from 0, over its shape), or -1.
  int whole(const BufferRegion& r) const {
    auto it = index_.find(r.buffer.get());
    if (it == index_.end()) return -1;
    const std::vector<Expr>& shape = r.buffer->shape;
    if (r.mins.size() != shape.size() || r.extents.size() != shape.size()) return -1;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (!is_const_int(r.mins[d], 0) || !structural_equal(r.extents[d], shape[d])) return -1;
    }
    return it->second;
  }

  FragmentSet none() const { return FragmentSet(n_); }
  FragmentSet mentions(const Expr& e) const {
    FragmentSet out = none();
    Mentions(index_, &out).visit(e);
    return out;
  }
  FragmentSet mentions(const Stmt& s) const {
    FragmentSet out = none();
    Mentions(index_, &out).visit(s);
    return out;
  }
  FragmentSet mentions(const BufferRegion& r) const {
    FragmentSet out = none();
    Mentions(index_, &out).region(r);
    return out;
  }
  int total(const FragmentSet& s) const {
    int t = 0;
    for (size_t i = 0; i < n_; ++i) t += s.has(int(i)) ? r_.fragments[i].registers : 0;
    return t;
  }

 private:
  RegisterLiveness& r_;
  size_t n_;
  std::unordered_map<const BufferNode*, int> index_;
};

}  // namespace

std::optional<RegisterLiveness> register_liveness(const Kernel& k) {
  std::vector<Buffer> fragments;
  for (const Buffer& b : k.allocs) {
    if (b->scope == Scope::Fragment) fragments.push_back(b);
  }
  if (fragments.size() * 2 > k.allocs.size()) return std::nullopt;
  RegisterLiveness out;
  size_t first_register = k.allocs.size() - fragments.size();
  for (size_t i = 0; i < fragments.size(); ++i) {
    const Buffer& array = k.allocs[first_register + i];
    const int64_t* slots = array->shape.size() == 1 ? as_const_int(array->shape[0]) : nullptr;
    if (array->scope != Scope::Local || array->dtype != fragments[i]->dtype || !slots) return std::nullopt;
    int64_t bytes = *slots * fragments[i]->dtype.bytes();
    out.fragments.push_back({fragments[i], *slots, int((bytes + 3) / 4)});
  }
  Liveness(out).block(k.body, FragmentSet(fragments.size()));
  std::stable_sort(out.live_at_peak.begin(), out.live_at_peak.end(),
                   [&](int a, int b) { return out.fragments[a].registers > out.fragments[b].registers; });
  return out;
}

}  // namespace tegula::analysis
