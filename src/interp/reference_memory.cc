// The reference's elements: an access's index checked against its buffer (masked past a
// global tensor's edge, an error elsewhere), views of another dtype kept in step with
// their buffer's bits, and tensors at run-time addresses (T.make_tensor of a T.ptr
// parameter, or of an address read from a pointer table). Where such an address is bound
// (the kernel's start for a parameter, its let otherwise) each tensor at it is pointed at
// the memory of the call holding that address (interp.h's Region), its shape and strides
// evaluated there; an access outside that memory is the program's error.
#include <cmath>
#include <limits>

#include "interp/reference_impl.h"

namespace tegula::interp::ref {

using namespace ir;

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

int64_t to_index(double v, const Buf& b, size_t dim, const SourceLoc& loc) {
  user_assert(!std::isnan(v), loc) << "index " << dim << " of '" << b.node->name
                                   << "' is not a number (it was computed from a value never written)";
  // Far past any edge; clamping keeps the conversion defined.
  if (!(std::fabs(v) < 4e18)) return v > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  return int64_t(v);
}

void Aliases::write_back(int except) {
  for (int i = 0; i < int(views.size()); ++i) {
    if (i == except) continue;
    View& v = views[i];
    for (int64_t e : v.handed) {
      reinterpret_bits(v.type, &v.own[e], v.from, root + e * v.ratio);
      v.out[e] = 0;
    }
    v.handed.clear();
  }
}

double* element(Buf& b, const int64_t* idx, const SourceLoc& loc) {
  if (b.aliases) b.aliases->write_back(b.alias);
  int64_t off = 0;
  for (size_t d = 0; d < b.shape.size(); ++d) {
    int64_t i = idx[d];
    if (i < 0 || i >= b.shape[d]) {
      if (b.global) return nullptr;
      std::string at;
      for (size_t e = 0; e < b.shape.size(); ++e) at += (e ? ", " : "") + std::to_string(idx[e]);
      user_error(loc) << "index " << i << " of '" << b.node->name << "' is out of bounds for its shape "
                      << shape_text(b.shape) << " (dimension " << d << " of the access " << b.node->name << "["
                      << at << "])";
    }
    off = b.strides.empty() ? off * b.shape[d] + i : off + i * b.strides[d];
  }
  if (b.map) off = b.map->offset(idx, b.shape.data());
  if (b.limit >= 0 && (off < 0 || off >= b.limit)) address_error(b, idx, loc);
  if (b.alias >= 0) {
    Aliases::View& v = b.aliases->views[b.alias];
    if (!v.out[off]) {
      reinterpret_bits(v.from, b.aliases->root + off * v.ratio, v.type, &v.own[off]);
      v.out[off] = 1;
      v.handed.push_back(off);
    }
  }
  return b.data + off;
}


void address_error(const Buf& b, const int64_t* idx, const SourceLoc& loc) {
  std::string at;
  for (size_t e = 0; e < b.shape.size(); ++e) at += (e ? ", " : "") + std::to_string(idx[e]);
  if (!b.unresolved.empty()) {
    user_error(loc) << "'" << b.node->name << "' (T.make_tensor at a run-time address) is read or written at [" << at
                    << "], but " << b.unresolved;
  }
  user_error(loc) << "element [" << at << "] of '" << b.node->name << "' (T.make_tensor at a run-time address) lies "
                  << "outside the tensor its address points into (" << b.limit << " elements from the address on)";
}

StmtFn Compiler::bind_addresses(const Expr& var, const SourceLoc& at) {
  struct Tensor {
    int slot;
    const BufferNode* node;
    std::vector<ExprFn> shape, strides;
  };
  std::vector<Tensor> tensors;
  for (const Buffer& b : k_.addressed) {
    if (!b->address.same_as(var)) continue;
    Tensor t{buffer_slot(b, at), b.get(), {}, {}};
    for (const Expr& d : b->shape) t.shape.push_back(expr(d, b->loc));
    for (const Expr& d : b->strides) t.strides.push_back(expr(d, b->loc));
    tensors.push_back(std::move(t));
  }
  if (tensors.empty()) return nullptr;
  int addr = var_slot(var.get());
  internal_assert(addr >= 0 && args_) << "reference: the address '" << var.as<VarNode>()->name << "' is not bound";
  const CallArgs* args = args_;
  return [tensors, addr, args](Frame& f) {
    for (const Tensor& t : tensors) {
      Buf& b = f.bufs[t.slot];
      b.node = t.node;
      b.global = true;
      b.shape.clear();
      b.strides.clear();
      for (const ExprFn& d : t.shape) {
        double v = d(f);
        user_assert(!std::isnan(v) && v >= 0, t.node->loc)
            << "T.make_tensor '" << t.node->name << "': a dimension of its shape is " << v;
        b.shape.push_back(int64_t(v));
      }
      for (const ExprFn& d : t.strides) {
        double v = d(f);
        user_assert(!std::isnan(v), t.node->loc) << "T.make_tensor '" << t.node->name << "': a stride is not a number";
        b.strides.push_back(int64_t(v));
      }
      double* data = nullptr;
      int64_t left = 0;
      b.unresolved = resolve_address(*args, f.vars[addr], t.node->dtype, &data, &left);
      b.data = data;
      b.limit = b.unresolved.empty() ? left : 0;
    }
  };
}

}  // namespace tegula::interp::ref
