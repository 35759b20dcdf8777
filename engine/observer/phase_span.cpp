#include "engine/observer/phase_span.h"

#include <chrono>

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define SPECULA_HAVE_NVTX 1
#else
#define SPECULA_HAVE_NVTX 0
#endif

namespace specula {

int64_t observer_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void nvtx_push(const char* name) {
#if SPECULA_HAVE_NVTX
  nvtxRangePushA(name);
#else
  (void)name;
#endif
}

void nvtx_pop() {
#if SPECULA_HAVE_NVTX
  nvtxRangePop();
#endif
}

bool nvtx_available() { return SPECULA_HAVE_NVTX != 0; }

PhaseSpan::PhaseSpan(Observer* observer, const char* name, int64_t round, int32_t layer)
    : observer_(observer), name_(name), round_(round), layer_(layer), start_ns_(observer_now_ns()) {
  nvtx_push(name);
}

double PhaseSpan::end() {
  if (!open_) return ms_;
  open_ = false;
  nvtx_pop();
  const int64_t end_ns = observer_now_ns();
  ms_ = static_cast<double>(end_ns - start_ns_) / 1e6;
  if (observes(observer_, EventKind::kCpuSpan)) {
    observer_->on_event(CpuSpanEvent{name_, start_ns_, end_ns, round_, layer_});
  }
  return ms_;
}

}  // namespace specula
