#include "layout/fragment.h"

#include <algorithm>

#include "ir/analyzer.h"

namespace tegula::layout {

using namespace ir;

Fragment::Fragment(std::vector<int64_t> shape, int threads, int slots)
    : shape_(std::move(shape)), threads_(threads), slots_(slots) {}

int64_t Fragment::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

int64_t Fragment::flatten(const int64_t* c) const {
  int64_t f = 0;
  for (size_t k = 0; k < shape_.size(); ++k) f = f * shape_[k] + c[k];
  return f;
}

void Fragment::build_table() const {
  if (!owners_.empty()) return;
  owners_.assign(num_elements(), {});
  std::vector<int64_t> c(shape_.size());
  for (int t = 0; t < threads_; ++t) {
    for (int s = 0; s < slots_; ++s) {
      if (coords(t, s, c.data())) owners_[flatten(c.data())].push_back({t, s});
    }
  }
}

int Fragment::slot_of(int t, int64_t flat) const {
  build_table();
  if (flat < 0 || flat >= int64_t(owners_.size())) return -1;
  for (auto& [tt, s] : owners_[flat]) {
    if (tt == t) return s;
  }
  return -1;
}

int Fragment::holders(int64_t flat) const {
  build_table();
  return flat < 0 || flat >= int64_t(owners_.size()) ? 0 : int(owners_[flat].size());
}

int Fragment::replicate_mask() const {
  if (replicate_mask_ >= 0) return replicate_mask_;
  build_table();
  int mask = 0;
  for (auto& o : owners_) {
    for (auto& [t, s] : o) mask |= t ^ o[0].first;
  }
  replicate_mask_ = mask;
  return mask;
}

bool Fragment::xor_groups_consistent(int mask, bool need_base) const {
  // Per slot, every thread of a group (same bits outside mask) must hold the same element
  // or nothing; linear in threads x slots.
  std::vector<int64_t> c(shape_.size());
  std::vector<int64_t> group_elem(threads_);
  for (int s = 0; s < slots_; ++s) {
    std::fill(group_elem.begin(), group_elem.end(), -1);
    for (int t = 0; t < threads_; ++t) {
      if (!coords(t, s, c.data())) continue;
      int64_t e = flatten(c.data());
      int64_t& g = group_elem[t & ~mask];
      if (g >= 0 && g != e) return false;
      g = e;
    }
    if (!need_base) continue;
    for (int t = 0; t < threads_; ++t) {
      int base = t & ~mask;
      if (group_elem[base] >= 0 && !coords(base, s, c.data())) return false;
    }
  }
  return true;
}

bool Fragment::same_as(const Fragment& o) const {
  if (this == &o) return true;
  if (shape_ != o.shape_ || threads_ != o.threads_ || slots_ != o.slots_) return false;
  std::vector<int64_t> a(shape_.size()), b(shape_.size());
  for (int t = 0; t < threads_; ++t) {
    for (int s = 0; s < slots_; ++s) {
      bool va = coords(t, s, a.data()), vb = o.coords(t, s, b.data());
      if (va != vb || (va && a != b)) return false;
    }
  }
  return true;
}

namespace {

std::vector<Expr> unflatten(const Expr& flat, const std::vector<int64_t>& shape) {
  std::vector<Expr> out(shape.size());
  int64_t stride = 1;
  for (int k = int(shape.size()) - 1; k >= 0; --k) {
    Expr q = stride == 1 ? flat : floordiv(flat, make_int(stride));
    out[k] = k == 0 ? q : floormod(q, make_int(shape[k]));
    stride *= shape[k];
  }
  return out;
}

void unflatten(int64_t f, const std::vector<int64_t>& shape, int64_t* out) {
  for (int k = int(shape.size()) - 1; k >= 0; --k) {
    out[k] = f % shape[k];
    f /= shape[k];
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  Text os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ")";
  return os.str();
}

class Blocked : public Fragment {
 public:
  Blocked(std::vector<int64_t> shape, int threads, int vec)
      : Fragment(std::move(shape), threads, 0), vec_(vec) {
    int64_t per_round = int64_t(threads) * vec;
    slots_ = int((num_elements() + per_round - 1) / per_round) * vec;
  }
  int vector_width() const override { return vec_; }
  bool coords(int t, int s, int64_t* out) const override {
    int64_t f = (int64_t(s / vec_) * threads_ + t) * vec_ + s % vec_;
    if (f >= num_elements()) return false;
    unflatten(f, shape_, out);
    return true;
  }
  std::vector<Expr> coords_expr(const Expr& tx, int s, Expr* valid) const override {
    Expr f = tx * int64_t(vec_) + int64_t(int64_t(s / vec_) * threads_ * vec_ + s % vec_);
    *valid = Expr();
    if (num_elements() % (int64_t(threads_) * vec_) != 0) *valid = f < make_int(num_elements());
    return unflatten(f, shape_);
  }
  std::string describe() const override {
    Text os;
    os << "blocked" << shape_str(shape_) << " threads=" << threads_ << " vec=" << vec_ << " slots=" << slots_;
    return os.str();
  }

 private:
  int vec_;
};

// Rows (every dimension but the last) dealt to groups of `lanes` consecutive threads, a
// power of two, so the threads sharing a row differ only in their low bits: a row's
// reduction is then a butterfly over those bits. A block of threads that are not a whole
// number of groups (448 threads, 256 lanes) leaves the threads past the last group idle. Within its row a lane takes every
// lanes-th vector of `vec` elements; a row shorter than lanes*k vectors leaves the last
// slots of some lanes empty.
//   RowBlocked({3, 24}, threads=8, vec=8): 3 vectors a row, lanes = 2, 4 row groups;
//   thread 1 holds (0, 8..15) in slots 0..7, thread 0 holds (0, 0..7) and (0, 16..23).
class RowBlocked : public Fragment {
 public:
  RowBlocked(std::vector<int64_t> shape, int threads, int vec) : Fragment(std::move(shape), threads, 0), vec_(vec) {
    cols_ = shape_.back();
    rows_ = num_elements() / cols_;
    nv_ = (cols_ + vec_ - 1) / vec_;
    lanes_ = 1;
    while (lanes_ * 2 <= nv_ && lanes_ * 2 <= threads_) lanes_ *= 2;
    groups_ = threads_ / lanes_;
    kv_ = int((nv_ + lanes_ - 1) / lanes_);
    rounds_ = int((rows_ + groups_ - 1) / groups_);
    slots_ = rounds_ * kv_ * vec_;
  }
  int vector_width() const override { return vec_; }
  bool coords(int t, int s, int64_t* out) const override {
    if (t >= groups_ * lanes_) return false;  // threads past the last whole group of lanes
    int v = s % vec_, k = (s / vec_) % kv_, r = s / (vec_ * kv_);
    int64_t row = int64_t(r) * groups_ + t / lanes_;
    int64_t vi = int64_t(k) * lanes_ + t % lanes_;
    if (row >= rows_ || vi >= nv_ || vi * vec_ + v >= cols_) return false;
    unflatten(row, std::vector<int64_t>(shape_.begin(), shape_.end() - 1), out);
    out[shape_.size() - 1] = vi * vec_ + v;
    return true;
  }
  std::vector<Expr> coords_expr(const Expr& tx, int s, Expr* valid) const override {
    int v = s % vec_, k = (s / vec_) % kv_, r = s / (vec_ * kv_);
    Expr row = floordiv(tx, make_int(lanes_)) + int64_t(r) * groups_;
    Expr vi = floormod(tx, make_int(lanes_)) + int64_t(k) * lanes_;
    *valid = Expr();
    if (rows_ % groups_ != 0) *valid = row < make_int(rows_);
    if (nv_ % lanes_ != 0) {
      Expr c = vi < make_int(nv_);
      *valid = *valid ? (*valid && c) : c;
    }
    if (groups_ * lanes_ != threads_) {
      // A block whose threads are not a whole number of lane groups (448 threads, rows of
      // 256 lanes): the threads past the last group hold nothing. Without this they would
      // take rows past the ones their group covers, ones another block or round holds.
      Expr c = tx < make_int(groups_ * lanes_);
      *valid = *valid ? (*valid && c) : c;
    }
    std::vector<Expr> out;
    if (shape_.size() > 1) out = unflatten(row, std::vector<int64_t>(shape_.begin(), shape_.end() - 1));
    out.push_back(vi * int64_t(vec_) + int64_t(v));
    return out;
  }
  std::string describe() const override {
    Text os;
    os << "row_blocked" << shape_str(shape_) << " threads=" << threads_ << " lanes=" << lanes_ << " vec=" << vec_
       << " slots=" << slots_;
    return os.str();
  }

 private:
  int vec_, kv_, rounds_;
  int64_t cols_, rows_, nv_, lanes_, groups_;
};

// The same threads and slots as `base`, seen through another shape with as many
// elements (row-major order kept): a (128,) row result used in a T.Parallel(128, 1) loop.
class Reshaped : public Fragment {
 public:
  Reshaped(FragmentPtr base, std::vector<int64_t> shape)
      : Fragment(std::move(shape), base->threads(), base->slots()), base_(std::move(base)) {}
  int vector_width() const override { return base_->vector_width(); }
  bool coords(int t, int s, int64_t* out) const override {
    int64_t c[8];
    if (!base_->coords(t, s, c)) return false;
    unflatten(base_->flatten(c), shape_, out);
    return true;
  }
  std::vector<Expr> coords_expr(const Expr& tx, int s, Expr* valid) const override {
    auto c = base_->coords_expr(tx, s, valid);
    Expr flat;
    for (size_t k = 0; k < c.size(); ++k) flat = flat ? flat * base_->shape()[k] + c[k] : c[k];
    return unflatten(flat, shape_);
  }
  std::string describe() const override { return "reshaped" + shape_str(shape_) + " of " + base_->describe(); }

 private:
  FragmentPtr base_;
};

class Permuted : public Fragment {
 public:
  Permuted(FragmentPtr base, std::vector<int> order)
      : Fragment(permuted_shape(*base, order), base->threads(), base->slots()), base_(std::move(base)),
        order_(std::move(order)) {}
  int vector_width() const override {
    return order_.back() == int(order_.size()) - 1 ? base_->vector_width() : 1;
  }
  bool coords(int t, int s, int64_t* out) const override {
    int64_t c[8];
    if (!base_->coords(t, s, c)) return false;
    for (size_t d = 0; d < order_.size(); ++d) out[order_[d]] = c[d];
    return true;
  }
  std::vector<Expr> coords_expr(const Expr& tx, int s, Expr* valid) const override {
    auto c = base_->coords_expr(tx, s, valid);
    std::vector<Expr> out(c.size());
    for (size_t d = 0; d < order_.size(); ++d) out[size_t(order_[d])] = c[d];
    return out;
  }
  std::string describe() const override {
    Text os;
    os << "permuted(";
    for (size_t d = 0; d < order_.size(); ++d) os << (d ? ", " : "") << order_[d];
    os << ") of " << base_->describe();
    return os.str();
  }

 private:
  static std::vector<int64_t> permuted_shape(const Fragment& base, const std::vector<int>& order) {
    internal_assert(order.size() == base.shape().size() && order.size() <= 8) << "make_permuted: bad order";
    std::vector<int64_t> shape(order.size(), 0);
    for (size_t d = 0; d < order.size(); ++d) {
      internal_assert(order[d] >= 0 && order[d] < int(order.size()) && shape[size_t(order[d])] == 0)
          << "make_permuted: order is not a permutation";
      shape[size_t(order[d])] = base.shape()[d];
    }
    return shape;
  }
  FragmentPtr base_;
  std::vector<int> order_;
};

class Replicated : public Fragment {
 public:
  Replicated(std::vector<int64_t> shape, int threads) : Fragment(std::move(shape), threads, 0) {
    slots_ = int(num_elements());
  }
  bool coords(int, int s, int64_t* out) const override {
    unflatten(s, shape_, out);
    return true;
  }
  std::vector<Expr> coords_expr(const Expr&, int s, Expr* valid) const override {
    *valid = Expr();
    std::vector<int64_t> c(shape_.size());
    unflatten(s, shape_, c.data());
    std::vector<Expr> out;
    for (int64_t v : c) out.push_back(make_int(v));
    return out;
  }
  std::string describe() const override { return "replicated" + shape_str(shape_); }
  bool whole_in_every_thread() const override { return true; }
};

class Projected : public Fragment {
 public:
  Projected(FragmentPtr base, std::vector<int> keep, const SourceLoc& loc)
      : Fragment({}, base->threads(), 0), base_(std::move(base)), keep_(std::move(keep)) {
    for (int k : keep_) shape_.push_back(base_->shape()[k]);
    if (shape_.empty()) shape_.push_back(1);
    // Number each thread's distinct projected elements in slot order; the numbering must
    // not depend on the thread, or no single register index would serve all threads.
    int nb = base_->slots();
    slot_of_base_.assign(nb, -1);
    std::vector<int64_t> c(base_->shape().size());
    for (int t = 0; t < threads_; ++t) {
      std::vector<int64_t> seen;  // projected flat index per new slot
      for (int s = 0; s < nb; ++s) {
        if (!base_->coords(t, s, c.data())) continue;
        int64_t pf = project_flat(c.data());
        auto it = std::find(seen.begin(), seen.end(), pf);
        int p = int(it - seen.begin());
        if (it == seen.end()) seen.push_back(pf);
        if (slot_of_base_[s] == -1) {
          slot_of_base_[s] = p;
        } else if (slot_of_base_[s] != p) {
          user_error(loc) << "cannot derive a register layout for a " << shape_str(shape_)
                          << " fragment from the layout " << base_->describe()
                          << ": threads would keep its elements in different registers";
        }
      }
      slots_ = std::max(slots_, int(seen.size()));
    }
    first_base_slot_.assign(slots_, -1);
    for (int s = nb - 1; s >= 0; --s) {
      if (slot_of_base_[s] >= 0) first_base_slot_[slot_of_base_[s]] = s;
    }
  }
  bool coords(int t, int s, int64_t* out) const override {
    if (s >= slots_ || first_base_slot_[s] < 0) return false;
    int64_t c[8];
    internal_assert(base_->shape().size() <= 8) << "tiles have at most 8 dimensions";
    if (!base_->coords(t, first_base_slot_[s], c)) return false;
    project(c, out);
    return true;
  }
  std::vector<Expr> coords_expr(const Expr& tx, int s, Expr* valid) const override {
    auto c = base_->coords_expr(tx, first_base_slot_[s], valid);
    std::vector<Expr> out;
    for (int k : keep_) out.push_back(c[k]);
    if (out.empty()) out.push_back(make_int(0));
    return out;
  }
  std::string describe() const override {
    Text os;
    os << "projected" << shape_str(shape_) << " of " << base_->describe();
    return os.str();
  }

 private:
  void project(const int64_t* c, int64_t* out) const {
    if (keep_.empty()) {
      out[0] = 0;
      return;
    }
    for (size_t k = 0; k < keep_.size(); ++k) out[k] = c[keep_[k]];
  }
  int64_t project_flat(const int64_t* c) const {
    int64_t f = 0;
    for (int k : keep_) f = f * base_->shape()[k] + c[k];
    return f;
  }
  FragmentPtr base_;
  std::vector<int> keep_;
  std::vector<int> slot_of_base_, first_base_slot_;
};

// A formula of the thread index, fitted to the values v[i] it must take at threads ts[i]:
// affine (base + stride * tx) or bit-linear (base + sum of weight * bit k of tx).
struct ThreadFormula {
  int64_t base = 0, stride = 0;
  bool bit_linear = false;
  std::vector<std::pair<int, int64_t>> bits;  // (k, weight)

  bool fit(const std::vector<int>& ts, const std::vector<int64_t>& v, int threads) {
    if (fit_affine(ts, v)) return true;
    return fit_bits(ts, v, threads);
  }
  int64_t at(int t) const {
    if (!bit_linear) return base + stride * t;
    int64_t r = base;
    for (auto& [k, w] : bits) r += w * ((t >> k) & 1);
    return r;
  }
  // Consecutive bits whose weights double form one field: w * ((tx >> k) % 2^len).
  Expr expr(const Expr& tx, int threads) const {
    Expr out = make_int(base);
    if (!bit_linear) return stride ? tx * stride + base : out;
    for (size_t i = 0; i < bits.size();) {
      size_t j = i + 1;
      while (j < bits.size() && bits[j].first == bits[j - 1].first + 1 && bits[j].second == 2 * bits[j - 1].second) ++j;
      int k = bits[i].first, len = int(j - i);
      Expr field = k ? floordiv(tx, make_int(int64_t(1) << k)) : tx;
      if ((int64_t(1) << (k + len)) < threads) field = floormod(field, make_int(int64_t(1) << len));
      out = out + field * bits[i].second;
      i = j;
    }
    return out;
  }

 private:
  bool check(const std::vector<int>& ts, const std::vector<int64_t>& v) const {
    for (size_t i = 0; i < ts.size(); ++i) {
      if (at(ts[i]) != v[i]) return false;
    }
    return true;
  }
  bool fit_affine(const std::vector<int>& ts, const std::vector<int64_t>& v) {
    bit_linear = false;
    stride = 0;
    if (ts.size() > 1) {
      int64_t dv = v[1] - v[0], dt = ts[1] - ts[0];
      if (dv % dt != 0) return false;
      stride = dv / dt;
    }
    base = v[0] - stride * ts[0];
    return check(ts, v);
  }
  bool fit_bits(const std::vector<int>& ts, const std::vector<int64_t>& v, int threads) {
    bit_linear = true;
    bits.clear();
    std::vector<int> pos(threads, -1);
    int varying = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      pos[ts[i]] = int(i);
      varying |= ts[i] ^ ts[0];
    }
    for (int k = 0; (1 << k) <= varying; ++k) {
      if (!(varying >> k & 1)) continue;
      int pair = -1;
      for (size_t i = 0; i < ts.size() && pair < 0; ++i) {
        int other = ts[i] ^ (1 << k);
        if (!(ts[i] >> k & 1) && other < threads && pos[other] >= 0) pair = int(i);
      }
      if (pair < 0) return false;
      int64_t w = v[pos[ts[pair] ^ (1 << k)]] - v[pair];
      if (w) bits.push_back({k, w});
    }
    base = 0;
    base = v[0] - at(ts[0]);
    return check(ts, v);
  }
};

// A user's layout, from the table its T.Fragment evaluated to (see make_table).
class Table : public Fragment {
 public:
  Table(std::vector<int64_t> shape, int threads, const Owners& owners, const SourceLoc& loc)
      : Fragment(std::move(shape), threads, 0) {
    user_assert(int64_t(owners.size()) == num_elements(), loc)
        << "T.Fragment: the layout has " << owners.size() << " elements, the buffer " << num_elements();
    for (auto& holders : owners) {
      user_assert(!holders.empty(), loc) << "T.Fragment: every element needs a thread";
      for (auto& [t, s] : holders) {
        user_assert(t >= 0 && t < threads_ && s >= 0, loc)
            << "T.Fragment: thread " << t << " is outside the kernel's " << threads_ << " threads";
        slots_ = std::max(slots_, s + 1);
      }
    }
    element_.assign(size_t(threads_) * slots_, -1);
    for (int64_t f = 0; f < int64_t(owners.size()); ++f) {
      for (auto& [t, s] : owners[f]) {
        int64_t& e = element_[size_t(t) * slots_ + s];
        user_assert(e < 0 || e == f, loc) << "T.Fragment: elements " << element_str(e) << " and " << element_str(f)
                                          << " both land in thread " << t << ", register " << s;
        e = f;
      }
    }
    slot_.resize(slots_);
    for (int s = 0; s < slots_; ++s) fit_slot(s, loc);
    for (vec_ = 8; vec_ > 1 && !holds_vectors(vec_); vec_ /= 2) {
    }
  }
  int vector_width() const override { return vec_; }
  bool coords(int t, int s, int64_t* out) const override {
    if (t < 0 || t >= threads_ || s < 0 || s >= slots_) return false;
    int64_t f = element_[size_t(t) * slots_ + s];
    if (f < 0) return false;
    unflatten(f, shape_, out);
    return true;
  }
  std::vector<Expr> coords_expr(const Expr& tx, int s, Expr* valid) const override {
    const Slot& slot = slot_.at(s);
    *valid = Expr();
    if (slot.empty) {  // an index forward_index_fn never gives: no thread holds the slot
      *valid = make_bool(false);
      return std::vector<Expr>(shape_.size(), make_int(0));
    }
    if (slot.range) {
      if (slot.lo > 0) *valid = make_binary(BinaryOp::GE, tx, make_int(slot.lo));
      if (slot.hi < threads_) *valid = *valid ? (*valid && tx < make_int(slot.hi)) : tx < make_int(slot.hi);
    } else {
      *valid = make_binary(BinaryOp::EQ, make_binary(BinaryOp::BitAnd, tx, make_int(slot.mask)), make_int(slot.value));
    }
    if (slot.per_coordinate.empty()) return unflatten(slot.flat.expr(tx, threads_), shape_);
    std::vector<Expr> out;
    for (auto& c : slot.per_coordinate) out.push_back(c.expr(tx, threads_));
    return out;
  }
  std::string describe() const override {
    Text os;
    os << "T.Fragment" << shape_str(shape_) << " threads=" << threads_ << " slots=" << slots_;
    return os.str();
  }

