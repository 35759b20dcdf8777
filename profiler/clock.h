#pragma once
// The profiler's CPU clock: integer nanoseconds on CLOCK_MONOTONIC, the clock NVTX_EVENTS
// rows use in CPU-only runs (Nsight Systems' SQLite export also stores integer ns).
#include <cstdint>

namespace specula::profiler {

int64_t monotonic_ns();

// A CPU span measured on monotonic_ns(); end_ns >= start_ns.
struct CpuSpan {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t duration_ns() const { return end_ns - start_ns; }
};

}  // namespace specula::profiler
