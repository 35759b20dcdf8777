#pragma once
// CUPTI activity capture into a session: kernels (CONCURRENT_KERNEL), CUDA runtime calls
// (RUNTIME) and copies (MEMCPY), plus NVTX ranges through CUPTI (MARKER) when NVTX injection
// points at libcupti (NVTX_INJECTION64_PATH). libcupti and the driver are loaded at run time
// (dlopen), so binaries run on machines without CUDA; there start() returns the one-line notice
// the caller prints before recording CPU spans only.
//
// Buffers: CUPTI asks for a buffer per request (buffer_bytes each), hands it back completed on
// its own thread; each completed buffer is parsed (profiler/cupti_records.h) and queued on the
// recorder in one batch. Dropped records (cuptiActivityGetNumDroppedRecords) and invalid ones
// are counted. Clock: at start the capture measures CUPTI timestamp - monotonic and sets it as
// the recorder's clock offset, so the engine's phases land on the CUPTI clock beside the kernels.
// One capture per process (CUPTI's callbacks are process-wide).
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/expected.h"
#include "profiler/recorder.h"

namespace specula::profiler {

struct CuptiOptions {
  size_t buffer_bytes = 8 << 20;
  bool markers = false;      // MARKER too (also on when NVTX_INJECTION64_PATH is set)
  std::string library_path;  // libcupti to load; empty: $SPECULA_CUPTI_PATH, then the usual names
};

struct CuptiStats {
  int64_t buffers = 0;
  int64_t records = 0;
  int64_t invalid = 0;   // unknown or inconsistent timestamps
  int64_t dropped = 0;   // CUPTI ran out of buffer space
  int64_t unknown_kinds = 0;
};

class CuptiCapture {
 public:
  // Loads libcupti, checks for a GPU, enables the activity kinds. The error is a one-line notice:
  // "CUPTI capture off: <why>".
  static Expected<std::unique_ptr<CuptiCapture>> start(std::shared_ptr<Recorder> recorder, CuptiOptions options = {});
  ~CuptiCapture();
  CuptiCapture(const CuptiCapture&) = delete;
  CuptiCapture& operator=(const CuptiCapture&) = delete;

  // Hands every completed and pending record to the recorder now.
  Status flush();
  // Disables the activity kinds and flushes; idempotent (the destructor calls it).
  Status stop();
  CuptiStats stats() const;
  int64_t clock_offset_ns() const { return clock_offset_ns_; }
  const std::string& library() const { return library_; }

  struct Api;  // the dlsym'd entry points (cupti_capture.cpp)

 private:
  CuptiCapture() = default;
  friend struct CaptureCallbacks;

  std::shared_ptr<Recorder> recorder_;
  std::unique_ptr<Api> api_;
  CuptiOptions options_;
  std::string library_;
  int64_t start_ns_ = 0;  // CUPTI clock
  int64_t clock_offset_ns_ = 0;
  bool stopped_ = false;
  std::atomic<int64_t> buffers_{0}, records_{0}, invalid_{0}, dropped_{0}, unknown_{0};
};

}  // namespace specula::profiler
