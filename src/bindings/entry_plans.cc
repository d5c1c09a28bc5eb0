// tegula._C.EntryPlans: an entry point's eager call, recorded once per argument signature
// and replayed from then on without its Python.
//
// An entry point (tegula.kernels.rms_norm, ...) spends most of a decode-sized call in
// Python: argument checks, views, output allocation, the plan lookup. For one signature
// (each tensor's dtype, device, sizes, strides, alignment, aliasing and requires_grad;
// every other argument's value) all of that decides the same thing every time: the same
// outputs allocated, the same kernels launched with the same sizes and scalars, only the
// addresses differ. So the first calls of a signature run the entry point under a
// recorder and keep what it did as a plan; later calls allocate and launch from the plan.
//
// What a recording sees: every tensor allocation (torch's allocation operators, through
// a thread-local RecordFunction observer) and every Program launch (Program::run reports
// to EntryRecorder::active()). It is refused, and the signature keeps running the entry
// point itself, when the call
//   - runs any torch operator other than allocations and views (a copy, a fill, a read of
//     a value to the host: a plan would skip it, or its result could change per call);
//   - launches with memory neither an argument nor an allocation of the call (a tensor
//     kept between calls, unless declared with entry_plan_constant), a raw address, an
//     explicit stream or an event log;
//   - returns anything but its arguments, tensors it allocated, None, or tuples of those.
// A plan becomes active only when two recordings of a signature agree (a first call may
// do one-time work), and a signature refused three times is not recorded again.
//
// Never planned: calls under torch.compile's tracing (the Python wrapper checks), under a
// TorchDispatchMode or TorchFunctionMode, with tensor subclasses, meta or traced tensors,
// with a tensor that requires grad while grad mode is on (autograd records the call), or
// while another entry point is recording (its recording sees this one's launches).
#include "bindings/entry_plans.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/record_function.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "bindings/bindings.h"
#include "bindings/entry_signature.h"

namespace tegula::bindings {

namespace {

using signature::Inputs;
using signature::Key;
using signature::KeyHash;

thread_local EntryRecorder* t_recorder = nullptr;

constexpr int kMaxRefusals = 3;       // recordings refused before a signature stops trying
constexpr size_t kMaxSignatures = 4096;  // past this many, an entry point forgets its plans

// ---------------------------------------------------------------------------------------
// Plans.

// Where a recorded address lies: at a byte offset into one of the call's tensors, one of
// its allocations or a plan constant; or null (an empty tensor's).
struct Source {
  enum Kind : int { Null, Input, Alloc, Const } kind = Null;
  int index = 0;
  int64_t offset = 0;
  bool operator==(const Source& o) const { return kind == o.kind && index == o.index && offset == o.offset; }
};

struct Allocation {
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype;
  at::Device device{at::kCPU};
  bool operator==(const Allocation& o) const {
    return sizes == o.sizes && strides == o.strides && dtype == o.dtype && device == o.device;
  }
};

struct RecordedTensor {
  Source source;
  std::vector<int64_t> sizes, strides;
  bool operator==(const RecordedTensor& o) const {
    return source == o.source && sizes == o.sizes && strides == o.strides;
  }
};

struct RecordedLaunch {
  std::shared_ptr<Program> program;
  std::vector<RecordedTensor> tensors;  // per parameter (unused for scalars)
  std::vector<ArgValue> scalars;        // per parameter (unused for tensors)
  std::vector<int64_t> dyn;
  int device = 0;
  bool operator==(const RecordedLaunch& o) const {
    if (program != o.program || !(tensors == o.tensors) || dyn != o.dyn || device != o.device) return false;
    const auto& params = program->params();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].is_tensor && scalars[i].u64 != o.scalars[i].u64) return false;
    }
    return true;
  }
};

