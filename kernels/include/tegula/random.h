// T.rng_init / T.rng_rand / T.rng_rand_float: one Philox4x32-10 generator per thread, the
// same numbers as curand's curandStatePhilox4_32_10_t (curand_init(seed, subsequence,
// offset), curand, curand_uniform, curand_uniform_double, curand_normal,
// curand_normal_double), written here because curand_kernel.h does not build beside this
// library under NVRTC (its cstdint declares int64_t as long long, config.h as long).
//
// The stream: draw k after init(seed, seq, off) is word (off + k) % 4 of
// philox10(counter = seq * 2^64 + (off + k) / 4, key = seed).
//
// The draws are calls, not inlined: a T.Parallel loop's slots are unrolled, so a thread
// of 128 slots drawing normals in five loops reaches them from 640 sites, and inlining
// the Philox rounds and Box-Muller into each took NVRTC 75 to 130 s (2.6 s outlined). The
// state lives in local memory either way (out[pos] is indexed at run time).
#pragma once

#include "tegula/config.h"

namespace tegula {

struct Philox {
  uint32_t ctr[4], out[4], key[2];
  int pos;
  bool has_extra, has_extra_double;
  float extra;
  double extra_double;

  TEGULA_DEVICE void init(unsigned long long seed, unsigned long long seq, unsigned long long off) {
    key[0] = uint32_t(seed), key[1] = uint32_t(seed >> 32);
    ctr[0] = ctr[1] = 0;
    ctr[2] = uint32_t(seq), ctr[3] = uint32_t(seq >> 32);
    has_extra = has_extra_double = false;
    pos = int(off & 3);
    add(off >> 2);
    refill();
  }

  // curand(): the next 32 random bits.
  TEGULA_DEVICE_OUTLINED unsigned next() {
    unsigned r = out[pos];
    if (++pos == 4) {
      add(1);
      refill();
      pos = 0;
    }
    return r;
  }
  // In (0, 1]: curand_uniform and curand_uniform_double (one draw each).
  TEGULA_DEVICE float uniform() { return next() * 2.3283064e-10f + 2.3283064e-10f / 2.0f; }
  TEGULA_DEVICE double uniform_double() { return next() * 2.3283064365386963e-10 + 2.3283064365386963e-10 / 2.0; }
  // Standard normal by Box-Muller, two draws giving two values, the second kept for the
  // next call: curand_normal (float, __sincosf) and curand_normal_double (four draws).
  TEGULA_DEVICE_OUTLINED float normal() {
    if (has_extra) {
      has_extra = false;
      return extra;
    }
    unsigned x = next(), y = next();
    float u = x * 2.3283064e-10f + 2.3283064e-10f / 2.0f;
    float v = y * (2.3283064e-10f * 6.2831855f) + (2.3283064e-10f * 6.2831855f) / 2.0f;
    float s = sqrtf(-2.0f * logf(u)), sn, cs;
    __sincosf(v, &sn, &cs);
    extra = cs * s;
    has_extra = true;
    return sn * s;
  }
  TEGULA_DEVICE_OUTLINED double normal_double() {
    if (has_extra_double) {
      has_extra_double = false;
      return extra_double;
    }
    unsigned x0 = next(), x1 = next(), y0 = next(), y1 = next();
    unsigned long long zx = (unsigned long long)x0 ^ ((unsigned long long)x1 << 21);
    unsigned long long zy = (unsigned long long)y0 ^ ((unsigned long long)y1 << 21);
    double u = zx * 1.1102230246251565e-16 + 1.1102230246251565e-16 / 2.0;
    double v = zy * (1.1102230246251565e-16 * 2.0) + 1.1102230246251565e-16;
    double s = sqrt(-2.0 * log(u)), sn, cs;
    sincospi(v, &sn, &cs);
    extra_double = cs * s;
    has_extra_double = true;
    return sn * s;
  }

 private:
  // The 128-bit counter plus n.
  TEGULA_DEVICE void add(unsigned long long n) {
    unsigned long long lo = ((unsigned long long)ctr[1] << 32 | ctr[0]) + n;
    bool carry = lo < n;
    ctr[0] = uint32_t(lo), ctr[1] = uint32_t(lo >> 32);
    if (carry && ++ctr[2] == 0) ++ctr[3];
  }
  TEGULA_DEVICE_OUTLINED void refill() {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
#pragma unroll
    for (int round = 0; round < 10; ++round) {
      uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
      uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
      c0 = hi1 ^ c1 ^ k0, c1 = lo1, c2 = hi0 ^ c3 ^ k1, c3 = lo0;
      k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
  }
};

}  // namespace tegula
