// Prints lowered IR as CUDA C++ against the device library in kernels/include/tegula.
//
// Conventions: global tensors are row-major and indexed by one flattened offset (64-bit
// when a tensor may exceed 2^31 elements); shared buffers are views into one dynamic
// shared-memory pool at the offsets plan_storage chose; register arrays are local arrays
// (a fragment's indexed by constants; a T.alloc_local of several dimensions row-major like
// the rest); a load or store of lanes > 1 is one vector access through tegula::Vec.
#include "codegen/cuda_printer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "codegen/cuda_names.h"
#include "codegen/cuda_spellings.h"
#include "codegen/cuda_tensor_cores.h"
#include "ir/analyzer.h"
#include "ir/functor.h"
#include "ir/thread_guard.h"
#include "ir/wide_access.h"

namespace tegula::codegen {

using namespace ir;

namespace {

class Printer {
 public:
  Printer(const Kernel& k, const transform::Target& target)
      : k_(k), target_(target), an_(kernel_analyzer(k)), wide_ints_(has_huge_dimension(k)) {
    post_order(k.body, [](const Stmt&) {}, [&](const Expr& e) {
      auto* c = e.as<CallNode>();
      if (c && c->op == "no_set_max_nreg") no_set_max_nreg_ = true;
      std::string phase, event;
      if (c && event_call(c->op, &phase, &event)) {
        events_[*as_const_int(c->args.at(0))] = (phase == "mark" ? "mark \"" : "range \"") + event + "\"";
      }
    });
  }

  CudaSource run() {
    CudaSource out;
    check_wgmma_registers(k_);
    // At global scope a leading '_' is the implementation's.
    out.entry = legal_name(k_.name + "_kernel");
    if (out.entry[0] == '_') out.entry = "v" + out.entry;
    // A warp-specialised kernel states one block per SM, so that ptxas knows the register
    // count at entry that setmaxnreg moves registers from.
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << k_.threads;
    // T.annotate_min_blocks_per_sm states it for any kernel.
    if (k_.consumer_threads) os_ << ", " << ws_registers(k_).blocks_per_sm;
    else if (k_.min_blocks_per_sm > 0) os_ << ", " << k_.min_blocks_per_sm;
    os_ << ") ";
    if (!k_.cluster_dims.empty()) {
      // A cluster shape fixed at compile time: an ordinary launch runs the blocks in clusters.
      os_ << "__cluster_dims__(" << k_.cluster_dims[0] << ", " << k_.cluster_dims[1] << ", " << k_.cluster_dims[2]
          << ") ";
    }
    os_ << out.entry << "(";
    // A kernel that waits for the kernel before it (T.pdl_sync) may start while that one
    // still writes its inputs: no __restrict__, which would let the compiler read them
    // through the non-coherent cache.
    // Nor where a tensor at a run-time address (T.make_tensor) may be one of them too.
    bool restrict_params = !calls("pdl_sync") && k_.addressed.empty();
    bool first = true;
    auto sep = [&] {
      if (!first) os_ << ", ";
      first = false;
    };
    for (auto& p : k_.params) {
      sep();
      if (p.buffer) {
        // A 4-bit type's tensor is its bytes, two elements each (packed_load / packed_store).
        os_ << (p.buffer->dtype.is_packed() ? "unsigned char" : cuda_type(p.buffer->dtype))
            << (restrict_params ? "* __restrict__ " : "* ") << name(p.buffer);
      } else {
        os_ << cuda_type(p.var.dtype()) << " " << name(p.var);
      }
    }
    for (auto& v : k_.dynamic_vars) {
      sep();
      os_ << cuda_type(v.dtype()) << " " << name(v);
    }
    for (size_t i = 0; i < k_.tensor_maps.size(); ++i) {
      sep();
      os_ << "const __grid_constant__ tegula::TensorMap tegula_tmap_" << i;
    }
    if (!events_.empty()) {
      sep();
      os_ << "tegula::IketLog* tegula_iket_log";  // iket.h; the launcher passes it last
    }
    os_ << ") {\n";
    indent_ = 1;
    line() << "const int " << name(k_.thread_var) << " = threadIdx.x;\n";
    print_block_indices();
    std::string rng_state = rng_state_type(k_);
    if (!rng_state.empty()) line() << rng_state << " tegula_rng;\n";  // T.rng_init's generator, per thread
    if (calls("match_all_sync")) line() << "int tegula_match_all;  // __match_all_sync's predicate, unused\n";
    if (k_.smem_bytes > 0) {
      line() << "extern __shared__ __align__(" << (k_.smem_panelled.empty() ? 128 : 1024)
             << ") unsigned char tegula_smem[];\n";
    }
    // A register array read or written as a vector is aligned to the widest such access.
    std::map<const BufferNode*, int64_t> vector_bytes;
    for (auto& b : k_.allocs) {
      if (b->scalar && b->scope == Scope::Local && b->num_elements_const() == 1 && !b->dtype.is_packed()) {
        scalars_.insert(b.get());
      }
    }
    auto note_vector = [&](const Buffer& b, int lanes) {
      if (lanes > 1) scalars_.erase(b.get());  // read as a vector: stays an array
      if (b->scope != Scope::Local || lanes < 2) return;
      int64_t bytes = int64_t(b->dtype.bytes()) * lanes,& align = vector_bytes[b.get()];
      align = std::max(align, std::min<int64_t>(bytes & -bytes, 16));
    };
    post_order(k_.body, [&](const Stmt& s) {
      if (auto* st = s.as<BufferStoreNode>()) note_vector(st->buffer, st->value.dtype().lanes);
    }, [&](const Expr& e) {
      if (auto* ld = e.as<BufferLoadNode>()) note_vector(ld->buffer, ld->dtype.lanes);
    });
    for (auto& b : k_.allocs) {
      if (b->scope == Scope::Shared) {
        line() << cuda_type(b->dtype) << "* " << name(b) << " = reinterpret_cast<" << cuda_type(b->dtype)
               << "*>(tegula_smem + " << k_.smem_offset.at(b.get()) << ");\n";
      } else if (scalars_.count(b.get())) {
        line() << cuda_type(b->dtype) << " " << name(b) << ";\n";
      } else if (b->scope == Scope::Local) {
        int64_t n = b->num_elements_const();
        int64_t align = b->dtype.bytes() * n % 16 == 0 ? 16 : vector_bytes.count(b.get()) ? vector_bytes[b.get()] : 0;
        line() << cuda_type(b->dtype) << " " << name(b) << "[" << n << "]"
               << (align > b->dtype.bytes() ? " __attribute__((aligned(" + std::to_string(align) + ")))" : "")
               << ";\n";
      }
    }
    for (auto& p : k_.params) {
      if (p.var) declare_address_tensors(p.var);  // T.make_tensor of a T.ptr parameter
    }
    stmt(k_.body);
    os_ << "}\n";
    std::string head = "// Generated by Tegula for " + target_.arch + ".\n#include \"tegula/tegula.h\"\n";
    if (launches_cooperatively(k_)) {
      // CUDA's grid barrier, without the libcu++ headers cooperative_groups.h would pull in
      // (their int64_t is `long long`, the device library's the LP64 `long`: config.h).
      head += "#define _CG_LIMIT_INCLUDED_DEPENDENCIES\n#include <cooperative_groups.h>\n";
    }
    head += "\n";
    head += "using namespace tegula;\n\n";
    // The instrumentation events by id (tegula.tools.cuda.iket decodes the log with them).
    for (auto& [id, what] : events_) head += "// iket event " + std::to_string(id) + ": " + what + "\n";
    if (!events_.empty()) head += "\n";
    for (auto& kv : instructions_) head += kv.second + "\n";
    out.code = head + os_.str();
    return out;
  }

