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
// reduction is then a butterfly over those bits. Within its row a lane takes every
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
FragmentPtr make_replicated(std::vector<int64_t> shape, int threads) {
  return std::make_shared<Replicated>(std::move(shape), threads);
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
