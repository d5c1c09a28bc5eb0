#include "ops/region.h"

namespace tegula::ops {

using namespace ir;

std::vector<int64_t> squeeze(const std::vector<Expr>& extents, std::vector<int>* dims) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < extents.size(); ++d) {
    const int64_t* v = as_const_int(extents[d]);
    if (v && *v == 1) continue;
    out.push_back(v ? *v : -1);
    dims->push_back(int(d));
  }
  return out;
}

// min + v, written as plain v when min is 0 so that layout inference sees the loop
// variable itself as the index.
Expr offset(const Expr& min, const Expr& v) { return is_const_int(min, 0) ? v : min + v; }

bool all_ones(const BufferRegion& r) {
  for (auto& e : r.extents) {
    if (!is_const_int(e, 1)) return false;
  }
  return true;
}

// Gives a corner-form region the other side's extents, trailing dimensions aligned, unit
// dimensions included (TileLang's rule): T.copy(X[r, c], x) with x of shape (32, 1) reads
// a column of X. Only when the other side has more dimensions than the corner are its unit
// dimensions dropped first.
BufferRegion widen(const BufferRegion& corner, const BufferRegion& other, const SourceLoc& loc) {
  BufferRegion r = corner;
  if (other.extents.size() <= r.extents.size()) {
    size_t shift = r.extents.size() - other.extents.size();
    for (size_t k = 0; k < other.extents.size(); ++k) r.extents[shift + k] = other.extents[k];
    return r;
  }
  std::vector<int> dims;
  std::vector<int64_t> sq = squeeze(other.extents, &dims);
  size_t rank = r.extents.size();
  if (sq.size() > rank) {
    user_error(loc) << "T.copy: '" << corner.buffer->name << "' has rank " << rank << " but the other side spans "
                    << sq.size() << " dimensions";
  }
  for (size_t k = 0; k < sq.size(); ++k) r.extents[rank - sq.size() + k] = make_int(sq[k]);
  return r;
}

bool is_whole(const BufferRegion& r) { return !inside(r, r.mins); }

Expr inside(const BufferRegion& r, const std::vector<Expr>& v) {
  Expr cond;
  auto add = [&](Expr c) { cond = cond ? (cond && c) : c; };
  for (size_t d = 0; d < v.size(); ++d) {
    const int64_t* ext = as_const_int(r.extents[d]);
    const int64_t* whole = as_const_int(r.buffer->shape[d]);
    bool from_zero = is_const_int(r.mins[d], 0);
    if (!from_zero) add(make_binary(BinaryOp::GE, v[d], r.mins[d]));
    if (!(from_zero && ext && whole && *ext == *whole)) {
      add(make_binary(BinaryOp::LT, v[d], offset(r.mins[d], r.extents[d])));
    }
  }
  return cond;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return out + ")";
}


}  // namespace tegula::ops
