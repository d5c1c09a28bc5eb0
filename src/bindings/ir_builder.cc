// tegula._C.ir: the IR builder the frontend drives, one call per node (docs/internals.md).
//
//   ir.set_loc("k.py", 12, 9)
//   i = ir.var("i")
//   s = ir.store(buf, [i], ir.float_imm(0.0))    # s carries k.py:12:9
//
// Names that arrive as strings (dtypes, scopes, ops, loop kinds) are looked up in tables; an
// unknown one is a CompileError at the current location, listing what was expected.
#include <pybind11/stl.h>

#include <cctype>
#include <optional>
#include <set>
#include <tuple>

#include "bindings/bindings.h"
#include "ir/analyzer.h"
#include "ir/functor.h"
#include "ir/hash.h"
#include "ir/printer.h"
#include "ir/thread_guard.h"
#include "ir/verifier.h"

namespace tegula::bindings {
namespace {

using ir::Expr;
using ir::Stmt;

thread_local SourceLoc t_current_loc;

template <typename T>
struct Named {
  const char* name;
  T value;
};

// TileLang's spellings of scopes ("shared.dyn", "local.fragment") are accepted too.
const Named<ir::Scope> kScopes[] = {
    {"global", ir::Scope::Global}, {"shared", ir::Scope::Shared},     {"shared.dyn", ir::Scope::Shared},
    {"fragment", ir::Scope::Fragment}, {"local.fragment", ir::Scope::Fragment}, {"local", ir::Scope::Local},
};

const Named<ir::BinaryOp> kBinaryOps[] = {
    {"add", ir::BinaryOp::Add},       {"sub", ir::BinaryOp::Sub},       {"mul", ir::BinaryOp::Mul},
    {"div", ir::BinaryOp::Div},       {"mod", ir::BinaryOp::Mod},       {"floordiv", ir::BinaryOp::FloorDiv},
    {"floormod", ir::BinaryOp::FloorMod}, {"min", ir::BinaryOp::Min},   {"max", ir::BinaryOp::Max},
    {"eq", ir::BinaryOp::EQ},         {"ne", ir::BinaryOp::NE},         {"lt", ir::BinaryOp::LT},
    {"le", ir::BinaryOp::LE},         {"gt", ir::BinaryOp::GT},         {"ge", ir::BinaryOp::GE},
    {"and", ir::BinaryOp::And},       {"or", ir::BinaryOp::Or},         {"bitand", ir::BinaryOp::BitAnd},
    {"bitor", ir::BinaryOp::BitOr},   {"bitxor", ir::BinaryOp::BitXor}, {"shl", ir::BinaryOp::Shl},
    {"shr", ir::BinaryOp::Shr},
};

const Named<ir::ForKind> kForKinds[] = {
    {"serial", ir::ForKind::Serial},       {"unrolled", ir::ForKind::Unrolled},
    {"unroll", ir::ForKind::Unrolled},     {"parallel", ir::ForKind::Parallel},
    {"pipelined", ir::ForKind::Pipelined}, {"vectorized", ir::ForKind::Vectorized},
};

// The tile ops of docs/internals.md; the value is unused.
const Named<int> kTileOps[] = {
    {"copy", 0}, {"fill", 0}, {"reduce", 0}, {"gemm", 0}, {"atomic_add", 0}, {"annotate_layout", 0}, {"use_swizzle", 0},
    {"finalize_reducer", 0}, {"im2col", 0}, {"annotate_safe_value", 0},
    {"annotate_min_blocks_per_sm", 0}, {"cumsum", 0}, {"gemm_sp", 0},
};

template <typename T, size_t N>
T lookup(const Named<T> (&table)[N], const std::string& key, const char* what) {
  for (const Named<T>& e : table) {
    if (key == e.name) return e.value;
  }
  std::string expected;
  for (const Named<T>& e : table) expected += std::string(expected.empty() ? "" : ", ") + e.name;
  throw UserError("unknown " + std::string(what) + " '" + key + "' (expected one of: " + expected + ")",
                  current_loc());
}

[[noreturn]] void fail(const std::string& msg) { throw UserError(msg, current_loc()); }

const ir::VarNode* require_var(const Expr& e, const char* what) {
  auto* v = e.as<ir::VarNode>();
  if (!v) fail(std::string(what) + " must be a variable, got " + ir::to_string(e));
  return v;
}

void require_int(const Expr& e, const char* what) {
  if (!e.dtype().is_int()) {
    fail(std::string(what) + " must be an integer, got " + ir::to_string(e) + " of " + e.dtype().name());
  }
}

void require_rank(const ir::Buffer& b, size_t n) {
  if (n != b->shape.size()) {
    fail("'" + b->name + "' has " + std::to_string(b->shape.size()) + " dimensions but " + std::to_string(n) +
         " indices were given");
  }
}

// Intrinsic names reach the generated source, so only identifiers are let through.
// The exceptions: T.print's "print:<message>" and T.device_assert's "device_assert:<message>",
// whose messages the printer escapes, and an instrumentation event's "iket_<phase>:<name>",
// whose name is printed in a line comment only (so anything but control characters).
void require_identifier(const std::string& op) {
  if (op.rfind("print:", 0) == 0 || op.rfind("device_assert:", 0) == 0) return;
  if (size_t colon = op.find(':'); op.rfind("iket_", 0) == 0 && colon != std::string::npos) {
    require_identifier(op.substr(0, colon));
    for (char c : op.substr(colon + 1)) {
      if (static_cast<unsigned char>(c) < 0x20) fail("bad event name in intrinsic '" + op + "'");
    }
    return;
  }
  bool ok = !op.empty() && !std::isdigit(static_cast<unsigned char>(op[0]));
  for (char c : op) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok) fail("bad intrinsic name '" + op + "'");
}

// Python bool is an int subclass, so it is tested first; both become int64.
ir::TileAttr to_attr(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return int64_t{v.cast<bool>()};
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  fail("tile-op attribute '" + key + "' must be an int, float, str or bool, got " +
       py::str(py::type::of(v).attr("__name__")).cast<std::string>());
}

// A Python int as a constant of type t. uint64 takes all of 0 .. 2^64 - 1, held as its bit
// pattern (IntImmNode::value); int32 and int64 take the int64 range (a size past 2^31 meets
// int32 indices: cuda_printer.h, kIndex32Limit); the narrower types their own range; bool
// any int, as its truth.
Expr int_constant(const py::object& v, ir::DataType t) {
  if (!py::isinstance<py::int_>(v)) {
    fail("an integer constant must be a Python int, got " + py::str(py::type::of(v).attr("__name__")).cast<std::string>());
  }
  if (t.is_float()) return ir::make_float(PyLong_AsDouble(v.ptr()), t, current_loc());
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (t.is_bool()) return ir::make_int(overflow != 0 || x != 0, t, current_loc());
  bool is_unsigned = t.code == ir::DataType::UInt;
  bool fits = overflow == 0;
  if (overflow > 0 && is_unsigned && t.bits == 64) {
    x = static_cast<long long>(PyLong_AsUnsignedLongLong(v.ptr()));
    fits = !PyErr_Occurred();
    PyErr_Clear();
  } else if (fits && t.bits < 32) {
    long long lo = is_unsigned ? 0 : -(1LL << (t.bits - 1));
    long long hi = is_unsigned ? (1LL << t.bits) - 1 : (1LL << (t.bits - 1)) - 1;
    fits = lo <= x && x <= hi;
  } else if (fits && is_unsigned) {
    fits = x >= 0 && (t.bits == 64 || x <= 0xFFFFFFFFLL);
  }
  if (!fits) {
    std::string range = is_unsigned ? "0 .. 2^" + std::to_string(t.bits) + " - 1"
                                    : "-2^" + std::to_string(t.bits < 32 ? t.bits - 1 : 63) + " .. 2^" +
                                          std::to_string(t.bits < 32 ? t.bits - 1 : 63) + " - 1";
    fail("the constant " + py::str(v).cast<std::string>() + " is out of the range of " + t.name() + " (" + range + ")");
  }
  return ir::make_int(x, t, current_loc());
}

py::tuple loc_tuple(const SourceLoc& l) { return py::make_tuple(l.file, l.line, l.col); }

py::object expr_const(const Expr& e) {
  if (auto* i = e.as<ir::IntImmNode>()) {
    if (e.dtype().is_bool()) return py::bool_(i->value != 0);
    if (e.dtype().code == ir::DataType::UInt) return py::int_(uint64_t(i->value));  // held as its bit pattern
    return py::int_(i->value);
  }
  if (auto* f = e.as<ir::FloatImmNode>()) return py::float_(f->value);
  return py::none();
}

std::shared_ptr<ir::Kernel> build_kernel(const std::string& name, const py::list& params,
                                         std::vector<Expr> dynamic_vars, std::vector<Expr> grid,
                                         std::vector<Expr> block_vars, const py::object& thread_var, int threads,
                                         const std::vector<BufferHandle>& allocs, const Stmt& body,
                                         const std::vector<int64_t>& cluster_dims) {
  auto k = std::make_shared<ir::Kernel>();
  k->name = name;
  k->loc = current_loc();
  for (const py::handle& p : params) {
    if (py::isinstance<BufferHandle>(p)) {
      k->params.push_back({p.cast<BufferHandle>().node, Expr()});
    } else if (py::isinstance<Expr>(p)) {
      Expr v = p.cast<Expr>();
      require_var(v, "a scalar kernel parameter");
      k->params.push_back({nullptr, v});
    } else {
      fail("kernel parameters must be Buffers or Exprs");
    }
  }
  for (const Expr& v : dynamic_vars) require_var(v, "a dynamic dimension");
  for (const Expr& v : block_vars) require_var(v, "a block index");
  if (grid.empty() || grid.size() > 3) fail("T.Kernel takes 1 to 3 grid extents, got " + std::to_string(grid.size()));
  for (const Expr& g : grid) require_int(g, "a grid extent");
  if (threads <= 0) fail("threads must be positive, got " + std::to_string(threads));
  k->dynamic_vars = std::move(dynamic_vars);
  k->grid = std::move(grid);
  k->block_vars = std::move(block_vars);
  if (!thread_var.is_none()) {
    k->thread_var = thread_var.cast<Expr>();
    require_var(k->thread_var, "the thread index");
  }
  k->threads = threads;
  if (!cluster_dims.empty() && cluster_dims.size() != 3) fail("cluster_dims has 3 extents (x, y, z)");
  for (int64_t d : cluster_dims) {
    if (d <= 0) fail("cluster_dims must be positive, got " + std::to_string(d));
  }
  k->cluster_dims = cluster_dims;
  for (const BufferHandle& b : allocs) (b.node->view_of ? k->views : b.node->address ? k->addressed : k->allocs).push_back(b.node);
  k->body = body;
  return k;
}

// `A_shared: shared float16[128, 32]`
std::string describe(const ir::Buffer& b) {
  std::string dims;
  for (const Expr& d : b->shape) dims += (dims.empty() ? "" : ", ") + ir::to_string(d);
  return b->name + ": " + ir::scope_name(b->scope) + " " + b->dtype.name() + "[" + dims + "]";
}

void bind_classes(py::module_& m) {
  py::class_<Expr>(m, "Expr")
      .def_property_readonly("dtype", [](const Expr& e) { return e.dtype().name(); })
      .def_property_readonly("const", &expr_const)
      .def_property_readonly("is_var", [](const Expr& e) { return e.as<ir::VarNode>() != nullptr; })
      .def_property_readonly("name", [](const Expr& e) -> py::object {
        auto* v = e.as<ir::VarNode>();
        return v ? py::object(py::str(v->name)) : py::object(py::none());
      })
      .def_property_readonly("loc", [](const Expr& e) { return loc_tuple(e->loc); })
      .def("same_as", [](const Expr& a, const Expr& b) { return a.same_as(b); })
      .def("__str__", [](const Expr& e) { return ir::to_string(e); })
      .def("__repr__", [](const Expr& e) { return ir::to_string(e); });

  py::class_<BufferHandle>(m, "Buffer")
      .def_property_readonly("name", [](const BufferHandle& b) { return b.node->name; })
      .def_property_readonly("scope", [](const BufferHandle& b) { return std::string(ir::scope_name(b.node->scope)); })
      .def_property_readonly("dtype", [](const BufferHandle& b) { return b.node->dtype.name(); })
      .def_property_readonly("shape", [](const BufferHandle& b) { return b.node->shape; })
      .def("same_as", [](const BufferHandle& a, const BufferHandle& b) { return a.node == b.node; })
      .def("__repr__", [](const BufferHandle& b) { return describe(b.node); });

  py::class_<Stmt>(m, "Stmt")
      .def_property_readonly("kind", [](const Stmt& s) { return std::string(ir::node_kind_name(s.kind())); })
      .def_property_readonly("loc", [](const Stmt& s) { return loc_tuple(s->loc); })
      .def("__str__", [](const Stmt& s) { return ir::to_string(s); })
      .def("__repr__", [](const Stmt& s) { return ir::to_string(s); })
      // (read, written): the names of the buffers a statement reads and writes, a tile
      // op taken to read and write every buffer it names; None where a call may touch
      // memory its arguments do not name (what T.Pipelined's order and stage check).
      .def("accesses", [](const Stmt& s) -> py::object {
        std::set<std::string> reads, writes;
        bool known = true;
        ir::post_order(s, [&](const Stmt& x) {
          if (auto* st = x.as<ir::BufferStoreNode>()) writes.insert(st->buffer->name);
          if (auto* t = x.as<ir::TileOpNode>()) {
            for (auto& r : t->regions) reads.insert(r.buffer->name), writes.insert(r.buffer->name);
          }
          if (x.as<ir::EvaluateNode>() || x.as<ir::SyncNode>()) known = false;
        }, [&](const Expr& e) {
          if (auto* ld = e.as<ir::BufferLoadNode>()) reads.insert(ld->buffer->name);
          if (auto* c = e.as<ir::CallNode>()) known &= ir::pure_call(c->op);
        });
        if (!known) return py::none();
        return py::make_tuple(reads, writes);
      });

  // dynamic_attr: kernel(...) keeps its attrs dict on the object as `.attrs`.
  py::class_<ir::Kernel, std::shared_ptr<ir::Kernel>>(m, "Kernel", py::dynamic_attr())
      .def_property_readonly("name", [](const ir::Kernel& k) { return k.name; })
      .def_property_readonly("threads", [](const ir::Kernel& k) { return k.threads; })
      .def_property_readonly("cluster_dims", [](const ir::Kernel& k) { return k.cluster_dims; })
      .def_property_readonly("grid", [](const ir::Kernel& k) { return k.grid; })
      // Before lowering the only stage is the frontend's output, "input".
      .def("stages", [](const ir::Kernel&) { return std::vector<std::string>{"input"}; })
      .def(
          "ir",
          [](const ir::Kernel& k, const std::string& stage) {
            if (stage != "all" && stage != "input") {
              throw py::value_error("unknown stage '" + stage + "' (stages: input)");
            }
            return ir::to_string(k);
          },
          py::arg("stage") = "all")
      .def(
          "verify", [](const ir::Kernel& k, const std::string& stage) { ir::verify(k, stage); },
          py::arg("stage") = "input")
      .def("__str__", [](const ir::Kernel& k) { return ir::to_string(k); })
      .def("__repr__", [](const ir::Kernel& k) { return "<tegula Kernel '" + k.name + "'>"; });
}

}  // namespace

