// T.print from device code. Every line names the block and thread that printed it,
// because the kernel prints from all threads unless the user guards the call:
//   msg: block=(0,1,0) thread=(37,0,0) float32 = 0.5
// T.device_assert, which prints the same way before it stops the kernel.
// printf is built into NVRTC's device code; nvcc declares it in <cstdio>.
#pragma once

#include "tegula/config.h"
#include "tegula/math.h"
#if !defined(__CUDACC_RTC__)
#include <cstdio>  // printf outside a template (device_assert); NVRTC has it built in
#endif

namespace tegula {

namespace detail {

// The dtype names of the tile IR, so the output reads like the DSL the user wrote.
template <typename T> struct PrintName { static constexpr const char* value = "?"; };
#define TEGULA_PRINT_NAME(T, name) \
  template <> struct PrintName<T> { static constexpr const char* value = name; };
TEGULA_PRINT_NAME(float, "float32")
TEGULA_PRINT_NAME(double, "float64")
TEGULA_PRINT_NAME(half_t, "float16")
TEGULA_PRINT_NAME(fp8_e4m3_t, "float8_e4m3fn")
TEGULA_PRINT_NAME(fp8_e5m2_t, "float8_e5m2")
TEGULA_PRINT_NAME(bfloat16_t, "bfloat16")
TEGULA_PRINT_NAME(bool, "bool")
TEGULA_PRINT_NAME(signed char, "int8")
TEGULA_PRINT_NAME(short, "int16")
TEGULA_PRINT_NAME(int, "int32")
TEGULA_PRINT_NAME(long, "int64")
TEGULA_PRINT_NAME(long long, "int64")
TEGULA_PRINT_NAME(unsigned char, "uint8")
TEGULA_PRINT_NAME(unsigned short, "uint16")
TEGULA_PRINT_NAME(unsigned int, "uint32")
TEGULA_PRINT_NAME(unsigned long, "uint64")
TEGULA_PRINT_NAME(unsigned long long, "uint64")
#undef TEGULA_PRINT_NAME

// The two line shapes, for a scalar and for element `index` of a buffer, around one
// printf conversion.
#define TEGULA_PRINT_FORMATS(conversion)                                  \
  "%s: block=(%d,%d,%d) thread=(%d,%d,%d) %s = " conversion "\n",        \
      "%s[%d]: block=(%d,%d,%d) thread=(%d,%d,%d) %s = " conversion "\n"

template <typename Arg>
TEGULA_DEVICE void emit(const char* scalar_format, const char* indexed_format, const char* msg,
                        int index, const char* dtype, Arg value) {
  int bx = blockIdx.x, by = blockIdx.y, bz = blockIdx.z;
  int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  if (index < 0) {
    printf(scalar_format, msg, bx, by, bz, tx, ty, tz, dtype, value);
  } else {
    printf(indexed_format, msg, index, bx, by, bz, tx, ty, tz, dtype, value);
  }
}

// Floats print with 9 significant digits, enough to tell any two float32 values apart.
template <typename T>
TEGULA_DEVICE void print_value(const char* msg, int index, T v) {
  const char* dtype = PrintName<T>::value;
  if constexpr (is_16bit_float<T> || is_8bit_float<T>) {
    emit(TEGULA_PRINT_FORMATS("%.9g"), msg, index, dtype, static_cast<double>(to_float(v)));
  } else if constexpr (is_float<T>) {
    emit(TEGULA_PRINT_FORMATS("%.9g"), msg, index, dtype, static_cast<double>(v));
  } else if constexpr (is_same<T, bool>) {
    emit(TEGULA_PRINT_FORMATS("%s"), msg, index, dtype, v ? "true" : "false");
  } else if constexpr (is_signed_integer<T>) {
    emit(TEGULA_PRINT_FORMATS("%lld"), msg, index, dtype, static_cast<long long>(v));
  } else if constexpr (is_integer<T>) {
    emit(TEGULA_PRINT_FORMATS("%llu"), msg, index, dtype, static_cast<unsigned long long>(v));
  } else {
    static_assert(always_false<T>, "print: T is not a scalar type of the tile IR");
  }
}
#undef TEGULA_PRINT_FORMATS

}  // namespace detail

// T.print(x, msg): one line per calling thread.
template <typename T>
TEGULA_DEVICE void print(const char* msg, T v) {
  detail::print_value(msg, -1, v);
}

// T.print of a buffer: the generated loop calls this once per element, flat index first.
template <typename T>
TEGULA_DEVICE void print(const char* msg, int index, T v) {
  detail::print_value(msg, index < 0 ? 0 : index, v);
}

// T.device_assert(cond, msg): a thread whose condition fails prints the message (which
// names the kernel line) and traps, so the launch fails as it does after CUDA's assert.
TEGULA_DEVICE void device_assert(bool cond, const char* msg) {
  if (!cond) {
    printf("device_assert failed: %s: block=(%d,%d,%d) thread=(%d,%d,%d)\n", msg, int(blockIdx.x), int(blockIdx.y),
           int(blockIdx.z), int(threadIdx.x), int(threadIdx.y), int(threadIdx.z));
    __trap();
  }
}

}  // namespace tegula
