// The SIMT simulator's machine, shared by its implementation files (simt.cc: blocks,
// statements and expressions; simt_calls.cc: warp and asynchronous calls;
// simt_tensor_cores.cc: tensor-core calls).
//
// Execution model. A block's threads run in lockstep, statement by statement: a statement
// is evaluated for every active thread before any thread's effect lands (a store evaluates
// its value in all threads first, as a warp does, so shfl_xor sees its partner's value from
// before the exchange). Expressions are evaluated for a set of threads at once (Vals holds
// one value per thread and lane), so the cost of walking the IR is paid once per statement,
// not once per thread. The two sides of a divergent `if`, of a select and of a
// short-circuiting && / || run on their own threads only, as the printed C does.
//
// What a GPU run would hide and the machine reports: out-of-bounds accesses; reads of
// registers or shared memory never written (tracked by flags, so a computed NaN is no
// false alarm); two threads touching one shared element between two barriers with a write
// among them; barriers or collective calls reached by part of the block; shuffles with an
// inactive or foreign partner; cp.async data read before a wait retired it, or never
// waited for; accumulators touched, or shared operands overwritten, while a wgmma using
// them is in flight.
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "interp/block_scheduler.h"
#include "interp/coop.h"
#include "interp/simt.h"

namespace tegula::interp::simt {

using Threads = std::vector<int>;

// One value per (thread of the evaluated set, lane): v[i * lanes + lane]. undef marks the
// values computed from registers never written (empty: none): a thread may read such a
// register harmlessly (a combine step on a thread that holds no element), so the report
// waits until the value reaches memory, an address or a branch, as memcheck tools do.
struct Vals {
  int lanes = 1;
  std::vector<double> v;
  std::vector<uint8_t> undef;
  double at(size_t i, int lane = 0) const { return lanes == 1 ? v[i] : v[i * lanes + lane]; }
  bool undef_at(size_t i, int lane = 0) const {
    return !undef.empty() && (lanes == 1 ? undef[i] : undef[i * lanes + lane]);
  }
  void set_undef(size_t k) {
    if (undef.empty()) undef.assign(v.size(), 0);
    undef[k] = 1;
  }
};

// Thrown to stop a run: too many reports, or something the machine cannot execute.
struct Abort {};

struct SharedUse {
  int64_t write_epoch = -1, read_epoch = -1;
  int writer = -1, reader = -1;  // reader -2: several threads; writer/reader -3: a collective call
};

// The storage of one buffer: a global tensor (the call's), a shared buffer (per block), or
// a register array (per thread: data[t * size + i]).
struct Storage {
  const ir::BufferNode* buf = nullptr;
  std::vector<int64_t> shape;
  int64_t size = 0;                 // elements (of one thread, for registers)
  double* data = nullptr;           // global: the tensor's; else own.data()
  std::vector<double> own;
  std::vector<uint8_t> written;     // shared and registers
  std::vector<SharedUse> uses;      // shared: who touched each element since the last barrier
  std::vector<int> async_pending;   // shared: cp.async copies in flight into each element
  std::vector<int> mma_reading;     // shared: wgmma groups in flight reading each element
  int mma_accumulating = 0;         // registers: wgmma groups in flight accumulating here
  int mma_sourcing = 0;             // registers: wgmma groups in flight reading A from here
  const ir::IndexMap* map = nullptr;  // global: the tensor's T.Layout, if any
  // A tensor at a run-time address (buf->address): its strides (empty: row-major); its
  // elements are found per thread, from the address that thread holds (global_element).
  std::vector<int64_t> strides;
  // global: which block last stored each element (-1: none), for the cross-block check
  // (Machine::note_global_store); sized at the first store.
  std::vector<int32_t> block_writer;
};

// One cp.async: its bytes, read at issue, land when a wait retires their group.
struct Landing {
  Storage* dst;
  int64_t flat;
  std::vector<double> vals;
};

// One wgmma group in flight: the accumulator it will write at the wait.
struct WgmmaGroup {
  Storage* acc;
  int64_t base;
  layout::FragmentPtr layout;
  std::vector<double> result;          // M x N, row-major
  Storage* regs_a = nullptr;           // A's registers (wgmma_rs)
  std::vector<std::pair<Storage*, int64_t>> reads;  // shared elements it reads
};

class Machine {
 public:
  Machine(const ir::Kernel& k, const RegisterLayouts& layouts, CallArgs& args);
  std::vector<std::string> run();

