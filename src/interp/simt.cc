// The SIMT simulator: the lowered kernel, every thread of every block (see interp.h and,
// for the execution model, simt_machine.h). This file: blocks, statements, expressions
// and memory; simt_calls.cc: the calls with warp-, block- or asynchronous effects.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "interp/simt_machine.h"
#include "ir/functor.h"
#include "ir/printer.h"
#include "transform/pipeline.h"

namespace tegula::interp {

using namespace ir;

namespace simt {

namespace {
constexpr size_t kMaxReports = 20;
}

Machine::Machine(const Kernel& k, const RegisterLayouts& layouts, CallArgs& args)
    : k_(k), layouts_(layouts), args_(args), threads_(k.threads),
      tile_threads_(k.consumer_threads ? k.consumer_threads : k.threads) {
  scalars_ = bind_call_values(k, args);
  post_order(k.body, [](const Stmt&) {}, [&](const Expr& e) {
    auto* c = e.as<CallNode>();
    if (c && c->op.rfind("mbar_", 0) == 0) has_mbarriers_ = true;
  });
  for (size_t i = 0; i < k.params.size(); ++i) {
    const Buffer& b = k.params[i].buffer;
    if (!b) continue;
    auto st = std::make_unique<Storage>();
    st->buf = b.get();
    st->shape = args.shapes[i];
    st->size = 1;
    for (int64_t d : st->shape) st->size *= d;
    internal_assert(int64_t(args.tensors[i]->size()) == st->size)
        << "simulate: '" << b->name << "' has " << args.tensors[i]->size() << " elements for " << st->size;
    st->data = args.tensors[i]->data();
    auto m = k.global_layouts.find(b.get());
    if (m != k.global_layouts.end()) st->map = &m->second;
    storage_[b.get()] = std::move(st);
  }
}

void Machine::error(const std::string& what) {
  if (errors_.size() >= kMaxReports) {
    stopped_ = true;
    throw Abort{};
  }
  errors_.push_back(block_name_ + what);
}

void Machine::cannot(const std::string& what) {
  errors_.push_back("cannot simulate " + what);
  stopped_ = true;
  throw Abort{};
}

std::string Machine::thread_name(int t) const {
  return t == -3 ? std::string("a collective call") : "thread " + std::to_string(t);
}

std::string Machine::element_name(const Storage* st, int64_t flat) const {
  std::string idx;
  for (int d = int(st->shape.size()) - 1; d >= 0; --d) {
    int64_t n = st->shape[d] > 0 ? st->shape[d] : 1;
    idx = std::to_string(flat % n) + (idx.empty() ? "" : ", ") + idx;
    flat /= n;
  }
  return st->buf->name + "[" + idx + "]";
}

std::vector<std::string> Machine::run() {
  VarValues ints = bind_call(k_, args_);
  std::vector<int64_t> grid;
  for (const Expr& g : k_.grid) {
    int64_t n = 0;
    if (!eval_int(g, ints, &n)) cannot("the grid extent " + to_string(g));
    grid.push_back(n);
  }
  while (grid.size() < 3) grid.push_back(1);
  // The printed kernel gives each shared buffer its own range of one pool; storage here is
  // per buffer, so buffers that share bytes would be modelled wrongly.
  std::vector<std::pair<int64_t, const BufferNode*>> ranges;
  for (auto& b : k_.allocs) {
    if (b->scope != Scope::Shared || !k_.smem_offset.count(b.get())) continue;
    ranges.push_back({k_.smem_offset.at(b.get()), b.get()});
  }
  std::sort(ranges.begin(), ranges.end());
  try {
    for (size_t i = 1; i < ranges.size(); ++i) {
      const BufferNode* prev = ranges[i - 1].second;
      if (ranges[i - 1].first + prev->num_elements_const() * prev->dtype.bytes() > ranges[i].first) {
        cannot("shared buffers that share storage ('" + prev->name + "' and '" + ranges[i].second->name + "')");
      }
    }
    CoRun mode = co_run_of(k_);
    if (mode == CoRun::None) {
      check_block_stores_ = true;
      for (int d = 0; d < 3; ++d) grid_[d] = std::max<int64_t>(1, grid[d]);
      run_blocks(grid.data(), k_.cluster_dims, mode, [&](const BlockTicket& t, const int64_t* b) {
        ticket_ = &t;
        run_block({b[0], b[1], b[2]});
      });
    } else {
      run_co_scheduled(grid.data(), mode);
    }
  } catch (const Abort&) {
    if (!stopped_) throw;
    if (errors_.size() >= kMaxReports) errors_.push_back("(stopped after " + std::to_string(kMaxReports) + " reports)");
  } catch (const BarrierError& e) {
    errors_.push_back(e.what());
  }
  return errors_;
}

void Machine::run_co_scheduled(const int64_t* grid, CoRun mode) {
  run_blocks(grid, k_.cluster_dims, mode, [&](const BlockTicket& t, const int64_t* b) {
    Machine m(k_, layouts_, args_);
    m.ticket_ = &t;
    // One block runs at a time, so the reports of the blocks merge here unguarded.
    auto merge = [&] {
      errors_.insert(errors_.end(), m.errors_.begin(), m.errors_.end());
      if (m.stopped_ || errors_.size() >= kMaxReports) {
        stopped_ = true;
        throw Abort{};
      }
    };
    try {
      m.run_block({b[0], b[1], b[2]});
    } catch (const Abort&) {
      merge();
      throw;
    }
    merge();
  });
}

// blockIdx -> the block variables, as the printer computes them (T.use_swizzle
// rasterises the grid in panels).
void Machine::bind_block_vars(const std::vector<int64_t>& bi) {
  std::vector<int64_t> v(bi.begin(), bi.begin() + k_.block_vars.size());
  if (k_.panel_size > 0 && k_.block_vars.size() >= 2) {
    std::vector<int64_t> dims;
    VarValues ints = bind_call(k_, args_);
    for (const Expr& g : k_.grid) {
      int64_t n = 0;
      eval_int(g, ints, &n);
      dims.push_back(n);
    }
    int64_t P = k_.panel_size;
    bool rows = k_.swizzle_row_major;
    int64_t lin = bi[1] * dims[0] + bi[0];
    int64_t across = rows ? dims[1] : dims[0], along = rows ? dims[0] : dims[1];
    int64_t panel = lin / (P * along), in = lin % (P * along);
    int64_t width = std::min(P, across - panel * P);
    int64_t a = panel * P + in % width, b = in / width;
    v[0] = rows ? b : a;
    v[1] = rows ? a : b;
  }
  std::string name = "block (";
  for (size_t d = 0; d < v.size(); ++d) {
    vars_[k_.block_vars[d].get()].assign(threads_, double(v[d]));
    name += (d ? ", " : "") + std::to_string(v[d]);
  }
  block_name_ = name + "): ";
}

void Machine::run_block(const std::vector<int64_t>& bi) {
  for (int d = 0; d < 3; ++d) block_index_[d] = bi[d];
  block_linear_ = int32_t(bi[0] + grid_[0] * (bi[1] + grid_[1] * bi[2]));
  vars_.clear();
  var_undef_.clear();
  for (auto& [var, x] : scalars_) vars_[var].assign(threads_, x);
  bind_block_vars(bi);
  auto& tx = vars_[k_.thread_var.get()];
  tx.resize(threads_);
  for (int t = 0; t < threads_; ++t) tx[t] = t;
  VarValues ints = bind_call(k_, args_);
  for (auto& b : k_.allocs) {
    if (b->scope != Scope::Shared && b->scope != Scope::Local) continue;
    auto st = std::make_unique<Storage>();
    st->buf = b.get();
    st->size = 1;
    for (const Expr& d : b->shape) {
      int64_t n = 0;
      if (!eval_int(d, ints, &n)) cannot("the shape of '" + b->name + "'");
      st->shape.push_back(n);
      st->size *= n;
    }
    int64_t total = b->scope == Scope::Local ? st->size * threads_ : st->size;
    st->own.assign(total, 0.0);
    st->written.assign(total, 0);
    if (b->scope == Scope::Shared) {
      st->uses.resize(total);
      st->async_pending.assign(total, 0);
      st->mma_reading.assign(total, 0);
    }
    st->data = st->own.data();
    storage_[b.get()] = std::move(st);
  }
  epoch_ = 0;
  open_.assign(threads_, {});
  committed_.assign(threads_, {});
  rng_.assign(threads_, {});
  wgmma_.clear();
  Threads all(threads_);
  for (int t = 0; t < threads_; ++t) all[t] = t;
  mbarriers_.clear();
  for (auto& p : k_.params) {
    if (p.var) bind_addresses(p.var, all);  // T.make_tensor of a T.ptr parameter
  }
  coop_ = std::make_unique<Coop>();
  exec(k_.body, all);
  coop_.reset();
  end_block();
}

Storage* Machine::storage(const Buffer& b) {
  auto it = storage_.find(b.get());
  if (it == storage_.end()) cannot(std::string("an access to ") + scope_name(b->scope) + " buffer '" + b->name + "', which has no storage");
  return it->second.get();
}

// ------------------------------------------------------------------ memory

void Machine::track(Storage* st, int64_t flat, int t, bool write) {
  SharedUse& u = st->uses[flat];
  auto race = [&](const char* kind, int other) {
    error(std::string(kind) + " race on " + element_name(st, flat) + " between " + thread_name(t) + " and " +
          (other == -2 ? std::string("other threads") : thread_name(other)) + " (no barrier between the accesses)");
  };
  if (u.write_epoch == epoch_ && (u.writer != t || t == -3)) race(write ? "write-after-write" : "read-after-write", u.writer);
  if (write) {
    if (u.read_epoch == epoch_ && (u.reader != t || t == -3)) race("write-after-read", u.reader);
    u.write_epoch = epoch_, u.writer = t;
  } else if (u.read_epoch != epoch_) {
    u.read_epoch = epoch_, u.reader = t;
  } else if (u.reader != t) {
    u.reader = -2;
  }
}

double Machine::read_element(Storage* st, int64_t flat, int t, bool* undef) {
  Scope scope = st->buf->scope;
  if (scope == Scope::Global) {
    double* p = global_element(st, flat, t);
    return p ? *p : 0.0;
  }
  int64_t p = flat;
  if (scope == Scope::Local) {
    p = int64_t(t) * st->size + flat;
    if (st->mma_accumulating) {
      error(thread_name(t) + " reads " + element_name(st, flat) + " while a wgmma accumulating into it is in flight "
            "(before its wgmma_wait)");
    }
  } else {
    track(st, flat, t, false);
    if (st->async_pending[flat]) {
      error(thread_name(t) + " reads " + element_name(st, flat) + " while a cp.async into it is in flight");
    }
  }
  if (!st->written[p]) {
    if (undef && scope == Scope::Local) *undef = true;
    else error(thread_name(t) + " reads unwritten " + element_name(st, flat));
  }
  return st->data[p];
}

void Machine::write_element(Storage* st, int64_t flat, int t, double v, bool undef) {
  v = round_to_dtype(st->buf->dtype.element(), v);
  Scope scope = st->buf->scope;
  if (undef && scope != Scope::Local) {
    error(thread_name(t) + " stores a value computed from unwritten registers into " + element_name(st, flat));
  }
  if (scope == Scope::Global) {
    if (double* p = global_element(st, flat, t)) {
      note_global_store(st, flat, p, v, t);
      *p = v;
    }
    return;
  }
  int64_t p = flat;
  if (scope == Scope::Local) {
    p = int64_t(t) * st->size + flat;
    if (st->mma_accumulating || st->mma_sourcing) {
      error(thread_name(t) + " writes " + element_name(st, flat) + " while a wgmma using it is in flight "
            "(before its wgmma_wait)");
    }
  } else {
    track(st, flat, t, true);
    if (st->mma_reading[flat]) {
      error(thread_name(t) + " writes " + element_name(st, flat) + " while a wgmma reading it is in flight");
    }
    if (st->async_pending[flat]) {
      error(thread_name(t) + " writes " + element_name(st, flat) + " while a cp.async into it is in flight");
    }
  }
  st->data[p] = v;
  st->written[p] = !undef;
}

void Machine::note_global_store(Storage* st, int64_t flat, const double* p, double v, int t) {
  if (!check_block_stores_ || st->buf->address || flat < 0 || flat >= st->size) return;
  if (st->block_writer.empty()) st->block_writer.assign(size_t(st->size), -1);
  int32_t& w = st->block_writer[size_t(flat)];
  bool same = (*p == v) || (std::isnan(*p) && std::isnan(v));
  if (w >= 0 && w != block_linear_ && !same) {
    int64_t x = w % grid_[0], y = (w / grid_[0]) % grid_[1], z = w / (grid_[0] * grid_[1]);
    std::ostringstream os;
    os << thread_name(t) << " stores " << v << " into " << element_name(st, flat) << ", where block (" << x;
    if (k_.block_vars.size() > 1) os << ", " << y;
    if (k_.block_vars.size() > 2) os << ", " << z;
    os << ") stored " << *p << ": on a GPU the blocks run at once, and which store lands is a race";
    error(os.str());
  }
  w = block_linear_;
}

void Machine::require_defined(const Vals& v, const Threads& ts, const std::string& what) {
  if (v.undef.empty()) return;
  for (size_t i = 0; i < ts.size(); ++i) {
    for (int l = 0; l < v.lanes; ++l) {
      if (v.undef_at(i, l)) {
        error(thread_name(ts[i]) + " " + what + " a value computed from unwritten registers");
        return;
      }
    }
  }
}

std::vector<Vals> Machine::eval_indices(const std::vector<Expr>& idx, const Threads& ts) {
  std::vector<Vals> out;
  out.reserve(idx.size());
  for (const Expr& e : idx) {
    out.push_back(eval(e, ts));
    require_defined(out.back(), ts, "indexes memory with");
  }
  return out;
}

// The distance between a vector's neighbouring lanes in the storage (row-major in the
// buffer's shape): 1, or a T.StridedTensor's row for a vector along another dimension.
int64_t Machine::lane_step(const Storage* st) const {
  int64_t step = 1;
  for (size_t d = vector_dim(*st->buf) + 1; d < st->shape.size(); ++d) step *= st->shape[d];
  return step;
}

int64_t Machine::flat_index(Storage* st, const std::vector<Vals>& idx, size_t i, int lanes, int t) {
  if (idx.size() != st->shape.size()) {
    cannot("an access to '" + st->buf->name + "' with " + std::to_string(idx.size()) + " indices for " +
           std::to_string(st->shape.size()) + " dimensions");
  }
  int64_t flat = 0;
  size_t along = vector_dim(*st->buf);
  for (size_t d = 0; d < idx.size(); ++d) {
    int64_t x = int64_t(idx[d].at(i)), n = st->shape[d];
    int64_t last = d == along ? x + lanes - 1 : x;
    if (x < 0 || last >= n) {
      error(thread_name(t) + ": " + st->buf->name + " index " + std::to_string(x) +
            (lanes > 1 ? " (" + std::to_string(lanes) + " lanes)" : std::string()) + " out of bounds in dimension " +
            std::to_string(d) + " (size " + std::to_string(n) + ")");
      return -1;
    }
    flat = st->strides.empty() ? flat * n + x : flat + x * st->strides[d];
  }
  if (st->map) {  // a T.Layout: the element's place (a vector access moves along the index)
    if (lanes > 1) cannot("a vector access to '" + st->buf->name + "', which has a T.Layout");
    int64_t at[16];
    for (size_t d = 0; d < idx.size(); ++d) at[d] = int64_t(idx[d].at(i));
    return st->map->offset(at, st->shape.data());
  }
  return flat;
}

// ------------------------------------------------------------------ expressions

Vals Machine::load(const BufferLoadNode* op, const Threads& ts) {
  Storage* st = storage(op->buffer);
  std::vector<Vals> idx = eval_indices(op->indices, ts);
  int lanes = op->dtype.lanes;
  int64_t step = lane_step(st);
  Vals out{lanes, std::vector<double>(ts.size() * lanes, 0.0)};
  bool addressed = st->buf->address && lanes > 1;
  for (size_t i = 0; i < ts.size(); ++i) {
    int64_t flat = flat_index(st, idx, i, lanes, ts[i]);
    if (flat < 0) continue;
    if (addressed && !global_element(st, flat, ts[i], lanes * st->buf->dtype.bytes())) continue;
    for (int l = 0; l < lanes; ++l) {
      bool undef = false;
      out.v[i * lanes + l] = read_element(st, flat + l * step, ts[i], &undef);
      if (undef) out.set_undef(i * lanes + l);
    }
  }
  return out;
}

// Threads of ts split by a condition's value.
static void split(const Vals& c, const Threads& ts, Threads* yes, Threads* no) {
  for (size_t i = 0; i < ts.size(); ++i) (c.at(i) != 0 ? yes : no)->push_back(ts[i]);
}

// Values of two disjoint subsets of ts put back in ts's order.
static Vals merge(const Vals& c, const Vals& a, const Vals& b, size_t n) {
  int lanes = std::max(a.lanes, b.lanes);
  Vals out{lanes, std::vector<double>(n * lanes, 0.0)};
  size_t ia = 0, ib = 0;
  for (size_t i = 0; i < n; ++i) {
    bool take_a = c.at(i) != 0;
    const Vals& src = take_a ? a : b;
    size_t j = take_a ? ia++ : ib++;
    for (int l = 0; l < lanes; ++l) {
      out.v[i * lanes + l] = src.at(j, src.lanes == 1 ? 0 : l);
      if (src.undef_at(j, src.lanes == 1 ? 0 : l)) out.set_undef(i * lanes + l);
    }
  }
  return out;
}

Vals Machine::select(const Expr& cond, const Expr& t, const Expr& f, const Threads& ts) {
  Vals c = eval(cond, ts);
  require_defined(c, ts, "selects on");
  Threads yes, no;
  split(c, ts, &yes, &no);
  Vals a = yes.empty() ? Vals{} : eval(t, yes);
  Vals b = no.empty() ? Vals{} : eval(f, no);
  if (yes.empty()) a.lanes = b.lanes;
  if (no.empty()) b.lanes = a.lanes;
  return merge(c, a, b, ts.size());
}

Vals Machine::binary(const BinaryNode* op, const Threads& ts) {
  if ((op->op == BinaryOp::And || op->op == BinaryOp::Or) && op->dtype.lanes == 1) {
    // && and || short-circuit in the printed C: the right side runs only where it decides.
    bool is_and = op->op == BinaryOp::And;
    Vals a = eval(op->a, ts);
    Threads go, done;
    for (size_t i = 0; i < ts.size(); ++i) ((a.at(i) != 0) == is_and ? go : done).push_back(ts[i]);
    Vals b = go.empty() ? Vals{} : eval(op->b, go);
    Vals out{1, std::vector<double>(ts.size())};
    size_t j = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      bool decided_by_b = (a.at(i) != 0) == is_and;
      if (a.undef_at(i) || (decided_by_b && b.undef_at(j))) out.set_undef(i);
      out.v[i] = decided_by_b ? (b.at(j++) != 0 ? 1.0 : 0.0) : (is_and ? 0.0 : 1.0);
    }
    return out;
  }
  Vals a = eval(op->a, ts), b = eval(op->b, ts);
  int lanes = std::max(a.lanes, b.lanes);
  DataType operand = op->a.dtype().element(), result = op->dtype.element();
  Vals out{lanes, std::vector<double>(ts.size() * lanes)};
  for (size_t i = 0; i < ts.size(); ++i) {
    for (int l = 0; l < lanes; ++l) {
      int la = a.lanes == 1 ? 0 : l, lb = b.lanes == 1 ? 0 : l;
      out.v[i * lanes + l] = eval_binary(op->op, a.at(i, la), b.at(i, lb), operand, result);
      if (a.undef_at(i, la) || b.undef_at(i, lb)) out.set_undef(i * lanes + l);
    }
  }
  return out;
}

Vals Machine::eval(const Expr& e, const Threads& ts) {
  size_t n = ts.size();
  switch (e.kind()) {
    case NodeKind::IntImm: {
      auto* c = e.as<IntImmNode>();  // an unsigned constant is held as its bit pattern
      return {1, std::vector<double>(n, c->dtype.code == DataType::UInt ? double(uint64_t(c->value)) : double(c->value))};
    }
    case NodeKind::FloatImm:
      return {1, std::vector<double>(n, round_to_dtype(e.dtype().element(), e.as<FloatImmNode>()->value))};
    case NodeKind::Var: {
      auto it = vars_.find(e.get());
      if (it == vars_.end()) cannot("the unbound variable '" + e.as<VarNode>()->name + "'");
      int lanes = e.dtype().lanes;  // a vector let holds its lanes side by side, per thread
      Vals out{lanes, std::vector<double>(n * lanes)};
      for (size_t i = 0; i < n; ++i) {
        for (int l = 0; l < lanes; ++l) out.v[i * lanes + l] = it->second[ts[i] * lanes + l];
      }
      auto u = var_undef_.find(e.get());
      if (u != var_undef_.end()) {
        for (size_t i = 0; i < n; ++i) {
          for (int l = 0; l < lanes; ++l) {
            if (u->second[ts[i]]) out.set_undef(i * lanes + l);
          }
        }
      }
      return out;
    }
    case NodeKind::Not: {
      Vals v = eval(e.as<NotNode>()->a, ts);
      for (double& x : v.v) x = x == 0 ? 1.0 : 0.0;
      return v;
    }
    case NodeKind::Select: {
      auto* s = e.as<SelectNode>();
      return select(s->cond, s->t, s->f, ts);
    }
    case NodeKind::Cast: {
      const Expr& from = e.as<CastNode>()->value;
      Vals v = eval(from, ts);
      DataType t = e.dtype().element(), f = from.dtype().element();
      for (double& x : v.v) x = cast_to_dtype(f, t, x);
      return v;
    }
    case NodeKind::BufferLoad: return load(e.as<BufferLoadNode>(), ts);
    case NodeKind::Call: return call(e.as<CallNode>(), ts);
    case NodeKind::Binary: return binary(e.as<BinaryNode>(), ts);
    default: cannot(std::string("the expression kind ") + node_kind_name(e.kind()));
  }
}

// ------------------------------------------------------------------ statements

void Machine::store(const BufferStoreNode* op, const Threads& ts) {
  Storage* st = storage(op->buffer);
  Vals v = eval(op->value, ts);
  std::vector<Vals> idx = eval_indices(op->indices, ts);
  int lanes = op->value.dtype().lanes;
  std::vector<int64_t> flats(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) flats[i] = flat_index(st, idx, i, lanes, ts[i]);
  int64_t step = lane_step(st);
  bool addressed = st->buf->address && lanes > 1;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (flats[i] < 0) continue;
    if (addressed && !global_element(st, flats[i], ts[i], lanes * st->buf->dtype.bytes())) continue;
    for (int l = 0; l < lanes; ++l) {
      int lv = v.lanes == 1 ? 0 : l;
      write_element(st, flats[i] + l * step, ts[i], v.at(i, lv), v.undef_at(i, lv));
    }
  }
}

