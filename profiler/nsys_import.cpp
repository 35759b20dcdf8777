#include "profiler/nsys_import.h"

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "profiler/session_store.h"
#include "profiler/sqlite.h"

namespace specula::profiler {
namespace {

constexpr int64_t kNvtxPushPopRange = 59;  // ENUM_NSYS_EVENT_TYPE
constexpr int64_t kNvtxStartEndRange = 60;

class Capture {
 public:
  static Expected<Capture> open(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return make_error(path + ": no such file");
    auto db = sql::Database::open(path, SQLITE_OPEN_READONLY);
    if (!db) return db.error();
    Capture c;
    c.path_ = path;
    c.db_ = std::move(*db);
    auto tables = c.db_.prepare("SELECT name FROM sqlite_master WHERE type = 'table'");
    if (!tables) return make_error(path + ": not a SQLite database (or corrupt): " + tables.error().message);
    const Status walked = sql::for_each_row(*tables, [&] {
      c.tables_.insert(tables->column_text(0));
    });
    if (!walked) return make_error(path + ": unreadable (corrupt?): " + walked.error().message);
    if (c.has("META") && c.has("SPECULA_SESSION")) {
      return make_error(path + ": already a Specula session; open it directly (no import needed)");
    }
    const bool activity = c.has("CUPTI_ACTIVITY_KIND_KERNEL") || c.has("CUPTI_ACTIVITY_KIND_MEMCPY") ||
                          c.has("CUPTI_ACTIVITY_KIND_RUNTIME") || c.has("NVTX_EVENTS");
    if (!c.has("StringIds") || !activity) {
      return make_error(path + ": not an Nsight Systems SQLite export (needs StringIds and at least one of "
                               "CUPTI_ACTIVITY_KIND_KERNEL/_MEMCPY/_RUNTIME or NVTX_EVENTS; make one with "
                               "`nsys export --type sqlite`)");
    }
    return c;
  }

  bool has(const std::string& table) const { return tables_.count(table) > 0; }

  Expected<std::set<std::string>> columns(const std::string& table) {
    auto info = db_.prepare("PRAGMA table_info(" + table + ")");
    if (!info) return info.error();
    std::set<std::string> cols;
    const Status walked = sql::for_each_row(*info, [&] {
      cols.insert(info->column_text(1));
    });
    if (!walked) return walked.error();
    return cols;
  }

