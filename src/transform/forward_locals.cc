// Pass: forward_locals (after pack_casts).
//
// The vectorisers stage a group's values through small register arrays: a vector load
// lands in `vld`, its elements are copied or computed into `vst`, and `vst` is stored as
// one vector. Where the staging does nothing but pass the vector on, the printed kernel
// pays for it anyway: NVVM splits every staged array back into registers before it sees
// the copy, which for a kernel's epilogue (a 128 x 128 tile converted and written through
// shared memory) is a tenth of the whole compile.
//
// Expects: per-thread code after pack_casts. Guarantees: within one statement list,
//   t[c:+w] = V;                          (t a register array, c a constant)
//   [u[e + i] = t[c + i];  i = 0 .. w-1]   (optional: t copied element by element into u)
//   [if (p)] dst[j:+w] = s[c':+w];         (s = u when the copies are there, else t)
// becomes `[if (p)] dst[j:+w] = V;` when t (and u) are read nowhere else in the kernel,
// and so does `u[e + i] = r[d + i] (i = 0 .. w-1); [if (p)] dst[j:+w] = u[e:+w]` with
// V = r[d:+w], a whole aligned vector of register array r (d a multiple of w; 4, 8 or 16
// bytes), when u is read nowhere else;
// the test p reads neither, and V is a vector the printer writes straight into memory:
// a load of dst's element type, or a conversion of a pair (pack_casts). V is evaluated
// where the last statement stood, after statements that touch only t and u, so it reads
// what it read before; under a test it is only evaluated where the store happens, which
// for a load (no side effect) changes nothing stored. An array that no statement reads
// any more is dropped from the kernel's declarations.
#include <map>
#include <set>

#include "ir/functor.h"
#include "transform/passes.h"
#include "transform/seq_windows.h"

namespace tegula::transform {

using namespace ir;

namespace {

// A store of all its lanes into register array `buffer` at constant `at` (one dimension).
struct LocalStore {
  const BufferStoreNode* store = nullptr;
  int64_t at = 0;
  int lanes = 0;
};

bool as_local_store(const Stmt& s, LocalStore* out) {
  auto* st = s.as<BufferStoreNode>();
  if (!st || st->buffer->scope != Scope::Local || st->buffer->scalar || st->indices.size() != 1) return false;
  const int64_t* at = as_const_int(st->indices[0]);
  if (!at) return false;
  *out = {st, *at, st->value.dtype().lanes};
  return true;
}

// `e` as a load of `lanes` lanes of register array b from constant `at`.
bool loads_local(const Expr& e, const Buffer& b, int64_t at, int lanes) {
  auto* ld = e.as<BufferLoadNode>();
  if (!ld || ld->buffer != b || ld->indices.size() != 1 || ld->dtype.lanes != lanes) return false;
  const int64_t* i = as_const_int(ld->indices[0]);
  return i && *i == at;
}

// Values the printer stores into memory as one access: a load of the destination's type
// (a vector copy) or a pair conversion of two registers (pack_casts).
bool printable_into(const Expr& v, const Buffer& dst, int sm) {
  if (!dst || dst->scope == Scope::Local) return false;
  if (auto* ld = v.as<BufferLoadNode>()) return ld->buffer->dtype == dst->dtype && !ld->buffer->dtype.is_packed();
  auto* cast = v.as<CastNode>();
  auto* src = cast ? cast->value.as<BufferLoadNode>() : nullptr;
  return src && src->buffer->scope == Scope::Local && cast->dtype.lanes == 2 &&
         cast->dtype.element() == dst->dtype && converts_pairs(src->dtype.element(), cast->dtype.element(), sm);
}

bool reads_any(const Expr& e, const std::set<const BufferNode*>& bufs) {
  bool found = false;
  post_order(make_evaluate(e), [](const Stmt&) {}, [&](const Expr& x) {
    if (auto* ld = x.as<BufferLoadNode>()) found |= bufs.count(ld->buffer.get()) > 0;
  });
  return found;
}

class Forward : public IRMutator {
 public:
  Forward(const std::map<const BufferNode*, int>& reads, int sm) : reads_(reads), sm_(sm) {}
  std::set<const BufferNode*> dropped;

  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override {
    return rewrite_windows(*this, self, op, [this](const std::vector<Stmt>& in, size_t i, size_t* used) {
      return forwarded(in, i, used);
    });
  }

 private:
  // Whether the kernel reads b exactly n times (loads of it, wherever they are).
  bool reads_exactly(const Buffer& b, int n) const {
    auto it = reads_.find(b.get());
    return it != reads_.end() && it->second == n;
  }

  // The pattern at in[i]: the statement that replaces it and how many it replaces.
  Stmt forwarded(const std::vector<Stmt>& in, size_t i, size_t* used) {
    LocalStore a;
    if (!as_local_store(in[i], &a)) return {};
    if (a.lanes == 1) return copied_out(in, i, used);
    const Buffer& t = a.store->buffer;
    Buffer staged = t;
    int64_t staged_at = a.at;
    size_t next = i + 1;
    std::set<const BufferNode*> temps = {t.get()};
    // Element-by-element copies of t into u.
    LocalStore c0;
    if (next < in.size() && as_local_store(in[next], &c0) && c0.lanes == 1 && c0.store->buffer != t &&
        loads_local(c0.store->value, t, a.at, 1)) {
      const Buffer& u = c0.store->buffer;
      if (u->dtype != t->dtype || !reads_exactly(u, 1) || !reads_exactly(t, a.lanes)) return {};
      if (copies(in, next, u, c0.at, t, a.at) < a.lanes) return {};
      next += a.lanes;
      staged = u;
      staged_at = c0.at;
      temps.insert(u.get());
    } else if (!reads_exactly(t, 1)) {
      return {};
    }
    if (!printable_into(a.store->value, next < in.size() ? stored_buffer(in[next]) : Buffer(), sm_)) return {};
    return stored_out(in, i, next, staged, staged_at, a.lanes, temps, a.store->value, used);
  }