  // ---- simt.cc
  void error(const std::string& what);
  [[noreturn]] void cannot(const std::string& what);
  Vals eval(const ir::Expr& e, const Threads& ts);
  void exec(const ir::Stmt& s, const Threads& ts);
  Storage* storage(const ir::Buffer& b);
  // The flat element index of an access of `lanes` elements by the i-th thread of ts, or -1
  // (and a report) when out of bounds.
  int64_t flat_index(Storage* st, const std::vector<Vals>& idx, size_t i, int lanes, int t);
  int64_t lane_step(const Storage* st) const;
  std::vector<Vals> eval_indices(const std::vector<ir::Expr>& idx, const Threads& ts);
  void track(Storage* st, int64_t flat, int t, bool write);
  // Every read of shared memory or registers goes through here: flags and in-flight checks.
  // An unwritten register is reported at once, or marked in *undef when given.
  double read_element(Storage* st, int64_t flat, int t, bool* undef = nullptr);
  // undef: the value was computed from unwritten registers (reported unless the
  // destination is a register, which then stays unwritten).
  void write_element(Storage* st, int64_t flat, int t, double v, bool undef = false);
  // A plain store of v over *p (element flat of global st) by thread t of the current block:
  // an error when another block stored a different value there (see check_block_stores_).
  void note_global_store(Storage* st, int64_t flat, const double* p, double v, int t);
  // The element `flat` of a global tensor as thread t reaches it: a tensor at a run-time
  // address through the address t holds (null, and a report, when that reads no memory of
  // the call); with `bytes` past the element's size, a vector access that must be aligned.
  double* global_element(Storage* st, int64_t flat, int t, int bytes = 0);
  // Points the tensors at the address `var` holds (T.make_tensor) at it: their shapes and
  // strides, evaluated for ts (they must agree).
  void bind_addresses(const ir::Expr& var, const Threads& ts);
  // Reports the first thread whose value in v is undefined, as `what` (e.g. "branches on").
  void require_defined(const Vals& v, const Threads& ts, const std::string& what);
  std::string thread_name(int t) const;
  std::string element_name(const Storage* st, int64_t flat) const;

  // ---- simt_calls.cc
  Vals call(const ir::CallNode* op, const Threads& ts);
  Vals warp_call(const ir::CallNode* op, const Threads& ts);  // warp reductions and votes
  // Calls with an effect (cp.async, atomics, tensor cores, waits); false when `op` is
  // an ordinary expression call.
  bool call_statement(const ir::CallNode* op, const Threads& ts);
  void end_block();
  // ---- simt_tensor_cores.cc: gemm_ss / gemm_rs, wgmma_ss / wgmma_rs and wgmma_wait,
  // gemm_sp_ss / gemm_sp_rs, at tile level; false for other calls.
  bool tensor_core_statement(const ir::CallNode* op, const Threads& ts);
  // ---- simt_barriers.cc: T.alloc_barrier's mbarriers; false for other calls.
  bool barrier_statement(const ir::CallNode* op, const Threads& ts);
  // Lands every cp.async thread t has issued (T.cp_async_barrier_noinc's arrival waits for them).
  void land_all(int t);
  // ---- simt_bits.cc: T.reinterpret and the explicit-width accesses (ir/wide_access.h)
  Vals bits_call(const ir::CallNode* op, const Threads& ts);  // reinterpret, the loads
  void wide_store(const ir::CallNode* op, const Threads& ts);

