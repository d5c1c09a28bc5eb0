// Compile-only test of the device library: instantiates every function template of
// kernels/include/tegula for every element type, in kernels whose results are stored,
// so that no instruction is optimised away before ptxas checks it. Built by
// device_lib_compile.sh with nvcc for each target, and fed as text to NVRTC.
#include "tegula/tegula.h"

using tegula::bfloat16_t;
using tegula::half_t;
using tegula::Vec;

template <typename... Ts>
struct TypeList {};

using FloatTypes = TypeList<float, double, half_t, bfloat16_t>;
using IntTypes = TypeList<signed char, short, int, long, long long, unsigned char,
                          unsigned short, unsigned int, unsigned long, unsigned long long>;
using AllTypes = TypeList<float, double, half_t, bfloat16_t, bool, int8_t, int16_t, int32_t,
                          int64_t, long long, uint8_t, uint16_t, uint32_t, uint64_t>;

// Raw bytes every test writes through, so each result is observable.
struct Sink {
  unsigned char* bytes;
  template <typename T>
  __device__ void put(int slot, const T& v) {
    reinterpret_cast<T*>(bytes)[slot] = v;
  }
};

// ---- vec.h: every vector width that is 1..32 bytes, for each element size.
template <typename T, int N>
__device__ void vec_one(const T* in, Sink out, int valid) {
  if constexpr (sizeof(T) * N <= 32 && ((sizeof(T) * N) & (sizeof(T) * N - 1)) == 0) {
    Vec<T, N> a = tegula::load_vec<N>(in);
    tegula::store_vec(reinterpret_cast<T*>(out.bytes), a);
    Vec<T, N> b = tegula::load_vec_pred<N>(in, valid, in[0]);
    tegula::store_vec_pred(reinterpret_cast<T*>(out.bytes) + 64, b, valid);
    out.put(200, tegula::broadcast_vec<N>(in[1]));
  }
}
template <typename T>
__device__ void vec_all(const T* in, Sink out, int valid) {
  vec_one<T, 1>(in, out, valid);
  vec_one<T, 2>(in, out, valid);
  vec_one<T, 4>(in, out, valid);
  vec_one<T, 8>(in, out, valid);
  vec_one<T, 16>(in, out, valid);
  vec_one<T, 32>(in, out, valid);
}
template <typename... Ts>
__device__ void vec_types(TypeList<Ts...>, const void* in, Sink out, int valid) {
  (vec_all<Ts>(static_cast<const Ts*>(in), out, valid), ...);
}
__global__ void test_vec(const void* in, unsigned char* out, int valid) {
  vec_types(AllTypes{}, in, Sink{out}, valid);
  Vec<float, 3> odd{{1.f, 2.f, 3.f}};  // 12 bytes: a Vec, but not one access
  Sink{out}.put(300, odd);
}

// ---- math.h
template <typename T>
__device__ void math_float(const T* in, Sink out) {
  T x = in[threadIdx.x], y = in[threadIdx.x + 1], z = in[threadIdx.x + 2];
  int s = 0;
  out.put(s++, tegula::exp(x));
  out.put(s++, tegula::exp2(x));
  out.put(s++, tegula::log(x));
  out.put(s++, tegula::log2(x));
  out.put(s++, tegula::sqrt(x));
  out.put(s++, tegula::rsqrt(x));
  out.put(s++, tegula::tanh(x));
  out.put(s++, tegula::sin(x));
  out.put(s++, tegula::cos(x));
  out.put(s++, tegula::floor(x));
  out.put(s++, tegula::ceil(x));
  out.put(s++, tegula::trunc(x));
  out.put(s++, tegula::rint(x));
  out.put(s++, tegula::abs(x));
  out.put(s++, tegula::max(x, y));
  out.put(s++, tegula::min(x, y));
  out.put(s++, tegula::fma(x, y, z));
  out.put(s++, tegula::add(x, y));
  out.put(s++, tegula::sigmoid(x));
  out.put(s++, tegula::floordiv(x, y));
  out.put(s++, tegula::floormod(x, y));
  out.put(s++, tegula::infinity<T>());
  out.put(s++, tegula::ninfinity<T>());
  out.put(s++, tegula::max_value<T>());
  out.put(s++, tegula::min_value<T>());
  if constexpr (!tegula::detail::is_same<T, double>) {
    out.put(s++, tegula::exp2_fast(x));
    out.put(s++, tegula::exp_fast(x));
    out.put(s++, tegula::log2_fast(x));
    out.put(s++, tegula::to_float(x));
  }
}
template <typename T>
__device__ void math_int(const T* in, Sink out) {
  T x = in[threadIdx.x], y = in[threadIdx.x + 1];
  out.put(0, tegula::abs(x));
  out.put(1, tegula::max(x, y));
  out.put(2, tegula::min(x, y));
  out.put(3, tegula::add(x, y));
  out.put(4, tegula::infinity<T>());
  out.put(5, tegula::ninfinity<T>());
  out.put(6, tegula::ceildiv(x, y));
  out.put(7, tegula::max_value<T>());
  out.put(8, tegula::min_value<T>());
  out.put(9, tegula::floordiv(x, y));
  out.put(10, tegula::floormod(x, y));
}
// Every (To, From) pair of AllTypes.
template <typename To, typename... Froms>
__device__ void cast_to(const unsigned char* in, Sink out, TypeList<Froms...>) {
  int s = 0;
  ((out.put(s++, tegula::cast<To>(*reinterpret_cast<const Froms*>(in)))), ...);
}
template <typename... Tos>
__device__ void cast_all(const unsigned char* in, Sink out, TypeList<Tos...>) {
  (cast_to<Tos>(in, out, AllTypes{}), ...);
}
template <typename... Ts>
__device__ void math_floats(TypeList<Ts...>, const void* in, Sink out) {
  (math_float<Ts>(static_cast<const Ts*>(in), out), ...);
}
template <typename... Ts>
__device__ void math_ints(TypeList<Ts...>, const void* in, Sink out) {
  (math_int<Ts>(static_cast<const Ts*>(in), out), ...);
}
__global__ void test_math(const void* in, unsigned char* out) {
  math_floats(FloatTypes{}, in, Sink{out});
  math_ints(IntTypes{}, in, Sink{out});
  cast_all(static_cast<const unsigned char*>(in), Sink{out}, AllTypes{});
  Sink{out}.put(0, tegula::rcp_fast(*static_cast<const float*>(in)));
  static_assert(tegula::ceildiv(10, 4) == 3, "ceildiv is usable in constant expressions");
}

