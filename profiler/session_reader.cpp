// SessionStore readers for the tables the exporters, the diff and the UI need beyond the
// session, rounds and kernels (session_store.cpp).
#include "profiler/session_store.h"

#include <nlohmann/json.hpp>

namespace specula::profiler {
namespace {

// Runs `sql` and calls `read(stmt)` per row.
template <class Row, class Read>
Expected<std::vector<Row>> read_all(sql::Database& db, std::string_view sql, Read read) {
  auto stmt = db.prepare(sql);
  if (!stmt) return stmt.error();
  std::vector<Row> rows;
  if (auto done = sql::for_each_row(*stmt, [&] { rows.push_back(read(*stmt)); }); !done) return done.error();
  return rows;
}

}  // namespace

Expected<std::vector<MemcpyActivity>> SessionStore::read_memcpy() {
  return read_all<MemcpyActivity>(
      db_,
      "SELECT start, end, deviceId, contextId, streamId, correlationId, globalPid, bytes, copyKind, srcKind, dstKind "
      "FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start, rowid",
      [](const sql::Statement& s) {
        MemcpyActivity m;
        m.start = s.column_int(0);
        m.end = s.column_int(1);
        m.device_id = static_cast<int32_t>(s.column_int(2));
        m.context_id = static_cast<int32_t>(s.column_int(3));
        m.stream_id = static_cast<int32_t>(s.column_int(4));
        m.correlation_id = s.column_int(5);
        m.global_pid = s.column_int(6);
        m.bytes = s.column_int(7);
        m.copy_kind = static_cast<int32_t>(s.column_int(8));
        m.src_kind = static_cast<int32_t>(s.column_int(9));
        m.dst_kind = static_cast<int32_t>(s.column_int(10));
        return m;
      });
}

Expected<std::vector<RuntimeRow>> SessionStore::read_runtime() {
  return read_all<RuntimeRow>(db_,
                              "SELECT r.start, r.end, r.globalTid, r.correlationId, s.value, r.returnValue "
                              "FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN StringIds AS s ON s.id = r.nameId "
                              "ORDER BY r.start, r.rowid",
                              [](const sql::Statement& s) {
                                return RuntimeRow{s.column_int(0), s.column_int(1), s.column_int(2),
                                                  s.column_int(3), s.column_text(4),
                                                  static_cast<int32_t>(s.column_int(5))};
                              });
}

Expected<std::vector<GpuInfo>> SessionStore::read_gpu_info() {
  return read_all<GpuInfo>(db_,
                           "SELECT id, name, busLocation, uuid, totalMemory, memoryBandwidth, clockRate, l2CacheSize, "
                           "smCount, computeMajor, computeMinor FROM TARGET_INFO_GPU ORDER BY id",
                           [](const sql::Statement& s) {
                             GpuInfo g;
                             g.id = static_cast<int32_t>(s.column_int(0));
                             g.name = s.column_text(1);
                             g.bus_location = s.column_text(2);
                             g.uuid = s.column_text(3);
                             g.total_memory = s.column_int(4);
                             g.memory_bandwidth = s.column_int(5);
                             g.clock_rate = s.column_int(6);
                             g.l2_cache_size = s.column_int(7);
                             g.sm_count = static_cast<int32_t>(s.column_int(8));
                             g.compute_major = static_cast<int32_t>(s.column_int(9));
                             g.compute_minor = static_cast<int32_t>(s.column_int(10));
                             return g;
                           });
}

Expected<std::vector<FfnStatsEvent>> SessionStore::read_ffn_stats() {
  return read_all<FfnStatsEvent>(
      db_, "SELECT round, layer, activeChannels, totalChannels, skipped FROM SPECULA_FFN_STATS ORDER BY round, layer",
      [](const sql::Statement& s) {
        return FfnStatsEvent{s.column_int(0), static_cast<int32_t>(s.column_int(1)),
                             static_cast<int32_t>(s.column_int(2)), static_cast<int32_t>(s.column_int(3)),
                             s.column_int(4) != 0};
      });
}

Expected<std::vector<MoeStatsEvent>> SessionStore::read_moe_stats() {
  // Expert lists are JSON arrays of ints, as written by write_batch.
  const auto experts = [](const std::string& text) {
    std::vector<int32_t> ids;
    const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!json.is_array()) return ids;
    for (const auto& v : json) {
      if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
    }
    return ids;
  };
  return read_all<MoeStatsEvent>(
      db_,
      "SELECT round, layer, totalExperts, routedExperts, skippedExperts FROM SPECULA_MOE_STATS ORDER BY round, layer",
      [&](const sql::Statement& s) {
        return MoeStatsEvent{s.column_int(0), static_cast<int32_t>(s.column_int(1)),
                             static_cast<int32_t>(s.column_int(2)), experts(s.column_text(3)),
                             experts(s.column_text(4))};
      });
}

Expected<std::vector<DecisionEvent>> SessionStore::read_decisions() {
  return read_all<DecisionEvent>(
      db_, "SELECT round, time, source, decision, detailJson FROM SPECULA_DECISIONS ORDER BY time, rowid",
      [](const sql::Statement& s) {
        return DecisionEvent{s.column_int(0), s.column_int(1), s.column_text(2), s.column_text(3), s.column_text(4)};
      });
}

}  // namespace specula::profiler
