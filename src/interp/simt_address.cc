// The simulator's tensors at run-time addresses (T.make_tensor of a T.ptr parameter, or of
// an address read from a pointer table). Each thread reaches such a tensor through the
// address it holds: an element is found in the memory of the call holding that address
// (interp.h's Region) on every access, so threads whose addresses differ (a pointer table
// indexed by the thread) reach different tensors, as on the GPU. An address that reads no
// memory of the call, an element past the end of the memory it points into, or a vector
// access at an address not a multiple of its size is reported, not executed.
#include <cstdio>

#include "interp/simt_machine.h"

namespace tegula::interp::simt {

using namespace ir;

void Machine::bind_addresses(const Expr& var, const Threads& ts) {
  if (ts.empty()) return;
  for (const Buffer& b : k_.addressed) {
    if (!b->address.same_as(var)) continue;
    auto& st = storage_[b.get()];
    if (!st) st = std::make_unique<Storage>();
    st->buf = b.get();
    auto uniform = [&](const Expr& e, const char* what) {
      Vals v = eval(e, ts);
      require_defined(v, ts, std::string("sizes T.make_tensor '") + b->name + "' with");
      for (size_t i = 1; i < ts.size(); ++i) {
        if (v.at(i) != v.at(0)) cannot(std::string("T.make_tensor '") + b->name + "' whose " + what + " differs between threads");
      }
      return int64_t(v.at(0));
    };
    st->shape.clear();
    st->strides.clear();
    st->size = 1;
    for (const Expr& d : b->shape) {
      st->shape.push_back(uniform(d, "shape"));
      st->size *= st->shape.back();
    }
    for (const Expr& d : b->strides) st->strides.push_back(uniform(d, "strides"));
    st->data = nullptr;
  }
}

double* Machine::global_element(Storage* st, int64_t flat, int t, int bytes) {
  if (!st->buf->address) return st->data + flat;
  if (t < 0) cannot("a collective access to '" + st->buf->name + "', a tensor at a run-time address");
  auto it = vars_.find(st->buf->address.get());
  if (it == vars_.end()) cannot("an access to '" + st->buf->name + "' outside the scope of its address");
  double address = it->second.at(size_t(t));
  double* data = nullptr;
  int64_t left = 0;
  std::string why = resolve_address(args_, address, st->buf->dtype, &data, &left);
  if (!why.empty()) {
    error(thread_name(t) + " accesses " + element_name(st, flat) + " (T.make_tensor at a run-time address): " + why);
    return nullptr;
  }
  if (flat < 0 || flat >= left) {
    error(thread_name(t) + " accesses " + element_name(st, flat) + ", outside the tensor its address points into (" +
          std::to_string(left) + " elements from the address on)");
    return nullptr;
  }
  int esize = st->buf->dtype.bytes();
  if (bytes > esize && (uint64_t(address) + uint64_t(flat) * esize) % uint64_t(bytes) != 0) {
    error(thread_name(t) + " accesses " + std::to_string(bytes) + " bytes of " + element_name(st, flat) +
          " at an address not a multiple of " + std::to_string(bytes) + " (T.make_tensor's address must be aligned "
          "to the widest access the kernel makes there)");
    return nullptr;
  }
  return data + flat;
}

}  // namespace tegula::interp::simt
