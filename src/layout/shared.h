// Where each element of a shared-memory tile is stored: the host-side twin of the device
// library's addressing, for inspection (tegula.tools.plot_layout) and tests. The CUDA
// printer picks one of three forms per buffer (codegen's `offset`), and shared_storage()
// applies the same rule:
//   Plain     row-major
//   Swizzled  16-byte chunks XOR-swizzled by row (tegula::swizzle_offset, gemm.h)
//   Panelled  a wgmma operand whose rows pass 128 bytes: 128-byte-wide panels, each an
//             R-row swizzled tile (tegula::panel_offset, wgmma.h)
//
// Worked example, Swizzled, C = 64 float16 (8 chunks of 8 elements, 128-byte rows): row r
// xors its chunk index with r % 8, so (r, c) = (3, 10), chunk 1, goes to chunk 1 ^ 3 = 2:
// offset 3 * 64 + 2 * 8 + 10 % 8 = 210. Rows of 4 chunks (64 bytes) xor with r / 2 % 4,
// rows of 2 chunks with r / 4 % 2, since 2 (4) such rows fill 128 bytes.
#pragma once
#include <cstdint>
#include <string>

#include "ir/stmt.h"

namespace tegula::layout {

enum class SharedStorage { Plain, Swizzled, Panelled };

const char* storage_name(SharedStorage s);
// "plain", "swizzled" or "panelled"; false for any other name.
bool parse_storage(const std::string& name, SharedStorage* out);

// The form the printer addresses shared buffer b of the final kernel k with.
SharedStorage shared_storage(const ir::Kernel& k, const ir::BufferNode* b);

// Element offset of (r, c) in a rows x cols tile of elem_bytes-byte elements stored as s.
// Swizzled and Panelled need cols * elem_bytes to be a multiple of 16 (whole chunks).
int64_t shared_offset(SharedStorage s, int64_t rows, int64_t cols, int elem_bytes, int64_t r, int64_t c);

}  // namespace tegula::layout
