// Kernel records per second into a session database (goal: >= 500k/s, issue 5), two ways:
//   store     SessionStore::write_kernels, one transaction per batch (the writer thread's work)
//   recorder  Recorder::record_kernels + flush: the copy on the caller's side, the queue and the
//             writer thread, end to end
// Records look like a decode loop's: ~40 distinct kernel names, increasing start times, a few
// streams. Best of --reps, each into a fresh file. Prints JSON; --out also writes it.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_info.h"
#include "profiler/recorder.h"
#include "profiler/session_store.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  const char* ops[] = {"gemv_q8_0", "gemv_f16", "rmsnorm", "rope", "attention_tree", "softmax", "silu_mul", "add",
                       "argmax", "kv_append", "quest_minmax", "select_blocks", "moe_route"};
  for (const char* op : ops) {
    for (int variant : {64, 128, 256}) {
      names.push_back("void specula::cuda::" + std::string(op) + "_kernel<" + std::to_string(variant) +
                      ", __half>(__half const*, __half*, int, int)");
    }
  }
  return names;
}

std::vector<specula::profiler::KernelActivity> make_records(int64_t n, const std::vector<std::string>& names) {
  std::vector<specula::profiler::KernelActivity> records(static_cast<size_t>(n));
  int64_t t = 1'000'000'000;
  for (int64_t i = 0; i < n; ++i) {
    auto& k = records[static_cast<size_t>(i)];
    k.start = t;
    k.end = t + 2000 + (i % 7) * 300;
    t = k.end + 500;
    k.device_id = 0;
    k.context_id = 1;
    k.stream_id = 7 + static_cast<int32_t>(i % 3);
    k.correlation_id = i + 1;
    k.global_pid = specula::profiler::nsys_global_pid(4242);
    k.demangled_name = names[static_cast<size_t>(i) % names.size()];
    k.grid[0] = 132;
    k.block[0] = 256;
    k.registers_per_thread = 64;
    k.dynamic_shared_memory = 16384;
  }
  return records;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t records = 2'000'000;
  int64_t batch = 8192;
  int reps = 3;
  std::string dir = std::filesystem::temp_directory_path().string();
  std::string out_path;
  CLI::App app{"bench_recorder_kernels: kernel records/s into a session database"};
  app.add_option("--records", records, "kernel records per run")->capture_default_str()->check(CLI::Range(1000, 100'000'000));
  app.add_option("--batch", batch, "records per transaction (a CUPTI buffer)")->capture_default_str()->check(CLI::Range(1, 1'000'000));
  app.add_option("--reps", reps)->capture_default_str()->check(CLI::Range(1, 100));
  app.add_option("--dir", dir, "where the scratch databases go")->capture_default_str();
  app.add_option("--out", out_path, "also write the JSON here");
  std::string commit = "unknown";
  app.add_option("--commit", commit, "commit the binary was built from");
  CLI11_PARSE(app, argc, argv);

  const auto names = kernel_names();
  const auto data = make_records(records, names);
  const std::string path = dir + "/bench_recorder_kernels_" + std::to_string(::getpid()) + ".sqlite";
  auto fail = [&](const std::string& message) {
    std::fprintf(stderr, "bench_recorder_kernels: %s\n", message.c_str());
    return 1;
  };

  double best_store_s = 1e30;
  double best_recorder_s = 1e30;
  int64_t file_bytes = 0;
  for (int rep = 0; rep < reps; ++rep) {
    {
      auto store = specula::profiler::SessionStore::create(path, {true});
      if (!store) return fail(store.error().message);
      const auto t0 = Clock::now();
      for (int64_t at = 0; at < records; at += batch) {
        const auto n = static_cast<size_t>(std::min(batch, records - at));
        if (auto s = store->write_kernels(std::span(data).subspan(static_cast<size_t>(at), n)); !s) {
          return fail(s.error().message);
        }
      }
      best_store_s = std::min(best_store_s, std::chrono::duration<double>(Clock::now() - t0).count());
      if (auto s = store->close(); !s) return fail(s.error().message);
      file_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
      auto check = store->database().query_int("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL");
      if (!check || *check != records) return fail("store run wrote the wrong number of rows");
    }
    {
      specula::profiler::RecorderOptions options;
      options.overwrite = true;
      auto recorder = specula::profiler::Recorder::create(path, options);
      if (!recorder) return fail(recorder.error().message);
      const auto t0 = Clock::now();
      for (int64_t at = 0; at < records; at += batch) {
        const auto n = static_cast<size_t>(std::min(batch, records - at));
        (*recorder)->record_kernels(std::span(data).subspan(static_cast<size_t>(at), n));
      }
      if (auto s = (*recorder)->flush(); !s) return fail(s.error().message);
      best_recorder_s = std::min(best_recorder_s, std::chrono::duration<double>(Clock::now() - t0).count());
      const auto stats = (*recorder)->stats();
      if (stats.kernels_written != records || stats.dropped != 0) return fail("recorder run lost records");
      if (auto s = (*recorder)->finish(); !s) return fail(s.error().message);
    }
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);

  const double store_rate = static_cast<double>(records) / best_store_s;
  const double recorder_rate = static_cast<double>(records) / best_recorder_s;
  const nlohmann::json out = {
      {"bench", "recorder_kernels"},
      {"date", specula::bench::utc_now()},
      {"host", specula::bench::host_info()},
      {"command", specula::bench::command_line(argc, argv)},
      {"commit", commit},
      {"device", "CPU: " + specula::cpu_model_name()},
      {"sqlite_version", sqlite3_libversion()},
      {"records", records},
      {"batch", batch},
      {"reps", reps},
      {"distinct_kernel_names", names.size()},
      {"store_seconds", best_store_s},
      {"store_records_per_s", store_rate},
      {"recorder_seconds", best_recorder_s},
      {"recorder_records_per_s", recorder_rate},
      {"bytes_per_record", static_cast<double>(file_bytes) / static_cast<double>(records)},
      {"goal_records_per_s", 500'000},
      {"goal_met", std::min(store_rate, recorder_rate) >= 500'000},
  };
  std::puts(out.dump(2).c_str());
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}
