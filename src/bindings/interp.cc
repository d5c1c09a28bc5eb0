// tegula._C's side of tegula.testing: a call's arguments (float64 CPU tensors and Python
// numbers, in parameter order) handed to the CPU interpreters of src/interp, and the
// results copied back into the tensors.
#include <torch/extension.h>

#include <algorithm>

#include "bindings/bindings.h"
#include "interp/interp.h"
#include "ir/host_checks.h"
#include "transform/pipeline.h"

namespace tegula::bindings {

namespace {

struct Marshalled {
  std::vector<std::vector<double>> storage;
  std::vector<at::Tensor> tensors;
  interp::CallArgs args;
  // The memory regions that are no argument: their tensors and their own storage.
  std::vector<at::Tensor> region_tensors;
  std::vector<std::unique_ptr<std::vector<double>>> region_storage;
};

// (address, dtype, float64 tensor) per region; a tensor that is an argument's (the same
// object) shares its storage, so a write through either is seen through the other.
void marshal_memory(Marshalled& m, const py::list& values, const py::list& memory) {
  for (const py::handle& item : memory) {
    auto t = item.cast<py::tuple>();
    if (t.size() != 3) throw ArgumentError("interpreter memory: each region is (address, dtype, tensor)");
    interp::Region r;
    r.base = t[0].cast<uint64_t>();
    if (!ir::DataType::parse(t[1].cast<std::string>(), &r.dtype)) {
      throw ArgumentError("interpreter memory: unknown dtype " + t[1].cast<std::string>());
    }
    PyObject* obj = t[2].ptr();
    for (size_t i = 0; i < values.size() && !r.data; ++i) {
      if (values[i].ptr() == obj && m.args.tensors[i]) r.data = m.args.tensors[i];
    }
    if (!r.data) {
      if (!THPVariable_Check(obj)) throw ArgumentError("interpreter memory: a region's tensor must be a tensor");
      at::Tensor x = THPVariable_Unpack(obj);
      if (x.scalar_type() != at::kDouble || !x.is_contiguous() || x.is_cuda()) {
        throw ArgumentError("interpreter memory: a region must be a contiguous float64 CPU tensor here");
      }
      const double* p = x.data_ptr<double>();
      m.region_tensors.push_back(x);
      m.region_storage.push_back(std::make_unique<std::vector<double>>(p, p + x.numel()));
      r.data = m.region_storage.back().get();
    }
    m.args.memory.push_back(r);
  }
}

Marshalled marshal(const ir::Kernel& k, const py::list& values) {
  if (values.size() != k.params.size()) {
    throw ArgumentError(k.name + ": the interpreter needs all " + std::to_string(k.params.size()) +
                        " parameters, got " + std::to_string(values.size()));
  }
  Marshalled m;
  size_t n = k.params.size();
  m.storage.resize(n);
  m.tensors.resize(n);
  m.args.tensors.assign(n, nullptr);
  m.args.shapes.resize(n);
  m.args.scalars.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    py::handle v = values[i];
    if (k.params[i].buffer) {
      if (!THPVariable_Check(v.ptr())) throw ArgumentError(k.name + ": argument '" + k.params[i].name() + "' must be a tensor");
      at::Tensor t = THPVariable_Unpack(v.ptr());
      if (t.scalar_type() != at::kDouble || !t.is_contiguous() || t.is_cuda()) {
        throw ArgumentError(k.name + ": argument '" + k.params[i].name() + "' must be a contiguous float64 CPU tensor here");
      }
      m.tensors[i] = t;
      const double* p = t.data_ptr<double>();
      m.storage[i].assign(p, p + t.numel());
      m.args.tensors[i] = &m.storage[i];
      m.args.shapes[i] = t.sizes().vec();
    } else {
      m.args.scalars[i] = v.cast<double>();
    }
  }
  return m;
}

void unmarshal(Marshalled& m) {
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    if (!m.args.tensors[i]) continue;
    std::copy(m.storage[i].begin(), m.storage[i].end(), m.tensors[i].data_ptr<double>());
  }
  for (size_t i = 0; i < m.region_tensors.size(); ++i) {
    std::copy(m.region_storage[i]->begin(), m.region_storage[i]->end(), m.region_tensors[i].data_ptr<double>());
  }
}

// T.assume's checks a launch makes (ir/host_checks.h), made by the interpreters too.
void check_assumptions(const ir::Kernel& input, const interp::CallArgs& args) {
  std::vector<ir::HostCheck> checks = ir::host_checks(input);
  if (checks.empty()) return;
  std::string failed = ir::failed_assumption(checks, interp::bind_call(input, args), input.name);
  if (!failed.empty()) throw AssumptionError(failed);
}

}  // namespace

void run_reference(const ir::Kernel& input, const py::list& values, const py::list& memory) {
  Marshalled m = marshal(input, values);
  marshal_memory(m, values, memory);
  check_assumptions(input, m.args);
  {
    py::gil_scoped_release release;
    interp::run_reference(input, m.args);
  }
  unmarshal(m);
}

namespace {

// Whether two of the kernel's shared buffers share bytes (the storage plan reuses them by
// lifetime where a kernel would not fit otherwise).
bool shares_shared_bytes(const ir::Kernel& k) {
  std::vector<std::pair<int64_t, const ir::BufferNode*>> ranges;
  for (auto& b : k.allocs) {
    if (b->scope == ir::Scope::Shared && k.smem_offset.count(b.get())) ranges.push_back({k.smem_offset.at(b.get()), b.get()});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const ir::BufferNode* prev = ranges[i - 1].second;
    if (ranges[i - 1].first + prev->num_elements_const() * prev->dtype.bytes() > ranges[i].first) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> run_simulator(const transform::Lowered& lowered, const py::list& values,
                                       const py::list& memory,
                                       const std::function<transform::Lowered()>& cp_async_form) {
  // A warp-specialised kernel runs as lowered: its producer's bulk copies land at once on
  // their mbarriers, its warpgroups run side by side (interp/simt_barriers.cc).
  if (cp_async_form && lowered.kernel.consumer_threads && shares_shared_bytes(lowered.kernel)) {
    return run_simulator(cp_async_form(), values, memory);
  }
  Marshalled m = marshal(lowered.kernel, values);
  marshal_memory(m, values, memory);
  check_assumptions(lowered.stages.front().second, m.args);
  std::vector<std::string> errors;
  {
    py::gil_scoped_release release;
    errors = interp::simulate(lowered, m.args);
  }
  unmarshal(m);
  return errors;
}

}  // namespace tegula::bindings