const SourceLoc& current_loc() { return t_current_loc; }

ir::DataType parse_dtype(const std::string& name) {
  ir::DataType t;
  if (!ir::DataType::parse(name, &t)) {
    fail("unknown dtype '" + name + "' (expected e.g. float16, bfloat16, float32, int32, int64, bool)");
  }
  return t;
}

void init_ir_builder(py::module_& m) {
  bind_classes(m);
  // For pass tests written in Python: "before" lowered vs "expected" built by hand.
  m.def("structural_equal", [](const Expr& a, const Expr& b) { return ir::structural_equal(a, b); });
  m.def("structural_equal", [](const Stmt& a, const Stmt& b) { return ir::structural_equal(a, b); });
  m.def("structural_equal", [](const ir::Kernel& a, const ir::Kernel& b) { return ir::structural_equal(a, b); });
  m.def("structural_hash", [](const Expr& e) { return ir::structural_hash(e); });
  m.def("structural_hash", [](const Stmt& s) { return ir::structural_hash(s); });
  m.def("structural_hash", [](const ir::Kernel& k) { return ir::structural_hash(k); });
  // An integer expression's value with the given variables' values (tegula.testing sizes a
  // workspace whose shape is computed from the dynamic sizes); None when it reads memory or
  // a variable not given.
  m.def("eval_int", [](const Expr& e, const std::vector<std::pair<Expr, int64_t>>& values) -> std::optional<int64_t> {
    ir::VarValues vars;
    for (auto& [var, v] : values) vars[var.get()] = v;
    int64_t out;
    if (!ir::eval_int(e, vars, &out)) return std::nullopt;
    return out;
  }, py::arg("e"), py::arg("values"));

  m.def("set_loc", [](std::string file, int line, int col) { t_current_loc = SourceLoc{std::move(file), line, col}; },
        py::arg("file"), py::arg("line"), py::arg("col"));

  m.def("int_imm", [](const py::object& v, const std::string& dtype) {
    return int_constant(v, parse_dtype(dtype));
  }, py::arg("v"), py::arg("dtype") = "int32");
  m.def("float_imm", [](double v, const std::string& dtype) {
    ir::DataType t = parse_dtype(dtype);
    if (!t.is_float()) fail("float_imm needs a floating dtype, got " + dtype);
    return ir::make_float(v, t, current_loc());
  }, py::arg("v"), py::arg("dtype") = "float32");
  m.def("var", [](const std::string& name, const std::string& dtype) {
    return ir::make_var(name, parse_dtype(dtype), current_loc());
  }, py::arg("name"), py::arg("dtype") = "int32");

  m.def("binary", [](const std::string& op, const Expr& a, const Expr& b) {
    return ir::make_binary(lookup(kBinaryOps, op, "binary op"), a, b, current_loc());
  }, py::arg("op"), py::arg("a"), py::arg("b"));
  m.def("not_", [](const Expr& a) { return ir::make_not(a, current_loc()); }, py::arg("a"));
  m.def("select", [](const Expr& c, const Expr& a, const Expr& b) {
    return ir::make_select(c, a, b, current_loc());
  }, py::arg("cond"), py::arg("a"), py::arg("b"));
  m.def("cast", [](const std::string& dtype, const Expr& a) {
    return ir::make_cast(parse_dtype(dtype), a, current_loc());
  }, py::arg("dtype"), py::arg("a"));
  m.def("call", [](const std::string& op, std::vector<Expr> args, const std::string& dtype) {
    require_identifier(op);
    return ir::make_call(op, std::move(args), parse_dtype(dtype), current_loc());
  }, py::arg("op"), py::arg("args"), py::arg("dtype"));

  m.def("buffer", [](const std::string& name, const std::string& scope, const std::string& dtype,
                     std::vector<Expr> shape, bool scalar) {
    for (const Expr& d : shape) require_int(d, "a buffer dimension");
    ir::Buffer b = ir::make_buffer(name, lookup(kScopes, scope, "scope"), parse_dtype(dtype), std::move(shape),
                                   current_loc());
    if (scalar) {
      if (b->scope != ir::Scope::Local || b->num_elements_const() != 1) fail("a scalar buffer is one local element");
      std::const_pointer_cast<ir::BufferNode>(b)->scalar = true;  // not yet shared: still ours to set
    }
    return BufferHandle{b};
  }, py::arg("name"), py::arg("scope"), py::arg("dtype"), py::arg("shape"), py::arg("scalar") = false);
  m.def("strided_buffer", [](const std::string& name, const std::string& dtype, std::vector<Expr> shape,
                             std::vector<Expr> strides) {
    for (const Expr& d : shape) require_int(d, "a buffer dimension");
    for (const Expr& d : strides) require_int(d, "a stride");
    return BufferHandle{ir::make_strided_buffer(name, parse_dtype(dtype), std::move(shape), std::move(strides),
                                                current_loc())};
  }, py::arg("name"), py::arg("dtype"), py::arg("shape"), py::arg("strides"));
  m.def("address_buffer", [](const std::string& name, const std::string& dtype, std::vector<Expr> shape,
                             std::vector<Expr> strides, const Expr& address) {
    for (const Expr& d : shape) require_int(d, "a tensor dimension");
    for (const Expr& d : strides) require_int(d, "a stride");
    require_var(address, "the address of a tensor");
    ir::DataType a = address.dtype();
    if (!(a.code == ir::DataType::Handle || (a.is_int() && a.bits == 64)) || a.lanes != 1) {
      fail("the address of a tensor must be a pointer or a 64-bit integer, got " + a.name());
    }
    return BufferHandle{ir::make_address_buffer(name, parse_dtype(dtype), std::move(shape), std::move(strides), address,
                                                current_loc())};
  }, py::arg("name"), py::arg("dtype"), py::arg("shape"), py::arg("strides"), py::arg("address"));
  m.def("view", [](const std::string& name, const BufferHandle& base, std::vector<Expr> shape,
                   const std::string& dtype) {
    for (const Expr& d : shape) require_int(d, "a view's dimension");
    std::optional<ir::DataType> t;
    if (!dtype.empty()) t = parse_dtype(dtype);
    return BufferHandle{ir::make_view(name, base.node, std::move(shape), current_loc(), t)};
  }, py::arg("name"), py::arg("base"), py::arg("shape"), py::arg("dtype") = "");
  // lanes > 1: that many contiguous elements along the last dimension, as one vector value
  // (the address of an explicit-width access, ir/wide_access.h).
  m.def("load", [](const BufferHandle& b, std::vector<Expr> indices, int lanes) {
    require_rank(b.node, indices.size());
    if (lanes < 1 || lanes > 32) fail("load: lanes must be 1 to 32, got " + std::to_string(lanes));
    return ir::make_load(b.node, std::move(indices), current_loc(), lanes);
  }, py::arg("buf"), py::arg("indices"), py::arg("lanes") = 1);

  m.def("evaluate", [](const Expr& e) { return ir::make_evaluate(e, current_loc()); }, py::arg("e"));
  m.def("store", [](const BufferHandle& b, std::vector<Expr> indices, const Expr& value) {
    require_rank(b.node, indices.size());
    return ir::make_store(b.node, std::move(indices), value, current_loc());
  }, py::arg("buf"), py::arg("indices"), py::arg("value"));
  // threads > 0: a named barrier `barrier` for that many threads (T.sync_threads(id, n)).
  m.def("sync", [](int barrier, int threads) {
    return threads > 0 ? ir::make_scoped_sync(barrier, threads, current_loc()) : ir::make_sync(current_loc());
  }, py::arg("barrier") = 0, py::arg("threads") = 0);
  m.def("loop_jump", [](bool is_continue) { return ir::make_loop_jump(is_continue, current_loc()); },
        py::arg("is_continue") = false);
  m.def("for_", [](const Expr& var, const Expr& min, const Expr& extent, const std::string& kind, const Stmt& body,
                   int num_stages) {
    require_var(var, "a loop variable");
    require_int(min, "a loop start");
    require_int(extent, "a loop extent");
    return ir::make_for(var, min, extent, lookup(kForKinds, kind, "loop kind"), body, num_stages, current_loc());
  }, py::arg("var"), py::arg("min"), py::arg("extent"), py::arg("kind"), py::arg("body"), py::arg("num_stages") = 0);
  m.def("if_", [](const Expr& cond, const Stmt& then_case, std::optional<Stmt> else_case) {
    return ir::make_if(cond, then_case, else_case.value_or(Stmt()), current_loc());
  }, py::arg("cond"), py::arg("then"), py::arg("else_") = py::none());
  m.def("while_", [](const Expr& cond, const Stmt& body) {
    return ir::make_while(cond, body, current_loc());
  }, py::arg("cond"), py::arg("body"));
  m.def("seq", [](std::vector<Stmt> stmts) { return ir::make_seq(std::move(stmts), current_loc()); }, py::arg("stmts"));
  m.def("let", [](const Expr& var, const Expr& value, const Stmt& body) {
    require_var(var, "a let variable");
    return ir::make_let(var, value, body, current_loc());
  }, py::arg("var"), py::arg("value"), py::arg("body"));

  using RegionTuple = std::tuple<BufferHandle, std::vector<Expr>, std::vector<Expr>>;
  m.def("tile_op", [](const std::string& op, const std::vector<RegionTuple>& regions, std::vector<Expr> args,
                      const py::dict& attrs) {
    lookup(kTileOps, op, "tile op");
    std::vector<ir::BufferRegion> rs;
    for (const auto& [buf, mins, extents] : regions) rs.push_back({buf.node, mins, extents});
    std::map<std::string, ir::TileAttr> as;
    for (const auto& [k, v] : attrs) as[py::str(k).cast<std::string>()] = to_attr(py::str(k), v);
    return ir::make_tile_op(op, std::move(rs), std::move(args), std::move(as), current_loc());
  }, py::arg("op"), py::arg("regions"), py::arg("args") = std::vector<Expr>{}, py::arg("attrs") = py::dict());

  m.def("kernel", [](const std::string& name, const py::list& params, std::vector<Expr> dynamic_vars,
                     std::vector<Expr> grid, std::vector<Expr> block_vars, const py::object& thread_var, int threads,
                     const std::vector<BufferHandle>& allocs, const Stmt& body, const py::dict& attrs,
                     const std::vector<int64_t>& cluster_dims) {
    py::object k = py::cast(build_kernel(name, params, std::move(dynamic_vars), std::move(grid), std::move(block_vars),
                                         thread_var, threads, allocs, body, cluster_dims));
    k.attr("attrs") = attrs;
    return k;
  }, py::arg("name"), py::arg("params"), py::arg("dynamic_vars"), py::arg("grid"), py::arg("block_vars"),
     py::arg("thread_var"), py::arg("threads"), py::arg("allocs"), py::arg("body"), py::arg("attrs") = py::dict(),
     py::arg("cluster_dims") = std::vector<int64_t>{});
}

}  // namespace tegula::bindings
