// Program::save / Program::load: a built program as bytes, so a later process can launch it
// without parsing or lowering (the JIT's persistent index, tegula/jit_index.py, stores them).
//
// What a launch needs and nothing else: the parameter specs, the dynamic variables, and per
// kernel its entry, image, grid, block, shared memory, grid rules, cooperative launch and
// cluster shape, and tensor maps. A grid
// extent is an expression over the dynamic sizes and the scalar parameters; it is written
// as a small prefix tree whose variables are indices into those two lists; so is a
// workspace dimension computed from the dynamic sizes. A program whose grid uses any other
// node (a load, a call) cannot be saved: save() returns "" and the caller keeps no record.
//
// Layout, little-endian: magic "TGLPROG" + u32 version, then the fields in the order of
// save(). load() checks every length against the bytes left, and throws InternalError on
// anything malformed; the cache entry holding these bytes is itself checksummed.
#include <cstring>

#include "bindings/bindings.h"
#include "bindings/program.h"

namespace tegula::bindings {

namespace {

constexpr char kMagic[8] = {'T', 'G', 'L', 'P', 'R', 'O', 'G', 0};
constexpr uint32_t kVersion = 4;

struct Writer {
  std::string out;
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(char(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(uint64_t(v)); }
  void str(const std::string& s) {
    u64(s.size());
    out += s;
  }
  void bytes(const std::vector<char>& b) {
    u64(b.size());
    out.append(b.data(), b.size());
  }
  void dtype(ir::DataType t) {
    i64(t.code);
    i64(t.bits);
    i64(t.lanes);
  }
};

struct Reader {
  const std::string& in;
  size_t pos = 0;
  void need(uint64_t n) {
    internal_assert(n <= in.size() - pos) << "saved program truncated at byte " << pos;
  }
  uint64_t u64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(in[pos + i])) << (8 * i);
    pos += 8;
    return v;
  }
  int64_t i64() { return int64_t(u64()); }
  int small(int64_t lo, int64_t hi) {
    int64_t v = i64();
    internal_assert(v >= lo && v <= hi) << "saved program: value " << v << " out of [" << lo << ", " << hi << "]";
    return int(v);
  }
  std::string str() {
    uint64_t n = u64();
    need(n);
    std::string s = in.substr(pos, n);
    pos += n;
    return s;
  }
  std::vector<char> bytes() {
    uint64_t n = u64();
    need(n);
    std::vector<char> b(in.data() + pos, in.data() + pos + n);
    pos += n;
    return b;
  }
  ir::DataType dtype() {
    ir::DataType t;
    t.code = ir::DataType::Code(small(0, ir::DataType::Handle));
    t.bits = small(1, 64);
    t.lanes = small(1, 1 << 16);
    return t;
  }
};

enum ExprTag : int64_t { kInt = 0, kVar = 1, kBinary = 2, kNot = 3, kSelect = 4, kCast = 5 };

// Variables a grid may name: vars[i] is written as index i.
bool write_expr(Writer& w, const ir::Expr& e, const std::vector<ir::Expr>& vars) {
  switch (e.kind()) {
    case ir::NodeKind::IntImm:
      w.i64(kInt);
      w.dtype(e.dtype());
      w.i64(e.as<ir::IntImmNode>()->value);
      return true;
    case ir::NodeKind::Var:
      for (size_t i = 0; i < vars.size(); ++i) {
        if (vars[i].same_as(e)) {
          w.i64(kVar);
          w.i64(int64_t(i));
          return true;
        }
      }
      return false;
    case ir::NodeKind::Binary: {
      auto* b = e.as<ir::BinaryNode>();
      w.i64(kBinary);
      w.dtype(e.dtype());
      w.i64(int64_t(b->op));
      return write_expr(w, b->a, vars) && write_expr(w, b->b, vars);
    }
    case ir::NodeKind::Not:
      w.i64(kNot);
      return write_expr(w, e.as<ir::NotNode>()->a, vars);
    case ir::NodeKind::Select: {
      auto* s = e.as<ir::SelectNode>();
      w.i64(kSelect);
      return write_expr(w, s->cond, vars) && write_expr(w, s->t, vars) && write_expr(w, s->f, vars);
    }
    case ir::NodeKind::Cast:
      w.i64(kCast);
      w.dtype(e.dtype());
      return write_expr(w, e.as<ir::CastNode>()->value, vars);
    default:
      return false;
  }
}

ir::Expr read_expr(Reader& r, const std::vector<ir::Expr>& vars, int depth = 0) {
  internal_assert(depth < 256) << "saved program: grid expression too deep";
  switch (r.small(kInt, kCast)) {
    case kInt: {
      ir::DataType t = r.dtype();
      return ir::Expr(std::make_shared<ir::IntImmNode>(t, r.i64()));
    }
    case kVar: return vars.at(size_t(r.small(0, int64_t(vars.size()) - 1)));
    case kBinary: {
      ir::DataType t = r.dtype();
      auto op = ir::BinaryOp(r.small(0, int(ir::BinaryOp::Shr)));
      ir::Expr a = read_expr(r, vars, depth + 1);
      ir::Expr b = read_expr(r, vars, depth + 1);
      return ir::Expr(std::make_shared<ir::BinaryNode>(t, op, a, b));
    }
    case kNot: return ir::Expr(std::make_shared<ir::NotNode>(read_expr(r, vars, depth + 1)));
    case kSelect: {
      ir::Expr c = read_expr(r, vars, depth + 1);
      ir::Expr a = read_expr(r, vars, depth + 1);
      ir::Expr b = read_expr(r, vars, depth + 1);
      return ir::Expr(std::make_shared<ir::SelectNode>(c, a, b));
    }
    default: {
      ir::DataType t = r.dtype();
      return ir::Expr(std::make_shared<ir::CastNode>(t, read_expr(r, vars, depth + 1)));
    }
  }
}

// The dynamic variables, then each scalar parameter's variable (null for tensors keeps the
// indices aligned with nothing: only real variables are listed).
std::vector<ir::Expr> grid_vars(const std::vector<ir::Expr>& dynamic, const std::vector<ParamSpec>& params) {
  std::vector<ir::Expr> vars = dynamic;
  for (auto& p : params) {
    if (!p.is_tensor) vars.push_back(p.var);
  }
  return vars;
}

}  // namespace

