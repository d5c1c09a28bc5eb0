// The SIMT simulator's tensor-core calls, which the warps of a block execute together and
// which are run here at tile level (see simt_machine.h for the model).
//
// gemm_{ss,rs}(M, N, K, WM, WN, TA, TB, CLEAR; A, B, C) (mma.sync) and
// wgmma_{ss,rs}(M, N, K, WGM, WGN, TA, TB, CLEAR; A, B, C) name each operand by its first
// element. A shared operand is the logical tile at that element (M x K, or K x M with TA;
// K x N, or N x K with TB): the IR's shared buffers are logical, swizzling exists only in
// printed addresses. A register operand (C, and A of _rs) is read through the layout the
// device library fixes, the accumulator of layout/mma.h, which must also be the layout the
// passes gave the fragment the registers replaced (else the rest of the kernel reads other
// elements than the instruction wrote: reported). D = C + A B is computed in double and
// rounded to C's type; 32-bit operands are rounded to tfloat32 first (m16n8k8 tf32). 8-bit
// operands (m16n8k32, m64nNk32) and packed 4-bit integer ones (m16n8k64, a byte each in
// shared memory) are K-major shared tiles, checked here: the instructions have no other
// form for them. Integer operands sum their products exactly in 64 bits, wrapped to C's
// int32 as the instructions (without .satfinite) wrap. mma.sync is synchronous; a wgmma reads its operands at issue
// and writes C at the wgmma_wait that retires its group (one group per call).
//
// gemm_sp_{ss,rs}(M, N, K, WM, WN, TA, TB, TE, CLEAR; A, E, B, C, tid) (mma.sp): A is the
// M x K/2 tile of kept elements (K/2 x M with TA; _rs: registers, as gemm_rs's A of that
// tile), E the metadata tile (M x K/F, K/F x M with TE, F its bits; ops/gemm_sp.cc gives
// its meaning), B and C as for gemm_ss. Each kept element multiplies the row of B its
// position names, summed in double; a group naming one position twice is positions 0 and
// 1, as the device code makes it, and positions out of order (which
// mma.sp::ordered_metadata leaves undefined) are reported.
#include <cmath>
#include <algorithm>
#include <map>

#include "interp/simt_machine.h"
#include "ir/printer.h"
#include "layout/mma.h"