 private:
  struct Slot {
    bool empty = false;
    bool range = true;  // the holders are lo <= tx < hi, else (tx & mask) == value
    int lo = 0, hi = 0, mask = 0, value = 0;
    std::vector<ThreadFormula> per_coordinate;  // one formula a coordinate, or empty:
    ThreadFormula flat;                         // the row-major index, unflattened
  };

  std::string element_str(int64_t f) const {
    std::vector<int64_t> c(shape_.size());
    unflatten(f, shape_, c.data());
    return shape_str(c);
  }

  void fit_slot(int s, const SourceLoc& loc) {
    Slot& slot = slot_[s];
    std::vector<int> ts;
    std::vector<int64_t> flat;
    for (int t = 0; t < threads_; ++t) {
      int64_t f = element_[size_t(t) * slots_ + s];
      if (f >= 0) ts.push_back(t), flat.push_back(f);
    }
    if (ts.empty()) {
      slot.empty = true;
      return;
    }
    slot.lo = ts.front();
    slot.hi = ts.back() + 1;
    if (slot.hi - slot.lo != int(ts.size())) {
      int width = 1;
      while (width < threads_) width <<= 1;
      int varying = 0;
      for (int t : ts) varying |= t ^ ts[0];
      slot.range = false;
      slot.mask = (width - 1) & ~varying;
      slot.value = ts[0] & slot.mask;
      int count = 0;
      for (int t = 0; t < threads_; ++t) count += (t & slot.mask) == slot.value;
      user_assert(count == int(ts.size()), loc)
          << "T.Fragment: the threads holding register " << s << " (" << ts.size() << " of them, from thread "
          << ts.front() << " to " << ts.back() << ") are neither a range of thread indices nor those with some "
          << "bits of the index fixed, which the generated code cannot test for";
    }
    // Coordinates one by one first: (tx / 16, tx % 16 * 4) is what later passes can
    // reason about (the distance between two slots' accesses), unlike the same element
    // unflattened from tx * 4.
    std::vector<int64_t> c(shape_.size());
    for (size_t d = 0; d < shape_.size(); ++d) {
      std::vector<int64_t> v;
      for (int64_t f : flat) {
        unflatten(f, shape_, c.data());
        v.push_back(c[d]);
      }
      ThreadFormula coord;
      if (!coord.fit(ts, v, threads_)) break;
      slot.per_coordinate.push_back(coord);
    }
    if (slot.per_coordinate.size() == shape_.size()) return;
    slot.per_coordinate.clear();
    user_assert(slot.flat.fit(ts, flat, threads_), loc)
        << "T.Fragment: the elements held in register " << s << " are not an affine or bit-linear function of "
        << "the thread index (thread " << ts[0] << " holds " << element_str(flat[0]) << ", thread " << ts.back()
        << " holds " << element_str(flat.back()) << "), so the generated code cannot compute them";
  }

