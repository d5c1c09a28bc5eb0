#include "layout/mma.h"

#include "support/text.h"

namespace tegula::layout {

using namespace ir;

namespace {

// See kernels/include/tegula/gemm.h for the register order this reproduces.
class MmaAccumulator : public Fragment {
 public:
  MmaAccumulator(int64_t m, int64_t n, int wm, int wn, int group)
      : Fragment({m, n}, wm * wn * 32, 0), wm_(wm), g_(group), tm_(int(m / wm)), tn_(int(n / wn)), nt_(tn_ / 8) {
    slots_ = (tm_ / 16) * nt_ * 4;
  }
  int vector_width() const override { return 2; }
  bool coords(int t, int s, int64_t* out) const override {
    int warp = t / 32, lane = t % 32;
    int mi = s / (nt_ * 4), ni = (s / 4) % nt_, e = s % 4;
    int wr = warp % wm_;
    out[0] = (wr / g_) * (tm_ * g_) + mi * 16 * g_ + (wr % g_) * 16 + lane / 4 + (e / 2) * 8;
    out[1] = (warp / wm_) * tn_ + ni * 8 + (lane % 4) * 2 + e % 2;
    return true;
  }
  std::vector<Expr> coords_expr(const Expr& tx, int s, Expr* valid) const override {
    *valid = Expr();
    int mi = s / (nt_ * 4), ni = (s / 4) % nt_, e = s % 4;
    Expr warp = floordiv(tx, make_int(32)), lane = floormod(tx, make_int(32));
    Expr wr = floormod(warp, make_int(wm_));
    Expr row = g_ == 1 ? wr * int64_t(tm_) : floordiv(wr, make_int(g_)) * int64_t(tm_ * g_) +
                                                 floormod(wr, make_int(g_)) * int64_t(16);
    row = row + floordiv(lane, make_int(4)) + int64_t(mi * 16 * g_ + (e / 2) * 8);
    Expr col = floordiv(warp, make_int(wm_)) * int64_t(tn_) + floormod(lane, make_int(4)) * int64_t(2) +
               int64_t(ni * 8 + e % 2);
    return {row, col};
  }
  std::string describe() const override {
    Text os;
    os << (g_ == 1 ? "mma_accumulator(" : "wgmma_accumulator(") << shape_[0] << ", " << shape_[1]
       << ") warps=" << wm_ << "x" << threads_ / 32 / wm_;
    return os.str();
  }

 private:
  int wm_, g_, tm_, tn_, nt_;
};

class GroupReplicated : public Fragment {
 public:
  GroupReplicated(FragmentPtr base, int groups)
      : Fragment(base->shape(), base->threads() * groups, base->slots()), base_(std::move(base)), groups_(groups) {}
  int vector_width() const override { return base_->vector_width(); }
  bool coords(int t, int s, int64_t* out) const override { return base_->coords(t % base_->threads(), s, out); }
  std::vector<Expr> coords_expr(const Expr& tx, int s, Expr* valid) const override {
    return base_->coords_expr(floormod(tx, make_int(base_->threads())), s, valid);
  }
  std::string describe() const override {
    Text os;
    os << base_->describe() << " held by each of " << groups_ << " groups of " << base_->threads() << " threads";
    return os.str();
  }

 private:
  FragmentPtr base_;
  int groups_;
};

// A 2-D base read with its dimensions swapped: the thread and slot of base's (i, j) hold
// (j, i).
class Transposed : public Fragment {
 public:
  explicit Transposed(FragmentPtr base)
      : Fragment({base->shape()[1], base->shape()[0]}, base->threads(), base->slots()), base_(std::move(base)) {}
  bool coords(int t, int s, int64_t* out) const override {
    int64_t c[2];
    if (!base_->coords(t, s, c)) return false;
    out[0] = c[1], out[1] = c[0];
    return true;
  }
  std::vector<Expr> coords_expr(const Expr& tx, int s, Expr* valid) const override {
    std::vector<Expr> c = base_->coords_expr(tx, s, valid);
    return {c[1], c[0]};
  }
  std::string describe() const override { return "transposed " + base_->describe(); }

 private:
  FragmentPtr base_;
};

}  // namespace

FragmentPtr make_transposed(const FragmentPtr& base) { return std::make_shared<Transposed>(base); }

FragmentPtr make_group_replicated(const FragmentPtr& base, int groups) {
  return groups == 1 ? base : std::make_shared<GroupReplicated>(base, groups);
}

bool gemm_warps(int64_t m, int64_t n, int warps, const std::string& policy, int* wm, int* wn) {
  auto fits = [&](int a, int b) { return m % (int64_t(a) * 16) == 0 && n % (int64_t(b) * 8) == 0; };
  return split_by_policy(warps, policy, fits, [&](int a, int b) { return double(m / a) / double(n / b); }, wm, wn);
}

FragmentPtr make_mma_accumulator(int64_t m, int64_t n, int wm, int wn, int group) {
  return std::make_shared<MmaAccumulator>(m, n, wm, wn, group);
}

}  // namespace tegula::layout
