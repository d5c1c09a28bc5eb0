// The tile ops at tile level, for the reference interpreter (reference.cc).
//
// Each op reads its regions as the language defines them (docs/internals.md):
//   copy        elementwise over the regions' non-unit dimensions, paired in order; a
//               corner-form side (every extent 1) spans the other side's extents on its
//               trailing dimensions. T.copy(X[bx, 0], x) with x of shape (1, N) copies
//               X[bx, 0:N]. The value is rounded to the destination's dtype.
//   fill        every element of the region.
//   reduce      dst (read row-major, the reduced dimension left out) = the reduction of
//               src along dim, combined with dst's old value when clear=0.
//   gemm        C (+)= op(A) @ op(B) on the regions' last two dimensions, in double
//               (32-bit operands rounded to tfloat32 first, as the tf32 tensor cores take them;
//               integer ones summed exactly in 64 bits, then wrapped to C's type).
//   gemm_sp     the same with A decompressed first from its kept elements and metadata.
//   atomic_add  an element (scalar value) or a region added elementwise.
//   cumsum      dst = the inclusive prefix sum of src along dim (suffix sum with reverse),
//               the running sum rounded to dst's dtype at each step.
//   im2col      the convolution's lowered input tile (ops/im2col.cc), pixel by pixel.
// Global accesses past a tensor's edge read 0 and are skipped (element()); any other
// out-of-bounds access is the user's error at the op's line.
#include <cmath>
#include <limits>

#include "interp/reference_impl.h"

namespace tegula::interp::ref {

using namespace ir;

namespace {

std::string extents_text(const RegionVal& r, const std::vector<size_t>& dims) {
  std::string out = "(";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(r.ext[dims[i]]);
  return out + (dims.size() == 1 ? ",)" : ")");
}

std::vector<size_t> non_unit_dims(const RegionFn& r) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < r.unit.size(); ++d) {
    if (!r.unit[d]) dims.push_back(d);
  }
  return dims;
}

bool all_unit(const RegionFn& r) { return non_unit_dims(r).empty(); }

// Calls f(offsets) for every point of the box `ext[dims[0]] x ext[dims[1]] x ...`, the
// last dimension fastest; offsets[i] is the position along dims[i].
template <typename F>
void for_each_point(const int64_t* ext, const std::vector<size_t>& dims, F f) {
  int64_t at[kMaxRank] = {};
  for (size_t i : dims) {
    if (ext[i] <= 0) return;
  }
  while (true) {
    f(static_cast<const int64_t*>(at));
    size_t i = dims.size();
    while (true) {
      if (i == 0) return;  // every dimension wrapped round: done
      --i;
      if (++at[i] < ext[dims[i]]) break;
      at[i] = 0;
    }
  }
}

// A corner-form region that takes the other side's non-unit extents, on its trailing
// dimensions (what T.copy(X[bx, 0], x) means).
// TileLang's rule: the other side's extents, trailing dimensions aligned and unit ones
// included; only an other side of higher rank is squeezed first.
void widen(RegionVal& corner, std::vector<size_t>& corner_dims, const RegionVal& other,
           const std::vector<size_t>& other_dims, const char* op, const SourceLoc& loc) {
  if (other.rank <= corner.rank) {
    size_t shift = corner.rank - other.rank;
    corner_dims.clear();
    for (size_t k = 0; k < other.rank; ++k) {
      corner.ext[shift + k] = other.ext[k];
      if (other.ext[k] != 1) corner_dims.push_back(shift + k);
    }
    return;
  }
  user_assert(other_dims.size() <= corner.rank, loc)
      << op << ": '" << corner.b->node->name << "' has rank " << corner.rank << " but the other side spans "
      << other_dims.size() << " dimensions";
  corner_dims.clear();
  for (size_t k = 0; k < other_dims.size(); ++k) {
    size_t d = corner.rank - other_dims.size() + k;
    corner.ext[d] = other.ext[other_dims[k]];
    corner_dims.push_back(d);
  }
}

// The two sides of an elementwise op (copy, atomic_add), paired dimension by dimension.
struct Pairing {
  RegionVal src, dst;
  std::vector<size_t> sdims, ddims;
};

