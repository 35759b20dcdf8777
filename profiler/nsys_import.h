#pragma once
// `specula-cli import-nsys CAPTURE.sqlite --out SESSION.sqlite`: an Nsight Systems capture
// (`nsys export --type sqlite`), of Specula or of any other engine (vLLM, SGLang, llama.cpp), as
// a Specula session the timeline, export and diff read like a recorded one.
//
// Read from the capture, by column name (so nsys versions that add or reorder columns work):
//   CUPTI_ACTIVITY_KIND_KERNEL, _MEMCPY, _RUNTIME   -> the same tables (names via StringIds)
//   NVTX_EVENTS  eventType 59 (push/pop) and 60 (start/end) ranges with an end -> NVTX_EVENTS
//   TARGET_INFO_GPU                                  -> TARGET_INFO_GPU
// Layout followed: the Nsight Systems SQLite export schema as documented for nsys 2024.x/2025.x
// ("SQLite Export Schema Reference"); the columns each table must have are checked and named
// in the error when missing. Times stay as nsys wrote them (integer ns on its session clock).
#include <cstdint>
#include <string>

#include "engine/core/expected.h"

namespace specula::profiler {

struct NsysImportStats {
  int64_t kernels = 0;
  int64_t memcpys = 0;
  int64_t runtime_calls = 0;
  int64_t nvtx_ranges = 0;
  int64_t gpus = 0;
};

Expected<NsysImportStats> import_nsys(const std::string& capture_path, const std::string& session_path,
                                      bool overwrite = false);

}  // namespace specula::profiler