  // u[e + l] = r[d + l], l = 0, 1, ...: one register array's elements copied one by one
  // into another's, then u[e:+w] stored: the store reads r[d:+w] itself.
  Stmt copied_out(const std::vector<Stmt>& in, size_t i, size_t* used) {
    auto* st = in[i].as<BufferStoreNode>();
    auto* ld = st->value.as<BufferLoadNode>();
    const int64_t* d = ld && ld->buffer->scope == Scope::Local && !ld->buffer->scalar && ld->indices.size() == 1
                           ? as_const_int(ld->indices[0])
                           : nullptr;
    const Buffer& u = st->buffer;
    if (!d || ld->buffer == u || ld->buffer->dtype != u->dtype || !reads_exactly(u, 1)) return {};
    const Buffer& r = ld->buffer;
    int64_t e = *as_const_int(st->indices[0]);
    int n = copies(in, i, u, e, r, *d);
    int64_t bytes = int64_t(n) * r->dtype.bytes();
    // A vector of r: whole, aligned (the printer aligns r for it), one CUDA vector type.
    if (n < 2 || (n & (n - 1)) || *d % n || (bytes != 4 && bytes != 8 && bytes != 16)) return {};
    Expr value = make_load(r, {make_int(*d)}, ld->loc, n);
    if (i + n >= in.size() || !printable_into(value, stored_buffer(in[i + n]), sm_)) return {};
    return stored_out(in, i, i + n, u, e, n, {u.get()}, value, used);
  }

  // How many statements from in[at] copy src[s + l] into dst[e + l], l = 0, 1, ...
  static int copies(const std::vector<Stmt>& in, size_t at, const Buffer& dst, int64_t e, const Buffer& src,
                    int64_t s) {
    int n = 0;
    LocalStore c;
    while (at + n < in.size() && as_local_store(in[at + n], &c) && c.store->buffer == dst && c.lanes == 1 &&
           c.at == e + n && loads_local(c.store->value, src, s + n, 1)) {
      ++n;
    }
    return n;
  }

  // The buffer `s` stores into, under a test or not (null for anything else).
  static Buffer stored_buffer(const Stmt& s) {
    const BufferStoreNode* st = s.as<BufferStoreNode>();
    if (auto* n = s.as<IfThenElseNode>(); n && !n->else_case) st = n->then_case.as<BufferStoreNode>();
    return st ? st->buffer : Buffer();
  }

  // in[last], [if (p)] dst[j:+w] = staged[at:+w], as `[if (p)] dst[j:+w] = value`,
  // replacing in[first .. last]; null when in[last] is not that store or its test or
  // indices read the staging arrays.
  Stmt stored_out(const std::vector<Stmt>& in, size_t first, size_t last, const Buffer& staged, int64_t at,
                  int lanes, const std::set<const BufferNode*>& temps, const Expr& value, size_t* used) {
    if (last >= in.size()) return {};
    const Stmt& s = in[last];
    Expr cond;
    const BufferStoreNode* st = s.as<BufferStoreNode>();
    if (auto* n = s.as<IfThenElseNode>(); n && !n->else_case) {
      cond = n->cond;
      st = n->then_case.as<BufferStoreNode>();
    }
    if (!st || st->buffer->scope == Scope::Local || !loads_local(st->value, staged, at, lanes)) return {};
    if (cond && reads_any(cond, temps)) return {};
    for (const Expr& x : st->indices) {
      if (reads_any(x, temps)) return {};
    }
    Stmt store = make_store(st->buffer, st->indices, value, st->loc);
    *used = last - first + 1;
    dropped.insert(temps.begin(), temps.end());
    return cond ? make_if(cond, store, {}, s->loc) : store;
  }

  const std::map<const BufferNode*, int>& reads_;
  int sm_;
};

}  // namespace

void forward_locals(Kernel& k, PassContext& ctx) {
  if (ctx.options.disable_vectorize) return;
  std::map<const BufferNode*, int> reads;
  post_order(k.body, [](const Stmt&) {}, [&](const Expr& x) {
    if (auto* ld = x.as<BufferLoadNode>()) ++reads[ld->buffer.get()];
  });
  Forward f(reads, ctx.target.sm);
  k.body = f.mutate(k.body);
  if (f.dropped.empty()) return;
  // Drop the arrays no statement reads or writes any more.
  std::set<const BufferNode*> live;
  post_order(k.body, [&](const Stmt& s) {
    if (auto* st = s.as<BufferStoreNode>()) live.insert(st->buffer.get());
  }, [&](const Expr& x) {
    if (auto* ld = x.as<BufferLoadNode>()) live.insert(ld->buffer.get());
  });
  std::vector<Buffer> kept;
  for (const Buffer& b : k.allocs) {
    if (!f.dropped.count(b.get()) || live.count(b.get())) kept.push_back(b);
  }
  k.allocs = kept;
}

}  // namespace tegula::transform