Pairing pair_regions(const RegionFn& src, const RegionFn& dst, bool widen_src, Frame& f, const char* op,
                     const SourceLoc& loc) {
  Pairing p{eval_region(src, f, loc), eval_region(dst, f, loc), non_unit_dims(src), non_unit_dims(dst)};
  bool sc = p.sdims.empty(), dc = p.ddims.empty();
  if (widen_src && sc && !dc) widen(p.src, p.sdims, p.dst, p.ddims, op, loc);
  if (dc && !sc) widen(p.dst, p.ddims, p.src, p.sdims, op, loc);
  bool same = p.sdims.size() == p.ddims.size();
  for (size_t i = 0; same && i < p.sdims.size(); ++i) same = p.src.ext[p.sdims[i]] == p.dst.ext[p.ddims[i]];
  user_assert(same, loc) << op << ": the source region of '" << p.src.b->node->name << "' spans "
                         << extents_text(p.src, p.sdims) << " but the destination region of '"
                         << p.dst.b->node->name << "' spans " << extents_text(p.dst, p.ddims);
  return p;
}

// Runs f(src element or null, dst element or null) for every pair of a pairing.
template <typename F>
void for_each_pair(Pairing& p, const SourceLoc& loc, F f) {
  int64_t si[kMaxRank], di[kMaxRank];
  for_each_point(p.src.ext, p.sdims, [&](const int64_t* at) {
    std::copy(p.src.min, p.src.min + p.src.rank, si);
    std::copy(p.dst.min, p.dst.min + p.dst.rank, di);
    for (size_t k = 0; k < p.sdims.size(); ++k) {
      si[p.sdims[k]] += at[k];
      di[p.ddims[k]] += at[k];
    }
    f(element(*p.src.b, si, loc), element(*p.dst.b, di, loc));
  });
}

StmtFn copy(const TileOpNode* op, Compiler& c) {
  const SourceLoc loc = op->loc;
  user_assert(op->regions.size() == 2, loc) << "T.copy takes a source and a destination";
  RegionFn src = c.region(op->regions[0], loc), dst = c.region(op->regions[1], loc);
  DataType t = op->regions[1].buffer->dtype, from = op->regions[0].buffer->dtype;
  return [src, dst, loc, t, from](Frame& f) {
    Pairing p = pair_regions(src, dst, true, f, "T.copy", loc);
    for_each_pair(p, loc, [&](double* s, double* d) {
      if (d) *d = cast_to_dtype(from, t, s ? *s : p.src.b->safe);
    });
  };
}

StmtFn fill(const TileOpNode* op, Compiler& c) {
  const SourceLoc loc = op->loc;
  user_assert(op->regions.size() == 1 && op->args.size() == 1, loc) << "T.fill takes a buffer and a value";
  RegionFn dst = c.region(op->regions[0], loc);
  ExprFn value = c.expr(op->args[0], loc);
  DataType t = op->regions[0].buffer->dtype;
  std::vector<size_t> all(dst.mins.size());
  for (size_t d = 0; d < all.size(); ++d) all[d] = d;
  return [dst, value, loc, t, all](Frame& f) {
    RegionVal r = eval_region(dst, f, loc);
    double v = round_to_dtype(t, value(f));
    int64_t idx[kMaxRank];
    for_each_point(r.ext, all, [&](const int64_t* at) {
      for (size_t d = 0; d < r.rank; ++d) idx[d] = r.min[d] + at[d];
      if (double* p = element(*r.b, idx, loc)) *p = v;
    });
  };
}

StmtFn atomic_add(const TileOpNode* op, Compiler& c) {
  const SourceLoc loc = op->loc;
  user_assert(!op->regions.empty(), loc) << "T.atomic_add takes a destination and a value";
  RegionFn dst = c.region(op->regions[0], loc);
  DataType t = op->regions[0].buffer->dtype;
  if (op->regions.size() == 1) {
    user_assert(op->args.size() == 1, loc) << "T.atomic_add takes a destination and a value";
    user_assert(all_unit(dst), loc) << "T.atomic_add: a scalar value is added to one element; '"
                                    << op->regions[0].buffer->name << "' is given as a region";
    ExprFn value = c.expr(op->args[0], loc);
    return [dst, value, loc, t](Frame& f) {
      RegionVal r = eval_region(dst, f, loc);
      double v = round_to_dtype(t, value(f));
      if (double* p = element(*r.b, r.min, loc)) *p = round_to_dtype(t, *p + v);
    };
  }
  RegionFn src = c.region(op->regions[1], loc);
  return [src, dst, loc, t](Frame& f) {
    Pairing p = pair_regions(src, dst, false, f, "T.atomic_add", loc);
    for_each_pair(p, loc, [&](double* s, double* d) {
      if (d) *d = round_to_dtype(t, *d + round_to_dtype(t, s ? *s : 0.0));
    });
  };
}