 private:
  // A global dimension of kIndex32Limit or more, or a 64-bit dynamic size (which may be
  // as large): every index (and mask) computed in the kernel could pass 2^31, so all its
  // integer arithmetic is printed in 64 bits.
  static bool has_huge_dimension(const Kernel& k) {
    for (auto& v : k.dynamic_vars) {
      if (v.dtype().bits == 64) return true;
    }
    for (auto& p : k.params) {
      if (!p.buffer) continue;
      for (auto& d : p.buffer->shape) {
        const int64_t* v = as_const_int(d);
        if (v && *v >= kIndex32Limit) return true;
      }
    }
    return false;
  }

  void print_block_indices() {
    static const char* dims[] = {"x", "y", "z"};
    std::vector<std::string> raw;
    for (size_t d = 0; d < k_.block_vars.size(); ++d) raw.push_back(std::string("blockIdx.") + dims[d]);
    std::string grid_y = "gridDim.y";
    if (folds_grid(k_)) {
      // y (times z) may pass the hardware's 65535: the launcher spreads those blocks over
      // blockIdx.y and blockIdx.z (launch_grid in program.cc), and the blocks of the last
      // z slice past the end leave at once (a whole block returns, so no barrier waits).
      std::string y = "(" + expr(k_.grid[1]) + ")";
      if (k_.block_vars.size() == 2) {
        line() << "const int tegula_by = blockIdx.z * gridDim.y + blockIdx.y;\n";
        line() << "if (tegula_by >= " << y << ") return;\n";
      } else {
        std::string z = "(" + expr(k_.grid[2]) + ")";
        line() << "const long long tegula_yz = (long long)blockIdx.z * gridDim.y + blockIdx.y;\n";
        line() << "if (tegula_yz >= (long long)" << y << " * " << z << ") return;\n";
        line() << "const int tegula_by = (int)(tegula_yz % " << y << ");\n";
        line() << "const int tegula_bz = (int)(tegula_yz / " << y << ");\n";
        raw[2] = "tegula_bz";
      }
      raw[1] = "tegula_by";
      grid_y = y;
    }
    if (k_.panel_size > 0 && k_.block_vars.size() >= 2) {
      std::vector<std::string> names;
      for (auto& v : k_.block_vars) names.push_back(name(v));
      for (auto& l : panel_block_indices(k_.panel_size, k_.swizzle_row_major, raw, grid_y, names)) line() << l << "\n";
      return;
    }
    for (size_t d = 0; d < k_.block_vars.size(); ++d) {
      line() << "const int " << name(k_.block_vars[d]) << " = " << raw[d] << ";\n";
    }
  }