namespace tegula::interp::simt {

using namespace ir;

namespace {

constexpr int kCollective = -3;  // the thread id of a block-wide call's accesses

struct MmaCall {
  int64_t m, n, k, wm, wn;
  bool ta, tb, clear, wgmma, regs_a;
  const BufferLoadNode *a, *b, *c;
};

}  // namespace

static MmaCall parse_mma(Machine& m, const CallNode* op) {
  MmaCall c{};
  // (13: a wgmma_rs whose wait was moved, argument 12 the registers A is packed into,
  // which only the device code has: gemm_waits.cc)
  if (op->args.size() != 11 && op->args.size() != 12 && !(op->args.size() == 13 && op->op == "wgmma_rs")) {
    m.cannot("a " + op->op + " call with " + std::to_string(op->args.size()) + " arguments");
  }
  int64_t v[8];
  for (int i = 0; i < 8; ++i) {
    const int64_t* x = as_const_int(op->args[i]);
    if (!x) m.cannot("a " + op->op + " call whose shape argument " + std::to_string(i) + " is not a constant");
    v[i] = *x;
  }
  c.m = v[0], c.n = v[1], c.k = v[2], c.wm = v[3], c.wn = v[4];
  c.ta = v[5] != 0, c.tb = v[6] != 0, c.clear = v[7] != 0;
  c.wgmma = op->op.rfind("wgmma", 0) == 0;
  c.regs_a = op->op.back() == 's' && op->op[op->op.size() - 2] == 'r';
  c.a = op->args[8].as<BufferLoadNode>();
  c.b = op->args[9].as<BufferLoadNode>();
  c.c = op->args[10].as<BufferLoadNode>();
  if (!c.a || !c.b || !c.c) m.cannot("a " + op->op + " call whose operands are not buffer elements");
  return c;
}

// The uniform value of a load's indices (an operand's first element).
static std::vector<int64_t> origin(Machine& m, const BufferLoadNode* ld, const Threads& ts) {
  std::vector<int64_t> out;
  for (const Vals& v : m.eval_indices(ld->indices, ts)) {
    for (size_t i = 1; i < ts.size(); ++i) {
      if (v.at(i) != v.at(0)) m.cannot("a tensor-core operand '" + ld->buffer->name + "' whose origin differs between threads");
    }
    out.push_back(int64_t(v.at(0)));
  }
  return out;
}

// rows x cols of a shared operand, row-major, from the element the load names; transposed
// (the buffer holds cols x rows) with `trans`.
static std::vector<double> shared_tile(Machine& m, const BufferLoadNode* ld, int64_t rows, int64_t cols, bool trans,
                                       const Threads& ts, std::vector<std::pair<Storage*, int64_t>>* reads) {
  Storage* st = m.storage(ld->buffer);
  if (ld->buffer->scope != Scope::Shared || st->shape.size() != 2) {
    m.cannot("a tensor-core operand '" + ld->buffer->name + "' that is not a 2-D shared buffer");
  }
  std::vector<int64_t> o = origin(m, ld, ts);
  int64_t sr = trans ? cols : rows, sc = trans ? rows : cols;  // as stored
  std::vector<double> out(rows * cols, 0.0);
  if (o[0] < 0 || o[1] < 0 || o[0] + sr > st->shape[0] || o[1] + sc > st->shape[1]) {
    m.error("tensor-core operand " + ld->buffer->name + "[" + std::to_string(o[0]) + ":+" + std::to_string(sr) + ", " +
            std::to_string(o[1]) + ":+" + std::to_string(sc) + "] out of bounds");
    return out;
  }
  for (int64_t r = 0; r < sr; ++r) {
    for (int64_t c = 0; c < sc; ++c) {
      int64_t flat = (o[0] + r) * st->shape[1] + o[1] + c;
      double v = m.read_element(st, flat, kCollective);
      if (trans) out[c * cols + r] = v;
      else out[r * cols + c] = v;
      if (reads) reads->push_back({st, flat});
    }
  }
  return out;
}

// The register array of an operand and its layout as the instruction holds it, checked
// against what the passes decided for the fragment the registers replaced.
static Storage* operand_registers(Machine& m, const BufferLoadNode* ld, const layout::FragmentPtr& want,
                                  const std::string& op, int64_t* base) {
  Storage* st = m.storage(ld->buffer);
  if (ld->buffer->scope != Scope::Local) m.cannot("a " + op + " register operand in " + scope_name(ld->buffer->scope) + " memory");
  const int64_t* b = ld->indices.size() == 1 ? as_const_int(ld->indices[0]) : nullptr;
  if (!b) m.cannot("a " + op + " register operand at a non-constant register");
  *base = *b;
  if (want->threads() != m.tile_threads_ && want->threads() != m.scope_threads_) {
    m.cannot("a " + op + " over " + std::to_string(want->threads()) + " threads in a block of " +
             std::to_string(m.tile_threads_));
  }
  if (*base < 0 || *base + want->slots() > st->size) {
    m.error(op + ": registers " + ld->buffer->name + "[" + std::to_string(*base) + ":+" + std::to_string(want->slots()) +
            "] out of bounds (size " + std::to_string(st->size) + ")");
    return nullptr;
  }
  auto it = m.layouts_.find(ld->buffer.get());
  if (it != m.layouts_.end() && !it->second->same_as(*want)) {
    m.error(op + ": the registers of '" + ld->buffer->name + "' are laid out as " + it->second->describe() +
            ", the instruction uses " + want->describe());
  }
  return st;
}

// Every (thread, slot) of a layout with the element it holds.
// Threads count from `first`: a thread scope's gemm runs on the block's threads
// [first, first + L.threads()).
template <typename F>
static void for_each_slot(const layout::Fragment& L, F f, int first = 0) {
  int64_t c[2];
  for (int t = 0; t < L.threads(); ++t) {
    for (int s = 0; s < L.slots(); ++s) {
      if (L.coords(t, s, c)) f(first + t, s, c[0], c[1]);
    }
  }
}

static std::vector<double> register_tile(Machine& m, Storage* st, int64_t base, const layout::Fragment& L, int first) {
  int64_t cols = L.shape()[1];
  std::vector<double> out(L.num_elements(), 0.0);
  std::vector<char> seen(L.num_elements(), 0);
  bool reported = false;
  for_each_slot(L, [&](int t, int s, int64_t i, int64_t j) {
    double v = m.read_element(st, base + s, t);
    double& o = out[i * cols + j];
    // Copies of one element (a replicated operand) must agree.
    if (seen[i * cols + j] && !(o == v || (std::isnan(o) && std::isnan(v))) && !reported) {
      m.error("the copies of element (" + std::to_string(i) + ", " + std::to_string(j) + ") of a tensor-core register "
              "operand differ between threads");
      reported = true;
    }
    seen[i * cols + j] = 1;
    o = v;
  }, first);
  return out;
}

// The threads sharing a tensor-core call: the block's, or under a thread guard a scope's,
// whose index (the call's argument `tid_arg`) is the block's minus the scope's first thread.
// Sets m.scope_threads_; false (reported) when the wrong number of threads reached it.
static bool sharing_threads(Machine& m, const CallNode* op, const Threads& ts, size_t tid_arg, int64_t warps,
                            int* first) {
  *first = 0;
  int sharing = m.tile_threads_;
  if (op->args.size() > tid_arg) {
    Vals tid = m.eval(op->args[tid_arg], ts);
    *first = ts.empty() ? 0 : ts[0] - int(tid.at(0));
    for (size_t i = 0; i < ts.size(); ++i) {
      if (ts[i] - int(tid.at(i)) != *first) m.cannot("a " + op->op + " whose threads are not one range");
    }
    sharing = int(warps * 32);
  }
  if (int(ts.size()) != sharing) {
    m.error(op->op + " reached by " + std::to_string(ts.size()) + " of " + std::to_string(sharing) + " threads");
    return false;
  }
  m.scope_threads_ = sharing;
  return true;
}

static void tensor_core(Machine& m, const CallNode* op, const Threads& ts) {
  MmaCall c = parse_mma(m, op);
  // 8-bit operands (m16n8k32, m64nNk32): K-major from shared memory, whole 32-element steps.
  DataType at = c.a->buffer->dtype.element(), bt = c.b->buffer->dtype.element();
  const bool ints = at.is_int() && bt.is_int();
  if (at.is_float8() != bt.is_float8() || at.is_int() != bt.is_int() || at.bits != bt.bits) {
    m.error(op->op + " multiplies " + at.name() + " by " + bt.name() + ": A and B of one width");
    return;
  }
  if (ints && (at.bits > 8 || c.c->buffer->dtype.element() != DataType::i32() || (at.bits == 4 && c.wgmma))) {
    m.error(op->op + " multiplies " + at.name() + " by " + bt.name() + " into " + c.c->buffer->dtype.name() +
            ": the integer instructions take 8-bit (or, on mma.sync, 4-bit) operands into int32");
    return;
  }
  const int64_t step = at.bits == 4 ? 64 : 32;
  if ((at.is_float8() || ints) && (c.ta || !c.tb || c.regs_a || c.k % step != 0)) {
    m.error(op->op + " on " + std::to_string(at.bits) + "-bit operands reads A (M x K) and B (N x K) K-major from "
            "shared memory in steps of " + std::to_string(step) + " (got transpose_A=" + std::to_string(c.ta) +
            ", transpose_B=" + std::to_string(c.tb) + (c.regs_a ? ", A in registers" : "") + ", K=" +
            std::to_string(c.k) + ")");
    return;
  }
  int first = 0;
  if (!sharing_threads(m, op, ts, 11, c.wm * c.wn * (c.wgmma ? 4 : 1), &first)) return;
  auto layout_of = [&](int operand, int64_t rows, int64_t cols, int64_t wn) {
    auto& L = m.mma_layouts_[{op, operand}];
    if (!L) {
      L = c.wgmma ? layout::make_mma_accumulator(rows, cols, int(4 * c.wm), int(wn), 4)
                  : layout::make_mma_accumulator(rows, cols, int(c.wm), int(wn));
    }
    return L;
  };
  layout::FragmentPtr lc = layout_of(0, c.m, c.n, c.wn);
  int64_t cbase = 0;
  Storage* acc = operand_registers(m, c.c, lc, op->op, &cbase);
  if (!acc) return;
  std::vector<std::pair<Storage*, int64_t>> reads;
  std::vector<double> A, B;
  Storage* regs_a = nullptr;
  if (c.regs_a) {
    layout::FragmentPtr la = layout_of(1, c.m, c.k, 1);
    // With transpose_A the registers hold Aᵀ (K x M stored) where they would hold A.
    if (c.ta) {
      auto& T = m.mma_layouts_[{op, 4}];
      if (!T) T = layout::make_transposed(la);
      la = T;
    }
    // Each column of the warp (group) split holds all of A (layout::make_group_replicated).
    if (c.wn > 1) {
      auto& R = m.mma_layouts_[{op, 3}];
      if (!R) R = layout::make_group_replicated(la, int(c.wn));
      la = R;
    }
    int64_t abase = 0;
    regs_a = operand_registers(m, c.a, la, op->op, &abase);
    if (!regs_a) return;
    A = register_tile(m, regs_a, abase, *la, first);
    if (c.ta) {  // held K x M: the product reads it M x K
      std::vector<double> t(A.size());
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t k = 0; k < c.k; ++k) t[i * c.k + k] = A[k * c.m + i];
      }
      A = std::move(t);
    }
  } else {
    A = shared_tile(m, c.a, c.m, c.k, c.ta, ts, c.wgmma ? &reads : nullptr);
  }
  B = shared_tile(m, c.b, c.k, c.n, c.tb, ts, c.wgmma ? &reads : nullptr);
  if (at.is_tf32_operand() && bt.is_tf32_operand()) {  // m16n8k8 tf32: operands rounded on the way in
    for (double& v : A) v = round_tf32(v);
    for (double& v : B) v = round_tf32(v);
  }
  // C: zero with CLEAR; else the latest group in flight on these registers (wgmma chains
  // on one accumulator in issue order), else the registers.
  std::vector<double> C(c.m * c.n, 0.0);
  if (!c.clear) {
    const WgmmaGroup* chained = nullptr;
    for (auto& g : m.wgmma_) {
      if (g.acc == acc && g.base == cbase) chained = &g;
    }
    C = chained ? chained->result : register_tile(m, acc, cbase, *lc, first);
  }
  DataType ct = c.c->buffer->dtype.element();
  for (int64_t i = 0; i < c.m && ints; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      uint64_t s = uint64_t(int64_t(C[i * c.n + j]));  // unsigned: wraps as the hardware's adds
      for (int64_t k = 0; k < c.k; ++k) s += uint64_t(int64_t(A[i * c.k + k]) * int64_t(B[k * c.n + j]));
      C[i * c.n + j] = double(int32_t(uint32_t(s)));
    }
  }
  for (int64_t i = 0; i < c.m && !ints; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double s = C[i * c.n + j];
      for (int64_t k = 0; k < c.k; ++k) s += A[i * c.k + k] * B[k * c.n + j];
      C[i * c.n + j] = round_to_dtype(ct, s);
    }
  }
  if (!c.wgmma) {
    for_each_slot(*lc, [&](int t, int s, int64_t i, int64_t j) { m.write_element(acc, cbase + s, t, C[i * c.n + j]); },
                  first);
    return;
  }
  for (auto& [st, flat] : reads) ++st->mma_reading[flat];
  ++acc->mma_accumulating;
  if (regs_a) ++regs_a->mma_sourcing;
  m.wgmma_.push_back({acc, cbase, lc, std::move(C), regs_a, std::move(reads)});
}