StmtFn reduce(const TileOpNode* op, Compiler& c) {
  const SourceLoc loc = op->loc;
  user_assert(op->regions.size() == 2, loc) << "T.reduce takes a source and a destination";
  std::string kind = op->attr_str("kind", "sum");
  bool sum = kind == "sum" || kind == "abssum", take_abs = kind == "abssum" || kind == "absmax";
  bool is_max = kind == "max" || kind == "absmax";
  // bitand / bitor / bitxor: combine_reducer's codes 3, 4, 5 (on the integers' values).
  int64_t bit_code = kind == "bitand" ? 3 : kind == "bitor" ? 4 : kind == "bitxor" ? 5 : -1;
  user_assert(sum || is_max || kind == "min" || bit_code >= 0, loc)
      << "unknown reduction '" << kind << "' (expected max, min, sum, abssum, absmax, bitand, bitor or bitxor)";
  bool clear = op->attr_int("clear", 1) != 0;
  size_t dim = size_t(op->attr_int("dim", 0));
  user_assert(dim < op->regions[0].mins.size(), loc)
      << "T.reduce: dim " << dim << " of the " << op->regions[0].mins.size() << "-d '"
      << op->regions[0].buffer->name << "'";
  RegionFn src = c.region(op->regions[0], loc), dst = c.region(op->regions[1], loc);
  DataType t = op->regions[1].buffer->dtype;
  double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // absmax starts from 0, as |x| >= 0 (and so do the generated reductions).
  double identity = bit_code == 3 ? -1.0 : sum || take_abs || bit_code >= 0 ? 0.0 : is_max ? -inf : inf;
  // max and min propagate NaN, as torch.amax does, unless nan_propagate is 0 (TileLang's
  // nan_propagate=False: a NaN is dropped, as fmaxf does).
  bool propagate = op->attr_int("nan_propagate", 1) != 0;
  auto combine = [sum, is_max, nan, propagate, bit_code](double a, double b) {
    if (bit_code >= 0) return combine_reducer(bit_code, a, b);
    if (sum) return a + b;
    if (!propagate && (std::isnan(a) || std::isnan(b))) return std::isnan(a) ? b : a;
    if (std::isnan(a) || std::isnan(b)) return nan;
    return is_max ? std::max(a, b) : std::min(a, b);
  };
  return [src, dst, loc, t, dim, clear, identity, take_abs, combine](Frame& f) {
    RegionVal s = eval_region(src, f, loc), d = eval_region(dst, f, loc);
    std::vector<size_t> sall(s.rank), dall(d.rank);
    int64_t rows = 1, count = 1;
    for (size_t i = 0; i < s.rank; ++i) {
      sall[i] = i;
      if (i != dim) rows *= s.ext[i];
    }
    for (size_t i = 0; i < d.rank; ++i) dall[i] = i, count *= d.ext[i];
    std::vector<size_t> kept;
    for (size_t i = 0; i < s.rank; ++i) {
      if (i != dim) kept.push_back(i);
    }
    user_assert(rows == count, loc) << "T.reduce: '" << d.b->node->name << "' must hold " << rows
                                    << " elements (the region of '" << s.b->node->name << "' without dimension "
                                    << dim << " spans " << extents_text(s, kept) << "), its region holds " << count;
    std::vector<double> acc(size_t(rows), identity);
    int64_t idx[kMaxRank];
    for_each_point(s.ext, sall, [&](const int64_t* at) {
      int64_t row = 0;
      for (size_t i = 0; i < s.rank; ++i) {
        idx[i] = s.min[i] + at[i];
        if (i != dim) row = row * s.ext[i] + at[i];
      }
      double* p = element(*s.b, idx, loc);
      double v = round_to_dtype(t, p ? *p : 0.0);
      acc[size_t(row)] = combine(acc[size_t(row)], take_abs ? std::fabs(v) : v);
    });
    int64_t row = 0;
    for_each_point(d.ext, dall, [&](const int64_t* at) {
      for (size_t i = 0; i < d.rank; ++i) idx[i] = d.min[i] + at[i];
      double r = round_to_dtype(t, acc[size_t(row++)]);
      double* p = element(*d.b, idx, loc);
      if (!p) return;
      *p = clear ? r : round_to_dtype(t, combine(*p, r));
    });
  };
}