std::string Program::save() const {
  Writer w;
  w.out.append(kMagic, sizeof(kMagic));
  w.i64(kVersion);
  w.str(kernel_name_);
  w.i64(num_dynamic_);
  for (auto& v : dynamic_vars_) {
    w.str(v.as<ir::VarNode>()->name);
    w.dtype(v.dtype());
  }
  w.i64(int64_t(params_.size()));
  for (auto& p : params_) {
    if (!p.strides.empty() || p.dtype.is_packed()) return "";  // not in the format yet
    w.str(p.name);
    w.i64(p.is_tensor);
    w.dtype(p.dtype);
    w.i64(int64_t(p.scalar_type));
    w.i64(int64_t(p.dims.size()));
    for (size_t d = 0; d < p.dims.size(); ++d) {
      w.i64(p.dims[d]);
      w.i64(p.dim_var[d]);
      bool computed = d < p.dim_expr.size() && p.dim_expr[d];
      w.i64(computed);
      if (computed && !write_expr(w, p.dim_expr[d], dynamic_vars_)) return "";
    }
    w.i64(p.align_bytes);
    w.i64(p.is_output);
    w.i64(p.is_workspace);
    if (!p.is_tensor) w.str(p.var.as<ir::VarNode>()->name);
  }
  std::vector<ir::Expr> vars = grid_vars(dynamic_vars_, params_);
  w.i64(int64_t(kernels_.size()));
  for (auto& k : kernels_) {
    const Launch& l = k.launch;
    if (l.event_log) return "";  // an instrumented kernel is for this process's session only
    w.str(l.entry);
    w.bytes(l.image);
    w.i64(int64_t(l.grid.size()));
    for (auto& g : l.grid) {
      if (!write_expr(w, g, vars)) return "";
    }
    w.i64(int64_t(l.checks.size()));
    for (auto& c : l.checks) {
      if (!write_expr(w, c.cond, vars)) return "";
      w.str(c.text);
    }
    w.i64(l.threads);
    w.i64(l.smem_bytes);
    w.i64(l.rules.fold);
    w.i64(l.cooperative);
    w.i64(int64_t(l.cluster_dims.size()));
    for (int64_t d : l.cluster_dims) w.i64(d);
    w.i64(int64_t(l.rules.dyn_multiple.size()));
    for (int m : l.rules.dyn_multiple) w.i64(m);
    w.i64(int64_t(l.tensor_maps.size()));
    for (auto& t : l.tensor_maps) {
      w.i64(t.param);
      w.i64(t.dtype);
      w.i64(t.elem_bytes);
      w.i64(int64_t(t.box.size()));
      for (uint32_t b : t.box) w.i64(b);
      w.i64(t.swizzle);
    }
  }
  return w.out;
}

