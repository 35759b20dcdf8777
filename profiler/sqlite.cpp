#include "profiler/sqlite.h"

namespace specula::profiler::sql {

Expected<bool> Statement::step() {
  const int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) {
    sqlite3_reset(stmt_.get());
    return false;
  }
  sqlite3* db = sqlite3_db_handle(stmt_.get());
  std::string message = label_ + ": " + sqlite3_errmsg(db);
  sqlite3_reset(stmt_.get());
  return make_error(std::move(message));
}

Status Statement::run() {
  // step() has reset the statement; bindings stay, and the writers rebind every parameter.
  auto stepped = step();
  if (!stepped) return stepped.error();
  return Status::success();
}

std::string Statement::column_text(int i) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_.get(), i));
  if (!text) return {};
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt_.get(), i)));
}

std::span<const uint8_t> Statement::column_blob(int i) const {
  const auto* data = static_cast<const uint8_t*>(sqlite3_column_blob(stmt_.get(), i));
  if (!data) return {};
  return {data, static_cast<size_t>(sqlite3_column_bytes(stmt_.get(), i))};
}

Expected<Database> Database::open(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  Database db;
  db.db_.reset(raw);
  db.path_ = path;
  if (rc != SQLITE_OK) {
    return make_error(path + ": cannot open: " + (raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, 2000);
  return db;
}

Error Database::error(std::string_view what) const {
  return make_error(path_ + ": " + std::string(what) + ": " + sqlite3_errmsg(db_.get()));
}

Status Database::exec(std::string_view sql) {
  char* message = nullptr;
  const std::string text(sql);
  if (sqlite3_exec(db_.get(), text.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    std::string reason = message ? message : sqlite3_errmsg(db_.get());
    sqlite3_free(message);
    return make_error(path_ + ": " + text.substr(0, 60) + ": " + reason);
  }
  return Status::success();
}

Expected<Statement> Database::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db_.get(), sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt,
                         nullptr) != SQLITE_OK) {
    return error("preparing '" + std::string(sql.substr(0, 60)) + "'");
  }
  return Statement(stmt, path_ + ": " + std::string(sql.substr(0, 40)));
}

Expected<int64_t> Database::query_int(std::string_view sql) {
  auto stmt = prepare(sql);
  if (!stmt) return stmt.error();
  auto row = stmt->step();
  if (!row) return row.error();
  const int64_t value = *row ? stmt->column_int(0) : 0;
  stmt->reset();
  return value;
}

}  // namespace specula::profiler::sql