// One returned value: None, an argument itself, or (a view of) an allocation.
struct ResultItem {
  Source source;  // Null: None
  bool whole = true;
  std::vector<int64_t> sizes, strides;
  bool operator==(const ResultItem& o) const {
    return source == o.source && whole == o.whole && sizes == o.sizes && strides == o.strides;
  }
};

// Tensors an entry point keeps between calls and declared constant (entry_plan_constant):
// a placeholder a kernel never reads, a table built once. A plan holds them by reference.
std::vector<at::Tensor>& plan_constants() {
  static std::vector<at::Tensor> constants;
  return constants;
}

bool same_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
}

struct Plan {
  std::vector<Allocation> allocs;
  std::vector<at::Tensor> constants;
  std::vector<RecordedLaunch> launches;
  enum Shape : int { One, Tuple, List } shape = One;
  std::vector<ResultItem> results;
  bool operator==(const Plan& o) const {
    if (constants.size() != o.constants.size()) return false;
    for (size_t i = 0; i < constants.size(); ++i) {
      if (!same_storage(constants[i], o.constants[i])) return false;
    }
    return allocs == o.allocs && launches == o.launches && shape == o.shape && results == o.results;
  }
};

// ---------------------------------------------------------------------------------------
// Recording.

bool name_in(const char* name, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (std::strcmp(name, n) == 0) return true;
  }
  return false;
}

bool is_allocation(const char* name) {
  return name_in(name, {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                        "aten::new_empty_strided"});
}

// Operators that read or write no tensor's elements: views and metadata.
bool is_view(const char* name) {
  return name_in(name, {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view",
                        "aten::as_strided", "aten::alias", "aten::detach", "aten::t", "aten::transpose",
                        "aten::permute", "aten::unsqueeze", "aten::squeeze", "aten::flatten", "aten::unflatten",
                        "aten::expand", "aten::expand_as", "aten::select", "aten::slice", "aten::narrow",
                        "aten::contiguous", "aten::view_as", "aten::reshape_as", "aten::unbind", "aten::split",
                        "aten::split_with_sizes", "aten::chunk", "aten::movedim", "aten::lift_fresh", "aten::to",
                        "aten::size", "aten::stride", "aten::numel", "aten::dim", "aten::is_contiguous",
                        "aten::storage_offset"});
}

