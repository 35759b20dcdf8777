#pragma once
// A thin RAII layer over the sqlite3 C API: a connection, prepared statements with typed binds,
// and errors as values that name the file ("run.sqlite: ...: database disk image is malformed").
#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/core/expected.h"

namespace specula::profiler::sql {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using DbHandle = std::unique_ptr<sqlite3, DbCloser>;

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3_stmt* stmt, std::string label) : stmt_(stmt), label_(std::move(label)) {}

  // Binds are 1-based like SQLite's; a nullopt binds NULL.
  void bind(int index, int64_t value) { sqlite3_bind_int64(stmt_.get(), index, value); }
  void bind(int index, int32_t value) { sqlite3_bind_int64(stmt_.get(), index, value); }
  void bind(int index, double value) { sqlite3_bind_double(stmt_.get(), index, value); }
  void bind(int index, std::string_view text) {
    sqlite3_bind_text64(stmt_.get(), index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  }
  void bind_blob(int index, std::span<const uint8_t> bytes) {
    sqlite3_bind_blob64(stmt_.get(), index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  }
  void bind_null(int index) { sqlite3_bind_null(stmt_.get(), index); }
  template <class T>
  void bind(int index, const std::optional<T>& value) {
    if (value) bind(index, *value); else bind_null(index);
  }

  // SQLITE_ROW -> true, SQLITE_DONE -> false (and resets), anything else -> error.
  Expected<bool> step();
  // Steps a statement that returns no rows and resets it; the bindings stay.
  Status run();
  void reset() { sqlite3_reset(stmt_.get()); sqlite3_clear_bindings(stmt_.get()); }

  int64_t column_int(int i) const { return sqlite3_column_int64(stmt_.get(), i); }
  double column_double(int i) const { return sqlite3_column_double(stmt_.get(), i); }
  bool column_is_null(int i) const { return sqlite3_column_type(stmt_.get(), i) == SQLITE_NULL; }
  std::string column_text(int i) const;
  std::span<const uint8_t> column_blob(int i) const;

  sqlite3_stmt* get() const { return stmt_.get(); }

 private:
  std::unique_ptr<sqlite3_stmt, StmtFinalizer> stmt_;
  std::string label_;  // "<file>: <sql head>" for error messages
};

// Steps `stmt` to its end, calling `visit()` once per row (read the row through `stmt`).
// The first step error ends the walk and is returned.
template <class Visit>
Status for_each_row(Statement& stmt, Visit visit) {
  for (;;) {
    auto more = stmt.step();
    if (!more) return more.error();
    if (!*more) return Status::success();
    visit();
  }
}

class Database {
 public:
  // flags: SQLITE_OPEN_READONLY or SQLITE_OPEN_READWRITE [| SQLITE_OPEN_CREATE].
  static Expected<Database> open(const std::string& path, int flags);

  Status exec(std::string_view sql);
  Expected<Statement> prepare(std::string_view sql);
  // The first column of the first row as an integer (0 when no row).
  Expected<int64_t> query_int(std::string_view sql);

  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_.get(); }
  // "<path>: <what>: <sqlite message>"
  Error error(std::string_view what) const;

 private:
  DbHandle db_;
  std::string path_;
};

}  // namespace specula::profiler::sql
