#pragma once
// CUPTI activity records -> session rows. CUPTI hands completed buffers of packed records
// (CUpti_ActivityKernel10, CUpti_ActivityAPI, CUpti_ActivityMemcpy6, CUpti_ActivityMarker2 in
// CUDA 13); this file turns them into the rows of profiler/session_store.h, without loading
// libcupti, so it is tested on synthetic buffers on machines without a GPU.
//
// Validation: a record whose start or end is 0 (CUPTI's "timestamp unknown"), whose end precedes
// its start, or whose start precedes the capture's start is counted in `invalid` and dropped.
// Marker start/end pairs (NVTX ranges through CUPTI's injection) become NvtxRange rows unless
// their name is an engine phase the observer already records.
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiler/recorder.h"

namespace specula::profiler {

// True when this build has the CUPTI headers (the record layouts); without them the parser and
// the capture are present but report that they cannot run.
bool cupti_headers_available();

class CuptiRecordParser {
 public:
  // min_start_ns: records starting before it (stale, from before the capture) are invalid.
  explicit CuptiRecordParser(int64_t min_start_ns = 1) : min_start_ns_(min_start_ns) {}

  // One record; `record` points at a CUpti_Activity of any kind. Unknown kinds are counted.
  void add(const void* record);
  // Runtime API records carry a callback id; the capture names them through libcupti
  // (cuptiGetCallbackName). Without a namer they read "cbid N".
  void set_runtime_namer(std::function<std::string(uint32_t cbid)> namer) { runtime_name_ = std::move(namer); }
  // Moves what was parsed so far into a batch for the recorder (names travel with it).
  GpuActivityBatch take();

  int64_t invalid() const { return invalid_; }
  int64_t unknown_kinds() const { return unknown_kinds_; }
  int64_t parsed() const { return parsed_; }

 private:
  bool valid(uint64_t start, uint64_t end);
  std::string_view intern(const std::string& raw, bool demangle);

  int64_t min_start_ns_;
  std::function<std::string(uint32_t)> runtime_name_;
  GpuActivityBatch batch_;
  std::unordered_map<std::string, std::string_view> names_;  // raw name -> interned (demangled)
  std::unordered_map<uint32_t, std::pair<uint64_t, std::string>> open_markers_;  // id -> (start, name)
  int64_t invalid_ = 0;
  int64_t unknown_kinds_ = 0;
  int64_t parsed_ = 0;
};

// "_Z10vector_addPKfS0_Pfi" -> "vector_add(float const*, float const*, float*, int)"; names that are
// not mangled C++ come back unchanged. (abi::__cxa_demangle, the toolchain's demangler.)
std::string demangle_kernel_name(const char* name);

}  // namespace specula::profiler
