// Event records for the instrumentation tool tegula.tools.cuda.iket: `iket.mark(name)` and
// `iket.range(name)` in a kernel become calls here, and each thread that reaches one
// appends a record to the launch's log. The log is the kernel's last parameter, a buffer
// the host allocates per launch; a null log (a launch nobody records) records nothing.
//
// Layout (tegula/tools/cuda/iket/records.py reads it): a 32-byte header, then records.
//   header:  u32 count (records claimed, which may pass the capacity: those past it are
//            dropped), u32 capacity, 24 bytes reserved
//   record:  u64 time (%globaltimer, ns), u32 event (id | phase << 16), u32 payload bits,
//            u32 linear block index, u32 threadIdx.x, u32 %smid, u32 reserved
#pragma once

#include "tegula/config.h"

namespace tegula {

struct IketRecord {
  unsigned long long time;
  unsigned event;
  unsigned payload;
  unsigned block;
  unsigned thread;
  unsigned sm;
  unsigned reserved;
};

struct IketLog {
  unsigned count;
  unsigned capacity;
  unsigned reserved[6];
};

static_assert(sizeof(IketRecord) == 32 && sizeof(IketLog) == 32, "the layout iket/records.py reads");

// The phase of an event, bits 16 and up of the record's event word.
enum : unsigned { kIketMark = 0, kIketRangeStart = 1, kIketRangeEnd = 2 };

// The clock every SM shares, read where the event is written: the volatile asm with a
// memory clobber keeps the memory accesses around the event on their side of it.
TEGULA_DEVICE unsigned long long iket_time() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

// Appends one record. The lanes of a warp that arrive together claim their slots with
// one atomic; a thread's later events always get later slots, so a thread's records in
// slot order are its events in program order. Outlined: a kernel may reach an event from
// many sites once its loops are unrolled.
TEGULA_DEVICE_OUTLINED void iket_append(IketLog* log, unsigned long long time, unsigned event, unsigned payload) {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  unsigned mask = __activemask();
  int leader = __ffs(mask) - 1;
  unsigned base = 0;
  if (int(lane) == leader) base = atomicAdd(&log->count, unsigned(__popc(mask)));
  base = __shfl_sync(mask, base, leader);
  unsigned slot = base + unsigned(__popc(mask & ((1u << lane) - 1u)));
  if (slot >= log->capacity) return;
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  IketRecord* r = reinterpret_cast<IketRecord*>(log + 1) + slot;
  r->time = time;
  r->event = event;
  r->payload = payload;
  r->block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  r->thread = threadIdx.x;
  r->sm = sm;
  r->reserved = 0;
}

TEGULA_DEVICE void iket_event(IketLog* log, unsigned id, unsigned phase, unsigned payload = 0) {
  if (log == nullptr) return;
  unsigned long long time = iket_time();
  iket_append(log, time, id | (phase << 16), payload);
}

TEGULA_DEVICE void iket_mark(IketLog* log, unsigned id, unsigned payload = 0) {
  iket_event(log, id, kIketMark, payload);
}
TEGULA_DEVICE void iket_range_start(IketLog* log, unsigned id, unsigned payload = 0) {
  iket_event(log, id, kIketRangeStart, payload);
}
TEGULA_DEVICE void iket_range_end(IketLog* log, unsigned id) { iket_event(log, id, kIketRangeEnd, 0); }

}  // namespace tegula
