// Helpers for ops that pair two buffer regions element by element (copy, atomic_add).
#pragma once
#include <string>
#include <vector>

#include "ir/stmt.h"

namespace tegula::ops {

// The non-unit extents of a region (-1 where symbolic); dims receives their positions.
std::vector<int64_t> squeeze(const std::vector<ir::Expr>& extents, std::vector<int>* dims);
// True when every extent is 1: the corner form A[by*bM, k*bK].
bool all_ones(const ir::BufferRegion& r);
// A corner-form region given the other side's extents, trailing dimensions aligned.
ir::BufferRegion widen(const ir::BufferRegion& corner, const ir::BufferRegion& other, const SourceLoc& loc);
// min + v, written as plain v when min is 0 so that layout inference sees the loop
// variable itself as the index.
ir::Expr offset(const ir::Expr& min, const ir::Expr& v);
std::string shape_str(const std::vector<int64_t>& s);
// True when r spans all of its buffer.
bool is_whole(const ir::BufferRegion& r);
// The condition that position v (one index per dimension of r's buffer) lies inside r;
// null when every position of the buffer does.
ir::Expr inside(const ir::BufferRegion& r, const std::vector<ir::Expr>& v);

}  // namespace tegula::ops
