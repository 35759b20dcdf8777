#pragma once
// Exports of a recorded session for other tools.
//
// Perfetto / Chrome trace-event JSON (ui.perfetto.dev and chrome://tracing open it):
//   process "Engine (CPU)":   one track per recording thread with the engine phases
//                             (NVTX_EVENTS ranges), a "CUDA API" track per thread with the
//                             CUPTI runtime calls, and the counter "accepted length" (one sample
//                             per round, at the round's start);
//   process "GPU <id>: <name>": one track per CUDA stream with its kernels and memcpys.
//   Times are microseconds (the format's unit) from the session's earliest timestamp, with
//   nanosecond decimals; otherData.time_origin_ns gives that origin on the session clock.
// CSV (RFC 4180: comma separated, quoted when needed, header row; times in integer ns):
//   kernels.csv, memcpy.csv, rounds.csv, selections.csv (block ids space-separated), nvtx.csv.
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/expected.h"
#include "profiler/session_store.h"

namespace specula::profiler {

Expected<nlohmann::json> perfetto_trace(SessionStore& session);
Status export_perfetto(SessionStore& session, const std::string& out_path);
// Writes the CSV files into out_dir (created if missing).
Status export_csv(SessionStore& session, const std::string& out_dir);

// "a,b" -> "\"a,b\"", doubling quotes; plain text stays as is.
std::string csv_field(std::string_view text);

}  // namespace specula::profiler
