// What a lowered kernel asks of the machine when it launches, decided where the printer
// and the launcher read it alike: the registers of a warp-specialised kernel's roles, the
// widest wgmma's register need (and the refusal of one past the kernel's registers), a
// thread's register limit, whether the grid folds, whether it is launched cooperatively,
// and whether it takes an event log.
#include <algorithm>

#include "codegen/cuda_printer.h"
#include "ir/analyzer.h"
#include "ir/functor.h"

namespace tegula::codegen {

using namespace ir;

WgmmaRegisters wgmma_registers(const Kernel& k) {
  WgmmaRegisters w;
  post_order(k.body, [](const Stmt&) {}, [&](const Expr& e) {
    auto* c = e.as<CallNode>();
    if (!c || (c->op != "wgmma_ss" && c->op != "wgmma_rs")) return;
    int n = int(*as_const_int(c->args[1]) / *as_const_int(c->args[4]));
    int k = 32 / c->args[8].as<BufferLoadNode>()->buffer->dtype.bytes();
    if (n > w.n) w = {n, k, n / 2 + WgmmaRegisters::kBeside, c->loc};
  });
  return w;
}

void check_wgmma_registers(const Kernel& k) {
  WgmmaRegisters w = wgmma_registers(k);
  int limit = register_limit(k);
  if (w.registers <= limit) return;
  int widest = 2 * (limit - WgmmaRegisters::kBeside) / 8 * 8;
  user_error(w.loc) << "T.gemm: its wgmma instruction m64n" << w.n << "k" << w.k << " holds " << w.n / 2
                    << " accumulator registers per thread (about " << w.registers
                    << " with its operands), past the " << limit << " registers a thread of this kernel has ("
                    << k.threads << " threads a block"
                    << (k.consumer_threads ? ", warp-specialised" : "")
                    << "): give each warpgroup at most " << widest
                    << " columns of the accumulator (a narrower block_N, or more warpgroups along N), or "
                       "fewer threads";
}

int register_limit(const Kernel& k) {
  int blocks = k.consumer_threads ? ws_registers(k).blocks_per_sm : std::max(1, k.min_blocks_per_sm);
  return std::min(255, 65536 / blocks / k.threads);
}

WsRegisters ws_registers(const Kernel& k) {
  WsRegisters r;
  const int T = k.consumer_threads;
  // 228 KB of shared memory per SM, 1 KB of it reserved per block.
  constexpr int64_t kSmemPerSm = 228 * 1024, kReserved = 1024;
  // ptxas compiles the whole kernel within the launch bounds' count (setmaxnreg does not
  // raise it), so a wgmma that needs more keeps one block per SM.
  if (T == 128 && 2 * (k.smem_bytes + kReserved) <= kSmemPerSm &&
      wgmma_registers(k).registers <= 65536 / 2 / k.threads) {
    r.blocks_per_sm = 2;
  }
  if (k.min_blocks_per_sm > 0) r.blocks_per_sm = k.min_blocks_per_sm;  // the author's T.annotate_min_blocks_per_sm
  const int regs = 65536 / r.blocks_per_sm;
  r.entry = std::min(255, regs / k.threads) / 8 * 8;
  r.producer = 24;
  r.consumer = std::min(240, (regs - 128 * r.producer) / T / 8 * 8);
  return r;
}

bool launches_cooperatively(const Kernel& k) {
  bool found = false;
  post_order(k.body, [](const Stmt&) {}, [&](const Expr& e) {
    auto* c = e.as<CallNode>();
    found = found || (c && c->op == "sync_grid");
  });
  return found;
}

bool event_call(const std::string& op, std::string* phase, std::string* name) {
  if (op.rfind("iket_", 0) != 0) return false;
  size_t colon = op.find(':');
  if (colon == std::string::npos) return false;
  if (phase) *phase = op.substr(5, colon - 5);
  if (name) *name = op.substr(colon + 1);
  return true;
}

bool records_events(const Kernel& k) {
  bool found = false;
  post_order(k.body, [](const Stmt&) {}, [&](const Expr& e) {
    auto* c = e.as<CallNode>();
    found = found || (c && event_call(c->op, nullptr, nullptr));
  });
  return found;
}

std::vector<std::string> panel_block_indices(int panel, bool rows, const std::vector<std::string>& raw,
                                             const std::string& grid_y, const std::vector<std::string>& names) {
  const std::string P = std::to_string(panel);
  std::string across = rows ? grid_y : "gridDim.x", along = rows ? "gridDim.x" : grid_y;
  std::string a = "tegula_panel * " + P + " + tegula_in % tegula_width", b = "tegula_in / tegula_width";
  std::vector<std::string> out = {
      "const int tegula_lin = " + raw[1] + " * gridDim.x + blockIdx.x;",
      "const int tegula_panel = tegula_lin / (" + P + " * " + along + ");",
      "const int tegula_in = tegula_lin % (" + P + " * " + along + ");",
      "const int tegula_width = min(" + P + ", (int)" + across + " - tegula_panel * " + P + ");",
      "const int " + names[0] + " = " + (rows ? b : a) + ";",
      "const int " + names[1] + " = " + (rows ? a : b) + ";"};
  for (size_t d = 2; d < names.size(); ++d) out.push_back("const int " + names[d] + " = " + raw[d] + ";");
  return out;
}

bool folds_grid(const Kernel& k) {
  // A cluster is a tile of the launch grid itself: its blocks are never refolded.
  if (!k.cluster_dims.empty()) return false;
  // The same bounds the printer's analyzer knows: an int32 dynamic size below
  // kIndex32Limit, an int64 one below its limit.
  Analyzer an;
  for (auto& v : k.dynamic_vars) {
    an.bind(v, Interval{0, (v.dtype().bits == 64 ? dynamic_size_limit(v) : kIndex32Limit) - 1});
  }
  for (size_t d = 1; d < k.grid.size() && d < 3; ++d) {
    if (an.bound(k.grid[d]).hi > 65535) return true;
  }
  return false;
}

}  // namespace tegula::codegen
