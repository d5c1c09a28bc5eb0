// A readable, Python-like text of the tile IR: for dumps (`kernel.get_ir(stage)`,
// TEGULA_DUMP_IR), error messages and test failures. It is not the CUDA printer and is
// never parsed back.
//
//   kernel matmul(A: float16[M, 1024], B: float16[1024, 1024], C: float32[M, 1024]):
//       dynamic M: int32
//       grid (8, (M + 127)//128) -> (bx, by)
//       threads 128 -> tx
//       alloc A_shared: shared float16[128, 32]
//       smem A_shared @ 0; 8192 bytes                  (once the storage plan is filled)
//       for k in pipelined(0, 32, num_stages=3):
//           T.copy(A[by*128:+128, k*32:+32] -> A_shared[0:+128, 0:+32])
//       for i in parallel(0, 128):
//           C[by*128 + i, bx] = float32(A_shared[i, 0]) + 1.0
//
// A load or store of n lanes shows its last index as a slice, `A_shared[i, j*8:+8]`; a let
// prints as `let x = ...` with its body at the same depth; casts as `float32(x)`, calls as
// `exp2(x)`, int32/float32 constants bare and others as `int64(3)`.
// Operators take Python's precedence with the fewest parentheses that keep the tree's shape;
// `*`, `/`, `//`, `%` are written without spaces so a line reads like its precedence.
// Two distinct Var nodes (or buffers) sharing a name print as `i`, `i_1`, ... numbered in
// order of first appearance, which matters once passes start creating variables.
#pragma once
#include <memory>
#include <ostream>
#include <string>

#include "ir/stmt.h"

namespace tegula::ir {

std::string to_string(const Expr& e);
// The expression as its author writes it, every operator spaced (`N % 4 == 0`): for
// messages that quote a condition back to the user.
std::string to_spaced_string(const Expr& e);
// `indent` counts levels of four spaces; the text ends with a newline.
std::string to_string(const Stmt& s, int indent = 0);
std::string to_string(const Kernel& k);
// `A[by*128:+128, k*32:+32]`: each dimension as min:+extent.
std::string to_string(const BufferRegion& r);

// A kernel printed once, so that a message can quote any of its statements or expressions
// with the names the whole printout gives them (`i_4`, not the `i` the expression alone
// would print as).
class PrintedKernel {
 public:
  explicit PrintedKernel(const Kernel& k);
  ~PrintedKernel();
  const std::string& text() const;
  // The expression as to_string or, spaced, as to_spaced_string writes it.
  std::string expr(const Expr& e, bool spaced = false);
  // The first line of the statement (a loop's or a branch's head, without its body).
  std::string head(const Stmt& s);
  std::string var(const VarNode* v);
  std::string buffer(const BufferNode* b);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// So that messages can stream nodes: user_error(loc) << "bad index " << e;
std::ostream& operator<<(std::ostream& os, const Expr& e);
std::ostream& operator<<(std::ostream& os, const Stmt& s);

}  // namespace tegula::ir