class Recording final : public EntryRecorder {
 public:
  explicit Recording(const Inputs& in) : in_(in) {
    previous_ = t_recorder;
    t_recorder = this;
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&Recording::op_start, &Recording::op_end).needsOutputs(true).scopes(
            {at::RecordScope::FUNCTION}));
  }
  ~Recording() override {
    at::removeCallback(handle_);
    t_recorder = previous_;
  }

  void on_launch(std::shared_ptr<Program> program, const TensorDesc* tensors, const ArgValue* scalars,
                 const int64_t* dyn, int device, bool unsupported) override {
    if (unsupported) return refuse(program->name() + " launched on an explicit stream or with an event log");
    const auto& params = program->params();
    RecordedLaunch launch;
    launch.tensors.resize(params.size());
    launch.scalars.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamSpec& p = params[i];
      if (p.is_tensor) {
        const TensorDesc& t = tensors[i];
        RecordedTensor& r = launch.tensors[i];
        if (!locate(t.ptr, &r.source)) {
          return refuse(program->name() + "'s argument " + p.name + " is memory the call neither takes nor allocates");
        }
        r.sizes.assign(t.sizes, t.sizes + t.rank);
        r.strides.assign(t.strides, t.strides + t.rank);
      } else if (p.is_pointer()) {
        return refuse(program->name() + "'s argument " + p.name + " is a raw address");
      } else {
        launch.scalars[i] = scalars[i];
      }
    }
    launch.dyn.assign(dyn, dyn + program->num_dynamic());
    launch.device = device;
    launch.program = std::move(program);
    plan_.launches.push_back(std::move(launch));
  }

  // What the call returned, as a plan's results; false (refused) when a plan cannot
  // give it back.
  bool take_result(PyObject* result) {
    // Exactly a tuple or a list: a subclass (a NamedTuple) would come back as its base.
    if (PyTuple_CheckExact(result) || PyList_CheckExact(result)) {
      bool tuple = PyTuple_CheckExact(result);
      plan_.shape = tuple ? Plan::Tuple : Plan::List;
      Py_ssize_t n = tuple ? PyTuple_GET_SIZE(result) : PyList_GET_SIZE(result);
      for (Py_ssize_t i = 0; i < n; ++i) {
        if (!take_item(tuple ? PyTuple_GET_ITEM(result, i) : PyList_GET_ITEM(result, i))) return false;
      }
      return true;
    }
    plan_.shape = Plan::One;
    return take_item(result);
  }

  const std::string& refusal() const { return refusal_; }
  Plan& plan() { return plan_; }

 private:
  static std::unique_ptr<at::ObserverContext> op_start(const at::RecordFunction& fn) {
    auto* r = dynamic_cast<Recording*>(t_recorder);
    if (r && !is_allocation(fn.name()) && !is_view(fn.name())) {
      r->refuse(std::string("it runs the torch operator ") + fn.name());
    }
    return nullptr;
  }

  static void op_end(const at::RecordFunction& fn, at::ObserverContext*) {
    auto* r = dynamic_cast<Recording*>(t_recorder);
    if (!r || !is_allocation(fn.name())) return;
    const auto& outs = fn.outputs();
    if (outs.size() != 1 || !outs[0].isTensor()) return r->refuse(std::string("an allocation by ") + fn.name());
    r->on_alloc(outs[0].toTensor());
  }

  void refuse(std::string why) {
    if (refusal_.empty()) refusal_ = std::move(why);
  }

  void on_alloc(const at::Tensor& t) {
    const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    for (const auto& a : allocs_) {
      if (a.storage().unsafeGetStorageImpl() == storage) return;  // empty_like's own empty_strided
    }
    if (t.storage_offset() != 0) return refuse("an allocation that is a view");
    // Held to the end of the recording, so no later allocation reuses its address.
    allocs_.push_back(t);
    plan_.allocs.push_back(Allocation{t.sizes().vec(), t.strides().vec(), t.scalar_type(), t.device()});
  }

  static bool within(const at::Tensor& t, const void* ptr, int64_t* offset) {
    const char* base = static_cast<const char*>(t.data_ptr());
    if (!base) return false;
    int64_t extent = 1;
    for (int64_t d = 0; d < t.dim(); ++d) extent += (t.size(d) - 1) * t.stride(d);
    int64_t bytes = t.numel() == 0 ? 0 : extent * int64_t(t.element_size());
    int64_t off = static_cast<const char*>(ptr) - base;
    if (off < 0 || (off > 0 && off >= bytes)) return false;
    *offset = off;
    return true;
  }

  bool locate(const void* ptr, Source* src) {
    if (!ptr) {
      *src = Source{};
      return true;
    }
    for (size_t i = 0; i < allocs_.size(); ++i) {
      int64_t off;
      if (within(allocs_[i], ptr, &off)) {
        *src = Source{Source::Alloc, int(i), off};
        return true;
      }
    }
    for (size_t i = 0; i < in_.tensors.size(); ++i) {
      int64_t off;
      if (within(*in_.tensors[i], ptr, &off)) {
        *src = Source{Source::Input, int(i), off};
        return true;
      }
    }
    for (const at::Tensor& c : plan_constants()) {
      int64_t off;
      if (!within(c, ptr, &off)) continue;
      size_t i = 0;
      while (i < plan_.constants.size() && !same_storage(plan_.constants[i], c)) ++i;
      if (i == plan_.constants.size()) plan_.constants.push_back(c);
      *src = Source{Source::Const, int(i), off + (static_cast<const char*>(c.data_ptr()) -
                                                  static_cast<const char*>(plan_.constants[i].data_ptr()))};
      return true;
    }
    return false;
  }

  bool take_item(PyObject* v) {
    ResultItem item;
    if (v == Py_None) {
      plan_.results.push_back(item);
      return true;
    }
    for (size_t i = 0; i < in_.objects.size(); ++i) {
      if (in_.objects[i] == v) {
        item.source = Source{Source::Input, int(i), 0};
        plan_.results.push_back(item);
        return true;
      }
    }
    if (!THPVariable_CheckExact(v)) return refuse("it returns something other than tensors, None and tuples"), false;
    const at::Tensor& t = THPVariable_Unpack(v);
    const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    for (size_t i = 0; i < allocs_.size(); ++i) {
      const at::Tensor& a = allocs_[i];
      if (a.storage().unsafeGetStorageImpl() != storage) continue;
      if (a.scalar_type() != t.scalar_type() || t.requires_grad()) break;
      int64_t off = static_cast<const char*>(t.data_ptr()) - static_cast<const char*>(a.data_ptr());
      item.source = Source{Source::Alloc, int(i), off};
      item.whole = off == 0 && t.sizes() == a.sizes() && t.strides() == a.strides();
      if (!item.whole) item.sizes = t.sizes().vec(), item.strides = t.strides().vec();
      plan_.results.push_back(item);
      return true;
    }
    refuse("it returns a tensor that is neither an argument nor its own allocation");
    return false;
  }

  const Inputs& in_;
  EntryRecorder* previous_ = nullptr;
  at::CallbackHandle handle_;
  std::vector<at::Tensor> allocs_;
  Plan plan_;
  std::string refusal_;
};

