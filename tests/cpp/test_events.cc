// Instrumentation events (tegula.tools.cuda.iket) through the core: an "iket_<phase>:<name>"
// call stays where it was written through every pass, the printer spells it as a record
// appended to the event log the kernel takes as its last parameter, and both interpreters
// run the kernel as they run it without the events.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/cuda_printer.h"
#include "interp/interp.h"
#include "ir/functor.h"
#include "transform/pipeline.h"

namespace tegula {
namespace {

using namespace ir;

Expr c(int64_t v) { return make_int(v); }

// B[i] = A[i] * 2 over one block of 128 threads, n elements; with events:
//   range "all" (id 1) around the loop; in its body mark "load" (id 2, payload i) before
//   the store, mark "value" (id 3, payload B[i], float32) after it.
struct EventKernel {
  static constexpr int64_t n = 128;
  Buffer A = make_buffer("A", Scope::Global, DataType::f32(), {c(n)});
  Buffer B = make_buffer("B", Scope::Global, DataType::f32(), {c(n)});
  Kernel kernel;

  explicit EventKernel(bool events) {
    Expr i = make_var("i");
    Stmt store = make_store(B, {i}, make_binary(BinaryOp::Mul, make_load(A, {i}), make_float(2.0)));
    std::vector<Stmt> body = {store};
    if (events) {
      body.insert(body.begin(), make_evaluate(make_call("iket_mark:load", {c(2), i}, DataType::i32())));
      body.push_back(make_evaluate(make_call("iket_mark:value", {c(3), make_load(B, {i})}, DataType::i32())));
    }
    std::vector<Stmt> top = {make_for(i, c(0), c(n), ForKind::Parallel, make_seq(body))};
    if (events) {
      top.insert(top.begin(), make_evaluate(make_call("iket_range_start:all", {c(1)}, DataType::i32())));
      top.push_back(make_evaluate(make_call("iket_range_end:all", {c(1)}, DataType::i32())));
    }
    kernel.name = "events";
    kernel.params = {{A, {}}, {B, {}}};
    kernel.grid = {c(1)};
    kernel.block_vars = {make_var("bx")};
    kernel.thread_var = make_var("tx");
    kernel.threads = 128;
    kernel.body = make_seq(top);
  }
};

transform::Lowered lowered(const Kernel& k) { return transform::lower(k, transform::Target::parse("sm_90a"), {}, false); }

TEST(Events, CallNamesGiveThePhaseAndTheEventName) {
  std::string phase, name;
  ASSERT_TRUE(codegen::event_call("iket_range_start:copy in", &phase, &name));
  EXPECT_EQ(phase, "range_start");
  EXPECT_EQ(name, "copy in");
  EXPECT_FALSE(codegen::event_call("iket_mark", &phase, &name));  // no name
  EXPECT_FALSE(codegen::event_call("print:iket_mark:x", &phase, &name));
}

TEST(Events, AreRecordsIntoTheLogTheKernelTakesLast) {
  transform::Lowered out = lowered(EventKernel(true).kernel);
  ASSERT_TRUE(codegen::records_events(out.kernel));
  std::string code = codegen::print_cuda(out.kernel, transform::Target::parse("sm_90a")).code;
  EXPECT_NE(code.find("tegula::IketLog* tegula_iket_log) {"), std::string::npos) << code;
  EXPECT_NE(code.find("// iket event 1: range \"all\"\n// iket event 2: mark \"load\"\n// iket event 3: mark \"value\""),
            std::string::npos) << code;
  size_t start = code.find("tegula::iket_range_start(tegula_iket_log, 1);");
  size_t load = code.find("tegula::iket_mark(tegula_iket_log, 2, (unsigned)(");
  size_t value = code.find("tegula::iket_mark(tegula_iket_log, 3, __float_as_uint(");
  size_t end = code.find("tegula::iket_range_end(tegula_iket_log, 1);");
  ASSERT_NE(start, std::string::npos) << code;
  ASSERT_NE(end, std::string::npos) << code;
  EXPECT_TRUE(start < load && load < value && value < end) << code;
}

TEST(Events, AKernelWithoutThemTakesNoLog) {
  transform::Lowered out = lowered(EventKernel(false).kernel);
  EXPECT_FALSE(codegen::records_events(out.kernel));
  std::string code = codegen::print_cuda(out.kernel, transform::Target::parse("sm_90a")).code;
  EXPECT_EQ(code.find("iket"), std::string::npos) << code;
}

TEST(Events, ChangeNothingTheInterpretersCompute) {
  EventKernel ek(true);
  std::vector<double> a(EventKernel::n), b_ref(EventKernel::n, -1.0), b_sim(EventKernel::n, -1.0);
  for (size_t i = 0; i < a.size(); ++i) a[i] = double(i) * 0.5 - 7;
  interp::CallArgs ref{{&a, &b_ref}, {{EventKernel::n}, {EventKernel::n}}, {0, 0}};
  interp::run_reference(ek.kernel, ref);
  interp::CallArgs sim{{&a, &b_sim}, {{EventKernel::n}, {EventKernel::n}}, {0, 0}};
  std::vector<std::string> errors = interp::simulate(lowered(ek.kernel), sim);
  EXPECT_TRUE(errors.empty()) << errors.front();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b_ref[i], a[i] * 2) << i;
    EXPECT_EQ(b_sim[i], a[i] * 2) << i;
  }
}

}  // namespace
}  // namespace tegula
