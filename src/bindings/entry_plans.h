// Entry plans: an entry point's eager call, recorded once per argument signature and then
// replayed without running its Python (entry_plans.cc says what is recorded and when a
// recording is refused).
#pragma once
#include <memory>

#include "bindings/program.h"

namespace tegula::bindings {

// The recording of one entry-point call in progress on this thread (null when none):
// every Program launch reports itself here before it runs.
class EntryRecorder {
 public:
  static EntryRecorder* active();
  virtual ~EntryRecorder() = default;
  // unsupported: a launch a plan cannot repeat (an explicit stream, an event log).
  virtual void on_launch(std::shared_ptr<Program> program, const TensorDesc* tensors, const ArgValue* scalars,
                         const int64_t* dyn, int device, bool unsupported) = 0;
};

void init_entry_plans(py::module_& m);

}  // namespace tegula::bindings