// ---------------------------------------------------------------------------------------
// Replay.

PyObject* replay(const Plan& plan, const Inputs& in) {
  c10::SmallVector<at::Tensor, 4> allocs;
  for (const auto& a : plan.allocs) {
    allocs.push_back(at::empty_strided(a.sizes, a.strides, at::TensorOptions().dtype(a.dtype).device(a.device)));
  }
  auto address = [&](const Source& s) -> void* {
    if (s.kind == Source::Null) return nullptr;
    char* base = static_cast<char*>(s.kind == Source::Input   ? in.tensors[s.index]->data_ptr()
                                    : s.kind == Source::Alloc ? allocs[s.index].data_ptr()
                                                              : plan.constants[s.index].data_ptr());
    return base + s.offset;
  };
  for (const auto& launch : plan.launches) {
    const auto& params = launch.program->params();
    Descs descs(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].is_tensor) continue;
      const RecordedTensor& r = launch.tensors[i];
      descs[i] = TensorDesc{address(r.source), int(r.sizes.size()), r.sizes.data(), r.strides.data()};
    }
    launch.program->replay(descs.data(), launch.scalars.data(), launch.dyn.data(), launch.device);
  }
  auto item = [&](const ResultItem& r) -> PyObject* {
    if (r.source.kind == Source::Null) Py_RETURN_NONE;
    if (r.source.kind == Source::Input) {
      Py_INCREF(in.objects[r.source.index]);
      return in.objects[r.source.index];
    }
    const at::Tensor& a = allocs[r.source.index];
    if (r.whole) return THPVariable_Wrap(a);
    return THPVariable_Wrap(a.as_strided(r.sizes, r.strides, r.source.offset / int64_t(a.element_size())));
  };
  if (plan.shape == Plan::One) return item(plan.results.at(0));
  Py_ssize_t n = Py_ssize_t(plan.results.size());
  PyObject* out = plan.shape == Plan::Tuple ? PyTuple_New(n) : PyList_New(n);
  if (!out) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* v = item(plan.results[i]);
    if (!v) {
      Py_DECREF(out);
      return nullptr;
    }
    if (plan.shape == Plan::Tuple) PyTuple_SET_ITEM(out, i, v);
    else PyList_SET_ITEM(out, i, v);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// The Python object.

struct Signature {
  std::unique_ptr<Plan> active, pending;
  int refusals = 0;
};

