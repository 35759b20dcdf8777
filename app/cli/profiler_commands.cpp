#include "app/cli/profiler_commands.h"

#include <cstdio>

#include "app/cli/commands.h"
#include <filesystem>

#include "profiler/nsys_import.h"
#include "profiler/session_diff.h"
#include "profiler/session_export.h"
#include "profiler/session_store.h"

namespace specula::cli {
ProfilerCommands::ProfilerCommands(CLI::App& app) {
  export_ = app.add_subcommand("export", "Export a recorded session: Perfetto trace JSON or CSV tables");
  export_->add_option("session", session_, "Session database (.sqlite)")->required();
  export_->add_option("--format", format_, "perfetto (Chrome trace JSON for ui.perfetto.dev) | csv (a folder)")
      ->check(CLI::IsMember({"perfetto", "csv"}))
      ->capture_default_str();
  export_->add_option("--out", out_, "Output file (perfetto) or folder (csv)")->required();
  export_->add_flag("--overwrite", overwrite_, "Replace an existing output file");

  import_ = app.add_subcommand("import-nsys", "Convert an Nsight Systems SQLite export into a Specula session");
  import_->add_option("capture", capture_, "`nsys export --type sqlite` output")->required();
  import_->add_option("--out", import_out_, "Session database to create")->required();
  import_->add_flag("--overwrite", overwrite_, "Replace an existing session file");

  diff_ = app.add_subcommand("diff", "Compare two sessions: configuration, speed, acceptance, KV reads, top kernels");
  diff_->add_option("a", diff_a_, "Session A")->required();
  diff_->add_option("b", diff_b_, "Session B")->required();
  diff_->add_flag("--json", diff_json_, "Print the comparison as JSON");
  diff_->add_option("--top", top_kernels_, "Kernels listed per session")->check(CLI::Range(1, 1000))->capture_default_str();
}

std::optional<int> ProfilerCommands::run() const {
  if (*export_) {
    auto session = profiler::open_session(session_);
    if (!session) return fail(session.error().message);
    std::error_code ec;
    if (format_ == "perfetto" && !overwrite_ && std::filesystem::exists(out_, ec)) {
      return fail(out_ + " already exists; choose another name or pass --overwrite");
    }
    const Status s = format_ == "perfetto" ? profiler::export_perfetto(*session, out_)
                                           : profiler::export_csv(*session, out_);
    if (!s) return fail(s.error().message);
    std::fprintf(stderr, "exported %s to %s\n", session_.c_str(), out_.c_str());
    return 0;
  }
  if (*import_) {
    auto stats = profiler::import_nsys(capture_, import_out_, overwrite_);
    if (!stats) return fail(stats.error().message);
    std::fprintf(stderr, "imported %lld kernels, %lld memcpys, %lld CUDA API calls, %lld NVTX ranges into %s\n",
                 static_cast<long long>(stats->kernels), static_cast<long long>(stats->memcpys),
                 static_cast<long long>(stats->runtime_calls), static_cast<long long>(stats->nvtx_ranges),
                 import_out_.c_str());
    return 0;
  }
  if (*diff_) {
    auto a = profiler::open_session(diff_a_);
    if (!a) return fail(a.error().message);
    auto b = profiler::open_session(diff_b_);
    if (!b) return fail(b.error().message);
    auto diff = profiler::diff_sessions(*a, *b, profiler::DiffOptions{top_kernels_});
    if (!diff) return fail(diff.error().message);
    std::fputs(diff_json_ ? (diff->dump(2) + "\n").c_str() : profiler::format_diff(*diff).c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

}  // namespace specula::cli