  Text& line() {
    os_ << pad();
    return os_;
  }
  std::string pad() const { return std::string(2 * indent_, ' '); }

  // The name of a variable or buffer: legal (cuda_names.h) and distinct from the names
  // printed before it, in the order of printing, so a program always prints the same.
  std::string unique(const void* key, const std::string& user_name) {
    auto it = names_.find(key);
    if (it != names_.end()) return it->second;
    std::string base = legal_name(user_name);
    std::string sep = base.back() == '_' ? "" : "_";
    std::string n = base;
    for (int i = 1; used_.count(n) || is_reserved_name(n); ++i) n = base + sep + std::to_string(i);
    used_.insert(n);
    names_[key] = n;
    return n;
  }
  std::string name(const Expr& v) { return unique(v.get(), v.as<VarNode>()->name); }

  // The tensors at the address `var` holds (T.make_tensor), as typed pointers in its scope:
  //   half_t* A = reinterpret_cast<half_t*>(A_addr);
  void declare_address_tensors(const Expr& var) {
    for (const Buffer& b : k_.addressed) {
      if (!b->address.same_as(var)) continue;
      std::string t = b->dtype.is_packed() ? "unsigned char" : cuda_type(b->dtype);
      line() << t << "* " << name(b) << " = reinterpret_cast<" << t << "*>(" << name(var) << ");\n";
    }
  }

  std::string name(const Buffer& b) { return unique(b.get(), b->name); }

  // Whether the kernel calls `op` anywhere.
  bool calls(const std::string& op) const {
    bool found = false;
    post_order(k_.body, [](const Stmt&) {}, [&](const Expr& e) {
      if (auto* c = e.as<CallNode>(); c && c->op == op) found = true;
    });
    return found;
  }

  // What the tensor-core calls' text needs of this printer (cuda_tensor_cores.h).
  TensorCorePrinter tensor_core_printer() {
    return {k_, [this](const Expr& e) { return expr(e); },
            [this](const Buffer& b, const std::vector<Expr>& idx, bool read) { return access(b, idx, 1, read); },
            instructions_};
  }

  std::string offset(const Buffer& b, const std::vector<Expr>& idx) {
    if (wide_panels(k_, b)) {
      return "panel_offset<" + expr(b->shape[1]) + ", " + std::to_string(b->dtype.bytes()) + ", " +
             expr(b->shape[0]) + ">(" + expr(idx[0]) + ", " + expr(idx[1]) + ")";
    }
    if (k_.smem_swizzled.count(b.get())) {
      return "swizzle_offset<" + expr(b->shape[1]) + ", " + std::to_string(b->dtype.bytes()) + ">(" + expr(idx[0]) +
             ", " + expr(idx[1]) + ")";
    }
    if (!b->strides.empty()) {
      // T.StridedTensor: sum of index times stride, in 64 bits (a stride may be large).
      std::string acc;
      for (size_t d = 0; d < idx.size(); ++d) {
        std::string term = "(long long)(" + expr(idx[d]) + ")";
        const int64_t* c = as_const_int(b->strides[d]);
        if (!c || *c != 1) term += " * " + expr(b->strides[d]);
        acc += (d ? " + " : "") + term;
      }
      return acc;
    }
    int64_t n = b->num_elements_const();
    bool wide = b->scope == Scope::Global && (n < 0 || n >= kIndex32Limit);
    std::vector<Expr> pos = idx;
    std::vector<Expr> dims = b->shape;
    if (auto m = k_.global_layouts.find(b.get()); m != k_.global_layouts.end()) {
      // A T.Layout: the row-major position of its outputs in its range (ir/index_map.h).
      std::vector<std::pair<Expr, Expr>> sub;
      for (size_t d = 0; d < idx.size(); ++d) sub.push_back({m->second.vars[d], idx[d]});
      pos.clear();
      for (auto& o : m->second.outs) pos.push_back(an_.simplify(substitute(o, sub)));
      dims = m->second.shape;
    }
    std::string acc;
    for (size_t d = 0; d < pos.size(); ++d) {
      std::string i = expr(pos[d]);
      if (d == 0) {
        acc = wide ? "(long long)(" + i + ")" : i;
      } else {
        acc = "(" + acc + ") * " + expr(dims[d]) + " + " + i;
      }
    }
    return acc;
  }

