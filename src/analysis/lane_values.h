// The values of the IR's scalar expressions over many lanes at once, as the work count
// (work_counts.h) evaluates them: a lane is one block of the grid, or one (block, thread)
// pair where the program reads its thread index.
//
// A value is an integer or a float, held once (it is the same in every lane: it depends
// on constants, dynamic sizes and scalar parameters alone) or once per lane (it depends on
// a block or thread index, directly or through a loop bound or a tensor's contents), or it
// is unknown: only running the kernel would tell (a value in registers or shared memory,
// or in a tensor whose contents were not given). Which of the two a known value is
// matters beyond speed: an affine form's coefficient must be the same in every lane.
//
// Arithmetic has the generated code's meaning (and the printer's spelling, ir/printer.h):
// `//` and `%` floor, `/` of two integers truncates, truncmod is C's remainder; an integer
// division or remainder by zero gives 0 rather than trapping, as a count must go on past
// a lane whose value is never used. Comparisons and logic give the integers 0 and 1.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/stmt.h"

namespace tegula::analysis {

class Val {
 public:
  enum Kind : uint8_t { Unknown, Int, Float };

  Val() = default;
  static Val of_int(int64_t v);
  static Val of_float(double v);
  static Val int_lanes(std::vector<int64_t> v);
  static Val float_lanes(std::vector<double> v);

  Kind kind() const { return kind_; }
  bool known() const { return kind_ != Unknown; }
  bool is_int() const { return kind_ == Int; }
  bool is_float() const { return kind_ == Float; }
  // One entry per lane, rather than one for all of them.
  bool per_lane() const { return ints_ || floats_; }
  size_t lanes() const { return ints_ ? ints_->size() : floats_ ? floats_->size() : 1; }
  int64_t i(size_t lane) const { return ints_ ? (*ints_)[lane] : kind_ == Float ? int64_t(f(lane)) : int_; }
  double f(size_t lane) const {
    if (kind_ == Float) return floats_ ? (*floats_)[lane] : float_;
    return double(i(lane));
  }
  bool truth(size_t lane) const { return kind_ == Float ? f(lane) != 0 : i(lane) != 0; }
  // The value in one lane, held once.
  Val at(size_t lane) const;

 private:
  Kind kind_ = Unknown;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::vector<int64_t>> ints_;
  std::shared_ptr<const std::vector<double>> floats_;
};

// The lanes a statement runs in: one flag a lane.
using Mask = std::vector<uint8_t>;

// A tensor's contents, row-major, when the count's caller gave them.
struct TensorContents {
  std::vector<int64_t> shape;
  bool is_float = false;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

// A value the evaluation needs and nobody bound (a dynamic size, a scalar parameter).
struct MissingValue : std::runtime_error {
  const ir::VarNode* var;
  explicit MissingValue(const ir::VarNode* v) : std::runtime_error("missing value"), var(v) {}
};

// What a variable stands for: a value, or (a let inside a T.Parallel nest, whose value
// depends on the nest's variables) the expression, evaluated where it is used.
struct Binding {
  Val value;
  ir::Expr deferred;
};
using Env = std::unordered_map<const ir::VarNode*, Binding>;

class Evaluator {
 public:
  // The value of element `indices` of a global tensor (each index in range or clipped),
  // or unknown; it may throw to say the tensor's contents are needed.
  using Load = std::function<Val(const ir::BufferNode*, const std::vector<Val>&)>;

  Evaluator(Env& env, Load load) : env_(env), load_(std::move(load)) {}

  Val eval(const ir::Expr& e);
  // With `upper`, an upper bound where the value itself is unknown but a select between two
  // known values, or a min with one known side, bounds it.
  Val eval_upper(const ir::Expr& e);
  // Whether `e` reads one of `vars`, looking through the deferred lets it reads.
  bool reads_any(const ir::Expr& e, const std::vector<const ir::VarNode*>& vars) const;

  Env& env() { return env_; }

 private:
  Val var(const ir::VarNode* v);
  Val binary(const ir::BinaryNode* op);
  Val call(const ir::CallNode* op);
  Val select(const ir::SelectNode* op);

  Env& env_;
  Load load_;
  bool upper_ = false;
};

// Elementwise helpers over lanes (a value held once broadcasts).
Val apply_binary(ir::BinaryOp op, const Val& a, const Val& b);
Val logical_not(const Val& a);
Val where(const Val& c, const Val& a, const Val& b);
int64_t sum_where(const Val& counts, const Mask& mask);  // sum of counts over the set lanes
int64_t count(const Mask& mask);
bool any(const Mask& mask);
// mask & truth(v) (an unknown v keeps every lane).
Mask and_truth(const Mask& mask, const Val& v);

}  // namespace tegula::analysis
