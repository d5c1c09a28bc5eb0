// Two executions of a kernel on the CPU, for checking the compiler against itself:
//
//   run_reference  the kernel as written (the "input" stage): tile ops at tile level,
//                  T.Parallel iterations one after another, one block after another.
//                  This is the language's meaning, independent of every pass.
//   simulate       the kernel as lowered (after the last pass): every thread of every
//                  block, barriers, shuffles and cp.async groups modelled.
//
// Both take one call's arguments in parameter order and write the results into the
// tensors' storage. Values are held as doubles and rounded to a buffer's dtype whenever
// they are stored into it or cast to it (round_to_dtype), so fp16/bf16/fp32 results
// match what the GPU stores up to the order of floating-point operations.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/analyzer.h"
#include "ir/stmt.h"

namespace tegula::transform {
struct Lowered;
}

namespace tegula::interp {

// Memory a run-time address may point into (T.make_tensor of a T.ptr parameter or of an
// address read from a pointer table): a tensor of the call or one given beside it, by the
// address its first element has in the caller's process, its element type, and its
// elements as the interpreters hold them (row-major).
struct Region {
  uint64_t base = 0;
  ir::DataType dtype;
  std::vector<double>* data = nullptr;
};

// One call: for each kernel parameter, in order, either a tensor (its row-major storage
// and shape) or a scalar value (a T.ptr parameter's: its address); and the memory its
// addresses may point into.
struct CallArgs {
  std::vector<std::vector<double>*> tensors;  // null for scalar parameters
  std::vector<std::vector<int64_t>> shapes;   // empty for scalar parameters
  std::vector<double> scalars;                // unused for tensor parameters
  std::vector<Region> memory;
};

// The elements from `address` on, as a tensor of `dtype` at that address reads them: a
// pointer into the region holding it and how many elements the region has from there.
// Returns "" on success, else why the address cannot be read so (no region of the call
// holds it, it falls between elements, the region holds another dtype).
std::string resolve_address(const CallArgs& args, double address, const ir::DataType& dtype, double** data,
                            int64_t* left);

// The value every variable of the call's signature takes: the dynamic dimensions, read
// off the tensors' shapes, and the integer scalar parameters. Throws UserError naming the
// parameter when a shape disagrees with the kernel's declaration.
ir::VarValues bind_call(const ir::Kernel& k, const CallArgs& args);
// The same, with float scalars too (as doubles), for evaluating expressions.
std::unordered_map<const ir::ExprNode*, double> bind_call_values(const ir::Kernel& k, const CallArgs& args);

// v rounded to what a variable of dtype t holds: fp16 / bf16 / fp32 by round-to-nearest-
// even (with overflow to inf), integers truncated toward zero and wrapped to their width
// (NaN becomes 0), bool to 0/1; fp64 unchanged.
double round_to_dtype(const ir::DataType& t, double v);
// A value rounded to tfloat32 (the tensor cores' tf32 operands): see round_to_dtype.
double round_tf32(double v);
// A conversion (T.cast, a Cast node) from `from` to `to`: as round_to_dtype, except that a
// float converted to an integer saturates at the integer's range (NaN gives 0), as the
// GPU's conversion instructions do.
double cast_to_dtype(const ir::DataType& from, const ir::DataType& to, double v);

// One operation of the language on scalar values, with the meaning of the generated CUDA
// (kernels/include/tegula/math.h, codegen/cuda_printer.cc), rounded to `result`:
// integer Div/Mod truncate (C), FloorDiv/FloorMod floor (on floats too), Max/Min and the
// max/min intrinsics propagate NaN (as torch.maximum does), comparisons give 0/1.
double eval_binary(ir::BinaryOp op, double a, double b, const ir::DataType& operand, const ir::DataType& result);
// A pure intrinsic call by its IR name (exp, exp2, log, log2, sqrt, rsqrt, tanh, sin, cos,
// floor, ceil, trunc, rint, abs, sigmoid, infinity, ninfinity, max_value, min_value, the
// NaN-ignoring max_num and min_num, and pdl_trigger / pdl_sync / assume, which change no value).
// Returns false when `name` is not one of them.
bool eval_intrinsic(const std::string& name, const std::vector<double>& args, const ir::DataType& result,
                    double* out);

// T.reinterpret on held values: the bits of `in` (from.lanes values of from's element
// type) read as to.lanes values of to's element type (bits.cc). The two types have one
// width; integers are two's complement, floats IEEE (fp16, bf16, fp32, fp64, fp8), lanes
// little-endian. Example: float32 1.0 -> uint32 1065353216; uint32x2 {0, 1072693248}
// -> float64... (not a language type) / float32x2 {0.0, 1.875}.
void reinterpret_bits(const ir::DataType& from, const double* in, const ir::DataType& to, double* out);

// The kernel as written (stage "input" of the pipeline). Throws UserError at the DSL line
// for a program whose meaning is undefined (an index outside a fragment or shared tile).
void run_reference(const ir::Kernel& k, CallArgs& args);

// The lowered kernel, thread by thread. Returns what a GPU run would hide or make flaky
// (out-of-bounds accesses, reads of unwritten memory, races between barriers, barriers
// reached by part of the block, shuffles with inactive lanes, cp.async never waited for);
// empty when none was seen.
std::vector<std::string> simulate(const transform::Lowered& lowered, CallArgs& args);

}  // namespace tegula::interp