  // `native`: name the vector with CUDA's own type (float4, ...) where one fits; only for a
  // copy whose two sides both do, since a vector value elsewhere is a Vec<T, N>.
  std::string access(const Buffer& b, const std::vector<Expr>& idx, int lanes, bool read, bool native = false) {
    if (b->scope == Scope::Global && b->dtype.is_packed()) {
      internal_assert(lanes == 1 && read) << "a 4-bit tensor is accessed one element at a time (store_packed)";
      return "packed_load<" + cuda_type(b->dtype) + ">(" + name(b) + ", " + offset(b, idx) + ")";
    }
    if (scalars_.count(b.get())) return name(b);  // a T.alloc_var: its one element is the variable
    std::string elem = name(b) + "[" + offset(b, idx) + "]";
    if (lanes == 1) return elem;
    std::string vt = native ? memory_vector_type(b->dtype, lanes)
                            : "Vec<" + cuda_type(b->dtype) + ", " + std::to_string(lanes) + ">";
    return std::string("*reinterpret_cast<") + (read ? "const " : "") + vt + "*>(&" + elem + ")";
  }

  // r[c:+2] = Tx2(s[d:+2]) (pack_casts.cc): one of CUDA's conversions of a pair, each side
  // by its storage type: *reinterpret_cast<__half2*>(&r[c]) = __float22half2_rn(...).
  // Empty for any other store.
  std::string pair_conversion_text(const BufferStoreNode* st) {
    auto* cast = st->value.as<CastNode>();
    auto* src = cast ? cast->value.as<BufferLoadNode>() : nullptr;
    PairConversion pc;
    if (!src || cast->dtype.lanes != 2 || !pair_conversion(src->dtype.element(), cast->dtype.element(), &pc)) return "";
    return "*reinterpret_cast<" + std::string(pc.to_type) + "*>(&" + access(st->buffer, st->indices, 1, false) +
           ") = " + pc.open + "*reinterpret_cast<const " + pc.from_type + "*>(&" +
           access(src->buffer, src->indices, 1, true) + ")" + pc.close;
  }

  std::string expr(const Expr& e) {
    switch (e.kind()) {
      case NodeKind::IntImm: return int_literal(e.as<IntImmNode>(), wide_ints_);
      case NodeKind::FloatImm: return float_literal(e.as<FloatImmNode>()->value, e.dtype());
      case NodeKind::Var: return wide_ints_ && e.dtype().is_int() && e.dtype().bits == 32 ? "(long long)" + name(e) : name(e);
      case NodeKind::Not: return "(!" + expr(e.as<NotNode>()->a) + ")";
      case NodeKind::Select: {
        auto* s = e.as<SelectNode>();
        return "(" + expr(s->cond) + " ? " + expr(s->t) + " : " + expr(s->f) + ")";
      }
      case NodeKind::Cast: {
        auto* c = e.as<CastNode>();
        return "cast<" + cuda_type(c->dtype) + ">(" + expr(c->value) + ")";
      }
      case NodeKind::Call: return call(e.as<CallNode>());
      case NodeKind::BufferLoad: {
        auto* l = e.as<BufferLoadNode>();
        return access(l->buffer, l->indices, l->dtype.lanes, true);
      }
      case NodeKind::Binary: return binary(e.as<BinaryNode>());
      default: internal_error << "cannot print " << node_kind_name(e.kind());
    }
    return "";
  }

  std::string binary(const BinaryNode* b) {
    std::string x = expr(b->a), y = expr(b->b);
    bool ints = b->a.dtype().is_int();
    switch (b->op) {
      // Qualified for floats: CUDA's global max(float, float) is fmaxf, which drops NaN;
      // tegula::max propagates it as torch.maximum does (math.h).
      case BinaryOp::Min: return (ints ? "min(" : "tegula::min(") + x + ", " + y + ")";
      case BinaryOp::Max: return (ints ? "max(" : "tegula::max(") + x + ", " + y + ")";
      case BinaryOp::FloorDiv:
      case BinaryOp::FloorMod: {
        // C's / and % are the floor forms only for integers known non-negative; on
        // floats / does not floor and % does not compile.
        bool plain = ints && an_.bound(b->a).lo >= 0 && an_.bound(b->b).lo > 0;
        bool div = b->op == BinaryOp::FloorDiv;
        if (plain) return "(" + x + (div ? " / " : " % ") + y + ")";
        return std::string(div ? "floordiv(" : "floormod(") + x + ", " + y + ")";
      }
      case BinaryOp::And:
      case BinaryOp::Or:
        if (evaluates_eagerly(b->b)) return "(" + x + (b->op == BinaryOp::And ? " & " : " | ") + y + ")";
        break;
      default: break;
    }
    return "(" + x + " " + binary_op_name(b->op) + " " + y + ")";
  }

