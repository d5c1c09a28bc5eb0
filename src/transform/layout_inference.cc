// Pass: infer_layout.
//
// Expects: copies, fills and atomics already expanded into T.Parallel nests; fragment
// shapes constant. Guarantees: every fragment buffer and every outermost T.Parallel loop
// has a layout in ctx.layouts.
//
// Levels, run to a fixed point (see shared notes on layout inference):
//   strict  - ops whose instruction fixes a layout (gemm), T.annotate_layout
//   common  - derived from a neighbour: a loop that touches a fragment element-for-element
//             takes its layout; fragments a loop touches take the loop's layout, or a
//             projection of it when indexed by a subset of the loop variables, or the
//             loop's layout reshaped when indexed by the loop's row-major position
//             under another shape (f[i * N + j] in a loop over (M, N)); a
//             reduction's output is its input without the reduced dimension
//   free    - an op's own choice (the fragment a reduction stages a shared source in), else
//             the first loop still open gets a blocked layout with the widest vector that
//             its memory accesses allow (loops reading a fragment through a serial loop's
//             variable first); then back to `common`
// A loop that reads a fragment held in a layout other than the loop's (two gemms'
// operands split differently over warps: a FullCol score gemm's output read into the
// operand of the value gemm that every warp column holds whole) is not a conflict: the
// fragment reaches the loop's threads through a fresh shared buffer (`<name>_exchange`),
// stored with the fragment's layout just before the loop. When the loop only narrows the
// fragment into another one (P = cast(S)), it runs with the source's layout and its
// result crosses at the narrower type instead. Barriers come from insert_barriers.
// A fragment accessed outside every T.Parallel nest and tile op is held whole by every
// thread (layout::make_replicated), decided before the strict level; Uniformity
// (ir/thread_guard.h) relies on the same structural rule.
#include <algorithm>
#include <set>
#include <tuple>

#include "ir/functor.h"
#include "ir/thread_guard.h"
#include "ops/tile_op.h"
#include "transform/layout_accesses.h"
#include "transform/layout_rewrites.h"
#include "transform/partition.h"
#include "transform/passes.h"

namespace tegula::transform {
namespace {

using namespace ir;
using layout_infer::Access;
using layout_infer::Collector;
using layout_infer::Nest;
using layout_infer::ScopeRef;

std::vector<int64_t> frag_shape(const Buffer& b) { return ops::const_shape(b, b->loc, "T.alloc_fragment"); }

class Inference {
 public:
  Inference(Kernel& k, PassContext& ctx, Collector& c) : k_(k), ctx_(ctx), lm_(ctx.layouts), c_(c) {}

  void run() {
    // A fragment read or written at a scalar index outside the T.Parallel nests (a block
    // mask tested in a serial loop) is held whole by every thread, TileLang's meaning:
    // any thread may read any element. The nests over it then run in every thread.
    for (auto& [b, where] : fragments_held_whole(k_.body)) {
      auto used = c_.frag_scope.find(b);
      int threads = used == c_.frag_scope.end() ? k_.threads : int(used->second.first.count);
      Buffer buf;
      for (auto& a : k_.allocs) {
        if (a.get() == b) buf = a;
      }
      if (!buf) continue;
      lm_.fragment[b] = layout::make_replicated(frag_shape(buf), threads);
      lm_.decided_at[b] = where;
    }
    for (auto* op : c_.ops) {
      if (auto* impl = ops::find_tile_op(op->op)) {
        in_scope(c_.op_scope[op], [&] { return impl->infer_layout(op, ops::InferLevel::Strict, ctx_, k_); });
      }
    }
    while (true) {
      while (common()) {
      }
      if (!free_one()) break;
    }
    for (auto& b : k_.allocs) {
      if (b->scope != Scope::Fragment || lm_.fragment.count(b.get())) continue;
      auto shape = frag_shape(b);
      auto used = c_.frag_scope.find(b.get());
      int threads = used == c_.frag_scope.end() ? k_.threads : int(used->second.first.count);
      lm_.fragment[b.get()] =
          layout::make_row_blocked(shape, threads, layout::choose_row_vector(shape.back(), b->dtype.bytes()));
      lm_.decided_at[b.get()] = b->loc;
    }
    // A reduction whose output was laid out by other loops before its input was (the
    // row maximum of a (splits, rows) tile, its rows already spread as a 128 x 128 loop
    // wants): it reduces into rows of the input's layout, which reach the output through
    // shared memory (insert_reduce_exchanges, layout_rewrites.h).
    for (auto* op : c_.ops) {
      if (op->op != "reduce" || op->regions.size() < 2 || c_.op_scope[op].var) continue;
      auto s = lm_.fragment.find(op->regions[0].buffer.get());
      auto d = lm_.fragment.find(op->regions[1].buffer.get());
      if (s == lm_.fragment.end() || d == lm_.fragment.end()) continue;
      int dim = int(op->attr_int("dim", 0));
      if (!rows_match(*s->second, *d->second, dim)) {
        std::vector<int> keep;
        for (int x = 0; x < int(op->regions[0].buffer->shape.size()); ++x) {
          if (x != dim) keep.push_back(x);
        }
        auto rows = layout::make_projected(s->second, keep, op->loc);
        if (rows->num_elements() == op->regions[1].buffer->num_elements_const()) reduce_exchanges[op] = rows;
      }
    }
  }

