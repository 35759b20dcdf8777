#pragma once
// The session database's DDL (docs/session-schema.md explains every table). GPU activity tables
// carry the names and columns of Nsight Systems' SQLite export (nsys export --type sqlite), so
// the same SQL runs on a Specula session and on an nsys capture; Specula's own tables are
// prefixed SPECULA_. Times are integer nanoseconds.
#include <cstdint>
#include <string_view>

namespace specula::profiler {

// Bump on any incompatible change and say what changed in docs/session-schema.md.
inline constexpr int kSessionSchemaVersion = 1;
// PRAGMA application_id: "SPCL", so `file` and SQLite tools can tell a session apart.
inline constexpr int32_t kSessionApplicationId = 0x5350434C;
inline constexpr std::string_view kSessionApplicationName = "specula-session";

// nsys ENUM_NSYS_EVENT_TYPE values used in NVTX_EVENTS.eventType.
inline constexpr int kNvtxMarkEventType = 34;
inline constexpr int kNvtxPushPopRangeEventType = 59;
inline constexpr int kNvtxStartEndRangeEventType = 60;

// Every CREATE TABLE / CREATE INDEX of schema version kSessionSchemaVersion.
std::string_view session_schema_sql();

// The tables a version-1 session holds, in creation order.
inline constexpr std::string_view kSessionTables[] = {
    "META",
    "StringIds",
    "TARGET_INFO_GPU",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "NVTX_EVENTS",
    "SPECULA_SESSION",
    "SPECULA_ROUNDS",
    "SPECULA_DRAFT_NODES",
    "SPECULA_LAYER_SELECTIONS",
    "SPECULA_FFN_STATS",
    "SPECULA_MOE_STATS",
    "SPECULA_DECISIONS",
    "SPECULA_METRICS",
};

// nsys globalTid / globalPid encoding: pid in bits 24..47, tid in bits 0..23.
inline int64_t nsys_global_tid(int64_t pid, int64_t tid) { return (pid << 24) | (tid & 0xFFFFFF); }
inline int64_t nsys_global_pid(int64_t pid) { return pid << 24; }

}  // namespace specula::profiler