  // tma_copy(dst, src, map, R, C, bar): one bulk tensor copy per box of the tensor map,
  // coordinates innermost first; a panelled destination takes one box per panel.
  std::string tma_copy(const CallNode* c) {
    auto* dst = c->args[0].as<BufferLoadNode>();
    auto* src = c->args[1].as<BufferLoadNode>();
    int64_t map = *as_const_int(c->args[2]);
    int64_t cols = *as_const_int(c->args[4]);
    auto* bar = c->args[5].as<BufferLoadNode>();
    const auto& m = k_.tensor_maps.at(map);
    int rank = int(m.box.size());
    std::string out;
    for (int64_t col = 0; col < cols; col += m.box[0]) {
      std::vector<Expr> at = dst->indices;
      at.back() = at.back() + make_int(col);
      std::string s = "tma_load_" + std::to_string(rank) + "d(&" + access(dst->buffer, at, 1, false) + ", &tegula_tmap_" +
                      std::to_string(map) + ", &" + access(bar->buffer, bar->indices, 1, false);
      for (int d = 0; d < rank; ++d) {
        Expr coord = src->indices[rank - 1 - d];
        if (d == 0 && col) coord = coord + make_int(col);
        s += ", " + expr(coord);
      }
      out += (out.empty() ? "" : ";\n" + pad()) + s + ")";
    }
    return out;
  }

  // load_global_64(&X[i]) / store_shared_128_conditional(&S[j], v, pred) (ldst.h): the
  // _unaligned form where the offset is not provably a multiple of the access's width (the
  // launcher checks a global tensor's base, plan_storage aligns a shared buffer's).
  std::string wide_access(const WideAccess& w, const std::string& op) {
    const BufferLoadNode* a = w.addr;
    Expr flat;
    for (size_t d = 0; d < a->indices.size(); ++d) flat = d ? flat * a->buffer->shape[d] + a->indices[d] : a->indices[d];
    int64_t elems = w.bits / 8 / a->buffer->dtype.bytes(), div = an_.known_divisor(flat);
    bool aligned = div == 0 || (elems > 0 && div % elems == 0);
    std::string s = op + (aligned ? "" : "_unaligned") + (w.pred ? "_conditional" : "") + "(&" +
                    access(a->buffer, a->indices, 1, !w.store);
    if (w.store) s += ", " + expr(w.value);
    if (w.pred) s += ", " + expr(w.pred);
    return s + ")";
  }