Threads Machine::without_jumped(const Threads& ts) const {
  Threads out;
  for (int t : ts) {
    if (!jumped_[t]) out.push_back(t);
  }
  return out;
}

void Machine::loop(const ForNode* op, const Threads& ts) {
  Vals lo = eval(op->min, ts), ext = eval(op->extent, ts);
  require_defined(lo, ts, "loops from");
  require_defined(ext, ts, "loops over");
  bool uniform = true;
  int64_t first = INT64_MAX, end = INT64_MIN;
  for (size_t i = 0; i < ts.size(); ++i) {
    uniform &= lo.at(i) == lo.at(0) && ext.at(i) == ext.at(0);
    first = std::min(first, int64_t(lo.at(i)));
    end = std::max(end, int64_t(lo.at(i) + ext.at(i)));
  }
  auto& var = vars_[op->var.get()];
  var.resize(threads_, 0.0);
  jumped_.resize(threads_, 0);
  std::vector<uint8_t> left(threads_, 0);  // threads that broke out of this loop
  for (int64_t it = first; it < end; ++it) {
    // Bounds that differ between threads: each iteration runs on the threads it belongs to.
    Threads in;
    for (size_t i = 0; i < ts.size(); ++i) {
      if (left[ts[i]]) continue;
      if (uniform || (it >= int64_t(lo.at(i)) && it < int64_t(lo.at(i) + ext.at(i)))) in.push_back(ts[i]);
    }
    if (in.empty()) {
      if (uniform) break;
      continue;
    }
    for (int t : in) var[t] = double(it);
    exec(op->body, in);
    if (!jumps_) continue;
    for (int t : in) {
      if (!jumped_[t]) continue;
      left[t] = jumped_[t] == 1;
      jumped_[t] = 0;
      --jumps_;
    }
  }
}

