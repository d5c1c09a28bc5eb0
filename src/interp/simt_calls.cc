// The SIMT simulator's calls: intrinsics, warp shuffles, atomics and cp.async groups (see
// simt_machine.h for the model; the tensor-core calls are in simt_tensor_cores.cc).

#include <cmath>
#include <algorithm>
#include <map>

#include "interp/simt_machine.h"
#include "ir/printer.h"
#include "ir/wide_access.h"

namespace tegula::interp::simt {

using namespace ir;

static Vals atomic_add(Machine& m, const CallNode* op, const Threads& ts);

Vals Machine::call(const CallNode* op, const Threads& ts) {
  const std::string& f = op->op;
  size_t n = ts.size();
  if (f == "atomic_add") return atomic_add(*this, op, ts);  // T.atomic_add(..., return_prev=True)
  if (f == "shfl_xor") {
    Vals v = eval(op->args.at(0), ts), mask = eval(op->args.at(1), ts);
    require_defined(mask, ts, "shuffles with");
    std::vector<int> pos(threads_, -1);
    for (size_t i = 0; i < n; ++i) pos[ts[i]] = int(i);
    Vals out{v.lanes, std::vector<double>(v.v.size(), 0.0)};
    for (size_t i = 0; i < n; ++i) {
      int t = ts[i], partner = t ^ int(mask.at(i));
      if (partner < 0 || partner >= threads_ || (partner >> 5) != (t >> 5) || pos[partner] < 0) {
        error("shfl_xor from thread " + std::to_string(t) + " to inactive or foreign lane " + std::to_string(partner));
        continue;
      }
      for (int l = 0; l < v.lanes; ++l) {
        int lv = v.lanes == 1 ? 0 : l;
        out.v[i * v.lanes + l] = v.at(pos[partner], lv);
        if (v.undef_at(pos[partner], lv)) out.set_undef(i * v.lanes + l);
      }
    }
    return out;
  }
  if (f.rfind("warp_reduce_", 0) == 0 || f == "any_sync" || f == "all_sync" || f == "ballot_sync" || f == "ballot" ||
      f == "activemask" || f == "shfl_idx" || f == "shfl_up" || f == "shfl_down" || f == "shfl_bfly" ||
      f == "sync_warp" || f == "match_any_sync" || f == "match_all_sync") {
    return warp_call(op, ts);
  }
  if (f == "reinterpret" || wide_access(op)) return bits_call(op, ts);
  if (f == "ws_producer" || f == "ws_leader") {
    // The warp-specialised split: threads [consumers, block) produce, the first of them leads.
    Vals out{1, std::vector<double>(n, 0.0)};
    for (size_t i = 0; i < n; ++i) {
      out.v[i] = f == "ws_producer" ? ts[i] >= tile_threads_ : ts[i] == tile_threads_;
    }
    return out;
  }
  if (f.rfind("print", 0) == 0) return {1, std::vector<double>(n, 0.0)};
  if (f.rfind("iket_", 0) == 0) {  // an instrumentation event (tegula.tools.cuda.iket): only its payload is read
    for (auto& a : op->args) eval(a, ts);
    return {1, std::vector<double>(n, 0.0)};
  }
  if (f.rfind("rng_", 0) == 0) return rng_call(op, ts);
  if (f == "syncthreads_count" || f == "syncthreads_and" || f == "syncthreads_or") {
    // A barrier of the whole block that also counts the threads whose predicate holds.
    Vals p = eval(op->args.at(0), ts);
    require_defined(p, ts, "votes on");
    if (int(n) != threads_) {
      error(f + " reached by " + std::to_string(n) + " of " + std::to_string(threads_) + " threads (" +
            thread_name(ts[0]) + " among them)");
    }
    double count = 0;
    for (size_t i = 0; i < n; ++i) count += p.at(i) != 0;
    double r = f == "syncthreads_count" ? count : f == "syncthreads_and" ? double(count == double(n)) : double(count > 0);
    ++epoch_;
    return {1, std::vector<double>(n, r)};
  }
  if (f == "barrier_sync") {
    // A named barrier of a run-time id: each warp's threads name one barrier, and each
    // barrier named is reached by its count of threads (bar.sync id, count).
    Vals id = eval(op->args.at(0), ts), count = eval(op->args.at(1), ts);
    require_defined(id, ts, "names a barrier with");
    std::map<int, int> arrived;
    std::map<int, int> warp_id;
    for (size_t i = 0; i < n; ++i) {
      int b = int(id.at(i));
      if (b < 0 || b > 15) error("T.sync_threads: barrier id " + std::to_string(b) + " in " + thread_name(ts[i]) +
                                 " (the hardware has named barriers 0..15)");
      auto w = warp_id.emplace(ts[i] / 32, b).first;
      if (w->second != b) {
        error("T.sync_threads: the threads of warp " + std::to_string(ts[i] / 32) + " name barriers " +
              std::to_string(w->second) + " and " + std::to_string(b) + " (a warp's threads must name one)");
      }
      ++arrived[b];
    }
    for (auto& [b, got] : arrived) {
      if (got != int(count.at(0))) {
        error("T.sync_threads: named barrier " + std::to_string(b) + " reached by " + std::to_string(got) + " threads, "
              "but its arrive_count is " + std::to_string(int(count.at(0))));
      }
    }
    ++epoch_;
    return {1, std::vector<double>(n, 0.0)};
  }
  if (f == "block_rank_in_cluster") {
    return {1, std::vector<double>(n, double(rank_in_cluster(k_.cluster_dims, block_index_)))};
  }
  if (f.rfind("device_assert", 0) == 0) {
    // T.device_assert: the GPU stops the kernel at the first thread where it fails.
    Vals c = eval(op->args.at(0), ts);
    require_defined(c, ts, "asserts on");
    for (size_t i = 0; i < n; ++i) {
      if (c.at(i) == 0) {
        std::string file = op->loc.file.substr(op->loc.file.find_last_of('/') + 1);
        error("T.device_assert" + (f.size() > 14 ? "(" + f.substr(14) + ")" : std::string()) + " failed in " +
              thread_name(ts[i]) + " (" + file + ":" + std::to_string(op->loc.line) + ")");
        break;
      }
    }
    return {1, std::vector<double>(n, 0.0)};
  }
  if (f == "assume") {
    // The compiler dropped the checks this implies: a thread where it fails reads or writes
    // past what the program meant.
    Vals c = eval(op->args.at(0), ts);
    for (size_t i = 0; i < n; ++i) {
      if (!c.undef_at(i) && c.at(i) == 0) error("T.assume(" + ir::to_string(op->args[0]) + ") does not hold in " + thread_name(ts[i]));
    }
    return {1, std::vector<double>(n, 0.0)};
  }
  std::vector<Vals> args;
  for (const Expr& a : op->args) args.push_back(eval(a, ts));
  Vals out{1, std::vector<double>(n, 0.0)};
  std::vector<double> xs(args.size());
  for (size_t i = 0; i < n; ++i) {
    for (size_t a = 0; a < args.size(); ++a) {
      xs[a] = args[a].at(i);
      if (args[a].undef_at(i)) out.set_undef(i);
    }
    if (!eval_intrinsic(f, xs, op->dtype.element(), &out.v[i])) cannot("the call '" + f + "'");
  }
  return out;
}

// A call the lanes of a warp make together: warp_reduce_<op>(v) over all 32 lanes, the
// votes any_sync / all_sync / ballot_sync(mask, predicate) over the lanes of mask, ballot
// over all 32, activemask, the matches match_any_sync / match_all_sync(mask, value), the
// shuffles shfl_idx / up / down / bfly(mask, v, lane, width) and sync_warp(mask). Every lane named must be active (CUDA leaves the rest
// undefined): reported. A reduction runs the device library's butterfly (warp.h), each
// step rounded to the value's dtype, so sums match the GPU's order.
Vals Machine::warp_call(const CallNode* op, const Threads& ts) {
  const std::string& f = op->op;
  size_t n = ts.size();
  bool reduce = f.rfind("warp_reduce_", 0) == 0, shuffle = f.rfind("shfl_", 0) == 0;
  bool matching = f == "match_any_sync" || f == "match_all_sync";
  bool voting = f == "any_sync" || f == "all_sync" || f == "ballot_sync" || matching;
  bool masked = voting || shuffle || f == "sync_warp";
  Vals mask = masked ? eval(op->args.at(0), ts) : Vals{1, std::vector<double>(n, 4294967295.0)};
  if (masked) require_defined(mask, ts, "names lanes with");
  Vals v = f == "activemask" || f == "sync_warp" ? Vals{1, std::vector<double>(n, 1.0)}
                                                 : eval(op->args.at(masked ? 1 : 0), ts);
  if (!reduce && !shuffle) require_defined(v, ts, "votes on");
  Vals lane_arg, width;
  if (shuffle) {
    lane_arg = eval(op->args.at(2), ts), width = eval(op->args.at(3), ts);
    require_defined(lane_arg, ts, "shuffles with");
    require_defined(width, ts, "shuffles with");
  }
  std::vector<int> pos(threads_, -1);
  for (size_t i = 0; i < n; ++i) pos[ts[i]] = int(i);
  Vals out{1, std::vector<double>(n, 0.0)};
  DataType t = op->dtype.element();
  for (size_t i = 0; i < n; ++i) {
    int base = ts[i] & ~31;
    uint32_t m = uint32_t(int64_t(mask.at(i)));
    if (f == "activemask") {
      uint64_t bits = 0;
      for (int l = 0; l < 32; ++l) bits |= uint64_t(base + l < threads_ && pos[base + l] >= 0) << l;
      out.v[i] = double(bits);
      continue;
    }
    bool whole = true;
    for (int l = 0; l < 32; ++l) {
      if (((m >> l) & 1) && (base + l >= threads_ || pos[base + l] < 0)) whole = false;
    }
    if (!whole || !((m >> (ts[i] & 31)) & 1)) {
      error(f + " in thread " + std::to_string(ts[i]) + ": lanes of mask " + std::to_string(m) +
            " of its warp are inactive or missing (all of them must reach the call, and the caller be among them)");
      continue;
    }
    if (f == "sync_warp") continue;
    if (shuffle) {
      int lane = ts[i] & 31, w = int(width.at(i)), d = int(int64_t(lane_arg.at(i)));
      if (w < 1 || w > 32 || (w & (w - 1))) {
        error(f + " in thread " + std::to_string(ts[i]) + ": width " + std::to_string(w) + " is not a power of two up to 32");
        continue;
      }
      int group = lane & ~(w - 1), src = lane;
      if (f == "shfl_idx") src = group + (d & (w - 1));
      else if (f == "shfl_up") src = lane - d >= group ? lane - d : lane;
      else if (f == "shfl_down") src = lane + d < group + w ? lane + d : lane;
      else src = ((lane ^ d) & 31) < group + w ? (lane ^ d) & 31 : lane;
      if (!((m >> src) & 1)) {
        error(f + " in thread " + std::to_string(ts[i]) + " reads lane " + std::to_string(src) + ", outside its mask");
        continue;
      }
      out.v[i] = v.at(pos[base + src]);
      if (v.undef_at(pos[base + src])) out.set_undef(i);
      continue;
    }
    if (reduce) {
      static const std::map<std::string, BinaryOp> kOps = {
          {"warp_reduce_sum", BinaryOp::Add}, {"warp_reduce_max", BinaryOp::Max}, {"warp_reduce_min", BinaryOp::Min},
          {"warp_reduce_bitand", BinaryOp::BitAnd}, {"warp_reduce_bitor", BinaryOp::BitOr}};
      auto it = kOps.find(f);
      if (it == kOps.end()) cannot("the call '" + f + "'");
      double lane[32];
      bool undef = false;
      for (int l = 0; l < 32; ++l) {
        lane[l] = v.at(pos[base + l]);
        undef |= v.undef_at(pos[base + l]);
      }
      for (int d = 16; d > 0; d >>= 1) {
        double next[32];
        for (int l = 0; l < 32; ++l) next[l] = eval_binary(it->second, lane[l], lane[l ^ d], t, t);
        std::copy(next, next + 32, lane);
      }
      out.v[i] = lane[ts[i] & 31];
      if (undef) out.set_undef(i);
      continue;
    }
    if (matching) {
      // CUDA compares the values' bits: -0.0 and 0.0 differ; NaN (one pattern here) matches NaN.
      auto same = [](double a, double b) { return std::isnan(a) ? std::isnan(b) : a == b && std::signbit(a) == std::signbit(b); };
      double mine = v.at(i);
      uint32_t peers = 0;
      for (int l = 0; l < 32; ++l) {
        if ((m >> l) & 1) peers |= uint32_t(same(v.at(pos[base + l]), mine)) << l;
      }
      out.v[i] = f == "match_any_sync" ? double(peers) : peers == m ? double(m) : 0.0;
      continue;
    }
    uint64_t bits = 0;
    for (int l = 0; l < 32; ++l) {
      if ((m >> l) & 1) bits |= uint64_t(v.at(pos[base + l]) != 0) << l;
    }
    if (f == "any_sync") out.v[i] = bits != 0;
    else if (f == "all_sync") out.v[i] = bits == (uint64_t(m) & 0xffffffffu);
    else out.v[i] = double(bits);
  }
  return out;
}

// ------------------------------------------------------------------ random numbers

namespace {

using Rng = Machine::Rng;

void rng_add(Rng& r, uint64_t n) {
  uint64_t lo = (uint64_t(r.ctr[1]) << 32 | r.ctr[0]) + n;
  bool carry = lo < n;
  r.ctr[0] = uint32_t(lo), r.ctr[1] = uint32_t(lo >> 32);
  if (carry && ++r.ctr[2] == 0) ++r.ctr[3];
}

void rng_refill(Rng& r) {
  uint32_t c[4] = {r.ctr[0], r.ctr[1], r.ctr[2], r.ctr[3]}, k0 = r.key[0], k1 = r.key[1];
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c[0], p1 = uint64_t(0xCD9E8D57u) * c[2];
    uint32_t n0 = uint32_t(p1 >> 32) ^ c[1] ^ k0, n2 = uint32_t(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0, c[1] = uint32_t(p1), c[2] = n2, c[3] = uint32_t(p0);
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  std::copy(c, c + 4, r.out);
}

uint32_t rng_next(Rng& r) {
  uint32_t v = r.out[r.pos];
  if (++r.pos == 4) rng_add(r, 1), rng_refill(r), r.pos = 0;
  return v;
}

}  // namespace

// The device library's Philox (random.h), thread by thread: the same bits, and uniforms
// rounded as the GPU's fused multiply-add gives them. Normals use the CPU's sin and cos
// where the GPU uses __sincosf (float) and sincospi: equal to a few ulps, not bits.
Vals Machine::rng_call(const CallNode* op, const Threads& ts) {
  const std::string& f = op->op;
  size_t n = ts.size();
  std::vector<Vals> args;
  for (const Expr& a : op->args) args.push_back(eval(a, ts));
  for (const Vals& a : args) require_defined(a, ts, "draws random numbers with");
  Vals out{1, std::vector<double>(n, 0.0)};
  constexpr float kInv32 = 2.3283064e-10f;
  constexpr double kInv53 = 1.1102230246251565e-16, kPi = 3.14159265358979323846;
  for (size_t i = 0; i < n; ++i) {
    Rng& r = rng_[ts[i]];
    if (f == "rng_init") {
      auto u64 = [&](int a) { return uint64_t(args[a].at(i)); };
      uint64_t seed = u64(0), seq = u64(1), off = u64(2);
      r = Rng{};
      r.key[0] = uint32_t(seed), r.key[1] = uint32_t(seed >> 32);
      r.ctr[0] = r.ctr[1] = 0, r.ctr[2] = uint32_t(seq), r.ctr[3] = uint32_t(seq >> 32);
      r.pos = int(off & 3);
      rng_add(r, off >> 2);
      rng_refill(r);
      r.ready = true;
      continue;
    }
    if (!r.ready) {
      error(thread_name(ts[i]) + " calls " + f + " before T.rng_init");
      continue;
    }
    if (f == "rng_rand") {
      out.v[i] = rng_next(r);
    } else if (f == "rng_uniform") {
      uint32_t x = rng_next(r);
      out.v[i] = op->dtype.bits == 64 ? x * 2.3283064365386963e-10 + 2.3283064365386963e-10 / 2.0
                                      : double(std::fma(float(x), kInv32, kInv32 / 2.0f));
    } else if (f == "rng_normal" && op->dtype.bits != 64) {
      if (r.has_extra) {
        r.has_extra = false, out.v[i] = r.extra;
        continue;
      }
      uint32_t x = rng_next(r), y = rng_next(r);
      float u = std::fma(float(x), kInv32, kInv32 / 2.0f);
      float v = std::fma(float(y), kInv32 * 6.2831855f, kInv32 * 6.2831855f / 2.0f);
      float s = std::sqrt(-2.0f * std::log(u));
      r.extra = double(float(std::cos(v) * s)), r.has_extra = true;
      out.v[i] = double(float(std::sin(v) * s));
    } else if (f == "rng_normal") {
      if (r.has_extra_double) {
        r.has_extra_double = false, out.v[i] = r.extra_double;
        continue;
      }
      uint64_t x0 = rng_next(r), x1 = rng_next(r), y0 = rng_next(r), y1 = rng_next(r);
      double u = double(x0 ^ (x1 << 21)) * kInv53 + kInv53 / 2.0;
      double v = double(y0 ^ (y1 << 21)) * (kInv53 * 2.0) + kInv53;
      double s = std::sqrt(-2.0 * std::log(u));
      r.extra_double = std::cos(kPi * v) * s, r.has_extra_double = true;
      out.v[i] = std::sin(kPi * v) * s;
    } else {
      cannot("the call '" + f + "'");
    }
  }
  return out;
}

// ------------------------------------------------------------------ cp.async

namespace {

// The storage and flat element of an address argument (a BufferLoad), per thread.
struct Address {
  Storage* st;
  std::vector<int64_t> flat;  // -1: out of bounds (reported)
};

}  // namespace

static Address address_of(Machine& m, const Expr& arg, int lanes, const Threads& ts, const std::string& what) {
  auto* ld = arg.as<BufferLoadNode>();
  if (!ld) m.cannot(what + " whose address is not a buffer element");
  Address a{m.storage(ld->buffer), std::vector<int64_t>(ts.size(), -1)};
  std::vector<Vals> idx = m.eval_indices(ld->indices, ts);
  for (size_t i = 0; i < ts.size(); ++i) a.flat[i] = m.flat_index(a.st, idx, i, lanes, ts[i]);
  return a;
}

static void land(Machine& m, const Landing& l, int t) {
  for (size_t v = 0; v < l.vals.size(); ++v) {
    --l.dst->async_pending[l.flat + v];
    m.write_element(l.dst, l.flat + int64_t(v), t, l.vals[v]);
  }
}

// cp.async of 16 bytes: read at issue, landing at the wait that retires its group; a
// false predicate fills zeros (the src-size 0 form).
// T.ptx_cp_async(dst, src, bytes) too: `bytes` of elements, its source masked at a tensor's
// edge (in bounds ? x[i] : 0) predicated on the mask.
static void issue_async_copy(Machine& m, const CallNode* op, const Threads& ts) {
  auto* dst_load = op->args.at(0).as<BufferLoadNode>();
  if (!dst_load || dst_load->buffer->scope != Scope::Shared) m.cannot("a cp_async into anything but shared memory");
  bool user = op->op == "ptx_cp_async";
  const int64_t* bytes = user ? as_const_int(op->args.at(2)) : nullptr;
  if (user && !bytes) m.cannot("a ptx_cp_async of a size that is not a constant");
  int lanes = int((user ? *bytes : 16) / dst_load->buffer->dtype.bytes());
  auto* masked = user ? op->args.at(1).as<SelectNode>() : nullptr;
  Expr src_expr = masked ? masked->t : op->args.at(1);
  Vals pred = user ? (masked ? m.eval(masked->cond, ts) : Vals{1, std::vector<double>(ts.size(), 1.0)})
                   : m.eval(op->args.at(2), ts);
  m.require_defined(pred, ts, "predicates a cp.async on");
  Address dst = address_of(m, op->args.at(0), lanes, ts, "a cp_async");
  Threads reading;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (pred.at(i) != 0) reading.push_back(ts[i]);
  }
  Address src = address_of(m, src_expr, lanes, reading, "a cp_async");
  size_t r = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    int t = ts[i];
    std::vector<double> vals(lanes, 0.0);
    if (pred.at(i) != 0) {
      int64_t s = src.flat[r++];
      if (s < 0) continue;
      // A tensor at a run-time address: the copy's bytes must be aligned there.
      if (src.st->buf->address && !m.global_element(src.st, s, t, lanes * src.st->buf->dtype.bytes())) continue;
      for (int l = 0; l < lanes; ++l) vals[l] = m.read_element(src.st, s + l, t);
    }
    if (dst.flat[i] < 0) continue;
    for (int l = 0; l < lanes; ++l) {
      int64_t e = dst.flat[i] + l;
      // The copy may land any time until its wait: it must not overtake earlier readers.
      m.track(dst.st, e, t, true);
      if (dst.st->mma_reading[e]) {
        m.error("thread " + std::to_string(t) + " issues a cp.async into " + m.element_name(dst.st, e) +
                " while a wgmma reading it is in flight");
      }
      ++dst.st->async_pending[e];
    }
    m.open_[t].push_back({dst.st, dst.flat[i], std::move(vals)});
  }
}

