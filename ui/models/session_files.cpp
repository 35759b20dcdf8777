#include "ui/models/session_files.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "profiler/session_export.h"
#include "profiler/session_store.h"

namespace specula::ui {

Status export_session_copy(const std::string& from, const std::string& to) {
  std::error_code ec;
  if (std::filesystem::exists(to, ec)) return make_error(to + ": already exists; not overwritten");
  auto store = profiler::open_session(from);
  if (!store) return store.error();
  auto stmt = store->database().prepare("VACUUM INTO ?1");
  if (!stmt) return make_error(from + ": copying to " + to + ": " + stmt.error().message);
  stmt->bind(1, std::string_view(to));
  if (Status s = stmt->run(); !s) return make_error(from + ": copying to " + to + ": " + s.error().message);
  return {};
}

Status export_session_perfetto(const std::string& from, const std::string& to) {
  auto store = profiler::open_session(from);
  if (!store) return store.error();
  return profiler::export_perfetto(*store, to);
}

Status export_session_csv(const std::string& from, const std::string& to_dir) {
  auto store = profiler::open_session(from);
  if (!store) return store.error();
  return profiler::export_csv(*store, to_dir);
}

Expected<SessionSummary> summarize_session(const std::string& path) {
  auto store = profiler::open_session(path);
  if (!store) return store.error();
  auto info = store->read_session();
  if (!info) return make_error(path + ": " + info.error().message);
  SessionSummary s;
  s.model_name = info->model_name;
  s.backend = info->backend;
  s.status = info->status;
  const auto config = nlohmann::json::parse(info->config_json, nullptr, false);
  if (config.is_object()) {
    if (auto d = config.find("drafter"); d != config.end() && d->is_string()) s.drafter = d->get<std::string>();
    if (auto sp = config.find("sparse"); sp != config.end() && sp->is_object()) s.sparse = sp->value("preset", "");
  }
  if (auto n = store->count_rows("SPECULA_ROUNDS")) s.rounds = *n;
  if (auto n = store->count_rows("CUPTI_ACTIVITY_KIND_KERNEL")) s.kernels = *n;
  return s;
}

}  // namespace specula::ui