  std::string call(const CallNode* c) {
    if (auto w = ir::wide_access(c)) return wide_access(*w, c->op);
    if (c->op == "reinterpret") return "tegula::reinterpret<" + cuda_type(c->dtype) + ">(" + expr(c->args.at(0)) + ")";
    if (c->op == "atomic_add") {
      // args[2], when there, is the memory order (TileLang's ids; see ops/atomic_add.cc).
      static const char* const kOrders[] = {"relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst"};
      std::string order = c->args.size() > 2 ? std::string("<tegula::memory_order_") +
                                                   kOrders[*as_const_int(c->args[2])] + ">"
                                             : "";
      auto* addr = c->args[0].as<BufferLoadNode>();
      // A packed add (vectorize.cc): addr's lanes name the elements, the value is a Vec.
      if (addr->dtype.lanes > 1) order = "_x" + std::to_string(addr->dtype.lanes);
      return "atomic_add" + order + "(&" + access(addr->buffer, addr->indices, 1, false) + ", " + expr(c->args[1]) + ")";
    }
    if (c->op == "cp_async") {
      auto* dst = c->args[0].as<BufferLoadNode>();
      auto* src = c->args[1].as<BufferLoadNode>();
      return "cp_async_16_pred(&" + access(dst->buffer, dst->indices, 1, false) + ", &" +
             access(src->buffer, src->indices, 1, true) + ", " + expr(c->args[2]) + ")";
    }
    if (c->op == "tma_copy") return tma_copy(c);
    if (c->op == ir::kThreadScope) return "(" + expr(c->args[0]) + " - " + expr(c->args[1]) + ")";
    if (c->op == "ws_producer") return "(threadIdx.x >= " + std::to_string(k_.consumer_threads) + ")";
    if (c->op == "ws_leader") return "(threadIdx.x == " + std::to_string(k_.consumer_threads) + ")";
    if (c->op == "sync_all") return "__syncthreads()";
    if (c->op.rfind("rng_", 0) == 0) return rng_call(c, [this](const Expr& e) { return expr(e); });
    if (c->op == "fence_barrier_init") return "fence_barrier_init()";
    // T.isfinite / isinf / isnan: CUDA's own, of a float or double (the frontend casts).
    if (c->op == "isfinite" || c->op == "isinf" || c->op == "isnan") return c->op + "(" + expr(c->args.at(0)) + ")";
    if (c->op == "setmaxnreg_inc" || c->op == "setmaxnreg_dec") {
      if (no_set_max_nreg_) return "/* " + c->op + ": T.disable_warp_group_reg_alloc */ (void)0";
      WsRegisters r = ws_registers(k_);
      bool inc = c->op == "setmaxnreg_inc";
      int n = inc ? r.consumer : r.producer;
      if (inc ? n <= r.entry : n >= r.entry) return "/* " + c->op + ": the launch bounds' " + std::to_string(r.entry) + " registers stay */ (void)0";
      return c->op + "<" + std::to_string(n) + ">()";
    }
    if (c->op.rfind("mbar_", 0) == 0) {
      // mbar_init / _wait / _arrive / _arrive_expect_tx(barrier, ...): the barrier by address.
      auto* bar = c->args[0].as<BufferLoadNode>();
      std::string s = c->op + "(&" + access(bar->buffer, bar->indices, 1, false);
      for (size_t i = 1; i < c->args.size(); ++i) s += ", " + expr(c->args[i]);
      // A program's own arrival (T.barrier_arrive) in a wgmma kernel: its threads' ordinary
      // stores into shared memory are ordered before the wgmma reads of the waiting threads.
      // (The compiler's own warp-specialised pipelines order theirs already.)
      bool arrival = c->op == "mbar_arrive" || c->op == "mbar_cp_async_arrive_noinc";
      bool fence = arrival && k_.uses_wgmma && !k_.consumer_threads;
      return (fence ? "fence_proxy_async(), " : "") + s + ")";
    }
    if (c->op == "ptx_cp_async") {
      // T.ptx_cp_async(dst, src, bytes): cp_async_<bytes>(&dst, &src) (async.h); a source
      // masked at the tensor's edge, (in bounds ? x[i] : 0), reads nothing and fills zeros.
      auto* dst = c->args[0].as<BufferLoadNode>();
      auto* masked = c->args[1].as<SelectNode>();
      auto* src = (masked ? masked->t : c->args[1]).as<BufferLoadNode>();
      internal_assert(dst && src) << "ptx_cp_async: its operands are buffer elements";
      std::string s = "cp_async_" + std::to_string(*as_const_int(c->args[2])) + (masked ? "_pred" : "") + "(&" +
                      access(dst->buffer, dst->indices, 1, false) + ", &" + access(src->buffer, src->indices, 1, true);
      return s + (masked ? ", " + expr(masked->cond) : std::string()) + ")";
    }
    if (c->op == "set_max_nreg") {
      // T.set_max_nreg(n, is_inc): the warpgroup's registers per thread.
      return std::string(is_const_int(c->args[1], 0) ? "setmaxnreg_dec<" : "setmaxnreg_inc<") + expr(c->args[0]) + ">()";
    }
    if (c->op == "no_set_max_nreg") return "/* T.disable_warp_group_reg_alloc */ (void)0";
    if (c->op == "cp_async_commit") return "cp_async_commit()";
    if (c->op == "cp_async_wait") return "cp_async_wait<" + expr(c->args[0]) + ">()";
    if (std::string text = tensor_core_call(c, tensor_core_printer()); !text.empty()) return text;
    if (c->op.rfind("print", 0) == 0) {
      std::string msg = c->op.size() > 6 ? c->op.substr(6) : "";
      return "print(" + string_literal(msg) + ", " + expr(c->args.at(0)) + ")";
    }
    if (c->op.rfind("device_assert", 0) == 0) {
      // T.device_assert(cond, msg): the message (the op name's tail) names the kernel line.
      std::string msg = c->op.size() > 14 ? c->op.substr(14) : "";
      std::string file = c->loc.file.substr(c->loc.file.find_last_of('/') + 1);
      std::string at = file + ":" + std::to_string(c->loc.line);
      return "device_assert(" + expr(c->args.at(0)) + ", " + string_literal(msg.empty() ? at : msg + " (" + at + ")") + ")";
    }
    if (std::string phase; event_call(c->op, &phase, nullptr)) {
      // An instrumentation event (iket.h): its id, then its payload's 32 bits.
      std::string s = "tegula::iket_" + phase + "(tegula_iket_log, " + expr(c->args.at(0));
      if (c->args.size() > 1) {
        const Expr& p = c->args[1];
        bool u32 = p.dtype().code == DataType::UInt;
        s += p.dtype().is_float() ? ", __float_as_uint(" + expr(p) + ")" : u32 ? ", " + expr(p) : ", (unsigned)(" + expr(p) + ")";
      }
      return s + ")";
    }
    if (c->op == "ffs") {
      // CUDA's __ffs reads an int, __ffsll a long long.
      bool wide = c->args.at(0).dtype().bits == 64;
      return std::string(wide ? "__ffsll((long long)(" : "__ffs((int)(") + expr(c->args[0]) + "))";
    }
    if (c->op == "match_all_sync") {
      // CUDA's third argument receives whether all matched, which the result (the mask or 0)
      // says already.
      return "__match_all_sync(" + expr(c->args.at(0)) + ", " + expr(c->args.at(1)) + ", &tegula_match_all)";
    }
    if (c->op == "ldg") {
      // A read-only load of a global element; anywhere else (a vector's register, once the
      // vectoriser has loaded it) the plain value.
      // A load masked at the tensor's edge is (in bounds ? x[i] : 0).
      const Expr& a = c->args.at(0);
      auto* masked = a.as<SelectNode>();
      auto* ld = (masked ? masked->t : a).as<BufferLoadNode>();
      if (!ld || ld->buffer->scope != Scope::Global || ld->dtype.lanes != 1) return expr(a);
      std::string read = "__ldg(&(" + access(ld->buffer, ld->indices, 1, true) + "))";
      return masked ? "(" + expr(masked->cond) + " ? " + read + " : " + expr(masked->f) + ")" : read;
    }
    auto it = call_table().find(c->op);
    user_assert(it != call_table().end(), c->loc) << "unknown intrinsic '" << c->op << "'";
    const CallSpelling& sp = it->second;
    std::string s = sp.name;
    if (sp.typed) s += "<" + cuda_type(c->dtype) + ">";
    s += "(";
    if (sp.leading) s += std::string(sp.leading) + (c->args.empty() ? "" : ", ");
    for (size_t i = 0; i < c->args.size(); ++i) s += (i ? ", " : "") + expr(c->args[i]);
    s += ")";
    return sp.widened ? "((" + std::string(sp.widened) + ")" + s + ")" : s;
  }

