// Lowered.count_work() and Lowered.dynamic_sizes(): the work count of
// src/analysis/work_counts.h as data for tegula.tools.Analyzer, which presents it.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "analysis/work_counts.h"
#include "bindings/bindings.h"
#include "transform/pipeline.h"

namespace tegula::bindings {

namespace {

analysis::Number number(const std::string& name, const py::handle& v) {
  analysis::Number out;
  if (py::isinstance<py::bool_>(v) || !(py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v))) {
    throw py::type_error("count_work: value '" + name + "' must be an int or a float, got " +
                         std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  if (py::isinstance<py::float_>(v)) {
    out.is_float = true;
    out.f = v.cast<double>();
  } else {
    out.i = v.cast<int64_t>();
  }
  return out;
}

// A tensor's contents from its numpy array (any dtype: integers and booleans read as
// integers, the rest as float64).
std::unique_ptr<analysis::TensorContents> contents_of(const py::array& a) {
  auto out = std::make_unique<analysis::TensorContents>();
  for (py::ssize_t d = 0; d < a.ndim(); ++d) out->shape.push_back(a.shape(d));
  char kind = a.dtype().kind();
  if (kind == 'b' || kind == 'i' || kind == 'u') {
    auto ints = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    out->ints.assign(ints.data(), ints.data() + ints.size());
  } else {
    out->is_float = true;
    auto floats = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
    out->floats.assign(floats.data(), floats.data() + floats.size());
  }
  return out;
}

}  // namespace

py::dict count_work(const transform::Lowered& lowered, const std::string& stage, const py::dict& values,
                    const py::dict& tensors, bool per_thread, int64_t dense_limit) {
  analysis::WorkInputs in;
  for (auto [k, v] : values) {
    std::string name = py::str(k);
    in.values[name] = number(name, v);
  }
  // Contents are fetched (from the GPU, maybe) only when the count reads them, once each.
  std::map<std::string, std::unique_ptr<analysis::TensorContents>> fetched;
  for (auto [k, v] : tensors) in.tensors.insert(py::str(k));
  in.contents = [&](const std::string& name) -> const analysis::TensorContents* {
    auto it = fetched.find(name);
    if (it != fetched.end()) return it->second.get();
    py::object getter = tensors[py::str(name)];
    py::object array = getter.is_none() ? py::none() : getter();
    auto& slot = fetched[name];
    if (!array.is_none()) slot = contents_of(py::array::ensure(array));
    return slot.get();
  };
  in.per_thread = per_thread;
  in.dense_limit = dense_limit;
  analysis::WorkCounts c;
  try {
    c = analysis::count_work(stage_kernel(lowered, stage), in);
  } catch (const analysis::WorkCountError& err) {
    throw py::value_error(err.what());
  }
  py::dict out;
  out["tensor_flops"] = c.tensor_flops;
  out["cuda_flops"] = c.cuda_flops;
  out["loads"] = c.loads;
  out["stores"] = c.stores;
  out["sizes"] = c.sizes;
  out["notes"] = c.notes;
  out["grid"] = c.grid;
  return out;
}

py::dict dynamic_sizes(const transform::Lowered& lowered) {
  const ir::Kernel& k = lowered.stages.front().second;
  py::list names;
  for (const ir::Expr& v : k.dynamic_vars) names.append(v.as<ir::VarNode>()->name);
  py::dict dims;
  for (const ir::Param& p : k.params) {
    if (!p.buffer || p.buffer->scope != ir::Scope::Global) continue;
    py::list per_dim;
    for (const ir::Expr& d : p.buffer->shape) {
      bool dynamic = std::any_of(k.dynamic_vars.begin(), k.dynamic_vars.end(),
                                 [&](const ir::Expr& v) { return v.get() == d.get(); });
      per_dim.append(dynamic ? py::object(py::str(d.as<ir::VarNode>()->name)) : py::object(py::none()));
    }
    dims[py::str(p.buffer->name)] = per_dim;
  }
  py::dict out;
  out["kernel"] = k.name;
  out["names"] = names;
  out["dims"] = dims;
  return out;
}

}  // namespace tegula::bindings