  // Whether every thread's slots, in groups of v, hold nothing or v consecutive elements
  // of one row starting at a multiple of v (what a vector access of the group needs).
  bool holds_vectors(int v) const {
    int64_t cols = shape_.back();
    if (slots_ % v != 0 || cols % v != 0) return false;
    for (int t = 0; t < threads_; ++t) {
      for (int g = 0; g < slots_; g += v) {
        const int64_t* e = &element_[size_t(t) * slots_ + g];
        if (e[0] < 0 || e[0] % v != 0) {
          for (int k = 0; k < v; ++k) {
            if (e[k] >= 0) return false;
          }
          continue;
        }
        for (int k = 1; k < v; ++k) {
          if (e[k] != e[0] + k) return false;
        }
      }
    }
    return true;
  }

  std::vector<int64_t> element_;  // (thread, slot) -> row-major element, or -1
  std::vector<Slot> slot_;
  int vec_ = 1;
};

}  // namespace

FragmentPtr make_blocked(std::vector<int64_t> shape, int threads, int vec) {
  return std::make_shared<Blocked>(std::move(shape), threads, vec);
}
FragmentPtr make_projected(const FragmentPtr& base, std::vector<int> keep, const SourceLoc& loc) {
  return std::make_shared<Projected>(base, std::move(keep), loc);
}
FragmentPtr make_row_blocked(std::vector<int64_t> shape, int threads, int vec) {
  return std::make_shared<RowBlocked>(std::move(shape), threads, vec);
}
FragmentPtr make_reshaped(const FragmentPtr& base, std::vector<int64_t> shape) {
  if (shape == base->shape()) return base;
  return std::make_shared<Reshaped>(base, std::move(shape));
}
FragmentPtr make_permuted(const FragmentPtr& base, std::vector<int> order) {
  bool identity = true;
  for (size_t d = 0; d < order.size(); ++d) identity = identity && order[d] == int(d);
  if (identity) return base;
  return std::make_shared<Permuted>(base, std::move(order));
}
FragmentPtr make_replicated(std::vector<int64_t> shape, int threads) {
  return std::make_shared<Replicated>(std::move(shape), threads);
}
FragmentPtr make_table(std::vector<int64_t> shape, int threads, const Owners& owners, const SourceLoc& loc) {
  return std::make_shared<Table>(std::move(shape), threads, owners, loc);
}

int choose_vector(int64_t last_dim, int64_t total, int threads, int elem_bytes) {
  int v = std::max(1, 16 / elem_bytes);
  while (v > 1 && (last_dim % v != 0 || total < int64_t(threads) * v)) v /= 2;
  return v;
}

int choose_row_vector(int64_t last_dim, int elem_bytes) {
  int v = std::max(1, 16 / elem_bytes);
  while (v > 1 && last_dim % v != 0) v /= 2;
  return v;
}

}  // namespace tegula::layout