  const ir::Kernel& k_;
  const RegisterLayouts& layouts_;
  CallArgs& args_;
  int threads_ = 0;
  // The threads that run the program's tile code: all of them, or a warp-specialised
  // kernel's consumers (the last warpgroup only issues bulk copies).
  int tile_threads_ = 0;
  int scope_threads_ = 0;  // the threads sharing the tensor-core call being simulated
  std::vector<std::string> errors_;
  bool stopped_ = false;
  std::string block_name_;
  // Blocks run here one at a time, in order; on a GPU they run at once. So two blocks
  // storing different values into one global element (without atomics) is a race whose
  // outcome the simulation would hide: reported when true (grids run block by block, not
  // co-scheduled ones, whose grid barriers order their blocks).
  bool check_block_stores_ = false;
  int32_t block_linear_ = 0;
  int64_t grid_[3] = {1, 1, 1};
  std::unordered_map<const ir::BufferNode*, std::unique_ptr<Storage>> storage_;
  std::unordered_map<const ir::ExprNode*, std::vector<double>> vars_;  // per thread
  std::unordered_map<const ir::ExprNode*, std::vector<uint8_t>> var_undef_;  // lets of undefined values
  std::unordered_map<const ir::ExprNode*, double> scalars_;             // the call's
  int64_t epoch_ = 0;                                                   // barriers so far
  // Per thread: a break (1) or continue (2) it took in its innermost loop, which skips the
  // rest of the iteration for it; `jumps_` counts the threads with one pending.
  std::vector<uint8_t> jumped_;
  int jumps_ = 0;
  Threads without_jumped(const Threads& ts) const;
  std::vector<std::vector<Landing>> open_;                  // per thread: issued, uncommitted
  std::vector<std::deque<std::vector<Landing>>> committed_;  // per thread: groups in flight
  std::deque<WgmmaGroup> wgmma_;                             // the block's groups in flight
  // A kernel with T.alloc_barrier: the sides of divergent branches run as coroutines of the
  // block (interp/coop.h), and its mbarriers by (storage, element).
  // tx: bytes of bulk copies (tma_copy) the current phase still expects
  // (mbar_arrive_expect_tx); the phase completes when its arrivals are in and tx is 0.
  struct Mbarrier {
    int64_t count = 0, pending = 0, phases = 0, tx = 0;
  };
  void complete_if_done(Mbarrier& m);
  void bulk_copy(const ir::CallNode* op, const Threads& ts);
  bool has_mbarriers_ = false;
  std::unique_ptr<Coop> coop_;
  std::map<std::pair<Storage*, int64_t>, Mbarrier> mbarriers_;
  // T.rng_*: each thread's Philox state (kernels/include/tegula/random.h); ready once initialised.
  struct Rng {
    uint32_t ctr[4], out[4], key[2];
    int pos = 0;
    bool ready = false, has_extra = false, has_extra_double = false;
    double extra = 0, extra_double = 0;
  };
  std::vector<Rng> rng_;  // per thread of the block
  Vals rng_call(const ir::CallNode* op, const Threads& ts);
  std::map<std::pair<const ir::CallNode*, int>, layout::FragmentPtr> mma_layouts_;  // per call: C, A
  // The block running: its blockIdx, and how it meets the other blocks at a grid or cluster
  // barrier (block_scheduler.h).
  int64_t block_index_[3] = {0, 0, 0};
  const BlockTicket* ticket_ = nullptr;
  void wide_barrier(const ir::CallNode* op, const Threads& ts);  // simt_calls.cc

 private:
  // Blocks that meet at grid or cluster barriers: each on a Machine of its own.
  void run_co_scheduled(const int64_t* grid, CoRun mode);
  void run_block(const std::vector<int64_t>& block_index);
  void bind_block_vars(const std::vector<int64_t>& block_index);
  Vals load(const ir::BufferLoadNode* op, const Threads& ts);
  Vals binary(const ir::BinaryNode* op, const Threads& ts);
  Vals select(const ir::Expr& cond, const ir::Expr& t, const ir::Expr& f, const Threads& ts);
  void store(const ir::BufferStoreNode* op, const Threads& ts);
  void loop(const ir::ForNode* op, const Threads& ts);
  void while_loop(const ir::WhileNode* op, const Threads& ts);
  static constexpr int64_t kMaxWhileIterations = int64_t(1) << 24;
};

}  // namespace tegula::interp::simt
