// Lowered.register_liveness(): the register estimate of src/analysis/register_liveness.h as
// data for tegula.registers, which presents it (JITKernel.register_usage, the
// RegisterPressureWarning's text).
//
// Names are the ones `kernel.get_ir("lower_fragments")` prints, so that a fragment reads the
// same in the report as in the statement it quotes: a fragment's own name, or `acc_1`
// where a buffer printed before it has the same one.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "analysis/register_liveness.h"
#include "bindings/bindings.h"
#include "ir/printer.h"
#include "transform/pipeline.h"

namespace tegula::bindings {

namespace {
constexpr const char* kStage = "lower_fragments";
}  // namespace

py::object describe_register_liveness(const transform::Lowered& lowered) {
  const ir::Kernel* k = nullptr;
  for (auto& [name, stage] : lowered.stages) {
    if (name == kStage) k = &stage;
  }
  if (!k) return py::none();
  std::optional<analysis::RegisterLiveness> r = analysis::register_liveness(*k);
  if (!r) return py::none();
  ir::PrintedKernel printed(*k);
  std::vector<std::string> names;
  py::list fragments;
  for (const analysis::FragmentRegisters& f : r->fragments) {
    names.push_back(printed.buffer(f.fragment.get()));
    py::list shape;
    for (const ir::Expr& d : f.fragment->shape) {
      const int64_t* v = ir::as_const_int(d);
      shape.append(v ? py::object(py::int_(*v)) : py::object(py::str(printed.expr(d))));
    }
    py::dict entry;
    entry["name"] = names.back();
    entry["dtype"] = f.fragment->dtype.name();
    entry["shape"] = shape;
    entry["slots"] = f.slots;
    entry["registers"] = f.registers;
    fragments.append(entry);
  }
  std::vector<std::string> live;
  for (int i : r->live_at_peak) live.push_back(names[i]);
  py::dict out;
  out["fragments"] = fragments;
  out["peak"] = r->peak;
  out["live_at_peak"] = live;
  out["peak_at"] = r->peak_at ? printed.head(r->peak_at) : std::string("pass");
  return out;
}

}  // namespace tegula::bindings
