// The explicit-width memory intrinsics (T.ldg32 ... T.stg256, T.lds32 ... T.sts128): calls
// that move 4, 8, 16 or 32 bytes in one access and whose value is the raw bits.
//
//   load_global_64(X[i] x2)            -> uint32x2      args: [addr]         or [addr, pred]
//   store_shared_128(S[j] x4, value)                    args: [addr, value]  or [addr, value, pred]
//
// addr is a BufferLoad of the elements covered (lanes = bytes / element size), so every
// analysis that reads BufferLoads sees the access's buffer, first index and width; for a
// store it is the destination, not a read. A false pred reads nothing (the value is 0) or
// writes nothing.
#pragma once
#include <optional>
#include <string>

#include "ir/expr.h"

namespace tegula::ir {

struct WideAccess {
  bool store = false;
  Scope scope = Scope::Global;
  int bits = 32;
  const BufferLoadNode* addr = nullptr;
  Expr value;  // stores
  Expr pred;   // null when unconditional
};

// The access a call makes, or nullopt for any other call.
std::optional<WideAccess> wide_access(const CallNode* c);
// "load_global_64", "store_shared_32", ...
std::string wide_access_op(bool store, Scope scope, int bits);
// The raw-bits type of an access of `bits`: uint32, uint32x2, uint32x4, uint32x8.
DataType wide_access_type(int bits);

}  // namespace tegula::ir