  // Whether each register of src folds into one register of dst, in the same thread, and
  // every thread holding a copy of a result is in the group of threads (the butterfly
  // over the bits in which the contributors of one result differ) that computes it: a
  // result read outside the T.Parallel loops is held by every thread, its row's
  // contributors perhaps only some warps.
  static bool rows_match(const layout::Fragment& src, const layout::Fragment& dst, int dim) {
    std::vector<int> to_dst(src.slots(), -1);
    std::vector<int64_t> c(src.shape().size()), dc;
    std::vector<int> first(size_t(dst.num_elements()), -1);
    std::vector<std::vector<int>> contributors(size_t(dst.num_elements()));
    int group = 0;
    for (int t = 0; t < src.threads(); ++t) {
      for (int sl = 0; sl < src.slots(); ++sl) {
        if (!src.coords(t, sl, c.data())) continue;
        dc.clear();
        for (int d = 0; d < int(c.size()); ++d) {
          if (d != dim) dc.push_back(c[d]);
        }
        if (dc.empty()) dc.push_back(0);
        if (int64_t(dc.size()) != int64_t(dst.shape().size())) return false;
        int64_t flat = dst.flatten(dc.data());
        int p = dst.slot_of(t, flat);
        if (p < 0 || (to_dst[sl] != -1 && to_dst[sl] != p)) return false;
        to_dst[sl] = p;
        if (first[size_t(flat)] < 0) first[size_t(flat)] = t;
        group |= t ^ first[size_t(flat)];
        contributors[size_t(flat)].push_back(t);
      }
    }
    for (int h = 0; h < dst.threads(); ++h) {
      for (int sl = 0; sl < dst.slots(); ++sl) {
        std::vector<int64_t> e(dst.shape().size());
        if (!dst.coords(h, sl, e.data())) continue;
        const auto& from = contributors[size_t(dst.flatten(e.data()))];
        bool reached = from.empty();  // a result no thread contributes to keeps its identity everywhere
        for (int t : from) reached = reached || (t & ~group) == (h & ~group);
        if (!reached) return false;
      }
    }
    return true;
  }

 public:
  // Reductions whose output holds its rows in another layout -> the rows' layout.
  std::map<const TileOpNode*, layout::FragmentPtr> reduce_exchanges;

 private:

 private:
  template <typename F>
  bool in_scope(const ScopeRef& s, F f) {
    if (!s.var) return f();
    ScopedThreads scoped(k_, s.var, s.count);
    return f();
  }