// ------------------------------------------------------------------ statements

// T.sync_grid and the cluster barrier: every thread of the block reaches them (CUDA's
// grid sync and barrier.cluster.*.aligned); a wait also orders the block's own threads.
void Machine::wide_barrier(const CallNode* op, const Threads& ts) {
  const std::string& f = op->op;
  if (int(ts.size()) != threads_) {
    error("T." + f + " reached by " + std::to_string(ts.size()) + " of " + std::to_string(threads_) + " threads (" +
          thread_name(ts[0]) + " among them)");
  }
  bool arrives = f != "cluster_wait", waits = f != "cluster_arrive" && f != "cluster_arrive_relaxed";
  if (f == "sync_grid") {
    ticket_->sync_grid();
  } else {
    if (arrives) ticket_->cluster_arrive();
    if (waits) ticket_->cluster_wait();
  }
  if (waits) ++epoch_;
}

// atomic_add(dst, value[, order]): each thread's add, in thread order; the values the
// elements held before, per thread (what the call returns, for T.atomic_add(...,
// return_prev=True)).
// A packed add (an address of 2 or 4 lanes, vectorize.cc) adds each lane on its own.
static Vals atomic_add(Machine& m, const CallNode* op, const Threads& ts) {
  int lanes = op->args.at(0).dtype().lanes;
  Vals old{lanes, std::vector<double>(ts.size() * lanes, 0.0)};
  Address a = address_of(m, op->args.at(0), lanes, ts, "an atomic_add");
  Vals v = m.eval(op->args.at(1), ts);
  m.require_defined(v, ts, "adds atomically");
  Storage* st = a.st;
  int64_t step = lanes > 1 ? m.lane_step(st) : 1;
  for (size_t n = 0; n < ts.size() * lanes; ++n) {
    size_t i = n / lanes;
    int l = int(n % lanes);
    if (a.flat[i] < 0) continue;
    int64_t e = a.flat[i] + l * step;
    if (lanes > 1 && l == 0 && st->buf->address &&
        !m.global_element(st, e, ts[i], lanes * st->buf->dtype.bytes())) {
      a.flat[i] = -1;  // reported: a packed add at an address not aligned to its width
      continue;
    }
    // Atomics on one element do not race with each other: no tracking between them.
    int64_t p = st->buf->scope == Scope::Local ? int64_t(ts[i]) * st->size + e : e;
    if (st->buf->scope != Scope::Global && !st->written[p]) {
      m.error("thread " + std::to_string(ts[i]) + " adds atomically to unwritten " + m.element_name(st, e));
    }
    if (st->buf->scope == Scope::Shared) {
      // An atomic is a write: it races with plain accesses of other threads since the
      // last barrier (and they with it), though not with other atomics.
      constexpr int kAtomic = -4;
      SharedUse& u = st->uses[e];
      if ((u.write_epoch == m.epoch_ && u.writer != kAtomic && u.writer != ts[i]) ||
          (u.read_epoch == m.epoch_ && u.reader != ts[i])) {
        m.error("race on " + m.element_name(st, e) + ": " + m.thread_name(ts[i]) +
                " adds atomically to it after a plain access by another thread, with no barrier between");
      }
      u.write_epoch = m.epoch_, u.writer = kAtomic;
    }
    double* q = st->buf->scope == Scope::Global ? m.global_element(st, e, ts[i]) : st->data + p;
    if (!q) continue;
    old.v[n] = *q;
    *q = round_to_dtype(st->buf->dtype.element(), *q + v.at(i, v.lanes == 1 ? 0 : l));
    if (st->buf->scope != Scope::Global) st->written[p] = 1;
  }
  return old;
}

