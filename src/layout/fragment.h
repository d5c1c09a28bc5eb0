// Fragment layouts: which thread of the block holds which element of a tile, and in
// which register slot.
//
// A layout answers two questions, one numeric (for checks and inference, evaluated over
// the whole tile at compile time) and one symbolic (for the generated code):
//   coords(t, s)        -> the logical element thread t keeps in slot s
//   coords_expr(tx, s)  -> the same as expressions of the thread index, for a constant s
// Several threads may hold the same element (replication, e.g. a row maximum held by
// every thread that held part of the row); replicate_mask() says which thread bits differ
// between the copies.
//
// Worked example, Blocked({2, 16}, threads=4, vec=4): 32 elements, 8 slots per thread.
//   thread 0 holds (0,0..3) in slots 0..3 and (1,0..3) in slots 4..7;
//   thread 1 holds (0,4..7) and (1,4..7); ... thread 3 holds (0,12..15) and (1,12..15).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ir/expr.h"

namespace tegula::layout {

using ir::Expr;

class Fragment {
 public:
  Fragment(std::vector<int64_t> shape, int threads, int slots);
  virtual ~Fragment() = default;

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const;
  int threads() const { return threads_; }
  int slots() const { return slots_; }
  // Contiguous slots that hold contiguous elements of the last dimension (1 if none).
  virtual int vector_width() const { return 1; }

  virtual bool coords(int t, int s, int64_t* out) const = 0;
  // valid is set to a predicate on tx when some threads leave slot s empty, else to null.
  virtual std::vector<Expr> coords_expr(const Expr& tx, int s, Expr* valid) const = 0;
  virtual std::string describe() const = 0;
  // Every thread holds the whole tile, element `flat` (row-major) in slot `flat`
  // (make_replicated): any thread may read any element at a run-time index.
  virtual bool whole_in_every_thread() const { return false; }

  // Slot of element `flat` (row-major) in thread t, or -1 when t does not hold it.
  int slot_of(int t, int64_t flat) const;
  // How many threads hold element `flat` (its copies).
  int holders(int64_t flat) const;
  // Bits of the thread index along which copies of one element differ.
  int replicate_mask() const;
  // True when threads that differ only in `mask` bits never keep different elements in
  // the same slot: what a butterfly over those bits relies on (threads of a group that
  // hold nothing in a slot only contribute the identity). With need_base, the thread of
  // each group whose mask bits are zero also holds every element its group holds: what
  // the one-copy store guard `(tx & mask) == 0` relies on.
  bool xor_groups_consistent(int mask, bool need_base) const;
  // Structural sameness: the same element in the same (thread, slot) everywhere.
  bool same_as(const Fragment& other) const;

  int64_t flatten(const int64_t* c) const;

 protected:
  std::vector<int64_t> shape_;
  int threads_, slots_;

 private:
  void build_table() const;
  mutable std::vector<std::vector<std::pair<int, int>>> owners_;  // flat -> (thread, slot)
  mutable int replicate_mask_ = -1;
};

using FragmentPtr = std::shared_ptr<const Fragment>;

// Free choice: the tile flattened row-major, cut into vectors of `vec` elements dealt
// round-robin to the threads.
FragmentPtr make_blocked(std::vector<int64_t> shape, int threads, int vec);

// Free choice for tiles reduced along their last dimension: each row goes to a
// power-of-two group of consecutive threads (see fragment.cc for an example).
FragmentPtr make_row_blocked(std::vector<int64_t> shape, int threads, int vec);
// The widest vector (elements, at most 16 bytes) dividing last_dim.
int choose_row_vector(int64_t last_dim, int elem_bytes);

// A layout derived from `base` by keeping only the dimensions in `keep` (reductions,
// and fragments indexed by a subset of a parallel loop's variables). Throws UserError at
// loc when the derived slots would differ between threads.
FragmentPtr make_projected(const FragmentPtr& base, std::vector<int> keep, const SourceLoc& loc);

// base seen through another shape of the same size (row-major order kept).
FragmentPtr make_reshaped(const FragmentPtr& base, std::vector<int64_t> shape);

// base, laid out over a tile whose dimensions are this one's in the order `order`: base's
// dimension d is dimension order[d] here. make_permuted(make_row_blocked({N, M}, ...), {1, 0})
// lays out an (M, N) tile with its columns dealt to thread groups (a reduction along dim 0
// is then a butterfly over each group's low bits).
FragmentPtr make_permuted(const FragmentPtr& base, std::vector<int> order);

// Every thread holds the whole tile.
FragmentPtr make_replicated(std::vector<int64_t> shape, int threads);

// A user's layout (T.Fragment), as a table: owners[flat] lists the (thread, slot) of each
// copy of the row-major element `flat`. For the generated code, the element a slot holds
// must be a formula of the thread index: each coordinate an affine (a + b*tx) or a
// bit-linear (a + sum of w_k * bit k of tx) function of tx, or else its row-major index
// one of those; the threads holding the slot a range or a bit pattern of tx. A table that
// breaks this, or places two elements in one register, is a UserError at loc.
//   Table({4, 128}, 128 threads): element (i, j) in thread j, slot i; coords_expr(tx, s)
//   = (s, tx). Table({8, 64}): element (i, j) in thread i*16 + j/4, slot j%4;
//   coords_expr(tx, s) = (tx / 16, tx % 16 * 4 + s), and vector_width() = 4.
using Owners = std::vector<std::vector<std::pair<int, int>>>;  // per element: (thread, slot) of each copy
FragmentPtr make_table(std::vector<int64_t> shape, int threads, const Owners& owners, const SourceLoc& loc);

// The largest vector (in elements) of `elem_bytes`-sized elements, at most 16 bytes,
// that divides `last_dim` and spreads `total` elements over threads without waste.
int choose_vector(int64_t last_dim, int64_t total, int threads, int elem_bytes);

}  // namespace tegula::layout