  bool common() {
    bool changed = false;
    for (auto* op : c_.ops) {
      if (auto* impl = ops::find_tile_op(op->op)) {
        changed |= in_scope(c_.op_scope[op], [&] { return impl->infer_layout(op, ops::InferLevel::Common, ctx_, k_); });
      }
    }
    for (auto& n : c_.nests) {
      auto known = lm_.loop.find(n.outer);
      if (known == lm_.loop.end()) {
        for (auto& a : n.fragments) {
          auto f = lm_.fragment.find(a.buf.get());
          if (a.identity && f != lm_.fragment.end()) {
            lm_.loop[n.outer] = f->second;
            changed = true;
            break;
          }
          if (a.flat && f != lm_.fragment.end()) {
            lm_.loop[n.outer] = layout::make_reshaped(f->second, n.extents);
            changed = true;
            break;
          }
        }
        if (!lm_.loop.count(n.outer)) {
          if (auto l = reshaped_from_projection(n)) {
            lm_.loop[n.outer] = l;
            changed = true;
          }
        }
        known = lm_.loop.find(n.outer);
        if (known == lm_.loop.end()) continue;
      }
      for (auto& a : n.fragments) {
        auto f = lm_.fragment.find(a.buf.get());
        auto w = write_exchanges.find(n.outer);
        if (w != write_exchanges.end() && w->second == a.buf) continue;
        if (f != lm_.fragment.end()) {
          if (a.flat) {
            auto seen = layout::make_reshaped(known->second, frag_shape(a.buf));
            if (!seen->same_as(*f->second)) conflict(n, a, known->second, f->second);
            continue;
          }
          if (a.identity && !f->second->same_as(*known->second)) {
            // The loop converts a fragment into a narrower one held in another layout
            // (P = cast(S) between two gemms): it runs with the source's layout and its
            // result crosses through shared memory, at the narrower type.
            if (auto dst = narrowing_store(n, a.buf, f->second)) {
              write_exchanges[n.outer] = dst;
              lm_.loop[n.outer] = f->second;
              changed = true;
              break;
            }
            // A fragment the loop only reads, held in another layout (a gemm's output
            // split over warpgroups, read by a loop that fills another gemm's operand held
            // whole by each): its elements reach the loop's threads through shared memory.
            if (only_read(n, a.buf.get())) {
              auto& list = exchanges[n.outer];
              bool seen = false;
              for (auto& b : list) seen = seen || b == a.buf;
              if (!seen) list.push_back(a.buf);
              continue;
            }
            conflict(n, a, known->second, f->second);
          }
          // A fragment the loop only reads at other indices (lse[k, j] in a loop over j,
          // k a loop's around it; a row vector read across a loop that lays rows out
          // otherwise) where its layout does not put each element the loop needs in the
          // thread that needs it: through shared memory too.
          if (!a.identity && !a.store && never_stored(n, a.buf.get()) && !f->second->whole_in_every_thread() &&
              checked_.insert({n.outer, a.buf.get(), &a}).second && !serves(n, a, *known->second, *f->second)) {
            auto& list = exchanges[n.outer];
            bool seen = false;
            for (auto& b : list) seen = seen || b == a.buf;
            if (!seen) {
              list.push_back(a.buf);
              changed = true;
            }
          }
          continue;
        }
        if (!a.extend.empty()) {
          // lse[k, j] in a loop over j inside one over k: each thread holds, for every k,
          // the elements the loop gives it.
          if (auto ext = extended(n, a, *known->second)) {
            lm_.fragment[a.buf.get()] = ext;
            lm_.decided_at[a.buf.get()] = n.outer->loc;
            changed = true;
          }
          continue;
        }
        if (a.flat) {
          auto derived = layout::make_reshaped(known->second, frag_shape(a.buf));
          check_size(a.buf, derived, n);
          lm_.fragment[a.buf.get()] = derived;
          lm_.decided_at[a.buf.get()] = n.outer->loc;
          changed = true;
          continue;
        }
        if (a.keep.empty()) continue;
        auto derived = a.identity ? known->second : layout::make_projected(known->second, a.keep, n.outer->loc);
        auto shape = frag_shape(a.buf);
        int64_t elements = 1;
        for (int64_t e : shape) elements *= e;
        if (derived->shape() != shape && derived->num_elements() == elements) {
          derived = layout::make_reshaped(derived, shape);  // unit dimensions indexed by 0
        }
        check_size(a.buf, derived, n);
        lm_.fragment[a.buf.get()] = derived;
        lm_.decided_at[a.buf.get()] = n.outer->loc;
        changed = true;
      }
    }
    return changed;
  }

