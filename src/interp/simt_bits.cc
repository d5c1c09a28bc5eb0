// The SIMT simulator's T.reinterpret and explicit-width accesses (ir/wide_access.h): the
// loaded elements' bits, per thread, read as the call's type; a false predicate reads or
// writes nothing (the value is 0), and an access past a tensor's edge is reported.
#include "interp/simt_machine.h"
#include "ir/wide_access.h"

namespace tegula::interp::simt {

using namespace ir;

namespace {

// Each thread's lanes of v, of type `from`, as the lanes of type `to`.
Vals reinterpret_vals(const Vals& v, const DataType& from, const DataType& to, size_t n) {
  Vals out{to.lanes, std::vector<double>(n * to.lanes, 0.0)};
  std::vector<double> in(from.lanes);
  for (size_t i = 0; i < n; ++i) {
    bool undef = false;
    for (int l = 0; l < from.lanes; ++l) {
      in[l] = v.at(i, v.lanes == 1 ? 0 : l);
      undef |= v.undef_at(i, v.lanes == 1 ? 0 : l);
    }
    reinterpret_bits(from, in.data(), to, &out.v[i * to.lanes]);
    for (int l = 0; undef && l < to.lanes; ++l) out.set_undef(i * to.lanes + l);
  }
  return out;
}

// The threads of ts whose predicate holds (all of them without one), by position in ts.
std::vector<size_t> enabled(Machine& m, const Expr& pred, const Threads& ts, Threads* on) {
  std::vector<size_t> pos;
  Vals p = pred ? m.eval(pred, ts) : Vals{};
  if (pred) m.require_defined(p, ts, "predicates an access on");
  for (size_t i = 0; i < ts.size(); ++i) {
    if (pred && p.at(i) == 0) continue;
    pos.push_back(i);
    on->push_back(ts[i]);
  }
  return pos;
}

}  // namespace

Vals Machine::bits_call(const CallNode* op, const Threads& ts) {
  size_t n = ts.size();
  if (op->op == "reinterpret") {
    const Expr& arg = op->args.at(0);
    return reinterpret_vals(eval(arg, ts), arg.dtype(), op->dtype, n);
  }
  WideAccess w = *wide_access(op);
  Threads on;
  std::vector<size_t> pos = enabled(*this, w.pred, ts, &on);
  Vals got = reinterpret_vals(eval(op->args[0], on), w.addr->dtype, op->dtype, on.size());
  int lanes = op->dtype.lanes;
  Vals out{lanes, std::vector<double>(n * lanes, 0.0)};
  for (size_t j = 0; j < pos.size(); ++j) {
    for (int l = 0; l < lanes; ++l) {
      out.v[pos[j] * lanes + l] = got.at(j, l);
      if (got.undef_at(j, l)) out.set_undef(pos[j] * lanes + l);
    }
  }
  return out;
}

void Machine::wide_store(const CallNode* op, const Threads& ts) {
  WideAccess w = *wide_access(op);
  Vals value = eval(w.value, ts);
  Threads on;
  std::vector<size_t> pos = enabled(*this, w.pred, ts, &on);
  Storage* st = storage(w.addr->buffer);
  std::vector<Vals> idx = eval_indices(w.addr->indices, on);
  int lanes = w.addr->dtype.lanes;
  DataType elems = w.addr->dtype;
  for (size_t j = 0; j < on.size(); ++j) {
    int64_t flat = flat_index(st, idx, j, lanes, on[j]);
    if (flat < 0) continue;
    Vals mine{value.lanes, {}};
    for (int l = 0; l < value.lanes; ++l) mine.v.push_back(value.at(pos[j], l));
    Vals bits = reinterpret_vals(mine, w.value.dtype(), elems, 1);
    bool undef = false;
    for (int l = 0; l < value.lanes; ++l) undef |= value.undef_at(pos[j], l);
    for (int l = 0; l < lanes; ++l) write_element(st, flat + l, on[j], bits.v[l], undef);
  }
}

}  // namespace tegula::interp::simt