// The generated code says `using namespace tegula;` and calls some names unqualified;
// none of them may be ambiguous with CUDA's global max, min, abs, exp, ...
namespace generated_style {
using namespace tegula;
__global__ void test_unqualified(float* f, double* d, half_t* h, int* i, long long* q) {
  f[0] = max(f[1], f[2]) + min(f[3], f[4]) + abs(f[5]) + exp(f[6]) + fma(f[7], f[8], f[9]);
  d[0] = max(d[1], d[2]) + min(d[3], d[4]) + abs(d[5]) + sqrt(d[6]);
  h[0] = max(h[1], h[2]);
  h[3] = min(abs(h[4]), cast<half_t>(1.0f));
  i[0] = max(i[1], i[2]) + min(i[3], i[4]) + abs(i[5]) + floordiv(i[6], i[7]);
  q[0] = max(q[1], q[2]) + min(q[3], q[4]) + floormod(q[5], q[6]);
  f[10] = infinity<float>() + max_value<float>() + cast<float>(h[5]) + to_float(h[6]);
  atomic_add(&f[11], shfl_xor(f[12], 1));
  Vec<float, 4> v = load_vec<4>(f + 16);
  store_vec(f + 20, v);
  print("unqualified", f[0]);
}
}  // namespace generated_style

// ---- reduce.h
template <typename Op, typename T>
__device__ T reduce_one(const T* in) {
  T acc = Op::template identity<T>();
  acc = Op()(acc, in[threadIdx.x]);
  acc = tegula::warp_reduce<Op>(acc, 0b11111);
  acc = tegula::warp_reduce<Op, T>(acc, 0b00011);
  return Op::combine(acc, tegula::shfl_xor(acc, 4));
}
template <typename T>
__device__ void reduce_all(const T* in, Sink out) {
  out.put(0, reduce_one<tegula::SumOp>(in));
  out.put(1, reduce_one<tegula::MaxOp>(in));
  out.put(2, reduce_one<tegula::MinOp>(in));
  out.put(3, reduce_one<tegula::AbsSumOp>(in));
  out.put(4, reduce_one<tegula::AbsMaxOp>(in));
}
template <typename... Ts>
__device__ void reduce_types(TypeList<Ts...>, const void* in, Sink out) {
  (reduce_all<Ts>(static_cast<const Ts*>(in), out), ...);
}
template <typename... Ts>
__device__ void shuffle_types(TypeList<Ts...>, const void* in, Sink out) {
  (out.put(0, tegula::shfl_xor(static_cast<const Ts*>(in)[threadIdx.x], 1)), ...);
}
__global__ void test_reduce(const void* in, unsigned char* out) {
  reduce_types(FloatTypes{}, in, Sink{out});
  reduce_types(IntTypes{}, in, Sink{out});
  shuffle_types(AllTypes{}, in, Sink{out});
  // Packed pairs and odd sizes go through the word-wise fallback.
  Sink{out}.put(0, tegula::shfl_xor(static_cast<const Vec<half_t, 2>*>(in)[threadIdx.x], 2));
  Sink{out}.put(0, tegula::shfl_xor(static_cast<const Vec<float, 3>*>(in)[threadIdx.x], 2));
}

