#include "profiler/session_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace specula::profiler {

namespace {

constexpr char kSqliteMagic[16] = {'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f', 'o', 'r', 'm', 'a', 't', ' ', '3', '\0'};

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The parent directory of path ("." for a bare name).
std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void remove_with_sidecars(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((path + suffix).c_str());
}

std::string tokens_json(const std::vector<int32_t>& tokens) { return nlohmann::json(tokens).dump(); }

std::vector<int32_t> tokens_from_json(const std::string& text) {
  const auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return {};
  std::vector<int32_t> out;
  for (const auto& v : parsed) {
    if (v.is_number_integer()) out.push_back(v.get<int32_t>());
  }
  return out;
}

// Validates what is at path before SQLite sees it: present, a regular file, a SQLite header.
Status check_sqlite_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return make_error(path + ": cannot open session: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return make_error(path + ": not a session file (not a regular file)");
  if (st.st_size == 0) return make_error(path + ": not a Specula session (empty file)");
  std::ifstream in(path, std::ios::binary);
  char header[16] = {};
  if (!in.read(header, sizeof header) || std::memcmp(header, kSqliteMagic, sizeof header) != 0) {
    return make_error(path + ": not a SQLite database (no 'SQLite format 3' header); a session is a .sqlite file "
                             "written by specula-cli --record");
  }
  return Status::success();
}

}  // namespace

std::string kernel_short_name(std::string_view name) {
  // Drop the parameter list: the parenthesised group that closes the name.
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') ++depth;
      if (name[i] == '(' && --depth == 0) {
        name = name.substr(0, i);
        break;
      }
    }
  }
  // Drop trailing template arguments.
  while (!name.empty() && name.back() == '>') {
    int depth = 0;
    size_t i = name.size();
    while (i-- > 0) {
      if (name[i] == '>') ++depth;
      if (name[i] == '<' && --depth == 0) break;
    }
    if (i == static_cast<size_t>(-1)) break;  // unbalanced: keep as is
    name = name.substr(0, i);
  }
  // The last component outside brackets: after the last "::" or space (the return type).
  int depth = 0;
  for (size_t i = name.size(); i-- > 0;) {
    const char c = name[i];
    if (c == '>' || c == ')') ++depth;
    if (c == '<' || c == '(') --depth;
    if (depth == 0 && (c == ' ' || (c == ':' && i > 0 && name[i - 1] == ':'))) {
      name = name.substr(i + 1);
      break;
    }
  }
  return name.empty() ? std::string("<unnamed>") : std::string(name);
}

Expected<SessionStore> open_session(const std::string& path) { return SessionStore::open(path, OpenMode::kReadOnly); }

// ---- Prepared writers -----------------------------------------------------------------------

// Kernel rows go in kKernelRowsPerInsert at a time: one statement step per chunk instead of per
// row is most of the bulk path's speed (bench_recorder_kernels).
constexpr int kKernelColumns = 18;
constexpr int kKernelRowsPerInsert = 32;

std::string kernel_insert_sql(int rows) {
  std::string sql =
      "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL(start, end, deviceId, contextId, streamId, correlationId, globalPid, "
      "demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
      "staticSharedMemory, dynamicSharedMemory) VALUES ";
  for (int r = 0; r < rows; ++r) {
    sql += r ? ", (" : "(";
    for (int c = 0; c < kKernelColumns; ++c) sql += c ? ", ?" : "?";
    sql += ")";
  }
  return sql;
}

struct SessionStore::Writers {
  sql::Statement string;
  sql::Statement kernel;
  sql::Statement kernel_chunk;
  sql::Statement runtime;
  sql::Statement memcpy;
  sql::Statement nvtx;
  sql::Statement round;
  sql::Statement node;
  sql::Statement selection;
  sql::Statement ffn;
  sql::Statement moe;
  sql::Statement decision;
};

SessionStore::SessionStore() = default;
SessionStore::SessionStore(SessionStore&&) noexcept = default;
SessionStore& SessionStore::operator=(SessionStore&&) noexcept = default;

SessionStore::~SessionStore() {
  if (db_.handle() && writable_ && !closed_) (void)close();
}