struct Stats {
  int64_t hits = 0, recordings = 0, refusals = 0, direct = 0;
};

struct EntryPlansObject {
  PyObject_HEAD
  PyObject* entry;  // the entry point the plans stand for (owned)
  std::unordered_map<Key, Signature, KeyHash>* signatures;
  Stats* stats;
  std::string* last_refusal;
  vectorcallfunc vectorcall;
};

void plans_dealloc(PyObject* self) {
  auto* p = reinterpret_cast<EntryPlansObject*>(self);
  Py_XDECREF(p->entry);
  delete p->signatures;
  delete p->stats;
  delete p->last_refusal;
  Py_TYPE(self)->tp_free(self);
}

PyObject* plans_new(PyTypeObject* type, PyObject* args, PyObject* kwargs);

PyObject* call_entry(EntryPlansObject* p, PyObject* args, PyObject* kwargs) {
  ++p->stats->direct;
  return PyObject_Call(p->entry, args, kwargs);
}

// plans(args, kwargs): the entry point's result for entry(*args, **kwargs).
PyObject* plans_run(EntryPlansObject* p, PyObject* args, PyObject* kwargs) {
  if (t_recorder || c10::impl::dispatch_mode_enabled() || at::impl::torch_function_mode_enabled() ||
      !at::isRecordFunctionEnabled()) {
    return call_entry(p, args, kwargs);
  }
  Key key;
  Inputs in;
  if (!make_key(args, kwargs, key, in)) return call_entry(p, args, kwargs);
  auto found = p->signatures->find(key);
  if (found != p->signatures->end()) {
    if (found->second.active) {
      ++p->stats->hits;
      try {
        return replay(*found->second.active, in);
      } catch (...) {
        // A launch error (an assumption the sizes break, a CUDA error): as from the entry point.
        set_python_error(std::current_exception());
        return nullptr;
      }
    }
    if (found->second.refusals >= kMaxRefusals) return call_entry(p, args, kwargs);
  }
  ++p->stats->recordings;
  PyObject* result = nullptr;
  std::string refusal;
  std::unique_ptr<Plan> plan;
  try {
    Recording rec(in);
    result = PyObject_Call(p->entry, args, kwargs);
    if (!result) return nullptr;  // the entry point's error, as it raised it
    if (rec.refusal().empty()) rec.take_result(result);
    refusal = rec.refusal();
    if (refusal.empty()) plan = std::make_unique<Plan>(std::move(rec.plan()));
  } catch (...) {
    Py_XDECREF(result);
    set_python_error(std::current_exception());
    return nullptr;
  }
  if (p->signatures->size() >= kMaxSignatures) p->signatures->clear();
  Signature& sig = (*p->signatures)[std::move(key)];
  if (!plan) {
    ++sig.refusals;
    ++p->stats->refusals;
    *p->last_refusal = refusal;
  } else if (sig.pending && *sig.pending == *plan) {
    sig.active = std::move(plan);
    sig.pending.reset();
  } else {
    sig.pending = std::move(plan);
  }
  return result;
}

PyObject* plans_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* p = reinterpret_cast<EntryPlansObject*>(self);
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (n != 2 || (kwnames && PyTuple_GET_SIZE(kwnames) != 0) || !PyTuple_Check(args[0]) ||
      !(args[1] == Py_None || PyDict_Check(args[1]))) {
    PyErr_SetString(PyExc_TypeError, "EntryPlans: call as plans(args: tuple, kwargs: dict | None)");
    return nullptr;
  }
  PyObject* kwargs = args[1] == Py_None || PyDict_GET_SIZE(args[1]) == 0 ? nullptr : args[1];
  return plans_run(p, args[0], kwargs);
}

PyObject* plans_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  return PyVectorcall_Call(self, args, kwargs);
}