static void retire_wgmma(Machine& m) {
  WgmmaGroup g = std::move(m.wgmma_.front());
  m.wgmma_.pop_front();
  for (auto& [st, flat] : g.reads) --st->mma_reading[flat];
  --g.acc->mma_accumulating;
  if (g.regs_a) --g.regs_a->mma_sourcing;
  int64_t cols = g.layout->shape()[1];
  // Written past the in-flight checks: a later group chained on these registers may still
  // be running, and will overwrite them when it retires.
  Storage* st = g.acc;
  for_each_slot(*g.layout, [&](int t, int s, int64_t i, int64_t j) {
    int64_t p = int64_t(t) * st->size + g.base + s;
    st->data[p] = g.result[i * cols + j];
    st->written[p] = 1;
  });
}

static void sparse_tensor_core(Machine& m, const CallNode* op, const Threads& ts) {
  if (op->args.size() != 14) m.cannot("a " + op->op + " call with " + std::to_string(op->args.size()) + " arguments");
  int64_t v[9];
  for (int i = 0; i < 9; ++i) {
    const int64_t* x = as_const_int(op->args[i]);
    if (!x) m.cannot("a " + op->op + " call whose shape argument " + std::to_string(i) + " is not a constant");
    v[i] = *x;
  }
  int64_t M = v[0], N = v[1], K = v[2], wm = v[3], wn = v[4];
  bool ta = v[5] != 0, tb = v[6] != 0, te = v[7] != 0, clear = v[8] != 0;
  const BufferLoadNode *a = op->args[9].as<BufferLoadNode>(), *e = op->args[10].as<BufferLoadNode>(),
                       *b = op->args[11].as<BufferLoadNode>(), *c = op->args[12].as<BufferLoadNode>();
  if (!a || !e || !b || !c) m.cannot("a " + op->op + " call whose operands are not buffer elements");
  int first = 0;
  if (!sharing_threads(m, op, ts, 13, wm * wn, &first)) return;
  auto& lc = m.mma_layouts_[{op, 0}];
  if (!lc) lc = layout::make_mma_accumulator(M, N, int(wm), int(wn));
  int64_t cbase = 0;
  Storage* acc = operand_registers(m, c, lc, op->op, &cbase);
  if (!acc) return;
  const int bits = e->buffer->dtype.bits, per = bits / 4;  // groups in an element of E
  std::vector<double> A;
  if (op->op == "gemm_sp_rs") {
    // The kept elements in registers: an M x K/2 register A of gemm_rs (with TA its
    // transpose, K/2 x M held), each column of the warp split holding all of it.
    auto& la = m.mma_layouts_[{op, 1}];
    if (!la) {
      la = layout::make_mma_accumulator(M, K / 2, int(wm), 1);
      if (ta) la = layout::make_transposed(la);
      if (wn > 1) la = layout::make_group_replicated(la, int(wn));
    }
    int64_t abase = 0;
    Storage* regs = operand_registers(m, a, la, op->op, &abase);
    if (!regs) return;
    A = register_tile(m, regs, abase, *la, first);
    if (ta) {  // held K/2 x M: read M x K/2
      std::vector<double> t(A.size());
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t k = 0; k < K / 2; ++k) t[i * (K / 2) + k] = A[k * M + i];
      }
      A = std::move(t);
    }
  } else {
    A = shared_tile(m, a, M, K / 2, ta, ts, nullptr);
  }
  std::vector<double> E = shared_tile(m, e, M, K / bits, te, ts, nullptr);
  std::vector<double> B = shared_tile(m, b, K, N, tb, ts, nullptr);
  std::vector<double> C = clear ? std::vector<double>(M * N, 0.0) : register_tile(m, acc, cbase, *lc, first);
  DataType ct = c->buffer->dtype.element();
  bool reported = false;
  for (int64_t i = 0; i < M; ++i) {
    std::vector<double> row(N, 0.0);
    for (int64_t q = 0; q < K / 4; ++q) {
      uint64_t word = uint64_t(int64_t(E[i * (K / bits) + q / per])) & ((uint64_t(1) << bits) - 1);
      int nibble = int((word >> (4 * (q % per))) & 0xF), p0 = nibble & 3, p1 = nibble >> 2;
      if (p0 == p1) p0 = 0, p1 = 1;
      if (p0 > p1 && !reported) {
        m.error(op->op + ": the metadata gives group " + std::to_string(q) + " of row " + std::to_string(i) +
                " of A the positions (" + std::to_string(p0) + ", " + std::to_string(p1) +
                "): mma.sp takes a group's two positions in increasing order");
        reported = true;
      }
      for (int s = 0; s < 2; ++s) {
        double av = A[i * (K / 2) + 2 * q + s];
        int64_t k = 4 * q + (s ? p1 : p0);
        for (int64_t j = 0; j < N; ++j) row[j] += av * B[k * N + j];
      }
    }
    for (int64_t j = 0; j < N; ++j) C[i * N + j] = round_to_dtype(ct, C[i * N + j] + row[j]);
  }
  for_each_slot(*lc, [&](int t, int s, int64_t i, int64_t j) { m.write_element(acc, cbase + s, t, C[i * N + j]); },
                first);
}

bool Machine::tensor_core_statement(const CallNode* op, const Threads& ts) {
  const std::string& f = op->op;
  if (f == "gemm_ss" || f == "gemm_rs" || f == "wgmma_ss" || f == "wgmma_rs") {
    tensor_core(*this, op, ts);
  } else if (f == "gemm_sp_ss" || f == "gemm_sp_rs") {
    sparse_tensor_core(*this, op, ts);
  } else if (f == "wgmma_wait") {
    if (int(ts.size()) != tile_threads_) {
      error("wgmma_wait reached by " + std::to_string(ts.size()) + " of " + std::to_string(tile_threads_) + " threads");
    }
    // (4 arguments: a moved wait of a wgmma_rs, its held registers and A after the count)
    const int64_t* keep = op->args.size() == 2 || op->args.size() == 4 ? as_const_int(op->args[1]) : nullptr;
    if (!keep) cannot("a wgmma_wait whose count is not a constant");
    while (int64_t(wgmma_.size()) > *keep) retire_wgmma(*this);
  } else {
    return false;
  }
  return true;
}

}  // namespace tegula::interp::simt