StmtFn cumsum(const TileOpNode* op, Compiler& c) {
  const SourceLoc loc = op->loc;
  user_assert(op->regions.size() == 2, loc) << "T.cumsum takes a source and a destination";
  size_t dim = size_t(op->attr_int("dim", 0));
  bool reverse = op->attr_int("reverse", 0) != 0;
  RegionFn src = c.region(op->regions[0], loc), dst = c.region(op->regions[1], loc);
  DataType t = op->regions[1].buffer->dtype;
  return [src, dst, loc, t, dim, reverse](Frame& f) {
    RegionVal s = eval_region(src, f, loc), d = eval_region(dst, f, loc);
    bool same = s.rank == d.rank && dim < s.rank;
    for (size_t i = 0; same && i < s.rank; ++i) same = s.ext[i] == d.ext[i];
    user_assert(same, loc) << "T.cumsum: the regions of '" << s.b->node->name << "' and '" << d.b->node->name
                           << "' must have the same extents, and dim " << dim << " must be one of their dimensions";
    std::vector<size_t> lines;  // every dimension but dim: one line each point
    for (size_t i = 0; i < s.rank; ++i) {
      if (i != dim) lines.push_back(i);
    }
    int64_t n = s.ext[dim];
    int64_t si[kMaxRank], di[kMaxRank];
    std::vector<double> line(size_t(std::max<int64_t>(n, 0)));
    for_each_point(s.ext, lines, [&](const int64_t* at) {
      for (size_t k = 0; k < lines.size(); ++k) {
        si[lines[k]] = s.min[lines[k]] + at[k];
        di[lines[k]] = d.min[lines[k]] + at[k];
      }
      for (int64_t q = 0; q < n; ++q) {  // read the whole line first: src may be dst
        si[dim] = s.min[dim] + q;
        double* p = element(*s.b, si, loc);
        line[size_t(q)] = round_to_dtype(t, p ? *p : 0.0);
      }
      double acc = 0;
      for (int64_t k = 0; k < n; ++k) {
        int64_t q = reverse ? n - 1 - k : k;
        acc = k == 0 ? line[size_t(q)] : round_to_dtype(t, acc + line[size_t(q)]);
        di[dim] = d.min[dim] + q;
        if (double* p = element(*d.b, di, loc)) *p = acc;
      }
    });
  };
}

// A gemm operand: the region's last two dimensions, every other extent 1.
struct Matrix {
  RegionVal r;
  int64_t rows, cols;
};

Matrix matrix(const RegionFn& fn, Frame& f, const char* name, const SourceLoc& loc) {
  Matrix m{eval_region(fn, f, loc), 0, 0};
  user_assert(m.r.rank >= 2, loc) << "T.gemm: " << name << " ('" << m.r.b->node->name << "') must be a 2-D tile";
  for (size_t d = 0; d + 2 < m.r.rank; ++d) {
    user_assert(m.r.ext[d] == 1, loc) << "T.gemm: " << name << " ('" << m.r.b->node->name
                                      << "') must be a 2-D tile: its region spans " << m.r.ext[d]
                                      << " in dimension " << d;
  }
  m.rows = m.r.ext[m.r.rank - 2];
  m.cols = m.r.ext[m.r.rank - 1];
  return m;
}

// Element (i, j) of an operand's region, 0 past a global tensor's edge.
double matrix_at(Matrix& m, int64_t i, int64_t j, const SourceLoc& loc) {
  int64_t idx[kMaxRank];
  std::copy(m.r.min, m.r.min + m.r.rank, idx);
  idx[m.r.rank - 2] += i;
  idx[m.r.rank - 1] += j;
  double* p = element(*m.r.b, idx, loc);
  return p ? *p : 0.0;
}

