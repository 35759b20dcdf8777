#pragma once
// Engine phases as spans: each is an NVTX range (so Nsight Systems and a CUPTI MARKER capture see
// it) and, when the observer wants CPU spans, a CpuSpanEvent (so a CPU-only run records it too).
//
//   PhaseSpan span(observer, "verify", round);   // push
//   ...                                          // the phase
//   span.end();                                  // pop + event (the destructor ends it too)
//
// NVTX comes from the CUDA toolkit's header-only NVTX3: without an injection library
// (NVTX_INJECTION64_PATH, set by nsys or our CUPTI capture) each call is a load and a branch.
// Builds without the header get no-op ranges.
#include <cstdint>
#include <string>

#include "engine/observer/observer.h"

namespace specula {

// Integer nanoseconds on the observer clock (CLOCK_MONOTONIC: steady_clock on Linux, the
// profiler's monotonic_ns()).
int64_t observer_now_ns();

void nvtx_push(const char* name);
void nvtx_pop();
bool nvtx_available();  // compiled with NVTX3

class PhaseSpan {
 public:
  // `name` must outlive the span (a string literal); layer -1 = not a per-layer phase.
  PhaseSpan(Observer* observer, const char* name, int64_t round = -1, int32_t layer = -1);
  ~PhaseSpan() { end(); }
  PhaseSpan(const PhaseSpan&) = delete;
  PhaseSpan& operator=(const PhaseSpan&) = delete;

  // Ends the phase now; later calls do nothing. Returns the span's length in ms.
  double end();

 private:
  Observer* observer_;
  const char* name_;
  int64_t round_;
  int32_t layer_;
  int64_t start_ns_;
  bool open_ = true;
  double ms_ = 0;
};

}  // namespace specula