// Each thread runs the body while its own condition holds; the loop ends when it fails for
// all. A loop past kMaxWhileIterations is reported (a condition that never turns false).
void Machine::while_loop(const WhileNode* op, const Threads& ts) {
  Threads active = ts;
  for (int64_t it = 0; !active.empty(); ++it) {
    if (it >= kMaxWhileIterations) {
      error("a while loop (line " + std::to_string(op->loc.line) + ") ran " + std::to_string(kMaxWhileIterations) +
            " iterations: its condition " + to_string(op->cond) + " never turned false");
      stopped_ = true;
      throw Abort{};
    }
    Threads yes, no;
    Vals c = eval(op->cond, active);
    require_defined(c, active, "loops while");
    split(c, active, &yes, &no);
    exec(op->body, yes);
    active = std::move(yes);
  }
}

void Machine::exec(const Stmt& s, const Threads& ts) {
  if (!s || ts.empty()) return;
  switch (s.kind()) {
    case NodeKind::Seq: {
      Threads live = ts;
      for (auto& x : s.as<SeqNode>()->seq) {
        exec(x, live);
        if (jumps_) live = without_jumped(live);  // past a break or continue: the rest is skipped
      }
      break;
    }
    case NodeKind::LoopJump:
      jumped_.resize(threads_, 0);
      for (int t : ts) {
        if (!jumped_[t]) ++jumps_;
        jumped_[t] = s.as<LoopJumpNode>()->is_continue ? 2 : 1;
      }
      break;
    case NodeKind::BufferStore: store(s.as<BufferStoreNode>(), ts); break;
    case NodeKind::IfThenElse: {
      auto* n = s.as<IfThenElseNode>();
      Threads yes, no;
      Vals c = eval(n->cond, ts);
      require_defined(c, ts, "branches on");
      split(c, ts, &yes, &no);
      if (has_mbarriers_ && !yes.empty() && !no.empty() && n->else_case) {
        // Warpgroups that meet at mbarriers run side by side (simt_barriers.cc).
        coop_->run_all({[&] { exec(n->then_case, yes); }, [&] { exec(n->else_case, no); }});
        break;
      }
      exec(n->then_case, yes);
      exec(n->else_case, no);
      break;
    }
    case NodeKind::For: loop(s.as<ForNode>(), ts); break;
    case NodeKind::While: while_loop(s.as<WhileNode>(), ts); break;
    case NodeKind::LetStmt: {
      auto* l = s.as<LetStmtNode>();
      Vals v = eval(l->value, ts);
      int lanes = l->var.dtype().lanes;
      if (v.lanes != lanes) cannot("a let of " + std::to_string(v.lanes) + " lanes into '" + l->var.as<VarNode>()->name + "'");
      auto& var = vars_[l->var.get()];
      var.resize(size_t(threads_) * lanes, 0.0);
      for (size_t i = 0; i < ts.size(); ++i) {
        for (int k = 0; k < lanes; ++k) var[size_t(ts[i]) * lanes + k] = v.v[i * lanes + k];
      }
      if (!v.undef.empty() || var_undef_.count(l->var.get())) {
        auto& u = var_undef_[l->var.get()];
        u.resize(threads_, 0);
        for (size_t i = 0; i < ts.size(); ++i) {
          u[ts[i]] = 0;
          for (int k = 0; k < lanes; ++k) u[ts[i]] |= v.undef_at(i, k);
        }
      }
      bind_addresses(l->var, ts);
      exec(l->body, ts);
      break;
    }
    case NodeKind::Evaluate: {
      const Expr& e = s.as<EvaluateNode>()->value;
      auto* c = e.as<CallNode>();
      if (c && call_statement(c, ts)) break;
      eval(e, ts);
      break;
    }
    case NodeKind::Sync: {
      // A thread scope's barrier waits for the scope's threads alone. Ordering them alone
      // is not modelled: the epoch moves for every thread, so a race between a scope and
      // the threads outside it that runs across this barrier goes unseen.
      // (A warp-specialised kernel's block-wide barriers are its consumers': the printer
      // makes them a named barrier of those threads, which the producer never meets.)
      int expect = s.as<SyncNode>()->threads ? s.as<SyncNode>()->threads : tile_threads_;
      if (int(ts.size()) != expect) {
        error("barrier reached by " + std::to_string(ts.size()) + " of " + std::to_string(expect) +
              " threads (thread " + std::to_string(ts[0]) + " among them)");
      }
      ++epoch_;
      break;
    }
    case NodeKind::TileOp: cannot("the tile op '" + s.as<TileOpNode>()->op + "' (not lowered)"); break;
    default: cannot(std::string("the statement kind ") + node_kind_name(s.kind()));
  }
}

}  // namespace simt

std::vector<std::string> simulate_kernel(const Kernel& k, const RegisterLayouts& layouts, CallArgs& args) {
  simt::Machine m(k, layouts, args);
  return m.run();
}

std::vector<std::string> simulate(const transform::Lowered& lowered, CallArgs& args) {
  return simulate_kernel(lowered.kernel, lowered.register_layouts, args);
}

}  // namespace tegula::interp