StmtFn gemm(const TileOpNode* op, Compiler& c) {
  const SourceLoc loc = op->loc;
  user_assert(op->regions.size() == 3, loc) << "T.gemm takes A, B and C";
  RegionFn a = c.region(op->regions[0], loc), b = c.region(op->regions[1], loc), cc = c.region(op->regions[2], loc);
  bool ta = op->attr_int("transpose_A", 0) != 0, tb = op->attr_int("transpose_B", 0) != 0;
  bool clear_always = op->attr_int("clear_accum", 0) != 0;
  // clear_accum as a run-time condition: C = A B where it holds, C += A B elsewhere.
  ExprFn clear_if = op->args.empty() ? ExprFn() : c.expr(op->args[0], loc);
  DataType t = op->regions[2].buffer->dtype;
  // 32-bit operands run on the tf32 tensor cores: each is rounded to tfloat32 first.
  bool tf32 = op->regions[0].buffer->dtype.is_tf32_operand() && op->regions[1].buffer->dtype.is_tf32_operand();
  bool ints = op->regions[0].buffer->dtype.is_int() && op->regions[1].buffer->dtype.is_int();
  return [a, b, cc, ta, tb, clear_always, clear_if, t, tf32, ints, loc](Frame& f) {
    const bool clear = clear_always || (clear_if && clear_if(f) != 0);
    Matrix A = matrix(a, f, "A", loc), B = matrix(b, f, "B", loc), C = matrix(cc, f, "C", loc);
    int64_t M = ta ? A.cols : A.rows, K = ta ? A.rows : A.cols;
    int64_t KB = tb ? B.cols : B.rows, N = tb ? B.rows : B.cols;
    user_assert(KB == K && C.rows == M && C.cols == N, loc)
        << "T.gemm: shapes do not agree: A gives " << M << "x" << K << ", B gives " << KB << "x" << N << ", C is "
        << C.rows << "x" << C.cols;
    // op(A) row-major and op(B) column-major, so the inner loop walks both contiguously.
    std::vector<double> av(size_t(M * K)), bv(size_t(K * N));
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t k = 0; k < K; ++k) av[size_t(i * K + k)] = ta ? matrix_at(A, k, i, loc) : matrix_at(A, i, k, loc);
    }
    for (int64_t j = 0; j < N; ++j) {
      for (int64_t k = 0; k < K; ++k) bv[size_t(j * K + k)] = tb ? matrix_at(B, j, k, loc) : matrix_at(B, k, j, loc);
    }
    if (tf32) {
      for (double& v : av) v = round_tf32(v);
      for (double& v : bv) v = round_tf32(v);
    }
    int64_t idx[kMaxRank];
    std::copy(C.r.min, C.r.min + C.r.rank, idx);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        idx[C.r.rank - 2] = C.r.min[C.r.rank - 2] + i;
        idx[C.r.rank - 1] = C.r.min[C.r.rank - 1] + j;
        double* p = element(*C.r.b, idx, loc);
        if (ints) {
          // Unsigned 64-bit sums wrap as the tensor cores' int32 adds do, once cut to 32 bits.
          uint64_t si = 0;
          for (int64_t k = 0; k < K; ++k) {
            si += uint64_t(int64_t(av[size_t(i * K + k)]) * int64_t(bv[size_t(j * K + k)]));
          }
          if (p && !clear) si += uint64_t(int64_t(*p));
          if (p) *p = t.is_int() && t.bits == 32 ? double(int32_t(uint32_t(si))) : round_to_dtype(t, double(int64_t(si)));
          continue;
        }
        for (int64_t k = 0; k < K; ++k) s += av[size_t(i * K + k)] * bv[size_t(j * K + k)];
        if (p) *p = round_to_dtype(t, clear ? s : *p + s);
      }
    }
  };
}

// The positions in its group of 4 of the two kept elements of group q of row i of a
// sparse gemm's A, from its metadata E (ops/gemm_sp.cc says how E is laid out).
void sparse_positions(Matrix& E, bool te, int bits, int64_t i, int64_t q, int* p0, int* p1, const SourceLoc& loc) {
  int64_t per = bits / 4;  // groups in an element of E
  double v = te ? matrix_at(E, q / per, i, loc) : matrix_at(E, i, q / per, loc);
  uint64_t word = uint64_t(int64_t(v)) & ((uint64_t(1) << bits) - 1);
  int nibble = int((word >> (4 * (q % per))) & 0xF);
  *p0 = nibble & 3, *p1 = nibble >> 2;
  if (*p0 == *p1) *p0 = 0, *p1 = 1;  // invalid for the instruction: read as positions 0 and 1
  user_assert(*p0 < *p1, loc) << "T.gemm_sp: E gives group " << q << " of row " << i << " of A the positions (" << *p0
                              << ", " << *p1 << "): the sparse tensor cores take a group's two positions in "
                              << "increasing order (as compress gives them)";
}

