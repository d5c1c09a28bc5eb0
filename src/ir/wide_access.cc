#include "ir/wide_access.h"

namespace tegula::ir {

std::string wide_access_op(bool store, Scope scope, int bits) {
  return std::string(store ? "store_" : "load_") + (scope == Scope::Shared ? "shared_" : "global_") +
         std::to_string(bits);
}

DataType wide_access_type(int bits) { return DataType{DataType::UInt, 32, bits / 32}; }

std::optional<WideAccess> wide_access(const CallNode* c) {
  const std::string& op = c->op;
  WideAccess w;
  size_t at;
  if (op.rfind("load_", 0) == 0) {
    at = 5;
  } else if (op.rfind("store_", 0) == 0) {
    w.store = true;
    at = 6;
  } else {
    return std::nullopt;
  }
  if (op.compare(at, 7, "global_") == 0) {
    w.scope = Scope::Global;
  } else if (op.compare(at, 7, "shared_") == 0) {
    w.scope = Scope::Shared;
  } else {
    return std::nullopt;
  }
  std::string bits = op.substr(at + 7);
  if (bits != "32" && bits != "64" && bits != "128" && bits != "256") return std::nullopt;
  w.bits = std::stoi(bits);
  size_t n = w.store ? 2 : 1;
  if (c->args.size() < n || c->args.size() > n + 1) return std::nullopt;
  w.addr = c->args[0].as<BufferLoadNode>();
  if (!w.addr) return std::nullopt;
  if (w.store) w.value = c->args[1];
  if (c->args.size() == n + 1) w.pred = c->args[n];
  return w;
}

}  // namespace tegula::ir