Status SessionStore::prepare_writers() {
  writers_ = std::make_unique<Writers>();
  struct Entry {
    sql::Statement* target;
    const char* sql;
  };
  const Entry entries[] = {
      {&writers_->string, "INSERT INTO StringIds(id, value) VALUES (?1, ?2)"},
      {&writers_->kernel,
       "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL(start, end, deviceId, contextId, streamId, correlationId, globalPid, "
       "demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
       "staticSharedMemory, dynamicSharedMemory) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
       "?14, ?15, ?16, ?17, ?18)"},
      {&writers_->runtime,
       "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME(start, end, globalTid, correlationId, nameId, returnValue) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"},
      {&writers_->memcpy,
       "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY(start, end, deviceId, contextId, streamId, correlationId, globalPid, "
       "bytes, copyKind, srcKind, dstKind) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"},
      {&writers_->nvtx,
       "INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid, endGlobalTid, textId, domainId, int64Value) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, 0, ?7)"},
      {&writers_->round,
       "INSERT INTO SPECULA_ROUNDS(round, start, end, speculative, contextLen, drafter, treeNodes, treeDepth, "
       "acceptedLength, nextToken, bonus, emitted, tokens, rollbackTokens, rejectedKvBytes) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"},
      {&writers_->node,
       "INSERT INTO SPECULA_DRAFT_NODES(round, node, token, parent, depth, draftProb, targetProb, visited, "
       "accepted) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"},
      {&writers_->selection,
       "INSERT INTO SPECULA_LAYER_SELECTIONS(round, layer, query, queryGroup, mode, anchorLayer, totalBlocks, "
       "selectedBlocks, blockBits, overlapPrev, jaccardPrev) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"},
      {&writers_->ffn,
       "INSERT INTO SPECULA_FFN_STATS(round, layer, activeChannels, totalChannels, skipped) "
       "VALUES (?1, ?2, ?3, ?4, ?5)"},
      {&writers_->moe,
       "INSERT INTO SPECULA_MOE_STATS(round, layer, totalExperts, routedExperts, skippedExperts, routedCount, "
       "skippedCount) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"},
      {&writers_->decision,
       "INSERT INTO SPECULA_DECISIONS(round, time, source, decision, detailJson) VALUES (?1, ?2, ?3, ?4, ?5)"},
  };
  for (const Entry& e : entries) {
    auto stmt = db_.prepare(e.sql);
    if (!stmt) return stmt.error();
    *e.target = std::move(*stmt);
  }
  auto chunk = db_.prepare(kernel_insert_sql(kKernelRowsPerInsert));
  if (!chunk) return chunk.error();
  writers_->kernel_chunk = std::move(*chunk);
  return reload_string_cache();
}

Status SessionStore::reload_string_cache() {
  string_ids_.clear();
  kernel_name_ids_.clear();
  auto stmt = db_.prepare("SELECT id, value FROM StringIds");
  if (!stmt) return stmt.error();
  next_string_id_ = 0;
  const Status walked = sql::for_each_row(*stmt, [&] {
    const int64_t id = stmt->column_int(0);
    string_ids_.emplace(stmt->column_text(1), id);
    next_string_id_ = std::max(next_string_id_, id + 1);
  });
  if (!walked) return walked.error();
  return Status::success();
}

Expected<int64_t> SessionStore::intern(std::string_view text) {
  if (auto it = string_ids_.find(text); it != string_ids_.end()) return it->second;
  const int64_t id = next_string_id_++;
  writers_->string.bind(1, id);
  writers_->string.bind(2, text);
  if (Status s = writers_->string.run(); !s) return s.error();
  string_ids_.emplace(std::string(text), id);
  return id;
}

Status SessionStore::transaction(const std::function<Status()>& body) {
  if (!writable_ || closed_) return make_error(path() + ": session is not open for writing");
  if (Status s = db_.exec("BEGIN IMMEDIATE"); !s) return s;
  Status result = body();
  if (result) result = db_.exec("COMMIT");
  if (!result) {
    (void)db_.exec("ROLLBACK");
    (void)reload_string_cache();  // ids interned inside the rolled-back transaction are gone
  }
  return result;
}

// ---- Create / open --------------------------------------------------------------------------

