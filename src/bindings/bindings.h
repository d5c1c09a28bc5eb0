// What the binding files of `tegula._C` share. The bindings are the only C++ that sees
// Python; the core under src/ir, src/transform, ... never includes this.
//
//   module.cc      PYBIND11_MODULE(_C): exception classes, the `ir` submodule
//   ir_builder.cc  tegula._C.ir: the IR builder the frontend drives (docs/internals.md)
//   compile.cc     tegula._C.lower / Lowered / Program: passes, NVRTC, launch
//   interp.cc      Lowered.reference / Lowered.simulate: the CPU interpreters (tegula.testing)
//   layouts.cc     Lowered.layouts / shared_offsets: the chosen layouts as data (tegula.tools)
//   register_analysis.cc  Lowered.register_liveness: fragment registers as data (tegula.registers)
//   program.cc, program_launch.cc  Program: a call's argument checks and outputs; its launches
//   launcher.cc    tegula._C.Launcher: a kernel's call slot
//   entry_plans.cc, entry_signature.cc  tegula._C.EntryPlans: entry points' calls recorded and replayed
#pragma once
#include <pybind11/pybind11.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "ir/stmt.h"
#include "support/error.h"

namespace tegula::transform {
struct Lowered;
}

namespace tegula::bindings {

namespace py = pybind11;

// Fills the submodule `tegula._C.ir` (module.cc creates it and passes it in).
void init_ir_builder(py::module_& ir);
// Adds the compile and launch API to `tegula._C` itself.
void init_compile(py::module_& m);

// Lowered.layouts(): per fragment and shared buffer the program declares, the layout the
// passes chose, as data (layouts.cc); init_layouts adds tegula._C.shared_offsets.
py::list describe_layouts(const tegula::transform::Lowered& lowered);
void init_layouts(py::module_& m);

// The kernel after IR stage `stage` ("final": the last; compile.cc); an unknown name is a
// ValueError listing the stages.
const ir::Kernel& stage_kernel(const tegula::transform::Lowered& lowered, const std::string& stage);

// Lowered.count_work (work_analysis.cc): the work one kernel does over its whole grid
// (src/analysis/work_counts.h) at IR stage `stage`, as a dict. values: dynamic sizes and
// scalar parameters by name; tensors: tensor parameter name -> a function giving its
// contents as a numpy array (or None where only the shape is known), called only when the
// count reads them.
py::dict count_work(const tegula::transform::Lowered& lowered, const std::string& stage, const py::dict& values,
                    const py::dict& tensors, bool per_thread, int64_t dense_limit);
// Lowered.dynamic_sizes: {"kernel": its name, "names": its T.dynamic sizes, "dims": per global
// tensor parameter, each dimension's T.dynamic name or None}.
py::dict dynamic_sizes(const tegula::transform::Lowered& lowered);

// Lowered.register_liveness() (register_analysis.cc): each fragment's registers per thread
// and the most live at once (src/analysis/register_liveness.h) as a dict, names as the
// lower_fragments stage prints them; None without that stage (a kernel of CUDA source).
py::object describe_register_liveness(const tegula::transform::Lowered& lowered);

// The CPU interpreters on one call's arguments: float64 CPU tensors (written in place) and
// Python numbers, one per kernel parameter.
// values: the call's arguments in parameter order; memory: (address, dtype, float64 tensor)
// of each tensor a run-time address may point into (interp::Region), the tensor the same
// object as an argument's when it is one.
void run_reference(const ir::Kernel& input, const py::list& values, const py::list& memory);
// A warp-specialised kernel is simulated as lowered, unless its shared buffers share bytes
// (the simulator keeps storage per buffer): then on the form `cp_async_form` lowers.
std::vector<std::string> run_simulator(const tegula::transform::Lowered& lowered, const py::list& values,
                                       const py::list& memory,
                                       const std::function<tegula::transform::Lowered()>& cp_async_form = nullptr);

// The DSL location last given to `ir.set_loc` on this thread. Every node built through the
// bindings carries it, and the bindings' own user errors (a bad dtype string...) point at it.
const SourceLoc& current_loc();

// A dtype name as the DSL spells it ("float16", "bf16", "int32", ...); an unknown name is
// a CompileError at current_loc().
ir::DataType parse_dtype(const std::string& name);

// The Python `tegula._C.ir.Buffer`. A wrapper because pybind11 cannot hold the
// shared_ptr<const BufferNode> that ir::Buffer is.
struct BufferHandle {
  ir::Buffer node;
};

// A bad argument to a launch (dtype, shape, device, stride). Thrown from binding code, it
// reaches Python as `tegula._C.ArgumentError`, a subclass of ValueError.
class ArgumentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A call that breaks a T.assume the launch checks (ir/host_checks.h): reaches Python as
// `tegula._C.AssumptionError`, a subclass of RuntimeError (TileLang's type for it).
class AssumptionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The Python exception classes, for code that sets a Python error itself:
//   PyErr_SetString(argument_error_type().ptr(), "...");  throw py::error_already_set();
// CompileError instances carry .file .line .col .msg; str() is the message alone.
py::handle compile_error_type();
py::handle cuda_error_type();
py::handle internal_error_type();
py::handle argument_error_type();
py::handle assumption_error_type();
// Sets the Python error a C++ exception stands for, as the module's translator does
// (CompileError, ArgumentError, AssumptionError, CudaError, InternalError; a Python error
// restored; anything else an InternalError): for the entry points that are not pybind11's.
void set_python_error(std::exception_ptr p);

}  // namespace tegula::bindings
