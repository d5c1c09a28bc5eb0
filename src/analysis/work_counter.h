// The work count's walker (work_counts.h), shared by its two files: work_counts.cc (the
// statements a block runs, once per lane) and work_nests.cc (T.Parallel nests, once per
// element). Internal to src/analysis.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "analysis/lane_values.h"
#include "analysis/work_counts.h"
#include "ir/printer.h"

namespace tegula::analysis::detail {

using ir::BinaryOp;
using ir::Expr;
using ir::Stmt;
using Vars = std::vector<const ir::VarNode*>;

// The statements of a block in order; a let stands first for its binding, then its body
// follows at the same level (the printer's reading of it).
std::vector<Stmt> items(const Stmt& s);
// The (condition, body) arms of an if/elif/else chain; the else arm's condition is empty.
std::vector<std::pair<Expr, Stmt>> arms(const ir::IfThenElseNode* op);

struct BufferInfo {
  std::string name;
  bool global = false;
  std::vector<int64_t> shape;  // global tensors
  int bits = 0;
  bool is_float = false;
};

// One access of a global tensor by a statement: a load, or the element a store writes.
struct Access {
  ir::Buffer buffer;
  std::vector<Expr> indices;
  int lanes = 1;
  bool store = false;
};

// What a statement computes, worked out once: its FLOPs per run and its distinct accesses.
struct Plan {
  int64_t flops = 0;
  std::vector<Access> accesses;
};

// A condition of a T.Parallel nest's statement: a branch (negated for the arms after it)
// or an access's in-bounds test.
struct Guard {
  Expr cond;
  bool negated = false;
  const Access* in_bounds = nullptr;
};

struct Loop {
  const ir::VarNode* var;
  Val lo, extent;
};

// base + sum(coefficient * nest variable), the coefficients the same in every lane.
struct Affine {
  std::vector<std::pair<const ir::VarNode*, int64_t>> coeffs;
  Val base;

  Affine plus(const Affine& o, int64_t sign) const {
    Affine out{coeffs, apply_binary(BinaryOp::Add, base, apply_binary(BinaryOp::Mul, o.base, Val::of_int(sign)))};
    for (auto& [v, c] : o.coeffs) {
      auto it = std::find_if(out.coeffs.begin(), out.coeffs.end(), [&](auto& p) { return p.first == v; });
      if (it == out.coeffs.end()) {
        out.coeffs.push_back({v, sign * c});
      } else {
        it->second += sign * c;
      }
    }
    out.coeffs.erase(std::remove_if(out.coeffs.begin(), out.coeffs.end(), [](auto& p) { return p.second == 0; }),
                     out.coeffs.end());
    return out;
  }
  Affine scaled(int64_t k) const {
    Affine out{{}, apply_binary(BinaryOp::Mul, base, Val::of_int(k))};
    for (auto& [v, c] : coeffs) {
      if (c * k != 0) out.coeffs.push_back({v, c * k});
    }
    return out;
  }
};

struct AffineResult {
  enum Kind { None, Unknown, Ok } kind = None;
  Affine form;
};

// A constraint of a nest's points: an affine form >= 0, or a per-lane truth.
struct Constraint {
  bool is_truth = false;
  Val truth;
  Affine form;
};

struct NeedsData {
  std::string buffer;
};

class Counter {
 public:
  Counter(const ir::Kernel& k, const WorkInputs& in)
      : k_(k), in_(in), printed_(k), ev_(env_, [this](const ir::BufferNode* b, const std::vector<Val>& i) {
          return load(b, i);
        }) {}

  WorkCounts count();

 private:
  [[noreturn]] void fail(const std::string& what) const { throw WorkCountError("kernel " + k_.name + ": " + what); }
  std::string quote(const Expr& e) { return printed_.expr(e, true); }
  std::string line(const Stmt& s) { return printed_.head(s); }
  int64_t fixed(const Expr& e, const std::string& what);
  Val load(const ir::BufferNode* b, const std::vector<Val>& indices);

  // ---- statements, for the lanes of a mask ----
  void run(const std::vector<Stmt>& stmts, const Mask& mask, bool threaded);
  void statement(const Stmt& s, const Mask& mask, bool threaded);
  bool per_thread(const std::vector<Expr>& exprs, bool threaded) const;
  Mask counted(const Mask& mask, bool per_thread) const;
  void loop(const ir::ForNode* op, const Stmt& s, const Mask& mask, bool threaded);
  Val control(const Expr& e, const Stmt& s, bool upper);
  void branch(const ir::IfThenElseNode* op, const Mask& mask, bool threaded);
  void lane_statement(const Stmt& s, const std::vector<Expr>& exprs, const Access* target, const Mask& mask,
                      bool atomic);
  Mask inside(const Access& a, const Mask& mask);
  void tile_op(const ir::TileOpNode* op, const Mask& mask);
  void call(const Stmt& s, const Expr& value, const Mask& mask);
  void add_bytes(const Access& a, int64_t n, bool store);

  // ---- statement plans ----
  const Plan& plan(const Stmt& s, const std::vector<Expr>& exprs, const Access* target, bool atomic);
  bool is_float(const Expr& e) const;
  int64_t flops(const Expr& e) const;

  // ---- T.Parallel nests ----
  struct Leaf {
    Stmt stmt;
    std::vector<Loop> loops;
    std::vector<Guard> guards;
  };
  void nest(const Stmt& s, const Mask& mask);
  void collect(const Stmt& s, const std::vector<Loop>& loops, const std::vector<Guard>& guards,
               std::vector<Leaf>& leaves);
  int64_t points(const std::vector<Loop>& loops, const std::vector<Guard>& guards, const Mask& mask);
  std::optional<std::vector<Constraint>> constraints(const Guard& g, const Vars& nest);
  AffineResult affine(const Expr& e, const Vars& nest);
  int64_t dense_points(const std::vector<Loop>& loops, const std::vector<Guard>& guards, const Mask& mask);
  Mask dense_holds(const Guard& g, const Mask& ok);
  void unknown_branch(const Guard& g);

  const ir::Kernel& k_;
  const WorkInputs& in_;
  ir::PrintedKernel printed_;
  Env env_;
  Evaluator ev_;
  WorkCounts out_;
  std::unordered_map<const ir::BufferNode*, BufferInfo> buffers_;
  std::unordered_map<const ir::StmtNode*, Plan> plans_;
  std::unordered_set<const ir::VarNode*> float_lets_;
  Vars thread_vars_;
  std::optional<Mask> first_thread_;  // the lanes of thread 0, where the program reads its thread index
};

}  // namespace tegula::analysis::detail