  // A loop over (128, 1) that reads r[i] of a (128,) fragment: the loop takes r's layout,
  // reshaped, when r's index covers every loop dimension longer than one.
  layout::FragmentPtr reshaped_from_projection(const Nest& n) {
    int64_t total = 1;
    for (int64_t e : n.extents) total *= e;
    for (auto& a : n.fragments) {
      auto f = lm_.fragment.find(a.buf.get());
      if (f == lm_.fragment.end() || f->second->num_elements() != total) continue;
      // A one-element fragment (a 1-D reduction's result) indexed by constants in a loop
      // of one iteration: every thread holding a copy must run it, or a write to the
      // copy reaches one thread only.
      if (a.keep.empty() && total != 1) continue;
      bool covers = true;
      for (size_t d = 0; d < n.extents.size(); ++d) {
        bool kept = std::find(a.keep.begin(), a.keep.end(), int(d)) != a.keep.end();
        if (n.extents[d] > 1 && !kept) covers = false;
      }
      if (covers) return layout::make_reshaped(f->second, n.extents);
    }
    return nullptr;
  }

  std::set<std::tuple<const ForNode*, const BufferNode*, const Access*>> checked_;  // serves() asked once

  // The layout of a fragment indexed by the nest's variables and by variables of loops
  // around it (Access::extend): the loop's layout for the nest's dimensions, each thread's
  // registers repeated for every value of the others. Null when a dimension of the
  // fragment is not the loop's extent.
  layout::FragmentPtr extended(const Nest& n, const Access& a, const layout::Fragment& loop) {
    std::vector<int64_t> shape = frag_shape(a.buf);
    for (size_t d = 0; d < shape.size(); ++d) {
      if (a.extend[d] >= 0 && shape[d] != n.extents[size_t(a.extend[d])]) return nullptr;
    }
    // Holders of each element of the loop's domain.
    std::vector<std::vector<std::pair<int, int>>> held(size_t(loop.num_elements()));
    std::vector<int64_t> c(n.extents.size());
    for (int t = 0; t < loop.threads(); ++t) {
      for (int sl = 0; sl < loop.slots(); ++sl) {
        if (loop.coords(t, sl, c.data())) held[size_t(loop.flatten(c.data()))].push_back({t, sl});
      }
    }
    int64_t total = 1;
    for (int64_t e : shape) total *= e;
    layout::Owners owners(static_cast<size_t>(total));
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t e = 0; e < total; ++e) {
      int64_t inner = 0, outer = 0;
      std::vector<int64_t> lc(n.extents.size());
      for (size_t d = 0; d < shape.size(); ++d) {
        if (a.extend[d] >= 0) lc[size_t(a.extend[d])] = idx[d];
        else outer = outer * shape[d] + idx[d];
      }
      inner = loop.flatten(lc.data());
      for (auto& [t, sl] : held[size_t(inner)]) owners[size_t(e)].push_back({t, int(outer * loop.slots() + sl)});
      for (size_t d = shape.size(); d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
    return layout::make_table(shape, loop.threads(), owners, a.buf->loc);
  }

  // Whether the loop's threads hold the elements of `a` they read: for every thread and
  // register of the loop's layout, the element its index names is held by that thread.
  // Unknown (an index reading a variable of a loop around the nest, or memory): no.
  // Whether `loop` puts each element of `frag` that the access reads in the thread that
  // reads it. An index may name variables of constant-bound serial loops around the nest
  // (acc[i + s * 16, j] in `for s in range(2)`): every value of them is checked.
  static bool serves(const Nest& n, const Access& a, const layout::Fragment& loop, const layout::Fragment& frag) {
    std::vector<const ExprNode*> outer;
    for (auto& e : a.idx) {
      post_order(make_evaluate(e), nullptr, [&](const Expr& x) {
        if (!x.as<VarNode>() || std::find(outer.begin(), outer.end(), x.get()) != outer.end()) return;
        bool mine = std::any_of(n.vars.begin(), n.vars.end(), [&](const Expr& v) { return v.same_as(x); });
        if (!mine) outer.push_back(x.get());
      });
    }
    std::vector<std::pair<int64_t, int64_t>> ranges;
    int64_t combos = 1;
    for (auto* v : outer) {
      auto r = n.around.find(v);
      if (r == n.around.end()) return false;
      ranges.push_back(r->second);
      combos *= r->second.second - r->second.first + 1;
      if (combos * loop.threads() * loop.slots() > (int64_t(1) << 24)) return false;
    }
    std::vector<int64_t> c(n.vars.size()), fc(a.idx.size()), at(outer.size());
    for (size_t i = 0; i < outer.size(); ++i) at[i] = ranges[i].first;
    VarValues values;
    for (int64_t combo = 0; combo < combos; ++combo) {
      for (size_t i = 0; i < outer.size(); ++i) values[outer[i]] = at[i];
      for (int t = 0; t < loop.threads(); ++t) {
        for (int sl = 0; sl < loop.slots(); ++sl) {
          if (!loop.coords(t, sl, c.data())) continue;
          for (size_t k = 0; k < c.size(); ++k) values[n.vars[k].get()] = c[k];
          bool inside = true;
          for (size_t k = 0; k < a.idx.size(); ++k) {
            if (!eval_int(a.idx[k], values, &fc[k])) return false;
            inside = inside && fc[k] >= 0 && fc[k] < frag.shape()[k];
          }
          if (!inside) continue;  // masked off, or past the edge: not ours to judge
          if (frag.slot_of(t, frag.flatten(fc.data())) < 0) return false;
        }
      }
      for (size_t i = outer.size(); i-- > 0;) {
        if (++at[i] <= ranges[i].second) break;
        at[i] = ranges[i].first;
      }
    }
    return true;
  }

  // Reductions derive their outputs' layouts from their inputs', so a loop over a
  // reduction's output must not choose first: chosen alone (the T.clear of an
  // accumulator), it would fix a layout the reduction cannot produce. Such loops come
  // last, and among the rest the largest first (a tile's copy before a row's loop).
  bool free_one() {
    // An op's own free choice first (a reduction of a shared source lays out the fragment
    // it stages that source in), then the loops'.
    for (auto* op : c_.ops) {
      if (auto* impl = ops::find_tile_op(op->op)) {
        if (in_scope(c_.op_scope[op], [&] { return impl->infer_layout(op, ops::InferLevel::Free, ctx_, k_); })) {
          return true;
        }
      }
    }
    std::vector<Nest*> open;
    for (auto& n : c_.nests) {
      if (!lm_.loop.count(n.outer)) open.push_back(&n);
    }
    auto size = [](const Nest* n) {
      int64_t total = 1;
      for (int64_t e : n->extents) total *= e;
      return total;
    };
    // A loop touching a reduction's output whose input is still open waits: the
    // reduction will derive that layout.
    auto waits = [&](const Nest* n) {
      for (auto* op : c_.ops) {
        if (op->op != "reduce" || op->regions.size() < 2) continue;
        const BufferNode* src = op->regions[0].buffer.get();
        const BufferNode* dst = op->regions[1].buffer.get();
        if (lm_.fragment.count(src) || lm_.fragment.count(dst)) continue;
        for (auto& a : n->fragments) {
          if (a.buf.get() == dst) return true;
        }
      }
      return false;
    };
    // A loop reading a fragment not yet laid out through a variable of a serial loop around
    // it (lse[k, j] in `for k: for j in T.Parallel(128)`, TileLang's split-KV combine) goes
    // first: the fragment then takes its layout extended over k (each thread holds its j
    // for every k), where a blocked layout chosen by the loop writing the whole fragment
    // would make every k step an exchange through shared memory.
    // Only for a fragment every store of which is element-for-element (a loop over its
    // whole shape then takes its layout) or through the same outer variables: a store in
    // another order could not be made where the extended layout holds the element.
    auto stored_plainly = [&](const BufferNode* b) {
      for (auto& m : c_.nests) {
        for (auto& a : m.fragments) {
          if (a.buf.get() == b && a.store && !a.identity && a.extend.empty()) return false;
        }
      }
      return true;
    };
    auto extends = [&](const Nest* n) {
      for (auto& a : n->fragments) {
        if (!a.store && a.outer && !a.extend.empty() && !lm_.fragment.count(a.buf.get()) &&
            stored_plainly(a.buf.get())) {
          return true;
        }
      }
      return false;
    };
    std::stable_sort(open.begin(), open.end(), [&](const Nest* a, const Nest* b) {
      bool wa = waits(a), wb = waits(b);
      if (wa != wb) return wb;
      bool ea = extends(a), eb = extends(b);
      return ea != eb ? ea : size(a) > size(b);
    });
    for (Nest* np : open) {
      Nest& n = *np;
      int bytes = n.min_mem_bytes;
      if (!bytes) {
        for (auto& a : n.fragments) bytes = bytes ? std::min(bytes, a.buf->dtype.bytes()) : a.buf->dtype.bytes();
      }
      if (!bytes) bytes = 4;
      if (auto l = layout_serving_reads(n)) {
        lm_.loop[n.outer] = l;
        return true;
      }
      int threads = int(n.scope.count);
      if (n.fragments.empty() && n.scattered) {
        // A copy from or to a tensor under a T.Layout, which has no vectors: consecutive
        // threads take consecutive elements, dealt out evenly over every thread.
        lm_.loop[n.outer] = layout::make_blocked(n.extents, threads, 1);
        return true;
      }
      // Rows to power-of-two thread groups, so that reductions along the last dimension
      // are butterflies and every thread's accesses stay in one row. A loop that reads or
      // writes a fragment across a serial loop (lse[k, j] in `for k: for j in
      // T.Parallel(128)`) sets the fragment's layout, extended over k, and so how many
      // threads every later loop over it runs on: its vector is no wider than leaves a
      // thread idle (the combine's 128 columns on 128 threads, one each). Every such loop
      // chooses alike, so a store and a read of the fragment agree.
      int vec = layout::choose_row_vector(n.extents.back(), bytes);
      bool across_serial = false;
      for (auto& a : n.fragments) across_serial |= a.outer && !a.extend.empty();
      if (across_serial) {
        int64_t total = 1;
        for (int64_t e : n.extents) total *= e;
        vec = std::min(vec, layout::choose_vector(n.extents.back(), total, threads, bytes));
      }
      lm_.loop[n.outer] = layout::make_row_blocked(n.extents, threads, vec);
      return true;
    }
    return false;
  }

  // A loop reading a fragment of its own shape at other indices than its variables
  // (acc[i + s * 16, j] for i < 16, in `for s in range(2)`) runs with that fragment's
  // layout when, so laid out, every thread holds each element it reads of every fragment
  // with a layout: no exchange through shared memory is needed.
  layout::FragmentPtr layout_serving_reads(const Nest& n) {
    for (auto& a : n.fragments) {
      auto f = lm_.fragment.find(a.buf.get());
      if (a.store || a.identity || f == lm_.fragment.end() || f->second->whole_in_every_thread()) continue;
      if (f->second->shape() != n.extents || f->second->threads() != int(n.scope.count)) continue;
      bool all = true;
      for (auto& b : n.fragments) {
        auto fb = lm_.fragment.find(b.buf.get());
        if (fb == lm_.fragment.end() || (!b.store && fb->second->whole_in_every_thread())) continue;
        all = all && !b.store && serves(n, b, *f->second, *fb->second);
      }
      if (all) return f->second;
    }
    return nullptr;
  }

  // The one fragment the loop stores, when the loop can run with `read`'s layout instead:
  // every other fragment access is an element-for-element read in that layout, and the
  // stored fragment's type is narrower than `read`'s.
  Buffer narrowing_store(const Nest& n, const Buffer& read, const layout::FragmentPtr& read_layout) {
    Buffer dst;
    for (auto& a : n.fragments) {
      if (a.store) {
        if (!a.identity || (dst && dst != a.buf)) return nullptr;
        dst = a.buf;
      }
    }
    if (!dst || dst->dtype.bytes() >= read->dtype.bytes()) return nullptr;
    for (auto& a : n.fragments) {
      if (a.buf == dst) {
        if (!a.store && !a.identity) return nullptr;
        continue;
      }
      auto f = lm_.fragment.find(a.buf.get());
      if (!a.identity || f == lm_.fragment.end() || !f->second->same_as(*read_layout)) return nullptr;
    }
    return dst;
  }

  static bool never_stored(const Nest& n, const BufferNode* b) {
    for (auto& a : n.fragments) {
      if (a.buf.get() == b && a.store) return false;
    }
    return true;
  }

  static bool only_read(const Nest& n, const BufferNode* b) {
    for (auto& a : n.fragments) {
      if (a.buf.get() == b && (a.store || !a.identity)) return false;
    }
    return true;
  }

 public:
  // Loops (outermost T.Parallel) -> fragments they read through shared memory.
  std::map<const StmtNode*, std::vector<Buffer>> exchanges;
  // Loops -> the fragment they write through shared memory.
  std::map<const StmtNode*, Buffer> write_exchanges;

 private:
  void check_size(const Buffer& b, const layout::FragmentPtr& l, const Nest& n) {
    auto shape = frag_shape(b);
    user_assert(shape == l->shape(), n.outer->loc)
        << "the T.Parallel loop indexes fragment '" << b->name << "' over a different shape than it was allocated with";
  }

  [[noreturn]] void conflict(const Nest& n, const Access& a, const layout::FragmentPtr& loop,
                             const layout::FragmentPtr& frag) {
    SourceLoc at = lm_.decided_at.count(a.buf.get()) ? lm_.decided_at[a.buf.get()] : a.buf->loc;
    user_error(n.outer->loc) << "layout conflict: this T.Parallel loop runs with layout " << loop->describe()
                             << ", but fragment '" << a.buf->name << "' already has layout " << frag->describe()
                             << " (decided at line " << at.line << ")";
    throw;  // unreachable
  }

  Kernel& k_;
  PassContext& ctx_;
  LayoutMap& lm_;
  Collector& c_;
};

}  // namespace

void infer_layout(Kernel& k, PassContext& ctx) {
  k.body = run_thread_private_nests(k.body);
  k.body = pad_nests_to_fragments(k.body);
  Collector c(k);
  c.visit(k.body);
  // Fragments one statement relates are one group for the choice of gemm instruction.
  std::map<const BufferNode*, const BufferNode*> parent;
  std::function<const BufferNode*(const BufferNode*)> group_of = [&](const BufferNode* b) {
    auto it = parent.find(b);
    if (it == parent.end() || it->second == b) return b;
    return it->second = group_of(it->second);
  };
  auto relate = [&](const std::vector<const BufferNode*>& bufs) {
    for (size_t i = 1; i < bufs.size(); ++i) {
      const BufferNode *a = group_of(bufs[0]), *b = group_of(bufs[i]);
      if (a != b) parent[b] = a;
    }
  };
  for (const Nest& n : c.nests) {
    std::vector<const BufferNode*> bufs;
    for (const Access& a : n.fragments) bufs.push_back(a.buf.get());
    relate(bufs);
  }
  std::set<const TileOpNode*> guarded;  // a gemm under a thread guard runs on mma.sync:
  for (const TileOpNode* op : c.ops) {  // wgmma's warpgroups are the block's
    std::vector<const BufferNode*> bufs;
    for (auto& r : op->regions) {
      if (r.buffer->scope == Scope::Fragment) bufs.push_back(r.buffer.get());
    }
    relate(bufs);
    if (op->op == "gemm" && c.op_scope[op].var) guarded.insert(op);
  }
  ctx.wgmma_accumulators = ops::wgmma_accumulators(k, ctx, group_of, guarded);
  // On sm_90a a guarded gemm runs on mma.sync; where its scope is whole warpgroups and
  // wgmma could run it, with wgmma's warp split (each warpgroup's 4 warps along M), so its
  // fragments take the layouts TileLang's wgmma gives them there: a P = cast(Q Kᵀ) feeds
  // P V in place and rows reduce within a warp, with no exchange through shared memory.
  // A group takes that split only when all its gemms do.
  if (ctx.target.arch == "sm_90a" && !ctx.options.disable_wgmma) {
    std::map<const BufferNode*, bool> split;
    for (const TileOpNode* op : c.ops) {
      if (op->op != "gemm") continue;
      const ScopeRef& s = c.op_scope[op];
      bool fits = s.var && s.range.lo % 128 == 0 && s.count % 128 == 0;
      if (fits) {
        ScopedThreads scoped(k, s.var, s.count);
        fits = ops::wgmma_fits(op, k);
      }
      auto it = split.emplace(group_of(op->regions.at(2).buffer.get()), true).first;
      it->second = it->second && fits;
    }
    for (const TileOpNode* op : c.ops) {
      const BufferNode* acc = op->op == "gemm" ? op->regions.at(2).buffer.get() : nullptr;
      if (acc && split.at(group_of(acc))) ctx.warpgroup_split.insert(acc);
    }
  }
  Inference inference(k, ctx, c);
  inference.run();
  if (!inference.exchanges.empty() || !inference.write_exchanges.empty()) {
    k.body = insert_exchanges(k.body, inference.exchanges, inference.write_exchanges, ctx);
  }
  if (!inference.reduce_exchanges.empty()) {
    k.body = insert_reduce_exchanges(k.body, inference.reduce_exchanges, k, ctx);
  }
}

}  // namespace tegula::transform
