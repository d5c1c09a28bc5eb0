// The addressing of shared-memory tiles on the host; see shared.h. Each function mirrors
// the device template named beside it, which is what the generated code runs.
#include "layout/shared.h"

#include "support/error.h"

namespace tegula::layout {

namespace {

// tegula::swizzle_offset<C, E>(r, c).
int64_t swizzle_offset(int64_t cols, int elem_bytes, int64_t r, int64_t c) {
  const int64_t chunk = 16 / elem_bytes;  // elements in a 16-byte chunk
  const int64_t chunks = cols / chunk;
  internal_assert(chunk > 0 && chunks > 0 && cols % chunk == 0)
      << "swizzled rows must be whole 16-byte chunks: " << cols << " x " << elem_bytes << " bytes";
  const int64_t bits = chunks >= 8 ? 8 : chunks;
  const int64_t rows_per_phase = 8 / bits;
  const int64_t phase = (r / rows_per_phase) % bits;
  return r * cols + ((c / chunk) ^ phase) * chunk + c % chunk;
}

// tegula::panel_offset<C, E, R>(r, c): panels of 128 bytes' worth of columns.
int64_t panel_offset(int64_t rows, int64_t cols, int elem_bytes, int64_t r, int64_t c) {
  const int64_t panel = cols * elem_bytes > 128 ? 128 / elem_bytes : cols;
  return (c / panel) * (rows * panel) + swizzle_offset(panel, elem_bytes, r, c % panel);
}

}  // namespace

const char* storage_name(SharedStorage s) {
  switch (s) {
    case SharedStorage::Plain: return "plain";
    case SharedStorage::Swizzled: return "swizzled";
    case SharedStorage::Panelled: return "panelled";
  }
  return "plain";
}

bool parse_storage(const std::string& name, SharedStorage* out) {
  for (SharedStorage s : {SharedStorage::Plain, SharedStorage::Swizzled, SharedStorage::Panelled}) {
    if (name == storage_name(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

SharedStorage shared_storage(const ir::Kernel& k, const ir::BufferNode* b) {
  if (b->shape.size() == 2 && k.smem_panelled.count(b)) {
    const int64_t* cols = ir::as_const_int(b->shape[1]);
    if (cols && *cols * b->dtype.bytes() > 128) return SharedStorage::Panelled;
  }
  if (k.smem_swizzled.count(b)) return SharedStorage::Swizzled;
  return SharedStorage::Plain;
}

int64_t shared_offset(SharedStorage s, int64_t rows, int64_t cols, int elem_bytes, int64_t r, int64_t c) {
  switch (s) {
    case SharedStorage::Plain: return r * cols + c;
    case SharedStorage::Swizzled: return swizzle_offset(cols, elem_bytes, r, c);
    case SharedStorage::Panelled: return panel_offset(rows, cols, elem_bytes, r, c);
  }
  return r * cols + c;
}

}  // namespace tegula::layout