  // "SELECT c1, c2, ... FROM table": a listed column the table lacks reads as NULL when optional;
  // a missing required one is an error naming it.
  Expected<sql::Statement> select(const std::string& table, const std::vector<std::string>& required,
                                  const std::vector<std::string>& optional, const std::string& tail = "") {
    auto cols = columns(table);
    if (!cols) return cols.error();
    std::string sql = "SELECT ";
    bool first = true;
    for (const auto& c : required) {
      if (!cols->count(c)) {
        return make_error(path_ + ": table " + table + " has no column '" + c +
                          "' (not the Nsight Systems export layout this importer reads)");
      }
      sql += (first ? "" : ", ") + c;
      first = false;
    }
    for (const auto& c : optional) {
      sql += first ? "" : ", ";
      sql += cols->count(c) ? c : "NULL";
      first = false;
    }
    sql += " FROM " + table + " " + tail;
    return db_.prepare(sql);
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  sql::Database db_;
  std::set<std::string> tables_;
};

int32_t to_i32(const sql::Statement& s, int i) { return static_cast<int32_t>(s.column_int(i)); }

}  // namespace

Expected<NsysImportStats> import_nsys(const std::string& capture_path, const std::string& session_path,
                                      bool overwrite) {
  auto capture = Capture::open(capture_path);
  if (!capture) return capture.error();
  NsysImportStats stats;

  std::unordered_map<int64_t, std::string> strings;
  {
    auto s = capture->select("StringIds", {"id", "value"}, {});
    if (!s) return s.error();
    const Status walked = sql::for_each_row(*s, [&] {
      strings[s->column_int(0)] = s->column_text(1);
    });
    if (!walked) return walked.error();
  }
  const auto name_of = [&](int64_t id) -> const std::string& {
    static const std::string unknown = "(unknown)";
    const auto it = strings.find(id);
    return it != strings.end() ? it->second : unknown;
  };

  std::vector<GpuInfo> gpus;
  if (capture->has("TARGET_INFO_GPU")) {
    auto s = capture->select("TARGET_INFO_GPU", {"id"},
                             {"name", "busLocation", "uuid", "totalMemory", "memoryBandwidth", "clockRate",
                              "l2CacheSize", "smCount", "computeMajor", "computeMinor"});
    if (!s) return s.error();
    const Status walked = sql::for_each_row(*s, [&] {
      GpuInfo g;
      g.id = to_i32(*s, 0);
      g.name = s->column_text(1);
      g.bus_location = s->column_text(2);
      g.uuid = s->column_text(3);
      g.total_memory = s->column_int(4);
      g.memory_bandwidth = s->column_int(5);
      g.clock_rate = s->column_int(6);
      g.l2_cache_size = s->column_int(7);
      g.sm_count = to_i32(*s, 8);
      g.compute_major = to_i32(*s, 9);
      g.compute_minor = to_i32(*s, 10);
      gpus.push_back(std::move(g));
    });
    if (!walked) return walked.error();
  }

  std::vector<KernelActivity> kernels;
  if (capture->has("CUPTI_ACTIVITY_KIND_KERNEL")) {
    auto s = capture->select("CUPTI_ACTIVITY_KIND_KERNEL", {"start", "end", "deviceId", "streamId", "demangledName"},
                             {"contextId", "correlationId", "globalPid", "gridX", "gridY", "gridZ", "blockX", "blockY",
                              "blockZ", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory"},
                             "ORDER BY start");
    if (!s) return s.error();
    const Status walked = sql::for_each_row(*s, [&] {
      KernelActivity k;
      k.start = s->column_int(0);
      k.end = s->column_int(1);
      k.device_id = to_i32(*s, 2);
      k.stream_id = to_i32(*s, 3);
      k.demangled_name = name_of(s->column_int(4));
      k.context_id = to_i32(*s, 5);
      k.correlation_id = s->column_int(6);
      k.global_pid = s->column_int(7);
      for (int d = 0; d < 3; ++d) {
        k.grid[d] = s->column_is_null(8 + d) ? 1 : to_i32(*s, 8 + d);
        k.block[d] = s->column_is_null(11 + d) ? 1 : to_i32(*s, 11 + d);
      }
      k.registers_per_thread = to_i32(*s, 14);
      k.static_shared_memory = to_i32(*s, 15);
      k.dynamic_shared_memory = to_i32(*s, 16);
      kernels.push_back(k);
    });
    if (!walked) return walked.error();
  }

  std::vector<MemcpyActivity> copies;
  if (capture->has("CUPTI_ACTIVITY_KIND_MEMCPY")) {
    auto s = capture->select("CUPTI_ACTIVITY_KIND_MEMCPY", {"start", "end", "deviceId", "streamId", "bytes", "copyKind"},
                             {"contextId", "correlationId", "globalPid", "srcKind", "dstKind"}, "ORDER BY start");
    if (!s) return s.error();
    const Status walked = sql::for_each_row(*s, [&] {
      MemcpyActivity m;
      m.start = s->column_int(0);
      m.end = s->column_int(1);
      m.device_id = to_i32(*s, 2);
      m.stream_id = to_i32(*s, 3);
      m.bytes = s->column_int(4);
      m.copy_kind = to_i32(*s, 5);
      m.context_id = to_i32(*s, 6);
      m.correlation_id = s->column_int(7);
      m.global_pid = s->column_int(8);
      m.src_kind = to_i32(*s, 9);
      m.dst_kind = to_i32(*s, 10);
      copies.push_back(m);
    });
    if (!walked) return walked.error();
  }

  std::vector<RuntimeActivity> calls;
  if (capture->has("CUPTI_ACTIVITY_KIND_RUNTIME")) {
    auto s = capture->select("CUPTI_ACTIVITY_KIND_RUNTIME", {"start", "end", "nameId"},
                             {"globalTid", "correlationId", "returnValue"}, "ORDER BY start");
    if (!s) return s.error();
    const Status walked = sql::for_each_row(*s, [&] {
      calls.push_back({s->column_int(0), s->column_int(1), s->column_int(3), s->column_int(4),
                       name_of(s->column_int(2)), to_i32(*s, 5)});
    });
    if (!walked) return walked.error();
  }

  SessionBatch ranges;
  if (capture->has("NVTX_EVENTS")) {
    auto s = capture->select("NVTX_EVENTS", {"start", "eventType"}, {"end", "text", "textId", "globalTid", "int64Value"},
                             "ORDER BY start");
    if (!s) return s.error();
    const Status walked = sql::for_each_row(*s, [&] {
      const int64_t type = s->column_int(1);
      if ((type != kNvtxPushPopRange && type != kNvtxStartEndRange) || s->column_is_null(2)) return;  // marks, domains
      NvtxRange r;
      r.start = s->column_int(0);
      r.end = s->column_int(2);
      r.text = !s->column_is_null(3) ? s->column_text(3) : (!s->column_is_null(4) ? name_of(s->column_int(4)) : "");
      r.global_tid = s->column_int(5);
      if (!s->column_is_null(6)) r.payload = s->column_int(6);
      ranges.nvtx.push_back(std::move(r));
    });
    if (!walked) return walked.error();
  }

  int64_t first = std::numeric_limits<int64_t>::max(), last = 0;
  const auto span = [&](int64_t start, int64_t end) {
    first = std::min(first, start);
    last = std::max(last, end);
  };
  for (const auto& k : kernels) span(k.start, k.end);
  for (const auto& m : copies) span(m.start, m.end);
  for (const auto& c : calls) span(c.start, c.end);
  for (const auto& r : ranges.nvtx) span(r.start, r.end);
  if (first > last) return make_error(capture_path + ": the capture has no kernels, memcpys, CUDA API calls or NVTX ranges");

  auto store = SessionStore::create(session_path, SessionStore::CreateOptions{overwrite});
  if (!store) return store.error();
  SessionInfo info;
  info.start_ns = first;
  info.config_json = nlohmann::json{{"imported_from", capture_path},
                                    {"source", "nsys export --type sqlite"},
                                    {"schema", "Nsight Systems SQLite export (nsys 2024.x/2025.x layout)"}}
                         .dump();
  info.model_name = "nsys capture " + std::filesystem::path(capture_path).filename().string();
  info.backend = "nsys";
  info.device = gpus.empty() ? std::string("unknown") : gpus.front().name;
  info.version = "import-nsys";
  if (Status s = store->write_session(info); !s) return s.error();
  for (const auto& g : gpus) {
    if (Status s = store->write_gpu_info(g); !s) return s.error();
  }
  if (Status s = store->write_kernels(kernels); !s) return s.error();
  if (Status s = store->write_memcpy(copies); !s) return s.error();
  if (Status s = store->write_runtime(calls); !s) return s.error();
  if (!ranges.empty()) {
    if (Status s = store->write_batch(ranges); !s) return s.error();
  }
  if (Status s = store->finish_session(last, "{}"); !s) return s.error();
  if (Status s = store->close(); !s) return s.error();
  stats.kernels = static_cast<int64_t>(kernels.size());
  stats.memcpys = static_cast<int64_t>(copies.size());
  stats.runtime_calls = static_cast<int64_t>(calls.size());
  stats.nvtx_ranges = static_cast<int64_t>(ranges.nvtx.size());
  stats.gpus = static_cast<int64_t>(gpus.size());
  return stats;
}

}  // namespace specula::profiler
