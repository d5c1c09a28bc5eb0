#include "ir/index_map.h"

#include "ir/analyzer.h"
#include "ir/functor.h"
#include "support/error.h"

namespace tegula::ir {

Expr IndexMap::offset(const std::vector<Expr>& idx) const {
  std::vector<std::pair<Expr, Expr>> sub;
  for (size_t d = 0; d < vars.size(); ++d) sub.push_back({vars[d], idx.at(d)});
  Expr flat;
  for (size_t d = 0; d < outs.size(); ++d) {
    Expr o = substitute(outs[d], sub);
    flat = flat ? flat * shape[d] + o : o;
  }
  return flat;
}

int64_t IndexMap::offset(const int64_t* idx, const int64_t* tensor_shape) const {
  VarValues values;
  for (size_t d = 0; d < vars.size(); ++d) values[vars[d].get()] = idx[d];
  int64_t flat = 0;
  for (size_t j = 0; j < outs.size(); ++j) {
    int64_t o = 0;
    if (moved[j] >= 0) {
      flat = flat * tensor_shape[moved[j]] + idx[moved[j]];
      continue;
    }
    internal_assert(eval_int(outs[j], values, &o)) << "an index map's output";
    flat = flat * *as_const_int(shape[j]) + o;
  }
  return flat;
}

namespace {

// No two elements at one place: checked over every element of a tensor up to 2^14 of
// them; past that over a corner of 16 (or 8, 4) indices a dimension (the maps a kernel
// author writes repeat with a period of a few elements, as gemm fragments do).
void check_one_to_one(const IndexMap& m, const Buffer& b, const SourceLoc& loc) {
  size_t rank = m.vars.size();
  std::vector<int64_t> n(rank), full(rank);
  int64_t total = 1;
  for (size_t d = 0; d < rank; ++d) total *= (n[d] = full[d] = *as_const_int(b->shape[d]));
  const int64_t kLimit = int64_t(1) << 14;
  for (int64_t clip = 16; total > kLimit && clip >= 4; clip /= 2) {
    total = 1;
    for (size_t d = 0; d < rank; ++d) total *= std::min<int64_t>(*as_const_int(b->shape[d]), clip);
    if (total <= kLimit || clip == 4) {
      for (size_t d = 0; d < rank; ++d) n[d] = std::min<int64_t>(n[d], clip);
    }
  }
  std::map<int64_t, std::vector<int64_t>> seen;
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < total; ++e) {
    int64_t at = m.offset(idx.data(), full.data());
    auto [it, fresh] = seen.emplace(at, idx);
    if (!fresh) {
      auto text = [](const std::vector<int64_t>& v) {
        std::string s;
        for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
        return s;
      };
      user_error(loc) << "T.Layout for '" << b->name << "' puts " << b->name << "[" << text(it->second) << "] and "
                      << b->name << "[" << text(idx) << "] at the same place; it must be a one-to-one "
                      << "rearrangement of the tensor's elements";
    }
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < n[d]) break;
      idx[d] = 0;
    }
  }
}

IndexMap read_map(const TileOpNode* op) {
  const Buffer& b = op->regions.at(0).buffer;
  size_t rank = b->shape.size();
  user_assert(op->args.size() > rank, op->loc) << "T.Layout for '" << b->name << "' gives no position";
  IndexMap m;
  m.loc = op->loc;
  m.vars.assign(op->args.begin(), op->args.begin() + rank);
  m.outs.assign(op->args.begin() + rank, op->args.end());
  Analyzer an;
  bool constant = true;
  int64_t elements = 1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t* n = as_const_int(b->shape[d]);
    if (n) {
      an.bind(m.vars[d], 0, *n);
      elements *= *n;
    } else {
      constant = false;
    }
  }
  int64_t range = 1;
  for (size_t j = 0; j < m.outs.size(); ++j) {
    const Expr& o = m.outs[j];
    size_t same = rank;
    for (size_t d = 0; d < rank; ++d) {
      if (o.same_as(m.vars[d])) same = d;
    }
    m.moved.push_back(same < rank ? int(same) : -1);
    if (same < rank) {  // a dimension moved whole: its range is the tensor's, symbolic or not
      m.shape.push_back(b->shape[same]);
      if (const int64_t* n = as_const_int(b->shape[same])) range *= *n;
      continue;
    }
    user_assert(constant, op->loc) << "T.Layout for '" << b->name << "': output " << j
                                   << " computes with a dimension whose size is known only at launch; only "
                                      "whole dimensions may move when a size is dynamic";
    Interval iv = an.bound(an.simplify(o));
    user_assert(iv.lo >= 0 && iv.hi < (int64_t(1) << 40), op->loc)
        << "T.Layout for '" << b->name << "': output " << j << " takes values " << iv.lo << ".." << iv.hi
        << "; a position must be a count from 0";
    m.shape.push_back(make_int(iv.hi + 1));
    range *= iv.hi + 1;
  }
  if (constant) {
    user_assert(range == elements, op->loc)
        << "T.Layout for '" << b->name << "' maps its " << elements << " elements into a range of " << range
        << " places; it must be a one-to-one rearrangement of the tensor's elements";
    check_one_to_one(m, b, op->loc);
  }
  return m;
}

}  // namespace

std::map<const BufferNode*, IndexMap> index_maps(const Kernel& k) {
  std::map<const BufferNode*, IndexMap> maps;
  post_order(k.body, [&](const Stmt& s) {
    auto* op = s.as<TileOpNode>();
    if (!op || op->op != "annotate_layout" || op->attr_str("layout", "") != "map") return;
    const Buffer& b = op->regions.at(0).buffer;
    user_assert(b->scope == Scope::Global, op->loc)
        << "T.annotate_layout: a T.Layout places the elements of a global tensor; '" << b->name << "' is in "
        << scope_name(b->scope) << " memory, whose layout Tegula chooses (T.layout.make_swizzled_layout asks for "
        << "the swizzle of a shared tile)";
    user_assert(!maps.count(b.get()), op->loc) << "T.annotate_layout: '" << b->name << "' has a T.Layout already";
    maps[b.get()] = read_map(op);
  }, nullptr);
  return maps;
}

}  // namespace tegula::ir