  void stmt(const Stmt& s) {
    if (!s) return;
    switch (s.kind()) {
      case NodeKind::Seq:
        for (auto& x : s.as<SeqNode>()->seq) stmt(x);
        break;
      case NodeKind::Evaluate:
        // An explicit-width store into an operand buffer (T.sts*, or a store through a view
        // of another dtype) dirties it for the wgmma reads as an element store does.
        proxy_dirty_ |= stores_operand(k_, s);
        line() << expr(s.as<EvaluateNode>()->value) << ";\n";
        break;
      case NodeKind::LoopJump: line() << (s.as<LoopJumpNode>()->is_continue ? "continue;\n" : "break;\n"); break;
      case NodeKind::Sync:
        // In a wgmma kernel, a barrier after ordinary stores into an operand buffer also
        // fences them for the wgmma reads past it (cp.async writes need no fence: the
        // wait before the barrier completes them, as CUTLASS's and Triton's cp.async
        // mainloops rely on). Inside a loop that stores, every barrier fences: the store
        // of one iteration precedes the next iteration's first barrier.
        if (auto* sy = s.as<SyncNode>(); sy->threads) {
          // A thread scope's threads only (scope_thread_guards.cc): a named barrier.
          line() << ((proxy_dirty_ || proxy_loops_ > 0) ? "fence_proxy_async(); " : "") << "barrier_sync("
                 << sy->barrier << ", " << sy->threads << ");\n";
        } else if (k_.consumer_threads) {
          // Warp specialised: the consumer threads only (named barrier 1).
          line() << ((proxy_dirty_ || proxy_loops_ > 0) ? "fence_proxy_async(); " : "") << "barrier_sync(1, "
                 << k_.consumer_threads << ");\n";
        } else {
          line() << ((proxy_dirty_ || proxy_loops_ > 0) ? "sync_async_proxy();\n" : "__syncthreads();\n");
        }
        proxy_dirty_ = false;
        break;
      case NodeKind::BufferStore: {
        auto* st = s.as<BufferStoreNode>();
        proxy_dirty_ |= stores_operand(k_, s);
        int lanes = st->value.dtype().lanes;
        if (std::string pair = pair_conversion_text(st); !pair.empty()) {
          line() << pair << ";\n";
          break;
        }
        // Registers given the bits of one value as they are (pack_casts' two 16-bit halves of
        // a 32-bit word): stored as that value's type, so no byte is moved apart.
        auto* bits = st->value.as<CallNode>();
        if (lanes > 1 && st->buffer->scope == Scope::Local && bits && bits->op == "reinterpret" &&
            bits->args.at(0).dtype().lanes == 1 && bits->args.at(0).dtype().bits == st->value.dtype().bits * lanes) {
          line() << "*reinterpret_cast<" << cuda_type(bits->args[0].dtype()) << "*>(&"
                 << access(st->buffer, st->indices, 1, false) << ") = " << expr(bits->args[0]) << ";\n";
          break;
        }
        auto* copy = st->value.as<BufferLoadNode>();
        if (lanes > 1 && copy && copy->buffer->dtype == st->buffer->dtype) {  // a vector copy
          line() << access(st->buffer, st->indices, lanes, false, true) << " = "
                 << access(copy->buffer, copy->indices, lanes, true, true) << ";\n";
          break;
        }
        if (st->buffer->scope == Scope::Global && st->buffer->dtype.is_packed()) {
          // A nibble of a byte another thread may be writing: an atomic on its word.
          line() << "packed_store(" << name(st->buffer) << ", " << offset(st->buffer, st->indices) << ", "
                 << expr(st->value) << ");\n";
          break;
        }
        line() << access(st->buffer, st->indices, lanes, false) << " = " << expr(st->value) << ";\n";
        break;
      }
      case NodeKind::IfThenElse: {
        auto* n = s.as<IfThenElseNode>();
        line() << "if (" << expr(n->cond) << ") {\n";
        block(n->then_case);
        if (n->else_case) {
          line() << "} else {\n";
          block(n->else_case);
        }
        line() << "}\n";
        break;
      }
      case NodeKind::LetStmt: {
        // A scope of its own: partitioning copies a loop body once per slot, lets included.
        auto* n = s.as<LetStmtNode>();
        line() << "{\n";
        ++indent_;
        line() << "const " << cuda_type(n->var.dtype()) << " " << name(n->var) << " = " << expr(n->value) << ";\n";
        declare_address_tensors(n->var);
        stmt(n->body);
        --indent_;
        line() << "}\n";
        break;
      }
      case NodeKind::For: {
        auto* f = s.as<ForNode>();
        // The body runs with var >= min whatever the extent: a dynamic trip count still
        // leaves k % 2 of `for k in T.Pipelined(n)` the plain C form.
        an_.bind_loop(f->var, f->min, f->extent, /*open_ended=*/true);
        if (f->for_kind == ForKind::Unrolled) line() << "#pragma unroll\n";
        if (f->for_kind == ForKind::Pipelined) line() << "// T.Pipelined(num_stages=" << f->num_stages << ")\n";
        std::string v = name(f->var), t = cuda_type(f->var.dtype());
        line() << "for (" << t << " " << v << " = " << expr(f->min) << "; " << v << " < " << expr(f->min) << " + "
               << expr(f->extent) << "; ++" << v << ") {\n";
        bool stores = stores_to_operands(k_, f->body);
        proxy_loops_ += stores;
        block(f->body);
        proxy_loops_ -= stores;
        line() << "}\n";
        break;
      }
      case NodeKind::While: {
        auto* w = s.as<WhileNode>();
        line() << "while (" << expr(w->cond) << ") {\n";
        bool stores = stores_to_operands(k_, w->body);
        proxy_loops_ += stores;
        block(w->body);
        proxy_loops_ -= stores;
        line() << "}\n";
        break;
      }
      case NodeKind::TileOp:
        internal_error << "tile op '" << s.as<TileOpNode>()->op << "' reached code generation";
        break;
      default: internal_error << "cannot print " << node_kind_name(s.kind());
    }
  }

  void block(const Stmt& s) {
    ++indent_;
    stmt(s);
    --indent_;
  }

  const Kernel& k_;
  const transform::Target& target_;
  Analyzer an_;
  bool wide_ints_;  // print int32 variables and literals as long long (has_huge_dimension)
  Text os_;
  int indent_ = 0;
  std::map<const void*, std::string> names_;
  std::set<std::string> used_;
  std::map<std::string, std::string> instructions_;  // wgmma instruction structs, by name
  std::set<const BufferNode*> scalars_;  // T.alloc_var buffers declared as plain variables
  // T.disable_warp_group_reg_alloc: the warp-specialised form keeps the launch's registers.
  bool no_set_max_nreg_ = false;
  std::map<int64_t, std::string> events_;  // iket event id -> its phase and name
  bool proxy_dirty_ = false;  // an ordinary store into a wgmma operand since the last barrier
  int proxy_loops_ = 0;       // enclosing loops whose bodies make such stores
};

}  // namespace

CudaSource print_cuda(const Kernel& k, const transform::Target& target) { return Printer(k, target).run(); }

}  // namespace tegula::codegen
