// The simulator's T.alloc_barrier mbarriers (language/barriers.py), thread by thread.
//
// Each thread that runs T.barrier_arrive makes one arrival; T.cp_async_barrier_noinc lands
// the thread's cp.async copies, then arrives. The sides of a divergent branch run as
// coroutines (interp/coop.h): T.barrier_wait lets the others run until the phase of its
// parity has completed. A completed phase orders what its arrivals did before it against
// what the waiters do after: the race tracking's epoch moves (for every thread: races
// between warpgroups across an unrelated phase go unseen).
#include "interp/simt_machine.h"

namespace tegula::interp::simt {

using namespace ir;

bool Machine::barrier_statement(const CallNode* op, const Threads& ts) {
  const std::string& f = op->op;
  if (f == "fence_barrier_init") return true;
  if (f.rfind("mbar_", 0) != 0) return false;
  if (ts.empty()) return true;
  auto* ld = op->args.at(0).as<BufferLoadNode>();
  if (!ld) cannot("an mbarrier call whose barrier is not a buffer element");
  Storage* st = storage(ld->buffer);
  std::vector<Vals> idx = eval_indices(ld->indices, ts);
  int64_t at = flat_index(st, idx, 0, 1, ts[0]);
  for (size_t i = 1; i < ts.size(); ++i) {
    if (flat_index(st, idx, i, 1, ts[i]) != at) cannot("an mbarrier call whose barrier differs between threads");
  }
  if (at < 0) return true;  // out of bounds: reported
  auto key = std::make_pair(st, at);
  std::string name = element_name(st, at);
  auto uniform = [&](const Expr& e, const std::string& what) {
    Vals v = eval(e, ts);
    require_defined(v, ts, what);
    for (size_t i = 1; i < ts.size(); ++i) {
      if (v.at(i) != v.at(0)) cannot("an mbarrier call whose " + what + " differs between threads");
    }
    return int64_t(v.at(0));
  };
  if (f == "mbar_init") {
    int64_t count = uniform(op->args.at(1), "arrival count");
    mbarriers_[key] = Mbarrier{count, count, 0};
    return true;
  }
  auto it = mbarriers_.find(key);
  if (it == mbarriers_.end()) {
    error(thread_name(ts[0]) + " uses the mbarrier " + name + " before it was initialised");
    return true;
  }
  Mbarrier& m = it->second;
  if (f == "mbar_arrive" || f == "mbar_cp_async_arrive_noinc" || f == "mbar_arrive_expect_tx") {
    if (f == "mbar_cp_async_arrive_noinc") {
      for (int t : ts) land_all(t);
    }
    if (f == "mbar_arrive_expect_tx") {
      // The warp-specialised producer's leader: the bytes its bulk copies will bring.
      if (ts.size() != 1) cannot("an mbar_arrive_expect_tx by " + std::to_string(ts.size()) + " threads");
      m.tx += uniform(op->args.at(1), "byte count");
    }
    int64_t n = int64_t(ts.size());
    while (n > 0) {
      if (m.pending == 0) {
        error(std::to_string(n) + " arrival(s) on " + name + " beyond its count, before its phase completed");
        break;
      }
      int64_t take = std::min(n, m.pending);
      m.pending -= take, n -= take;
      complete_if_done(m);
    }
    return true;
  }
  if (f == "mbar_wait") {
    int64_t p = uniform(op->args.at(1), "parity") & 1;
    Mbarrier* mb = &m;  // map nodes stay put
    coop_->wait_until([mb, p] { return (mb->phases & 1) != p; },
                      thread_name(ts[0]) + " and " + std::to_string(ts.size() - 1) + " others at T.barrier_wait(" + name +
                          ", " + std::to_string(p) + ")");
    return true;
  }
  cannot("the mbarrier call '" + f + "'");
}

void Machine::complete_if_done(Mbarrier& m) {
  if (m.pending == 0 && m.tx == 0) ++m.phases, m.pending = m.count, ++epoch_;
}

// tma_copy(dst, src, map, rows, cols, bar) of a warp-specialised kernel's producer: the box
// of tensor map `map` (Kernel::tensor_maps: extents innermost first) from the global element
// `src` on, into the shared tile at `dst`, a box row to a tile row (the IR's shared tiles are
// logical, the swizzle is the printer's), elements outside the tensor read as 0; then its
// bytes complete on `bar`. Issued by one thread and landed at once: the
// consumers see it only after waiting for `bar`'s phase, as on the GPU.
void Machine::bulk_copy(const CallNode* op, const Threads& ts) {
  if (ts.size() != 1) cannot("a tma_copy issued by " + std::to_string(ts.size()) + " threads");
  if (op->args.size() != 6) cannot("a tma_copy without its mbarrier (a warp-specialised kernel's copies have one)");
  const int t = ts[0];
  auto* dst_ld = op->args[0].as<BufferLoadNode>();
  auto* src_ld = op->args[1].as<BufferLoadNode>();
  const int64_t* map = as_const_int(op->args[2]);
  if (!dst_ld || !src_ld || !map || *map < 0 || *map >= int64_t(k_.tensor_maps.size())) {
    cannot("a tma_copy whose operands are not buffer elements and a tensor map");
  }
  // The map's box, its innermost extent the copy's columns: a copy into a tile stored in
  // panels is one tma_copy here, several of the map's narrower boxes once printed.
  std::vector<int64_t> box = k_.tensor_maps[size_t(*map)].box;
  const int64_t* rows = as_const_int(op->args[3]);
  const int64_t* cols = as_const_int(op->args[4]);
  if (!rows || !cols || box.empty()) cannot("a tma_copy whose extents are not constants");
  box[0] = *cols;
  Storage* dst = storage(dst_ld->buffer);
  Storage* src = storage(src_ld->buffer);
  const size_t rank = src_ld->indices.size();
  if (box.size() != rank) cannot("a tma_copy whose box has another rank than its tensor");
  std::vector<int64_t> start(rank), shape(rank);
  for (size_t d = 0; d < rank; ++d) {
    Vals v = eval(src_ld->indices[d], ts);
    require_defined(v, ts, "copies from");
    start[d] = int64_t(v.at(0));
    const int64_t* e = as_const_int(src_ld->buffer->shape[d]);
    shape[d] = e ? *e : int64_t(eval(src_ld->buffer->shape[d], ts).at(0));
  }
  std::vector<Vals> didx;
  for (auto& e : dst_ld->indices) didx.push_back(eval(e, ts));
  const int64_t dst0 = flat_index(dst, didx, 0, 1, t);
  const int64_t* row_p = as_const_int(dst_ld->buffer->shape.back());
  if (!row_p) cannot("a tma_copy into a shared buffer whose rows are not a constant length");
  const int64_t row = *row_p;
  int64_t total = 1;
  for (int64_t b : box) total *= b;
  if (total != *rows * *cols) cannot("a tma_copy whose box is not its rows x columns");
  for (int64_t i = 0; i < total; ++i) {
    int64_t rest = i;
    bool inside = true;
    std::vector<int64_t> g(rank);
    for (size_t d = 0; d < rank; ++d) {  // box[0] is the innermost dimension, rank - 1 - d
      int64_t ext = box[d];
      size_t dim = rank - 1 - d;
      g[dim] = start[dim] + rest % ext;
      rest /= ext;
      inside &= g[dim] >= 0 && g[dim] < shape[dim];
    }
    double v = 0.0;
    if (inside) {
      int64_t flat = 0;
      for (size_t d = 0; d < rank; ++d) flat = flat * shape[d] + g[d];
      double* p = global_element(src, flat, t);
      v = p ? *p : 0.0;
    }
    // Rows of the box are consecutive rows of the destination from dst on (a panel of a
    // wider tile: the rest of each row is another copy's).
    write_element(dst, dst0 + (i / box[0]) * row + i % box[0], t, v);
  }
  auto* bar_ld = op->args[5].as<BufferLoadNode>();
  if (!bar_ld) cannot("a tma_copy whose mbarrier is not a buffer element");
  Storage* bst = storage(bar_ld->buffer);
  std::vector<Vals> bidx;
  for (auto& e : bar_ld->indices) bidx.push_back(eval(e, ts));
  auto it = mbarriers_.find({bst, flat_index(bst, bidx, 0, 1, t)});
  if (it == mbarriers_.end()) {
    error(thread_name(t) + " completes a tma_copy on an mbarrier that was not initialised");
    return;
  }
  it->second.tx -= total * dst_ld->buffer->dtype.bytes();
  if (it->second.tx < 0) error("a tma_copy brings more bytes than its mbarrier expects");
  complete_if_done(it->second);
}

}  // namespace tegula::interp::simt
