// The reference's tensors at run-time addresses (T.make_tensor of a T.ptr parameter, or of
// an address read from a pointer table): where the address is bound (the kernel's start for
// a parameter, its let otherwise), each such tensor is pointed at the memory of the call
// holding that address (interp.h's Region), its shape and strides evaluated there.
#include <cmath>

#include "interp/reference_impl.h"

namespace tegula::interp::ref {

using namespace ir;

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