// C (+)= A B with A given as its kept elements and their positions (T.gemm_sp), in
// double: each kept element times the row of B its position names (the pruned ones are
// not multiplied, as on the sparse tensor cores: a zero there never meets an infinity).
StmtFn gemm_sp(const TileOpNode* op, Compiler& c) {
  const SourceLoc loc = op->loc;
  user_assert(op->regions.size() == 4, loc) << "T.gemm_sp takes A_sparse, E, B and C";
  std::vector<RegionFn> r;
  for (const BufferRegion& x : op->regions) r.push_back(c.region(x, loc));
  bool ta = op->attr_int("transpose_A", 0) != 0, te = op->attr_int("transpose_E", 0) != 0,
       tb = op->attr_int("transpose_B", 0) != 0, clear = op->attr_int("clear_accum", 0) != 0;
  DataType t = op->regions[3].buffer->dtype;
  int bits = op->regions[1].buffer->dtype.bits;
  return [r, ta, te, tb, clear, t, bits, loc](Frame& f) {
    Matrix A = matrix(r[0], f, "A_sparse", loc), E = matrix(r[1], f, "E", loc), B = matrix(r[2], f, "B", loc),
           C = matrix(r[3], f, "C", loc);
    int64_t M = C.rows, N = C.cols, K = 2 * (ta ? A.rows : A.cols);
    user_assert((ta ? A.cols : A.rows) == M && (tb ? B.cols : B.rows) == K && (tb ? B.rows : B.cols) == N &&
                    (te ? E.cols : E.rows) == M && (te ? E.rows : E.cols) * bits == K,
                loc)
        << "T.gemm_sp: shapes do not agree";
    // Row i of A as (kept value, row of B) pairs.
    std::vector<std::pair<double, int64_t>> kept(size_t(K / 2));
    int64_t idx[kMaxRank];
    std::copy(C.r.min, C.r.min + C.r.rank, idx);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t q = 0; q < K / 4; ++q) {
        int p[2];
        sparse_positions(E, te, bits, i, q, &p[0], &p[1], loc);
        for (int s = 0; s < 2; ++s) {
          double a = ta ? matrix_at(A, 2 * q + s, i, loc) : matrix_at(A, i, 2 * q + s, loc);
          kept[size_t(2 * q + s)] = {a, 4 * q + p[s]};
        }
      }
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (auto& [a, k] : kept) s += a * (tb ? matrix_at(B, j, k, loc) : matrix_at(B, k, j, loc));
        idx[C.r.rank - 2] = C.r.min[C.r.rank - 2] + i;
        idx[C.r.rank - 1] = C.r.min[C.r.rank - 1] + j;
        double* p = element(*C.r.b, idx, loc);
        if (p) *p = round_to_dtype(t, clear ? s : *p + s);
      }
    }
  };
}

}  // namespace

// T.reducer_update(acc[i], v): one logical iteration's contribution, combined into the
// one accumulator the reference keeps (each T.Parallel iteration runs once here).
StmtFn Compiler::reducer_update(const CallNode* call, const SourceLoc& loc) {
  auto* target = call->args.at(0).as<BufferLoadNode>();
  internal_assert(target) << "reducer_update's target at " << loc.str();
  int slot = buffer_slot(target->buffer, loc);
  std::vector<ExprFn> idx;
  for (auto& i : target->indices) idx.push_back(expr(i, loc));
  ExprFn value = expr(call->args.at(1), loc);
  int64_t code = *as_const_int(call->args.at(2));
  DataType t = target->buffer->dtype;
  return [slot, idx, value, code, t, loc](Frame& f) {
    int64_t at[kMaxRank];
    for (size_t d = 0; d < idx.size(); ++d) at[d] = to_index(idx[d](f), f.bufs[slot], d, loc);
    double* p = element(f.bufs[slot], at, loc);
    *p = round_to_dtype(t, combine_reducer(code, *p, round_to_dtype(t, value(f))));
  };
}