// ---- atomic.h
template <typename... Ts>
__device__ void atomic_types(TypeList<Ts...>, void* dst, const void* in, Sink out) {
  (out.put(0, tegula::atomic_add(static_cast<Ts*>(dst), static_cast<const Ts*>(in)[1])), ...);
}
__global__ void test_atomic(void* dst, const void* in, unsigned char* out) {
  atomic_types(TypeList<float, double, half_t, bfloat16_t, int, unsigned, long, long long,
                        unsigned long long>{},
               dst, in, Sink{out});
  Sink{out}.put(0, tegula::atomic_add_x2(static_cast<half_t*>(dst),
                                         static_cast<const Vec<half_t, 2>*>(in)[0]));
  Sink{out}.put(0, tegula::atomic_add_x2(static_cast<bfloat16_t*>(dst),
                                         static_cast<const Vec<bfloat16_t, 2>*>(in)[0]));
  Sink{out}.put(0, tegula::atomic_add_x2(static_cast<float*>(dst),
                                         static_cast<const Vec<float, 2>*>(in)[0]));
  Sink{out}.put(0, tegula::atomic_add_x4(static_cast<float*>(dst),
                                         static_cast<const Vec<float, 4>*>(in)[0]));
}

// ---- print.h
template <typename... Ts>
__device__ void print_types(TypeList<Ts...>, const void* in) {
  (tegula::print("scalar", static_cast<const Ts*>(in)[0]), ...);
  (tegula::print("buffer", 3, static_cast<const Ts*>(in)[1]), ...);
}
__global__ void test_print(const void* in) { print_types(AllTypes{}, in); }

// ---- mma.h: fragments come from shared memory so ldmatrix has real addresses.
__global__ void test_mma(const uint4* gin, float* fout, int* iout, uint32_t* hout) {
  __shared__ __align__(16) unsigned short tile[16 * 64];
  reinterpret_cast<uint4*>(tile)[threadIdx.x] = gin[threadIdx.x];
  __syncthreads();
  const unsigned short* row = tile + (threadIdx.x % 16) * 64 + (threadIdx.x / 16) * 8;
  uint32_t a[4], b[2], b1[1], t[4], t2[2], t1[1];
  tegula::ldmatrix_x4(a, row);
  tegula::ldmatrix_x2(b, row);
  tegula::ldmatrix_x1(b1, row);
  tegula::ldmatrix_x4_trans(t, row);
  tegula::ldmatrix_x2_trans(t2, row);
  tegula::ldmatrix_x1_trans(t1, row);
  b[0] ^= b1[0] ^ t1[0];
  a[0] ^= t[0];
  b[1] ^= t2[1];

  float c[4] = {0.f, 0.f, 0.f, 0.f};
  tegula::mma_m16n8k16_f16f32(c, a, b, c);
  tegula::mma_m16n8k16_bf16f32(c, a, b, c);
  tegula::mma_m16n8k8_tf32f32(c, a, b, c);
#if TEGULA_ARCH >= 890
  tegula::mma_m16n8k32_e4m3f32(c, a, b, c);
  tegula::mma_m16n8k32_e5m2f32(c, a, b, c);
#endif
  for (int i = 0; i < 4; ++i) fout[threadIdx.x * 4 + i] = c[i];

  uint32_t h[2] = {tegula::pack_f16x2(c[0], c[1]), tegula::pack_bf16x2(c[2], c[3])};
  tegula::mma_m16n8k16_f16f16(h, a, b, h);
  hout[threadIdx.x * 3] = h[0];
  hout[threadIdx.x * 3 + 1] = h[1];
  hout[threadIdx.x * 3 + 2] = tegula::to_tf32(c[0]);

  int ic[4] = {0, 0, 0, 0};
  tegula::mma_m16n8k32_s8s32(ic, a, b, ic);
  for (int i = 0; i < 4; ++i) iout[threadIdx.x * 4 + i] = ic[i];

  uint32_t b4[4] = {b[0], b[1], t[2], t[3]};
  tegula::mma_sp_m16n8k32_f16f32(c, a, b4, c, tegula::valid_sparse_metadata(t[0]));
  tegula::mma_sp_m16n8k32_bf16f32(c, a, b4, c, t[1]);
  tegula::mma_sp_m16n8k32_f16f16(h, a, b4, h, t[2]);
  fout[threadIdx.x * 4] += c[0];
  hout[threadIdx.x * 3] ^= h[0];

#if TEGULA_ARCH >= 900
  __syncthreads();
  uint32_t s4[4] = {h[0], h[1], a[2], a[3]};
  unsigned short* wrow = tile + (threadIdx.x % 16) * 64 + (threadIdx.x / 16) * 8;
  tegula::stmatrix_x4(wrow, s4);
  tegula::stmatrix_x2(wrow, h);
  tegula::stmatrix_x4_trans(wrow, s4);
  tegula::stmatrix_x2_trans(wrow, h);
  __syncthreads();
  hout[threadIdx.x] = tile[threadIdx.x];
#endif
}

