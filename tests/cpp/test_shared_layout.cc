// Shared-memory addressing on the host (layout/shared.h), checked over whole tiles: every
// form is a permutation of the tile's offsets that keeps 16-byte chunks whole, and the
// swizzled forms put the 8 rows one ldmatrix phase reads at one logical chunk in 8
// different 16-byte bank groups.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "layout/shared.h"

namespace tegula::layout {
namespace {

struct TileCase {
  SharedStorage storage;
  int64_t rows, cols;
  int elem_bytes;
};

TEST(SharedLayout, WorkedExample) {
  // shared.h's example: (3, 10) of a 64-wide float16 tile goes to chunk 1 ^ 3 = 2.
  EXPECT_EQ(shared_offset(SharedStorage::Swizzled, 64, 64, 2, 3, 10), 3 * 64 + 2 * 8 + 2);
  EXPECT_EQ(shared_offset(SharedStorage::Plain, 64, 64, 2, 3, 10), 3 * 64 + 10);
  // A 128-wide float16 panelled tile of 64 rows: column 70 is in panel 1 (64 x 64 elements
  // after panel 0), chunk (70 % 64) / 8 = 0 ^ (5 % 8) = 5.
  EXPECT_EQ(shared_offset(SharedStorage::Panelled, 64, 128, 2, 5, 70), 64 * 64 + 5 * 64 + 5 * 8 + 6);
}

TEST(SharedLayout, PermutationKeepingChunks) {
  const TileCase cases[] = {
      {SharedStorage::Plain, 16, 24, 2},    {SharedStorage::Swizzled, 64, 64, 2},
      {SharedStorage::Swizzled, 32, 32, 2}, {SharedStorage::Swizzled, 32, 16, 2},
      {SharedStorage::Swizzled, 16, 32, 4}, {SharedStorage::Swizzled, 8, 256, 2},
      {SharedStorage::Panelled, 128, 256, 2}, {SharedStorage::Panelled, 64, 64, 4},
  };
  for (const TileCase& tc : cases) {
    std::set<int64_t> seen;
    const int64_t chunk = 16 / tc.elem_bytes;
    for (int64_t r = 0; r < tc.rows; ++r) {
      for (int64_t c = 0; c < tc.cols; ++c) {
        int64_t off = shared_offset(tc.storage, tc.rows, tc.cols, tc.elem_bytes, r, c);
        ASSERT_TRUE(off >= 0 && off < tc.rows * tc.cols) << storage_name(tc.storage) << " (" << r << ", " << c << ")";
        ASSERT_TRUE(seen.insert(off).second) << storage_name(tc.storage) << ": two elements at " << off;
        if (c % chunk) {
          ASSERT_EQ(off, shared_offset(tc.storage, tc.rows, tc.cols, tc.elem_bytes, r, c - 1) + 1)
              << storage_name(tc.storage) << ": chunk split at (" << r << ", " << c << ")";
        }
      }
    }
  }
}

TEST(SharedLayout, SwizzleSpreadsEightRowsOverBankGroups) {
  // Rows of 128 bytes or more: rows r0..r0+7 at one chunk fall in 8 different groups of
  // 4 banks (byte address / 16 mod 8); plain storage puts them all in one.
  for (int64_t cols : {64, 128}) {
    for (int64_t chunk = 0; chunk < cols / 8; ++chunk) {
      std::set<int64_t> swizzled, plain;
      for (int64_t r = 8; r < 16; ++r) {
        swizzled.insert(shared_offset(SharedStorage::Swizzled, 16, cols, 2, r, chunk * 8) * 2 / 16 % 8);
        plain.insert(shared_offset(SharedStorage::Plain, 16, cols, 2, r, chunk * 8) * 2 / 16 % 8);
      }
      EXPECT_EQ(swizzled.size(), 8u) << cols << " columns, chunk " << chunk;
      EXPECT_EQ(plain.size(), 1u);
    }
  }
}

TEST(SharedLayout, Names) {
  SharedStorage s;
  EXPECT_TRUE(parse_storage("panelled", &s));
  EXPECT_EQ(s, SharedStorage::Panelled);
  EXPECT_FALSE(parse_storage("banked", &s));
}

}  // namespace
}  // namespace tegula::layout