Expected<SessionStore> SessionStore::create(const std::string& path, CreateOptions options) {
  if (file_exists(path)) {
    if (!options.overwrite) return make_error(path + ": already exists; choose another name or overwrite it");
    if (::access(path.c_str(), W_OK) != 0) {
      return make_error(path + ": cannot overwrite: " + std::strerror(errno));
    }
    remove_with_sidecars(path);
  }
  const std::string dir = parent_dir(path);
  if (::access(dir.c_str(), W_OK) != 0) {
    return make_error(path + ": cannot create session: directory '" + dir + "': " + std::strerror(errno));
  }
  auto db = sql::Database::open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  if (!db) return db.error();

  SessionStore store;
  store.db_ = std::move(*db);
  store.writable_ = true;
  // WAL: a reader (the live UI) never blocks the recorder, and a killed writer leaves every
  // committed round in the log. synchronous=NORMAL survives a process kill (not power loss).
  auto mode = store.db_.prepare("PRAGMA journal_mode=WAL");
  if (!mode) return mode.error();
  auto row = mode->step();
  if (!row) return row.error();
  if (!*row || mode->column_text(0) != "wal") {
    return make_error(path + ": cannot switch to WAL mode (file system without shared memory?)");
  }
  mode->reset();
  // A 64 MiB page cache and a 16 MiB WAL between checkpoints keep the hot index pages of
  // CUPTI_ACTIVITY_KIND_KERNEL from being written back on every batch (bench_recorder_kernels).
  const std::string pragmas = "PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536; PRAGMA wal_autocheckpoint=4096; "
                              "PRAGMA application_id=" +
                              std::to_string(kSessionApplicationId) +
                              "; PRAGMA user_version=" + std::to_string(kSessionSchemaVersion) + ";";
  if (Status s = store.db_.exec(pragmas); !s) return s.error();
  if (Status s = store.db_.exec("BEGIN"); !s) return s.error();
  if (Status s = store.db_.exec(session_schema_sql()); !s) return s.error();
  const std::string meta = "INSERT INTO META(key, value) VALUES ('application', '" +
                           std::string(kSessionApplicationName) + "'), ('schema_version', '" +
                           std::to_string(kSessionSchemaVersion) + "'), ('sqlite_version', '" + sqlite3_libversion() +
                           "')";
  if (Status s = store.db_.exec(meta); !s) return s.error();
  if (Status s = store.db_.exec("COMMIT"); !s) return s.error();
  store.schema_version_ = kSessionSchemaVersion;
  if (Status s = store.prepare_writers(); !s) return s.error();
  return store;
}

Expected<SessionStore> SessionStore::open(const std::string& path, OpenMode mode) {
  if (Status s = check_sqlite_file(path); !s) return s.error();
  if (mode == OpenMode::kReadWrite) {
    struct stat st {};
    ::stat(path.c_str(), &st);
    // Root ignores permission bits; a file its owner marked read-only is still not ours to write.
    if ((st.st_mode & 0222) == 0 || ::access(path.c_str(), W_OK) != 0) {
      return make_error(path + ": session file is read-only; open it read-only (to view or export) or copy it");
    }
  }
  auto db = sql::Database::open(path, mode == OpenMode::kReadOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE);
  if (!db) return db.error();

  SessionStore store;
  store.db_ = std::move(*db);
  store.writable_ = mode == OpenMode::kReadWrite;

  // A damaged file fails here (SQLITE_CORRUPT / SQLITE_NOTADB) or in quick_check below.
  auto check = store.db_.prepare("PRAGMA quick_check(1)");
  if (!check) return make_error(check.error().message + " (the file is corrupt or not a SQLite database)");
  auto row = check->step();
  if (!row) return make_error(row.error().message + " (the file is corrupt)");
  if (!*row || check->column_text(0) != "ok") {
    std::string report = *row ? check->column_text(0) : std::string("no answer");
    std::replace(report.begin(), report.end(), '\n', ' ');
    return make_error(path + ": corrupt session database: integrity check: " + report);
  }
  check->reset();

  auto has_meta = store.db_.query_int("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='META'");
  if (!has_meta) return has_meta.error();
  if (*has_meta == 0) {
    auto tables = store.db_.prepare("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name LIMIT 6");
    if (!tables) return tables.error();
    std::string names;
    bool nsys = false;
    int count = 0;
    const Status walked = sql::for_each_row(*tables, [&] {
      const std::string name = tables->column_text(0);
      nsys = nsys || name.rfind("CUPTI_ACTIVITY_KIND_", 0) == 0 || name == "NVTX_EVENTS";
      names += (count++ ? ", " : "") + name;
    });
    if (!walked) return walked.error();
    std::string message = path + ": not a Specula session (a SQLite database without a META table";
    message += count ? "; its tables: " + names + ")" : "; it has no tables)";
    if (nsys) message += "; it looks like an Nsight Systems export: convert it with specula-cli import-nsys";
    return make_error(message);
  }
  auto app = store.db_.prepare("SELECT value FROM META WHERE key = 'application'");
  if (!app) return make_error(path + ": not a Specula session (its META table has another layout)");
  auto app_row = app->step();
  if (!app_row) return app_row.error();
  if (!*app_row || app->column_text(0) != kSessionApplicationName) {
    return make_error(path + ": not a Specula session (META names application '" +
                      (*app_row ? app->column_text(0) : std::string()) + "')");
  }
  app->reset();
  auto version = store.db_.query_int("SELECT CAST(value AS INTEGER) FROM META WHERE key = 'schema_version'");
  if (!version) return version.error();
  if (*version < 1 || *version > kSessionSchemaVersion) {
    return make_error(path + ": session schema version " + std::to_string(*version) + " is not supported (this build " +
                      "reads versions 1 to " + std::to_string(kSessionSchemaVersion) + "); use a newer Specula");
  }
  store.schema_version_ = static_cast<int>(*version);
  if (store.writable_) {
    if (Status s = store.db_.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !s) return s.error();
    if (Status s = store.prepare_writers(); !s) return s.error();
  }
  return store;
}