// ---- async.h: a two-stage cp.async pipeline, then (sm_90+) an mbarrier handshake.
__global__ void test_async(const float4* gin, float* out, int n) {
  __shared__ __align__(16) float4 stage[2][128];
  int i = threadIdx.x;
  tegula::cp_async_16(&stage[0][i], gin + i);
  tegula::cp_async_16_pred(&stage[1][i], gin + 128 + i, i < n);
  tegula::cp_async_commit();
  tegula::cp_async_8(&stage[0][i], gin + i);
  tegula::cp_async_8_pred(&stage[0][i], gin + i, i < n);
  tegula::cp_async_4(&stage[1][i], gin + i);
  tegula::cp_async_4_pred(&stage[1][i], gin + i, i < n);
  tegula::cp_async_commit();
  tegula::cp_async_wait<1>();
  tegula::cp_async_wait<0>();
  tegula::cp_async_wait_all();
  __syncthreads();
  float sum = stage[0][i].x + stage[1][i].y;
  if (threadIdx.x < 64) {
    tegula::barrier_arrive(1, 128);
  } else {
    tegula::barrier_sync(1, 128);
  }
#if TEGULA_ARCH >= 900
  __shared__ __align__(8) uint64_t bar;
  if (threadIdx.x == 0) {
    tegula::mbarrier_init(&bar, 1);
    tegula::fence_barrier_init();
  }
  __syncthreads();
  stage[0][i].z = sum;
  tegula::fence_proxy_async();
  if (threadIdx.x == 0) {
    tegula::mbarrier_expect_tx(&bar, 0);
    tegula::mbarrier_arrive_expect_tx(&bar, 0);
  }
  tegula::mbarrier_wait(&bar, 0);
  if (tegula::mbarrier_try_wait(&bar, 0)) sum += 1.f;
  __syncthreads();
  if (threadIdx.x == 0) tegula::mbarrier_init(&bar, 128);
  __syncthreads();
  tegula::mbarrier_arrive(&bar);
  tegula::mbarrier_wait(&bar, 0);
#endif
  out[i] = sum;
}

#if defined(TEGULA_DEVICE_LIB_RUN) && !defined(__CUDACC_RTC__)
// ---- Numeric checks, for a machine with an sm_90+ GPU: `device_lib_compile.sh --run`
// builds this file as a program. Each kernel stores what it computed; the host compares
// against values worked out by hand or by a plain CPU loop.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