std::shared_ptr<Program> Program::load(const std::string& bytes) {
  Reader r{bytes};
  r.need(sizeof(kMagic));
  internal_assert(std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0) << "not a saved program";
  r.pos = sizeof(kMagic);
  internal_assert(r.i64() == kVersion) << "saved program of another format version";
  std::string name = r.str();
  int num_dynamic = r.small(0, kMaxArgs);
  std::vector<ir::Expr> dynamic;
  for (int i = 0; i < num_dynamic; ++i) {
    std::string var = r.str();
    dynamic.push_back(ir::make_var(var, r.dtype()));
  }
  int np = r.small(0, kMaxArgs);
  std::vector<ParamSpec> params(np);
  for (auto& p : params) {
    p.name = r.str();
    p.is_tensor = r.small(0, 1);
    p.dtype = r.dtype();
    p.scalar_type = at::ScalarType(r.small(0, int(at::ScalarType::NumOptions) - 1));
    int rank = r.small(0, 64);
    for (int d = 0; d < rank; ++d) {
      p.dims.push_back(r.i64());
      p.dim_var.push_back(r.small(-1, num_dynamic - 1));
      p.dim_expr.push_back(r.small(0, 1) ? read_expr(r, dynamic) : ir::Expr());
    }
    p.align_bytes = r.small(0, 1 << 20);
    p.is_output = r.small(0, 1);
    p.is_workspace = r.small(0, 1);
    if (!p.is_tensor) p.var = ir::make_var(r.str(), p.dtype);
  }
  std::vector<ir::Expr> vars = grid_vars(dynamic, params);
  int nk = r.small(1, 1024);
  std::vector<Launch> launches(nk);
  for (auto& l : launches) {
    l.entry = r.str();
    l.image = r.bytes();
    int ng = r.small(1, 3);
    for (int g = 0; g < ng; ++g) l.grid.push_back(read_expr(r, vars));
    int nchecks = r.small(0, 1 << 10);
    for (int c = 0; c < nchecks; ++c) {
      ir::Expr cond = read_expr(r, vars);
      l.checks.push_back({cond, r.str()});
    }
    l.threads = r.small(1, 1 << 16);
    l.smem_bytes = r.small(0, 1 << 30);
    l.rules.fold = r.small(0, 1);
    l.cooperative = r.small(0, 1);
    int ncl = r.small(0, 3);
    for (int i = 0; i < ncl; ++i) l.cluster_dims.push_back(r.small(1, 1 << 16));
    int nm = r.small(0, kMaxArgs);
    for (int i = 0; i < nm; ++i) l.rules.dyn_multiple.push_back(r.small(1, 1 << 30));
    int nt = r.small(0, 64);
    for (int i = 0; i < nt; ++i) {
      TensorMapSpec t;
      t.param = r.small(0, np - 1);
      t.dtype = r.small(0, 64);
      t.elem_bytes = r.small(1, 16);
      int nb = r.small(0, 5);
      for (int b = 0; b < nb; ++b) t.box.push_back(uint32_t(r.small(0, 1 << 20)));
      t.swizzle = r.small(0, 16);
      l.tensor_maps.push_back(std::move(t));
    }
  }
  internal_assert(r.pos == bytes.size()) << "saved program has trailing bytes";
  return std::make_shared<Program>(std::move(name), std::move(params), num_dynamic, std::move(dynamic),
                                   std::move(launches));
}

}  // namespace tegula::bindings
