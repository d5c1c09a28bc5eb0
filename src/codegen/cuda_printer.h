// CUDA C++ for a lowered kernel: the only place in the core that builds source text.
#pragma once
#include <string>
#include <vector>

#include "ir/stmt.h"
#include "transform/context.h"

namespace tegula::codegen {

struct CudaSource {
  std::string code;        // a translation unit including "tegula/tegula.h"
  std::string entry;       // extern "C" kernel name
};

CudaSource print_cuda(const ir::Kernel& k, const transform::Target& target);

// Sizes below this are indexed with 32-bit arithmetic (the 2^20 below 2^31 leaves room for
// a tile hanging past the end: by * bm + i < M + bm). A kernel with a static global
// dimension at or above it computes in 64 bits; the launcher refuses dynamic sizes past it.
constexpr int64_t kIndex32Limit = (int64_t(1) << 31) - (int64_t(1) << 20);

// Whether a y or z grid extent can pass the hardware's 65535: the kernel then reads its
// block indices from a folded launch grid (program.cc: launch_grid).
bool folds_grid(const ir::Kernel& k);

// T.use_swizzle(panel_size): the statements that declare the block variables `names`,
// rasterising the grid in panels of `panel` rows (or columns) so neighbouring blocks share
// tiles in L2. raw: each block index as read (blockIdx.x, the folded y, ...); grid_y: the
// grid's y extent as the kernel knows it.
std::vector<std::string> panel_block_indices(int panel, bool rows, const std::vector<std::string>& raw,
                                             const std::string& grid_y, const std::vector<std::string>& names);

// Whether the kernel has a grid barrier (T.sync_grid): it is then launched cooperatively
// (every block resident at once), and includes <cooperative_groups.h>.
bool launches_cooperatively(const ir::Kernel& k);

// Whether the kernel records instrumentation events (tegula.tools.cuda.iket: calls named
// "iket_<phase>:<event name>"): it then takes the launch's event log as its last parameter.
bool records_events(const ir::Kernel& k);
// The phase of an instrumentation event call ("mark", "range_start", "range_end") and the
// event's name; false for any other call.
bool event_call(const std::string& op, std::string* phase, std::string* name);

// Registers of a warp-specialised kernel (k.consumer_threads > 0): with one consumer
// warpgroup, two blocks share an SM when their shared memory allows (the cp.async form
// of such a kernel runs two as well); each block's 64K / blocks registers go 24 per
// producer thread and the rest, up to 240, to the consumers. setmaxnreg is printed only
// where it moves a count away from the launch bounds' (`entry`).
struct WsRegisters {
  int blocks_per_sm = 1;
  int entry = 0, producer = 0, consumer = 0;
};
WsRegisters ws_registers(const ir::Kernel& k);

// The widest wgmma instruction of a kernel (m64nNk16, N per warpgroup) and the registers a
// thread needs at once to issue it: N / 2 accumulators and what ptxas keeps beside them
// (A's registers, the descriptors, the scale: m64n256k16 took 158 in all).
struct WgmmaRegisters {
  static constexpr int kBeside = 32;
  int n = 0;
  int k = 16;  // 32 bytes of K: 16 of 16-bit operands, 32 of 8-bit ones
  int registers = 0;
  SourceLoc loc;  // its T.gemm
};
WgmmaRegisters wgmma_registers(const ir::Kernel& k);

// The registers ptxas may give a thread of the kernel: 64K over the threads of the blocks
// its launch bounds put on an SM, at most 255.
int register_limit(const ir::Kernel& k);

// A wgmma instruction whose registers are past the launch bounds' count is the user's tile:
// an error at its T.gemm (ptxas would fail on the generated code, C7602).
void check_wgmma_registers(const ir::Kernel& k);

// The C++ spelling of a scalar type ("half_t", "float", ...).
std::string cuda_type(ir::DataType t);
// CUDA's float4 / int2 / uint4 ... for a memory access of that many 32-bit lanes, else Vec<T, N>.
std::string memory_vector_type(ir::DataType t, int lanes);

}  // namespace tegula::codegen
