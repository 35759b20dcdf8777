#pragma once
// Session files as files: a consistent copy of a session (export/save as) and a short summary
// for the session browser. No Qt.
#include <cstdint>
#include <string>

#include "engine/core/expected.h"

namespace specula::ui {

// Writes a compacted single-file copy of the session at `from` to `to` (SQLite VACUUM INTO, so
// a session still being recorded in WAL mode copies consistently). Refuses an existing `to`.
Status export_session_copy(const std::string& from, const std::string& to);
// The profiler's exports (profiler/session_export.h) of the session at `from`: a Perfetto /
// Chrome trace-event JSON file, and the CSV files (kernels, memcpy, rounds, selections, nvtx)
// in the folder `to_dir`.
Status export_session_perfetto(const std::string& from, const std::string& to);
Status export_session_csv(const std::string& from, const std::string& to_dir);

struct SessionSummary {
  std::string model_name;
  std::string backend;
  std::string status;  // "finished" | "recording"
  std::string drafter; // config "drafter"
  std::string sparse;  // config "sparse.preset"
  int64_t rounds = 0;
  int64_t kernels = 0;
};
Expected<SessionSummary> summarize_session(const std::string& path);

}  // namespace specula::ui
