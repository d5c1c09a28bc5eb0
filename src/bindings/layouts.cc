// Lowered.layouts() and tegula._C.shared_offsets(): the layouts the passes chose, as data
// for tegula.tools.plot_layout. The IR text does not print them (a fragment's layout is
// gone once its register array replaces it), so they are read off the lowering's results:
// the fragment layouts behind the final kernel's register arrays (Lowered::register_layouts)
// and the storage form of each shared buffer (layout/shared.h, the printer's rule).
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bindings/bindings.h"
#include "layout/shared.h"
#include "transform/pipeline.h"

namespace tegula::bindings {

namespace {

std::vector<int64_t> const_shape(const ir::Buffer& b) {
  std::vector<int64_t> out;
  for (auto& d : b->shape) {
    const int64_t* v = ir::as_const_int(d);
    out.push_back(v ? *v : -1);
  }
  return out;
}

// The k-th buffer named `name` among `allocs` (passes keep names; a name may repeat).
const ir::BufferNode* nth_named(const std::vector<ir::Buffer>& allocs, const std::string& name, int k) {
  for (auto& b : allocs) {
    if (b->name == name && k-- == 0) return b.get();
  }
  return nullptr;
}

// Every (element, thread, slot) the layout holds, elements row-major, as three lists.
py::dict fragment_entry(const ir::Buffer& declared, const layout::Fragment& f) {
  std::vector<int64_t> element;
  std::vector<int> thread, slot;
  std::vector<int64_t> c(f.shape().size());
  for (int t = 0; t < f.threads(); ++t) {
    for (int s = 0; s < f.slots(); ++s) {
      if (!f.coords(t, s, c.data())) continue;
      element.push_back(f.flatten(c.data()));
      thread.push_back(t);
      slot.push_back(s);
    }
  }
  py::dict d;
  d["name"] = declared->name;
  d["scope"] = "fragment";
  d["dtype"] = declared->dtype.name();
  d["shape"] = f.shape();
  d["threads"] = f.threads();
  d["slots"] = f.slots();
  d["layout"] = f.describe();
  d["element"] = element;
  d["thread"] = thread;
  d["slot"] = slot;
  return d;
}

// The element offsets of a rows x cols tile (row-major order) inside a buffer stored as
// `storage` with stored_rows rows: the tile is its first rows (stage 0 of a stacked one).
std::vector<int64_t> tile_offsets(layout::SharedStorage storage, int64_t stored_rows, int64_t rows, int64_t cols,
                                  int elem_bytes) {
  std::vector<int64_t> out;
  out.reserve(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out.push_back(layout::shared_offset(storage, stored_rows, cols, elem_bytes, r, c));
  }
  return out;
}

py::dict shared_entry(const ir::Buffer& declared, const ir::Kernel& final_kernel, const ir::BufferNode* stored) {
  std::vector<int64_t> shape = const_shape(declared);
  std::vector<int64_t> stored_shape = shape;
  layout::SharedStorage storage = layout::SharedStorage::Plain;
  int64_t base = -1;
  if (stored) {
    stored_shape.clear();
    for (auto& d : stored->shape) {
      const int64_t* v = ir::as_const_int(d);
      stored_shape.push_back(v ? *v : -1);
    }
    storage = layout::shared_storage(final_kernel, stored);
    auto it = final_kernel.smem_offset.find(stored);
    if (it != final_kernel.smem_offset.end()) base = it->second;
  }
  int64_t cols = shape.empty() ? 1 : shape.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  int64_t stored_rows = stored_shape.empty() ? 1 : stored_shape[0];
  py::dict d;
  d["name"] = declared->name;
  d["scope"] = "shared";
  d["dtype"] = declared->dtype.name();
  d["elem_bytes"] = declared->dtype.bytes();
  d["shape"] = shape;
  d["stored_shape"] = stored_shape;
  d["storage"] = layout::storage_name(storage);
  d["base"] = base;
  if (rows > 0 && cols > 0) {
    d["offsets"] = tile_offsets(shape.size() == 2 ? storage : layout::SharedStorage::Plain,
                                shape.size() == 2 ? stored_rows : rows, rows, cols, declared->dtype.bytes());
  }
  return d;
}

}  // namespace

py::list describe_layouts(const transform::Lowered& lowered) {
  const ir::Kernel& input = lowered.stages.front().second;
  const ir::Kernel& final_kernel = lowered.kernel;
  // Register arrays keep their fragment's name: name -> their layouts, in alloc order.
  std::map<std::string, std::vector<layout::FragmentPtr>> registers;
  for (auto& b : final_kernel.allocs) {
    auto it = lowered.register_layouts.find(b.get());
    if (it != lowered.register_layouts.end()) registers[b->name].push_back(it->second);
  }
  std::map<std::string, int> seen;
  py::list out;
  for (auto& b : input.allocs) {
    int k = seen[b->name]++;
    if (b->scope == ir::Scope::Fragment) {
      auto it = registers.find(b->name);
      if (it == registers.end() || k >= int(it->second.size())) continue;  // optimised away
      out.append(fragment_entry(b, *it->second[k]));
    } else if (b->scope == ir::Scope::Shared) {
      out.append(shared_entry(b, final_kernel, nth_named(final_kernel.allocs, b->name, k)));
    }
  }
  return out;
}

void init_layouts(py::module_& m) {
  m.def("shared_offsets", [](int64_t rows, int64_t cols, int elem_bytes, const std::string& storage,
                             int64_t stored_rows) {
    layout::SharedStorage s;
    if (!parse_storage(storage, &s)) {
      throw py::value_error("shared_offsets: storage must be 'plain', 'swizzled' or 'panelled', got '" + storage + "'");
    }
    if (rows <= 0 || cols <= 0 || (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4 && elem_bytes != 8)) {
      throw py::value_error("shared_offsets: rows and cols must be positive and elem_bytes 1, 2, 4 or 8");
    }
    if (s != layout::SharedStorage::Plain && (cols * elem_bytes) % 16 != 0) {
      throw py::value_error("shared_offsets: a " + storage + " tile's rows must be whole 16-byte chunks, got " +
                            std::to_string(cols) + " x " + std::to_string(elem_bytes) + " bytes");
    }
    return tile_offsets(s, stored_rows > 0 ? stored_rows : rows, rows, cols, elem_bytes);
  }, py::arg("rows"), py::arg("cols"), py::arg("elem_bytes"), py::arg("storage"), py::arg("stored_rows") = 0,
     "Element offsets (row-major order) of a rows x cols shared tile stored 'plain', 'swizzled' or 'panelled' "
     "(a buffer of stored_rows rows whose first rows are the tile), as the generated code addresses it.");
}

}  // namespace tegula::bindings