// T.finalize_reducer(acc, seed, result): result = seed op acc, element by element (the
// reference keeps one accumulator: there are no partials to combine).
StmtFn finalize_reducer(const TileOpNode* op, Compiler& c) {
  const SourceLoc loc = op->loc;
  static const char* kinds[] = {"sum", "max", "min", "bitand", "bitor", "bitxor"};
  std::string kind = op->attr_str("op", "sum");
  int64_t code = -1;
  for (int64_t i = 0; i < 6; ++i) {
    if (kind == kinds[i]) code = i;
  }
  user_assert(code >= 0, loc) << "unknown reducer op '" << kind << "'";
  RegionFn acc = c.region(op->regions.at(0), loc), seed = c.region(op->regions.at(1), loc);
  RegionFn res = c.region(op->regions.at(2), loc);
  DataType t = op->regions[2].buffer->dtype, ta = op->regions[0].buffer->dtype;
  return [acc, seed, res, code, t, ta, loc](Frame& f) {
    RegionVal a = eval_region(acc, f, loc), s = eval_region(seed, f, loc), r = eval_region(res, f, loc);
    int64_t zero[kMaxRank] = {};
    double sv = *element(*s.b, zero, loc);
    std::vector<size_t> all(a.rank);
    for (size_t d = 0; d < a.rank; ++d) all[d] = d;
    for_each_point(a.ext, all, [&](const int64_t* at) {
      double* src = element(*a.b, at, loc);
      double* dst = element(*r.b, at, loc);
      if (dst) *dst = round_to_dtype(t, round_to_dtype(ta, combine_reducer(code, sv, *src)));
    });
  };
}

// Written from the convolution's definition, independently of ops/im2col.cc's expansion.
StmtFn im2col(const TileOpNode* op, Compiler& c) {
  const SourceLoc loc = op->loc;
  user_assert(op->regions.size() == 2 && op->args.size() == 2, loc) << "T.im2col takes an image and a tile";
  RegionFn img = c.region(op->regions[0], loc), col = c.region(op->regions[1], loc);
  ExprFn row_step = c.expr(op->args[0], loc), col_step = c.expr(op->args[1], loc);
  int64_t K = op->attr_int("kernel", 1), S = op->attr_int("stride", 1), D = op->attr_int("dilation", 1),
          P = op->attr_int("pad", 0);
  DataType t = op->regions[1].buffer->dtype;
  return [=](Frame& f) {
    RegionVal in = eval_region(img, f, loc), out = eval_region(col, f, loc);
    const std::vector<int64_t>& s = in.b->shape;  // N, H, W, C
    int64_t OH = (s[1] + 2 * P - D * (K - 1) - 1) / S + 1, OW = (s[2] + 2 * P - D * (K - 1) - 1) / S + 1;
    int64_t BM = out.ext[0], BK = out.ext[1];
    int64_t r0 = int64_t(row_step(f)) * BM, q0 = int64_t(col_step(f)) * BK;
    for (int64_t m = 0; m < BM; ++m) {
      for (int64_t j = 0; j < BK; ++j) {
        int64_t r = r0 + m, q = q0 + j;
        int64_t n = r / (OH * OW), oh = r / OW % OH, ow = r % OW;
        int64_t kh = q / (K * s[3]), kw = q / s[3] % K, ch = q % s[3];
        int64_t h = oh * S + kh * D - P, w = ow * S + kw * D - P;
        double v = 0;
        if (n < s[0] && kh < K && h >= 0 && h < s[1] && w >= 0 && w < s[2]) {
          int64_t at[4] = {n, h, w, ch};
          if (double* p = element(*in.b, at, loc)) v = *p;
        }
        int64_t idx[2] = {out.min[0] + m, out.min[1] + j};
        *element(*out.b, idx, loc) = round_to_dtype(t, v);
      }
    }
  };
}

StmtFn compile_tile_op(const TileOpNode* op, Compiler& c) {
  if (op->op == "im2col") return im2col(op, c);
  if (op->op == "finalize_reducer") return finalize_reducer(op, c);
  if (op->op == "copy") return copy(op, c);
  if (op->op == "fill") return fill(op, c);
  if (op->op == "reduce") return reduce(op, c);
  if (op->op == "cumsum") return cumsum(op, c);
  if (op->op == "gemm") return gemm(op, c);
  if (op->op == "gemm_sp") return gemm_sp(op, c);
  if (op->op == "atomic_add") return atomic_add(op, c);
  // Layout and rasterisation hints: no effect on the values computed.
  // T.annotate_safe_value is read before the run (run_reference: Buf::safe).
  if (op->op == "annotate_layout" || op->op == "use_swizzle" || op->op == "annotate_safe_value" ||
      op->op == "annotate_min_blocks_per_sm") {
    return [](Frame&) {};
  }
  internal_error << "reference: cannot interpret the tile op '" << op->op << "' at " << op->loc.str();
  return {};
}

}  // namespace tegula::interp::ref