static int failures = 0;
static void expect(bool ok, const char* what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  failures += !ok;
}
// Compared with ==, not memcmp: an exact zero may come back as -0.
static bool same(const float* a, const float* b, int n) {
  for (int i = 0; i < n; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

__global__ void run_scalar(float* r, long long* q) {
  using tegula::cast;
  r[0] = cast<float>(cast<bfloat16_t>((1 << 24) + (1 << 16) + 1));
  r[1] = cast<float>(cast<half_t>(1.0 + 0x1p-11 + 0x1p-40));
  r[2] = cast<float>(cast<bfloat16_t>(cast<half_t>(1.00390625f)));
  r[3] = cast<float>(tegula::infinity<half_t>());
  r[4] = cast<float>(tegula::ninfinity<bfloat16_t>());
  r[5] = tegula::max(__int_as_float(0x7fc00000), 1.0f);
  r[6] = tegula::exp2_fast(3.5f) / exp2f(3.5f);
  r[7] = cast<float>(tegula::exp(cast<half_t>(1.0f)));
  q[0] = cast<int>(cast<half_t>(-2.5f));
  q[1] = cast<bool>(cast<half_t>(0.0f));
  q[2] = cast<bool>(cast<bfloat16_t>(0.5f));
  q[3] = tegula::ninfinity<int>();
  q[4] = tegula::infinity<int8_t>();
  q[5] = tegula::infinity<uint16_t>();
  q[6] = tegula::pack_f16x2(1.0f, 2.0f);
  q[7] = cast<long long>(cast<double>(cast<bfloat16_t>(-7)));
  q[8] = tegula::floordiv(-7, 2) * 100 + tegula::floormod(-7, 2);
  q[9] = tegula::floordiv(7ll, -2ll) * 100 + tegula::floormod(7ll, -2ll);
  q[10] = static_cast<long long>(tegula::floormod(-7.5f, 2.0f) * 10);
  q[11] = cast<int>(tegula::max_value<half_t>()) + cast<int>(tegula::min_value<half_t>()) * 2;
  q[12] = static_cast<long long>(tegula::sigmoid(0.0f) * 4);
}

__global__ void run_warp(float* f, long long* q) {
  int lane = threadIdx.x;
  float v = float(lane - 10);
  f[lane * 8 + 0] = tegula::warp_reduce<tegula::SumOp>(v, 0b11111);
  f[lane * 8 + 1] = tegula::warp_reduce<tegula::MaxOp>(v, 0b00011);
  f[lane * 8 + 2] = tegula::warp_reduce<tegula::SumOp>(v, 0b11100);
  f[lane * 8 + 3] = tegula::warp_reduce<tegula::AbsSumOp>(tegula::abs(v), 0b11111);
  f[lane * 8 + 4] = tegula::warp_reduce<tegula::AbsMaxOp>(tegula::abs(v), 0b11111);
  f[lane * 8 + 5] = tegula::warp_reduce<tegula::MinOp>(v, 0b11111);
  f[lane * 8 + 6] = tegula::to_float(tegula::warp_reduce<tegula::SumOp>(half_t(float(lane)), 31));
  f[lane * 8 + 7] = tegula::to_float(tegula::warp_reduce<tegula::MaxOp>(bfloat16_t(float(lane)), 31));
  q[lane] = tegula::warp_reduce<tegula::SumOp>((long long)lane << 33, 31);
}

__global__ void run_vec(const float* in, float* out) {
  tegula::store_vec(out, tegula::load_vec<4>(in + 4));
  tegula::store_vec_pred(out + 4, tegula::load_vec_pred<4>(in + 6, 2, -1.0f), 4);
  tegula::store_vec(out + 8, tegula::load_vec<8>(in));
}

// One warp: D(16x8) = A(16xK) B(Kx8) through every mma form. A row-major, Bnk is B
// stored n-major (k contiguous), Bkn k-major; D is written row-major into d[form][16][8].
__global__ void run_mma(const half_t* A, const half_t* Bnk, const half_t* Bkn, const int8_t* A8,
                        const int8_t* B8nk, const float* A32, const float* B32nk, float* d,
                        half_t* scratch) {
  __shared__ __align__(16) half_t as[16 * 16], bnk[8 * 16], bkn[16 * 8];
  __shared__ __align__(16) bfloat16_t as16[16 * 16], bnk16[8 * 16];
  int l = threadIdx.x, g = l / 4, t = l % 4;
  for (int i = l; i < 256; i += 32) {
    as[i] = A[i];
    as16[i] = tegula::cast<bfloat16_t>(A[i]);
  }
  for (int i = l; i < 128; i += 32) {
    bnk[i] = Bnk[i];
    bkn[i] = Bkn[i];
    bnk16[i] = tegula::cast<bfloat16_t>(Bnk[i]);
  }
  __syncthreads();
  int a_off = ((l % 8) + 8 * ((l / 8) % 2)) * 16 + 8 * (l / 16);
  int b_off = (l % 8) * 16 + 8 * ((l / 8) % 2);
  int bt_off = ((l % 8) + 8 * ((l / 8) % 2)) * 8;
  uint32_t a[4], b[2], bt[2], a16[4], b16[2], h[2] = {0u, 0u};
  tegula::ldmatrix_x4(a, as + a_off);
  tegula::ldmatrix_x2(b, bnk + b_off);
  tegula::ldmatrix_x2_trans(bt, bkn + bt_off);
  tegula::ldmatrix_x4(a16, as16 + a_off);
  tegula::ldmatrix_x2(b16, bnk16 + b_off);
  float c[6][4] = {};
  tegula::mma_m16n8k16_f16f32(c[0], a, b, c[0]);
  tegula::mma_m16n8k16_f16f32(c[1], a, bt, c[1]);
  tegula::mma_m16n8k16_bf16f32(c[2], a16, b16, c[2]);
  tegula::mma_m16n8k16_f16f16(h, a, b, h);
  c[3][0] = __low2float(*reinterpret_cast<__half2*>(&h[0]));
  c[3][1] = __high2float(*reinterpret_cast<__half2*>(&h[0]));
  c[3][2] = __low2float(*reinterpret_cast<__half2*>(&h[1]));
  c[3][3] = __high2float(*reinterpret_cast<__half2*>(&h[1]));
  auto word = [](const int8_t* p) { return *reinterpret_cast<const uint32_t*>(p); };
  uint32_t a8[4] = {word(A8 + g * 32 + 4 * t), word(A8 + (g + 8) * 32 + 4 * t),
                    word(A8 + g * 32 + 16 + 4 * t), word(A8 + (g + 8) * 32 + 16 + 4 * t)};
  uint32_t b8[2] = {word(B8nk + g * 32 + 4 * t), word(B8nk + g * 32 + 16 + 4 * t)};
  int ic[4] = {0, 0, 0, 0};
  tegula::mma_m16n8k32_s8s32(ic, a8, b8, ic);
  for (int i = 0; i < 4; ++i) c[4][i] = float(ic[i]);
  uint32_t a32[4] = {tegula::to_tf32(A32[g * 8 + t]), tegula::to_tf32(A32[(g + 8) * 8 + t]),
                     tegula::to_tf32(A32[g * 8 + t + 4]), tegula::to_tf32(A32[(g + 8) * 8 + t + 4])};
  uint32_t b32[2] = {tegula::to_tf32(B32nk[g * 8 + t]), tegula::to_tf32(B32nk[g * 8 + t + 4])};
  tegula::mma_m16n8k8_tf32f32(c[5], a32, b32, c[5]);
  for (int form = 0; form < 6; ++form) {
    float* out = d + form * 128;
    out[g * 8 + 2 * t] = c[form][0];
    out[g * 8 + 2 * t + 1] = c[form][1];
    out[(g + 8) * 8 + 2 * t] = c[form][2];
    out[(g + 8) * 8 + 2 * t + 1] = c[form][3];
  }
  __shared__ __align__(16) half_t st[16 * 16];
  tegula::stmatrix_x4(st + a_off, a);  // must land where ldmatrix_x4 read it from
  __syncthreads();
  for (int i = l; i < 256; i += 32) scratch[i] = st[i];
}

// One warp: C (32 x 16) = A B for a 2:4 sparse A (32 x 64) given as kept elements (32 x 32)
// and natural metadata E (32 x 64/F), through gemm_sp_ss (two mma tiles each way); C
// written row-major from the accumulator layout ([mi][ni][e], gemm.h).
template <typename Meta>
__global__ void run_gemm_sp(const half_t* kept, const Meta* E, const half_t* B, float* C) {
  constexpr int F = 8 * int(sizeof(Meta));
  __shared__ __align__(16) half_t as[32 * 32], bs[64 * 16];
  __shared__ __align__(16) Meta es[32 * 64 / F];
  int l = threadIdx.x, g = l / 4, t = l % 4;
  for (int i = l; i < 32 * 32; i += 32) as[i] = kept[i];
  for (int i = l; i < 64 * 16; i += 32) bs[i] = B[i];
  for (int i = l; i < 32 * 64 / F; i += 32) es[i] = E[i];
  __syncthreads();
  float c[2 * 2 * 4];
  tegula::gemm_sp_ss<32, 16, 64, 1, 1, false, false, false, true, false, false, false>(as, es, bs, c);
  for (int mi = 0; mi < 2; ++mi)
    for (int ni = 0; ni < 2; ++ni)
      for (int e = 0; e < 4; ++e) C[(mi * 16 + g + 8 * (e / 2)) * 16 + ni * 8 + 2 * t + e % 2] = c[(mi * 2 + ni) * 4 + e];
}

__global__ void run_async(const float4* gin, float4* out, int* flags) {
  __shared__ __align__(16) float4 s[64];
  __shared__ __align__(8) uint64_t bar;
  int i = threadIdx.x;
  tegula::cp_async_16(&s[i], gin + i);
  tegula::cp_async_16_pred(&s[32 + i], gin + 32 + i, i % 2 == 0);
  tegula::cp_async_commit();
  tegula::cp_async_wait<0>();
  __syncthreads();
  out[i] = s[i];
  out[32 + i] = s[32 + i];
  if (i == 0) {
    tegula::mbarrier_init(&bar, 32);
    tegula::fence_barrier_init();
  }
  __syncthreads();
  tegula::mbarrier_arrive(&bar);
  tegula::mbarrier_wait(&bar, 0);
  if (i == 0) tegula::mbarrier_arrive_expect_tx(&bar, 0);
  else tegula::mbarrier_arrive(&bar);
  tegula::mbarrier_wait(&bar, 1);
  tegula::barrier_sync(1, 32);
  flags[i] = 1;
}

__global__ void run_atomic(float* f, half_t* h, bfloat16_t* b, int* i, long long* q) {
  tegula::atomic_add(f, 1.0f);
  tegula::atomic_add(h, half_t(1.0f));
  tegula::atomic_add(b, bfloat16_t(1.0f));
  tegula::atomic_add(i, 1);
  tegula::atomic_add(q, -1ll);
  tegula::atomic_add_x2(h + 2, Vec<half_t, 2>{{half_t(1.0f), half_t(2.0f)}});
  tegula::atomic_add_x4(f + 4, Vec<float, 4>{{1.f, 2.f, 3.f, 4.f}});
  if (threadIdx.x == 0) tegula::print("run_atomic", 2, half_t(1.5f));
}

template <typename T>
static T* managed(size_t n) {
  void* p = nullptr;
  cudaError_t err = cudaMallocManaged(&p, n * sizeof(T));
  if (err != cudaSuccess) {
    printf("FAIL cudaMallocManaged: %s\n", cudaGetErrorString(err));
    exit(2);
  }
  memset(p, 0, n * sizeof(T));
  return static_cast<T*>(p);
}

int main() {
  float* r = managed<float>(8);
  long long* q = managed<long long>(32);
  run_scalar<<<1, 1>>>(r, q);
  cudaDeviceSynchronize();
  expect(r[0] == 16908288.f, "int -> bf16 rounds once: 2^24 + 2^16 + 1 -> 2^24 + 2^17");
  expect(r[1] == 1.0009765625f, "double -> half rounds once");
  expect(r[2] == 1.0f && std::isinf(r[3]) && r[3] > 0 && std::isinf(r[4]) && r[4] < 0,
         "half -> bf16 ties to even; infinities");
  expect(std::isnan(r[5]), "max propagates NaN (torch.maximum)");
  expect(std::fabs(r[6] - 1.0f) < 1e-6f, "exp2_fast within 1e-6 of exp2f");
  expect(r[7] == 2.71875f, "half exp");
  expect(q[0] == -2 && q[1] == 0 && q[2] == 1 && q[3] == -2147483648ll && q[4] == 127 &&
             q[5] == 65535 && q[6] == 0x40003C00 && q[7] == -7 && q[11] == -65504 && q[12] == 2,
         "casts to int and bool, integer limits, pack_f16x2 order");

  expect(q[8] == -400 + 1 && q[9] == -400 - 1 && q[10] == 5, "floordiv, floormod: Python signs");

  float* w = managed<float>(256);
  run_warp<<<1, 32>>>(w, q);
  cudaDeviceSynchronize();
  bool ok = true;
  for (int l = 0; l < 32; ++l) {
    const float* x = w + l * 8;
    ok &= x[0] == 176 && x[1] == 4 * (l / 4) + 3 - 10 && x[2] == 8 * (l % 4) + 32 && x[3] == 286 &&
          x[4] == 21 && x[5] == -10 && x[6] == 496 && x[7] == 31 && q[l] == (496ll << 33);
  }
  expect(ok, "warp_reduce: sum, quad max, strided sum, abs ops, min, half, bf16, int64");

  float* vin = managed<float>(16);
  float* vout = managed<float>(16);
  for (int k = 0; k < 16; ++k) vin[k] = float(k);
  run_vec<<<1, 1>>>(vin, vout);
  cudaDeviceSynchronize();
  const float want_vec[16] = {4, 5, 6, 7, 6, 7, -1, -1, 0, 1, 2, 3, 4, 5, 6, 7};
  expect(same(vout, want_vec, 16), "load_vec, load_vec_pred, store_vec");

  half_t* A = managed<half_t>(256);
  half_t* Bnk = managed<half_t>(128);
  half_t* Bkn = managed<half_t>(128);
  int8_t* A8 = managed<int8_t>(512);
  int8_t* B8 = managed<int8_t>(256);
  float* A32 = managed<float>(128);
  float* B32 = managed<float>(64);
  float* D = managed<float>(6 * 128);
  half_t* scratch = managed<half_t>(256);
  float ref16[128] = {}, ref8[128] = {}, ref32[128] = {};
  for (int m = 0; m < 16; ++m)
    for (int k = 0; k < 32; ++k) {
      A8[m * 32 + k] = int8_t((m * 7 + k * 3) % 11 - 5);
      if (k < 16) A[m * 16 + k] = __float2half(float((m * 3 + k) % 7 - 3));
      if (k < 8) A32[m * 8 + k] = float((m + 2 * k) % 5 - 2);
    }
  for (int n = 0; n < 8; ++n)
    for (int k = 0; k < 32; ++k) {
      B8[n * 32 + k] = int8_t((n * 5 + k) % 9 - 4);
      if (k < 16) Bnk[n * 16 + k] = Bkn[k * 8 + n] = __float2half(float((k * 5 + n) % 5 - 2));
      if (k < 8) B32[n * 8 + k] = float((3 * n + k) % 7 - 3);
    }
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 32; ++k) {
        ref8[m * 8 + n] += A8[m * 32 + k] * B8[n * 32 + k];
        if (k < 16) ref16[m * 8 + n] += __half2float(A[m * 16 + k]) * __half2float(Bnk[n * 16 + k]);
        if (k < 8) ref32[m * 8 + n] += A32[m * 8 + k] * B32[n * 8 + k];
      }
  run_mma<<<1, 32>>>(A, Bnk, Bkn, A8, B8, A32, B32, D, scratch);
  cudaDeviceSynchronize();
  const char* forms[6] = {"mma f16f32 + ldmatrix", "mma f16f32 + ldmatrix_trans", "mma bf16f32",
                          "mma f16f16", "mma s8s32", "mma tf32f32"};
  const float* refs[6] = {ref16, ref16, ref16, ref16, ref8, ref32};
  for (int form = 0; form < 6; ++form) expect(same(D + form * 128, refs[form], 128), forms[form]);
  expect(memcmp(scratch, A, 512) == 0, "stmatrix_x4 inverts ldmatrix_x4");

  // 2:4 sparse A: group q of row m keeps positions (p0, p1), a pattern through all six
  // pairs, zero metadata (positions 0 and 1) for the groups of row 5.
  half_t* kept = managed<half_t>(32 * 32);
  half_t* Bsp = managed<half_t>(64 * 16);
  short* E16 = managed<short>(32 * 4);
  signed char* E8 = managed<signed char>(32 * 8);
  float* Csp = managed<float>(32 * 16);
  float refsp[32 * 16] = {};
  const int pairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  for (int i = 0; i < 32 * 4; ++i) E16[i] = 0;
  for (int i = 0; i < 32 * 8; ++i) E8[i] = 0;
  for (int k = 0; k < 64; ++k)
    for (int n = 0; n < 16; ++n) Bsp[k * 16 + n] = __float2half(float((k * 3 + n * 5) % 7 - 3));
  for (int m = 0; m < 32; ++m)
    for (int q = 0; q < 16; ++q) {
      const int* p = m == 5 ? pairs[0] : pairs[(m * 5 + q * 7) % 6];
      unsigned nibble = m == 5 ? 0u : unsigned(p[0] | (p[1] << 2));
      E16[m * 4 + q / 4] = short(unsigned(E16[m * 4 + q / 4]) | (nibble << (4 * (q % 4))));
      E8[m * 8 + q / 2] = (signed char)(unsigned(E8[m * 8 + q / 2]) | (nibble << (4 * (q % 2))));
      for (int s = 0; s < 2; ++s) {
        float v = float((m * 7 + q * 3 + s) % 9 - 4);
        kept[m * 32 + 2 * q + s] = __float2half(v);
        for (int n = 0; n < 16; ++n) refsp[m * 16 + n] += v * __half2float(Bsp[(4 * q + p[s]) * 16 + n]);
      }
    }
  run_gemm_sp<short><<<1, 32>>>(kept, E16, Bsp, Csp);
  cudaDeviceSynchronize();
  expect(same(Csp, refsp, 32 * 16), "gemm_sp_ss (mma.sp m16n8k32), int16 metadata");
  run_gemm_sp<signed char><<<1, 32>>>(kept, E8, Bsp, Csp);
  cudaDeviceSynchronize();
  expect(same(Csp, refsp, 32 * 16), "gemm_sp_ss (mma.sp m16n8k32), int8 metadata");

  float4* gin = managed<float4>(64);
  float4* gout = managed<float4>(64);
  int* flags = managed<int>(32);
  for (int k = 0; k < 64; ++k) gin[k] = make_float4(k, k + 1, k + 2, k + 3);
  run_async<<<1, 32>>>(gin, gout, flags);
  cudaError_t err = cudaDeviceSynchronize();
  ok = err == cudaSuccess;
  for (int k = 0; k < 64 && ok; ++k) {
    bool zero = k >= 32 && k % 2 == 1;
    ok &= gout[k].x == (zero ? 0.f : float(k)) && gout[k].w == (zero ? 0.f : float(k + 3));
  }
  for (int k = 0; k < 32; ++k) ok &= flags[k] == 1;
  expect(ok, "cp.async, zero fill, two mbarrier phases, named barrier");

  float* af = managed<float>(8);
  half_t* ah = managed<half_t>(4);
  bfloat16_t* ab = managed<bfloat16_t>(1);
  int* ai = managed<int>(1);
  long long* aq = managed<long long>(1);
  run_atomic<<<1, 256>>>(af, ah, ab, ai, aq);
  err = cudaDeviceSynchronize();
  expect(err == cudaSuccess && af[0] == 256 && __half2float(ah[0]) == 256 &&
             __bfloat162float(ab[0]) == 256 && ai[0] == 256 && aq[0] == -256 &&
             __half2float(ah[2]) == 256 && __half2float(ah[3]) == 512 && af[4] == 256 &&
             af[7] == 1024,
         "atomic_add scalar, x2, x4");
  printf("%s (%s)\n", failures ? "FAILED" : "PASSED", cudaGetErrorString(cudaGetLastError()));
  return failures ? 1 : 0;
}
#endif  // TEGULA_DEVICE_LIB_RUN