Status SessionStore::close() {
  if (closed_ || !db_.handle()) return Status::success();
  closed_ = true;
  if (!writable_) return Status::success();
  writers_.reset();
  // Back to one self-contained file: checkpoints the WAL and removes -wal/-shm.
  return db_.exec("PRAGMA journal_mode=DELETE");
}

// ---- Writing --------------------------------------------------------------------------------

Status SessionStore::write_session(const SessionInfo& info) {
  return transaction([&]() -> Status {
    auto stmt = db_.prepare(
        "INSERT OR REPLACE INTO SPECULA_SESSION(id, start, end, wallStartNs, configJson, modelName, modelSha256, "
        "architecture, backend, device, version, level, status) "
        "VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
    if (!stmt) return stmt.error();
    stmt->bind(1, info.start_ns);
    stmt->bind(2, info.end_ns);
    stmt->bind(3, info.wall_start_ns);
    stmt->bind(4, std::string_view(info.config_json));
    stmt->bind(5, std::string_view(info.model_name));
    stmt->bind(6, std::string_view(info.model_sha256));
    stmt->bind(7, std::string_view(info.architecture));
    stmt->bind(8, std::string_view(info.backend));
    stmt->bind(9, std::string_view(info.device));
    stmt->bind(10, std::string_view(info.version));
    stmt->bind(11, std::string_view(info.level));
    stmt->bind(12, std::string_view(info.status));
    return stmt->run();
  });
}

Status SessionStore::finish_session(int64_t end_ns, std::string_view metrics_json) {
  return transaction([&]() -> Status {
    auto update = db_.prepare("UPDATE SPECULA_SESSION SET end = ?1, status = 'finished' WHERE id = 1");
    if (!update) return update.error();
    update->bind(1, end_ns);
    if (Status s = update->run(); !s) return s;
    if (metrics_json.empty()) return Status::success();
    const auto metrics = nlohmann::json::parse(metrics_json, nullptr, /*allow_exceptions=*/false);
    if (!metrics.is_object()) return make_error(path() + ": run metrics are not a JSON object");
    auto insert = db_.prepare("INSERT OR REPLACE INTO SPECULA_METRICS(key, value, valueJson) VALUES (?1, ?2, ?3)");
    if (!insert) return insert.error();
    for (const auto& [key, value] : metrics.items()) {
      insert->bind(1, std::string_view(key));
      if (value.is_number()) insert->bind(2, value.get<double>()); else insert->bind_null(2);
      insert->bind(3, std::string_view(value.dump()));
      if (Status s = insert->run(); !s) return s;
    }
    return Status::success();
  });
}

Status SessionStore::write_batch(const SessionBatch& batch) {
  return transaction([&]() -> Status {
    Writers& w = *writers_;
    if (batch.round) {
      const RoundRow& r = *batch.round;
      w.round.bind(1, r.round);
      w.round.bind(2, r.start_ns);
      w.round.bind(3, r.end_ns);
      w.round.bind(4, int64_t{r.speculative});
      w.round.bind(5, r.context_len);
      w.round.bind(6, std::string_view(r.drafter));
      w.round.bind(7, r.tree_nodes);
      w.round.bind(8, r.tree_depth);
      w.round.bind(9, r.accepted_length);
      w.round.bind(10, r.next_token);
      w.round.bind(11, int64_t{r.bonus});
      w.round.bind(12, r.emitted);
      w.round.bind(13, std::string_view(tokens_json(r.tokens)));
      w.round.bind(14, r.rollback_tokens);
      w.round.bind(15, r.rejected_kv_bytes);
      if (Status s = w.round.run(); !s) return s;
    }
    for (const DraftNodeRow& n : batch.draft_nodes) {
      w.node.bind(1, n.round);
      w.node.bind(2, n.node);
      w.node.bind(3, n.token);
      w.node.bind(4, n.parent);
      w.node.bind(5, n.depth);
      w.node.bind(6, double{n.draft_prob});
      if (n.target_prob) w.node.bind(7, double{*n.target_prob}); else w.node.bind_null(7);
      w.node.bind(8, int64_t{n.visited});
      w.node.bind(9, int64_t{n.accepted});
      if (Status s = w.node.run(); !s) return s;
    }
    for (const LayerSelectionRow& row : batch.selections) {
      const LayerSelectionEvent& e = row.selection;
      w.selection.bind(1, e.round);
      w.selection.bind(2, e.layer);
      w.selection.bind(3, e.query);
      w.selection.bind(4, e.group);
      w.selection.bind(5, std::string_view(e.mode == SelectionMode::kRefresh ? "refresh" : "reuse"));
      if (e.anchor_layer >= 0) w.selection.bind(6, e.anchor_layer); else w.selection.bind_null(6);
      w.selection.bind(7, e.total_blocks);
      w.selection.bind(8, row.selected_blocks);
      w.selection.bind_blob(9, e.block_bits);
      w.selection.bind(10, row.overlap_prev);
      w.selection.bind(11, row.jaccard_prev);
      if (Status s = w.selection.run(); !s) return s;
    }
    for (const FfnStatsEvent& f : batch.ffn_stats) {
      w.ffn.bind(1, f.round);
      w.ffn.bind(2, f.layer);
      w.ffn.bind(3, f.active_channels);
      w.ffn.bind(4, f.total_channels);
      w.ffn.bind(5, int64_t{f.skipped});
      if (Status s = w.ffn.run(); !s) return s;
    }
    for (const MoeStatsEvent& m : batch.moe_stats) {
      w.moe.bind(1, m.round);
      w.moe.bind(2, m.layer);
      w.moe.bind(3, m.total_experts);
      w.moe.bind(4, std::string_view(tokens_json(m.routed_experts)));
      w.moe.bind(5, std::string_view(tokens_json(m.skipped_experts)));
      w.moe.bind(6, static_cast<int64_t>(m.routed_experts.size()));
      w.moe.bind(7, static_cast<int64_t>(m.skipped_experts.size()));
      if (Status s = w.moe.run(); !s) return s;
    }
    for (const DecisionEvent& d : batch.decisions) {
      w.decision.bind(1, d.round);
      w.decision.bind(2, d.time_ns);
      w.decision.bind(3, std::string_view(d.source));
      w.decision.bind(4, std::string_view(d.decision));
      w.decision.bind(5, std::string_view(d.detail_json.empty() ? std::string_view("{}") : d.detail_json));
      if (Status s = w.decision.run(); !s) return s;
    }
    for (const NvtxRange& n : batch.nvtx) {
      auto text_id = intern(n.text);
      if (!text_id) return text_id.error();
      w.nvtx.bind(1, n.start);
      w.nvtx.bind(2, n.end);
      w.nvtx.bind(3, int64_t{kNvtxPushPopRangeEventType});
      w.nvtx.bind(4, std::string_view(n.text));
      w.nvtx.bind(5, n.global_tid);
      w.nvtx.bind(6, *text_id);
      w.nvtx.bind(7, n.payload);
      if (Status s = w.nvtx.run(); !s) return s;
    }
    return Status::success();
  });
}

Status SessionStore::write_kernels(std::span<const KernelActivity> kernels) {
  return transaction([&]() -> Status {
    // Binds one record at parameter offset `base` (0 for the single-row statement).
    auto bind_row = [&](sql::Statement& k, int base, const KernelActivity& a) -> Status {
      auto ids = kernel_name_ids_.find(a.demangled_name);
      if (ids == kernel_name_ids_.end()) {
        auto name_id = intern(a.demangled_name);
        if (!name_id) return name_id.error();
        auto short_id = intern(kernel_short_name(a.demangled_name));
        if (!short_id) return short_id.error();
        ids = kernel_name_ids_.emplace(std::string(a.demangled_name), std::pair{*name_id, *short_id}).first;
      }
      k.bind(base + 1, a.start);
      k.bind(base + 2, a.end);
      k.bind(base + 3, a.device_id);
      k.bind(base + 4, a.context_id);
      k.bind(base + 5, a.stream_id);
      k.bind(base + 6, a.correlation_id);
      k.bind(base + 7, a.global_pid);
      k.bind(base + 8, ids->second.first);
      k.bind(base + 9, ids->second.second);
      k.bind(base + 10, a.registers_per_thread);
      for (int d = 0; d < 3; ++d) {
        k.bind(base + 11 + d, a.grid[d]);
        k.bind(base + 14 + d, a.block[d]);
      }
      k.bind(base + 17, a.static_shared_memory);
      k.bind(base + 18, a.dynamic_shared_memory);
      return Status::success();
    };
    size_t at = 0;
    for (; at + kKernelRowsPerInsert <= kernels.size(); at += kKernelRowsPerInsert) {
      for (int r = 0; r < kKernelRowsPerInsert; ++r) {
        if (Status s = bind_row(writers_->kernel_chunk, r * kKernelColumns, kernels[at + static_cast<size_t>(r)]); !s) {
          return s;
        }
      }
      if (Status s = writers_->kernel_chunk.run(); !s) return s;
    }
    for (; at < kernels.size(); ++at) {
      if (Status s = bind_row(writers_->kernel, 0, kernels[at]); !s) return s;
      if (Status s = writers_->kernel.run(); !s) return s;
    }
    return Status::success();
  });
}

Status SessionStore::write_runtime(std::span<const RuntimeActivity> calls) {
  return transaction([&]() -> Status {
    sql::Statement& r = writers_->runtime;
    for (const RuntimeActivity& a : calls) {
      auto name_id = intern(a.name);
      if (!name_id) return name_id.error();
      r.bind(1, a.start);
      r.bind(2, a.end);
      r.bind(3, a.global_tid);
      r.bind(4, a.correlation_id);
      r.bind(5, *name_id);
      r.bind(6, a.return_value);
      if (Status s = r.run(); !s) return s;
    }
    return Status::success();
  });
}

Status SessionStore::write_memcpy(std::span<const MemcpyActivity> copies) {
  return transaction([&]() -> Status {
    sql::Statement& m = writers_->memcpy;
    for (const MemcpyActivity& a : copies) {
      m.bind(1, a.start);
      m.bind(2, a.end);
      m.bind(3, a.device_id);
      m.bind(4, a.context_id);
      m.bind(5, a.stream_id);
      m.bind(6, a.correlation_id);
      m.bind(7, a.global_pid);
      m.bind(8, a.bytes);
      m.bind(9, a.copy_kind);
      m.bind(10, a.src_kind);
      m.bind(11, a.dst_kind);
      if (Status s = m.run(); !s) return s;
    }
    return Status::success();
  });
}

Status SessionStore::write_gpu_info(const GpuInfo& gpu) {
  return transaction([&]() -> Status {
    auto stmt = db_.prepare(
        "INSERT INTO TARGET_INFO_GPU(id, name, busLocation, isDiscrete, l2CacheSize, totalMemory, memoryBandwidth, "
        "clockRate, smCount, uuid, cuDevice, computeMajor, computeMinor) "
        "VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?8, ?9, ?1, ?10, ?11)");
    if (!stmt) return stmt.error();
    stmt->bind(1, gpu.id);
    stmt->bind(2, std::string_view(gpu.name));
    stmt->bind(3, std::string_view(gpu.bus_location));
    stmt->bind(4, gpu.l2_cache_size);
    stmt->bind(5, gpu.total_memory);
    stmt->bind(6, gpu.memory_bandwidth);
    stmt->bind(7, gpu.clock_rate);
    stmt->bind(8, gpu.sm_count);
    stmt->bind(9, std::string_view(gpu.uuid));
    stmt->bind(10, gpu.compute_major);
    stmt->bind(11, gpu.compute_minor);
    return stmt->run();
  });
}

// ---- Reading --------------------------------------------------------------------------------

Expected<int64_t> SessionStore::count_rows(std::string_view table) {
  for (const std::string_view known : kSessionTables) {
    if (known == table) return db_.query_int("SELECT count(*) FROM " + std::string(table));
  }
  return make_error(path() + ": no table '" + std::string(table) + "' in a session");
}

Expected<SessionInfo> SessionStore::read_session() {
  auto stmt = db_.prepare(
      "SELECT start, end, wallStartNs, configJson, modelName, modelSha256, architecture, backend, device, version, "
      "level, status FROM SPECULA_SESSION WHERE id = 1");
  if (!stmt) return stmt.error();
  auto row = stmt->step();
  if (!row) return row.error();
  if (!*row) return make_error(path() + ": the session row is missing (the run was killed before it started)");
  SessionInfo info;
  info.start_ns = stmt->column_int(0);
  if (!stmt->column_is_null(1)) info.end_ns = stmt->column_int(1);
  info.wall_start_ns = stmt->column_int(2);
  info.config_json = stmt->column_text(3);
  info.model_name = stmt->column_text(4);
  info.model_sha256 = stmt->column_text(5);
  info.architecture = stmt->column_text(6);
  info.backend = stmt->column_text(7);
  info.device = stmt->column_text(8);
  info.version = stmt->column_text(9);
  info.level = stmt->column_text(10);
  info.status = stmt->column_text(11);
  stmt->reset();
  return info;
}

Expected<std::vector<RoundRow>> SessionStore::read_rounds() {
  auto stmt = db_.prepare(
      "SELECT round, start, end, speculative, contextLen, drafter, treeNodes, treeDepth, acceptedLength, nextToken, "
      "bonus, emitted, tokens, rollbackTokens, rejectedKvBytes FROM SPECULA_ROUNDS ORDER BY round");
  if (!stmt) return stmt.error();
  std::vector<RoundRow> rounds;
  const Status walked = sql::for_each_row(*stmt, [&] {
    RoundRow r;
    r.round = stmt->column_int(0);
    r.start_ns = stmt->column_int(1);
    r.end_ns = stmt->column_int(2);
    r.speculative = stmt->column_int(3) != 0;
    r.context_len = stmt->column_int(4);
    r.drafter = stmt->column_text(5);
    r.tree_nodes = static_cast<int32_t>(stmt->column_int(6));
    r.tree_depth = static_cast<int32_t>(stmt->column_int(7));
    r.accepted_length = static_cast<int32_t>(stmt->column_int(8));
    r.next_token = static_cast<int32_t>(stmt->column_int(9));
    r.bonus = stmt->column_int(10) != 0;
    r.emitted = static_cast<int32_t>(stmt->column_int(11));
    r.tokens = tokens_from_json(stmt->column_text(12));
    r.rollback_tokens = stmt->column_int(13);
    r.rejected_kv_bytes = stmt->column_int(14);
    rounds.push_back(std::move(r));
  });
  if (!walked) return walked.error();
  return rounds;
}

Expected<std::vector<DraftNodeRow>> SessionStore::read_draft_nodes(int64_t round) {
  auto stmt = db_.prepare(
      "SELECT node, token, parent, depth, draftProb, targetProb, visited, accepted FROM SPECULA_DRAFT_NODES "
      "WHERE round = ?1 ORDER BY node");
  if (!stmt) return stmt.error();
  stmt->bind(1, round);
  std::vector<DraftNodeRow> nodes;
  const Status walked = sql::for_each_row(*stmt, [&] {
    DraftNodeRow n;
    n.round = round;
    n.node = static_cast<int32_t>(stmt->column_int(0));
    n.token = static_cast<int32_t>(stmt->column_int(1));
    n.parent = static_cast<int32_t>(stmt->column_int(2));
    n.depth = static_cast<int32_t>(stmt->column_int(3));
    n.draft_prob = static_cast<float>(stmt->column_double(4));
    if (!stmt->column_is_null(5)) n.target_prob = static_cast<float>(stmt->column_double(5));
    n.visited = stmt->column_int(6) != 0;
    n.accepted = stmt->column_int(7) != 0;
    nodes.push_back(n);
  });
  if (!walked) return walked.error();
  return nodes;
}

Expected<std::vector<LayerSelectionRow>> SessionStore::read_layer_selections(int64_t round) {
  auto stmt = db_.prepare(
      "SELECT layer, query, queryGroup, mode, anchorLayer, totalBlocks, selectedBlocks, blockBits, overlapPrev, "
      "jaccardPrev FROM SPECULA_LAYER_SELECTIONS WHERE round = ?1 ORDER BY layer, query, rowid");
  if (!stmt) return stmt.error();
  stmt->bind(1, round);
  std::vector<LayerSelectionRow> rows;
  const Status walked = sql::for_each_row(*stmt, [&] {
    LayerSelectionRow r;
    r.selection.round = round;
    r.selection.layer = static_cast<int32_t>(stmt->column_int(0));
    r.selection.query = static_cast<int32_t>(stmt->column_int(1));
    r.selection.group = static_cast<int32_t>(stmt->column_int(2));
    r.selection.mode = stmt->column_text(3) == "reuse" ? SelectionMode::kReuse : SelectionMode::kRefresh;
    r.selection.anchor_layer = stmt->column_is_null(4) ? -1 : static_cast<int32_t>(stmt->column_int(4));
    r.selection.total_blocks = static_cast<int32_t>(stmt->column_int(5));
    r.selected_blocks = stmt->column_int(6);
    const auto bits = stmt->column_blob(7);
    r.selection.block_bits.assign(bits.begin(), bits.end());
    if (!stmt->column_is_null(8)) r.overlap_prev = stmt->column_int(8);
    if (!stmt->column_is_null(9)) r.jaccard_prev = stmt->column_double(9);
    rows.push_back(std::move(r));
  });
  if (!walked) return walked.error();
  return rows;
}

Expected<std::vector<NvtxRange>> SessionStore::read_nvtx() {
  auto stmt = db_.prepare(
      "SELECT n.start, n.end, COALESCE(n.text, s.value), n.globalTid, n.int64Value FROM NVTX_EVENTS AS n "
      "LEFT JOIN StringIds AS s ON s.id = n.textId ORDER BY n.start, n.rowid");
  if (!stmt) return stmt.error();
  std::vector<NvtxRange> ranges;
  const Status walked = sql::for_each_row(*stmt, [&] {
    NvtxRange r{stmt->column_int(0), stmt->column_int(1), stmt->column_text(2), stmt->column_int(3), std::nullopt};
    if (!stmt->column_is_null(4)) r.payload = stmt->column_int(4);
    ranges.push_back(std::move(r));
  });
  if (!walked) return walked.error();
  return ranges;
}

Expected<std::vector<KernelRow>> SessionStore::read_kernels() {
  auto stmt = db_.prepare(
      "SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, d.value, s.value, k.gridX, k.gridY, k.gridZ, "
      "k.blockX, k.blockY, k.blockZ, k.contextId, k.registersPerThread, k.staticSharedMemory, k.dynamicSharedMemory "
      "FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
      "JOIN StringIds AS d ON d.id = k.demangledName JOIN StringIds AS s ON s.id = k.shortName "
      "ORDER BY k.start, k.rowid");
  if (!stmt) return stmt.error();
  std::vector<KernelRow> kernels;
  const Status walked = sql::for_each_row(*stmt, [&] {
    KernelRow k;
    k.start = stmt->column_int(0);
    k.end = stmt->column_int(1);
    k.device_id = static_cast<int32_t>(stmt->column_int(2));
    k.stream_id = static_cast<int32_t>(stmt->column_int(3));
    k.correlation_id = stmt->column_int(4);
    k.demangled_name = stmt->column_text(5);
    k.short_name = stmt->column_text(6);
    for (int d = 0; d < 3; ++d) {
      k.grid[d] = static_cast<int32_t>(stmt->column_int(7 + d));
      k.block[d] = static_cast<int32_t>(stmt->column_int(10 + d));
    }
    k.context_id = static_cast<int32_t>(stmt->column_int(13));
    k.registers_per_thread = static_cast<int32_t>(stmt->column_int(14));
    k.static_shared_memory = static_cast<int32_t>(stmt->column_int(15));
    k.dynamic_shared_memory = static_cast<int32_t>(stmt->column_int(16));
    kernels.push_back(std::move(k));
  });
  if (!walked) return walked.error();
  return kernels;
}

Expected<std::vector<std::pair<std::string, double>>> SessionStore::read_metrics() {
  auto stmt = db_.prepare("SELECT key, value FROM SPECULA_METRICS WHERE value IS NOT NULL ORDER BY key");
  if (!stmt) return stmt.error();
  std::vector<std::pair<std::string, double>> metrics;
  const Status walked = sql::for_each_row(*stmt, [&] {
    metrics.emplace_back(stmt->column_text(0), stmt->column_double(1));
  });
  if (!walked) return walked.error();
  return metrics;
}

}  // namespace specula::profiler
