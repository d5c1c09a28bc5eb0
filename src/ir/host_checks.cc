#include "ir/host_checks.h"

#include <functional>

#include "ir/printer.h"

namespace tegula::ir {

std::vector<HostCheck> host_checks(const Kernel& k) {
  VarValues probe;
  for (auto& v : k.dynamic_vars) probe[v.get()] = 1;
  for (auto& p : k.params) {
    if (!p.buffer && !p.var.dtype().is_float()) probe[p.var.get()] = 1;
  }
  std::vector<HostCheck> out;
  std::function<void(const Stmt&)> walk = [&](const Stmt& s) {
    if (auto* seq = s.as<SeqNode>()) {
      for (auto& x : seq->seq) walk(x);
      return;
    }
    auto* ev = s.as<EvaluateNode>();
    auto* c = ev ? ev->value.as<CallNode>() : nullptr;
    int64_t value = 0;
    if (c && c->op == "assume" && c->args.size() == 1 && eval_int(c->args[0], probe, &value)) {
      out.push_back({c->args[0], to_spaced_string(c->args[0])});
    }
  };
  walk(k.body);
  return out;
}

std::string failed_assumption(const std::vector<HostCheck>& checks, const VarValues& vars,
                              const std::string& kernel_name) {
  for (const HostCheck& c : checks) {
    int64_t holds = 1;
    if (!eval_int(c.cond, vars, &holds) || holds) continue;
    std::string values;
    for (auto& [var, value] : vars) {
      auto* v = static_cast<const VarNode*>(var);
      if (c.text.find(v->name) == std::string::npos) continue;
      values += (values.empty() ? "" : ", ") + v->name + " = " + std::to_string(value);
    }
    return kernel_name + ": Assume: " + c.text + " does not hold for this call" +
           (values.empty() ? std::string() : " (" + values + ")") + ": T.assume states a fact the kernel relies on";
  }
  return "";
}

}  // namespace tegula::ir
