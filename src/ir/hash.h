// Structural hash and equality of IR trees, for pass tests (an "expected" program built by
// hand against the pass's output) and for caching.
//
// Two trees are equal when they have the same shape, node kinds, dtypes, constants, names
// of ops and attrs, with:
//  * bound variables (For and Let vars; a kernel's scalar params, dynamic vars, block vars
//    and thread var) matched by binding position, so alpha-renaming does not matter:
//        for i in serial(0, 4): A[i] = 0   equals   for j in serial(0, 4): A[j] = 0
//  * free variables matched by name and dtype;
//  * buffers compared by name, scope, dtype and shape the first time each is met, after
//    which every later use must name the corresponding buffer again (aliasing is kept).
// Source locations never take part. Equal trees hash equal.
#pragma once
#include <cstdint>

#include "ir/stmt.h"

namespace tegula::ir {

uint64_t structural_hash(const Expr& e);
uint64_t structural_hash(const Stmt& s);
uint64_t structural_hash(const Kernel& k);

bool structural_equal(const Expr& a, const Expr& b);
bool structural_equal(const Stmt& a, const Stmt& b);
bool structural_equal(const Kernel& a, const Kernel& b);

}  // namespace tegula::ir