bool Machine::call_statement(const CallNode* op, const Threads& ts) {
  const std::string& f = op->op;
  if (f == "sync_grid" || f.rfind("cluster_", 0) == 0) {
    wide_barrier(op, ts);
  } else if (auto w = wide_access(op); w && w->store) {
    wide_store(op, ts);
  } else if (f == "cp_async") {
    issue_async_copy(*this, op, ts);
  } else if (f == "cp_async_commit") {
    for (int t : ts) {
      committed_[t].push_back(std::move(open_[t]));
      open_[t].clear();
    }
  } else if (f == "cp_async_wait") {
    Vals keep = eval(op->args.at(0), ts);
    require_defined(keep, ts, "waits for");
    for (size_t i = 0; i < ts.size(); ++i) {
      int t = ts[i];
      while (committed_[t].size() > size_t(keep.at(i))) {
        std::vector<Landing> group = std::move(committed_[t].front());
        committed_[t].pop_front();
        for (const Landing& l : group) land(*this, l, t);
      }
    }
  } else if (f == "atomic_add") {
    atomic_add(*this, op, ts);
  } else if (tensor_core_statement(op, ts)) {
  } else if (f == "tma_copy") {
    bulk_copy(op, ts);
  } else if (f == "sync_all") {
    // __syncthreads() of a warp-specialised kernel, before its warpgroups part.
    if (int(ts.size()) != threads_) {
      error("__syncthreads reached by " + std::to_string(ts.size()) + " of " + std::to_string(threads_) + " threads");
    }
    ++epoch_;
  } else if (f == "set_max_nreg" || f == "no_set_max_nreg" || f == "fence_proxy_async" || f == "setmaxnreg_inc" ||
             f == "setmaxnreg_dec") {
    // Register counts do not change what the threads compute; the simulator has one proxy.
  } else if (f == "ptx_cp_async") {
    issue_async_copy(*this, op, ts);
  } else if (barrier_statement(op, ts)) {
  } else if (f.rfind("print", 0) == 0) {
    // Printing has no effect on the kernel's results.
  } else {
    return false;
  }
  return true;
}

void Machine::land_all(int t) {
  for (const Landing& l : open_[t]) land(*this, l, t);
  open_[t].clear();
  while (!committed_[t].empty()) {
    for (const Landing& l : committed_[t].front()) land(*this, l, t);
    committed_[t].pop_front();
  }
}

void Machine::end_block() {
  for (int t = 0; t < threads_; ++t) {
    if (!open_[t].empty() || !committed_[t].empty()) {
      error("thread " + std::to_string(t) + " ends with cp.async copies never waited for");
      break;
    }
  }
  if (!wgmma_.empty()) {
    error("the block ends with " + std::to_string(wgmma_.size()) + " wgmma group(s) never waited for");
    wgmma_.clear();
  }
}

}  // namespace tegula::interp::simt