PyObject* plans_stats(PyObject* self, PyObject*) {
  auto* p = reinterpret_cast<EntryPlansObject*>(self);
  int64_t active = 0, refused = 0;
  for (const auto& [key, sig] : *p->signatures) {
    active += sig.active != nullptr;
    refused += sig.refusals >= kMaxRefusals;
  }
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:s}", "hits", (long long)p->stats->hits, "recordings",
                       (long long)p->stats->recordings, "refusals", (long long)p->stats->refusals, "direct",
                       (long long)p->stats->direct, "plans", (long long)active, "refused_signatures",
                       (long long)refused, "last_refusal", p->last_refusal->c_str());
}

PyObject* plans_clear(PyObject* self, PyObject*) {
  auto* p = reinterpret_cast<EntryPlansObject*>(self);
  p->signatures->clear();
  *p->stats = Stats{};
  p->last_refusal->clear();
  Py_RETURN_NONE;
}

PyMethodDef plans_methods[] = {
    {"stats", plans_stats, METH_NOARGS,
     "Counts: hits (calls replayed), recordings, refusals (recordings refused; last_refusal says why), direct "
     "(calls that ran the entry point unrecorded), plans (active), refused_signatures."},
    {"clear", plans_clear, METH_NOARGS, "Forgets every plan and count."},
    {nullptr, nullptr, 0, nullptr}};

PyObject* plans_get_entry(PyObject* self, void*) {
  auto* p = reinterpret_cast<EntryPlansObject*>(self);
  Py_INCREF(p->entry);
  return p->entry;
}

PyGetSetDef plans_getset[] = {{"entry", plans_get_entry, nullptr, "The entry point the plans replay.", nullptr},
                              {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject plans_type = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "tegula._C.EntryPlans";
  t.tp_basicsize = sizeof(EntryPlansObject);
  t.tp_dealloc = plans_dealloc;
  t.tp_call = plans_call;
  t.tp_vectorcall_offset = offsetof(EntryPlansObject, vectorcall);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_doc = "EntryPlans(entry): plans(args, kwargs) is entry(*args, **kwargs), replayed per argument signature "
             "once two recorded calls agree (src/bindings/entry_plans.cc).";
  t.tp_methods = plans_methods;
  t.tp_getset = plans_getset;
  t.tp_new = plans_new;
  return t;
}();

PyObject* plans_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* entry = nullptr;
  static const char* names[] = {"entry", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:EntryPlans", const_cast<char**>(names), &entry)) return nullptr;
  if (!PyCallable_Check(entry)) {
    PyErr_SetString(PyExc_TypeError, "EntryPlans: entry must be callable");
    return nullptr;
  }
  auto* p = reinterpret_cast<EntryPlansObject*>(type->tp_alloc(type, 0));
  if (!p) return nullptr;
  Py_INCREF(entry);
  p->entry = entry;
  p->signatures = new std::unordered_map<Key, Signature, KeyHash>();
  p->stats = new Stats();
  p->last_refusal = new std::string();
  p->vectorcall = plans_vectorcall;
  return reinterpret_cast<PyObject*>(p);
}

}  // namespace

EntryRecorder* EntryRecorder::active() { return t_recorder; }

void init_entry_plans(py::module_& m) {
  if (PyType_Ready(&plans_type) < 0) throw py::error_already_set();
  Py_INCREF(&plans_type);
  m.add_object("EntryPlans", py::handle(reinterpret_cast<PyObject*>(&plans_type)));
  m.def("entry_plan_constant", [](const at::Tensor& t) {
    if (!t.defined()) throw py::type_error("entry_plan_constant: a tensor is expected");
    for (const auto& c : plan_constants()) {
      if (same_storage(c, t)) return t;
    }
    plan_constants().push_back(t);
    return t;
  }, py::arg("tensor"),
     "Declares a tensor an entry point keeps between calls (a placeholder, a table built once) a constant its "
     "entry plans may launch with; it is held for the life of the process. Returns the tensor.");
}

}  // namespace tegula::bindings
