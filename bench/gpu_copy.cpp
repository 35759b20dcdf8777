// Measured ceilings: device-to-device copy bandwidth (cudaMemcpy and a 16-byte-vector kernel)
// at several buffer sizes. Every GPU figure in docs is reported against this.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>

#include "bench/bench_info.h"
#include "kernels/cuda/device.h"

int main(int argc, char** argv) {
  std::string commit = "unknown", out_path;
  int iterations = 20;
  CLI::App app{"bench_gpu_copy: device-to-device copy bandwidth"};
  app.add_option("--commit", commit);
  app.add_option("--out", out_path);
  app.add_option("--iterations", iterations)->check(CLI::Range(1, 10000));
  CLI11_PARSE(app, argc, argv);

  if (specula::cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_gpu_copy: skipped: no GPU (%s)\n", specula::cuda::no_device_reason().c_str());
    return 0;
  }
  specula::cuda::DeviceInfo dev;
  specula::cuda::device_info(0, &dev);
  nlohmann::json sizes = nlohmann::json::array();
  double best = 0;
  for (uint64_t mib : {64, 256, 1024, 4096}) {
    specula::cuda::CopyBandwidth memcpy_bw, kernel_bw;
    std::string error;
    if (!specula::cuda::measure_copy_bandwidth(mib << 20, iterations, &memcpy_bw, &error) ||
        !specula::cuda::measure_kernel_copy_bandwidth(mib << 20, iterations, &kernel_bw, &error)) {
      std::fprintf(stderr, "bench_gpu_copy: %s\n", error.c_str());
      return 1;
    }
    sizes.push_back({{"buffer_mib", mib},
                     {"memcpy_GBps", memcpy_bw.bytes_per_s / 1e9},
                     {"kernel_copy_GBps", kernel_bw.bytes_per_s / 1e9}});
    best = std::max({best, memcpy_bw.bytes_per_s, kernel_bw.bytes_per_s});
  }
  nlohmann::json out = {
      {"bench", "gpu_copy"},
      {"date", specula::bench::utc_now()},
      {"device", {{"name", dev.name}, {"sm", std::to_string(dev.sm_major) + std::to_string(dev.sm_minor)},
                  {"multiprocessors", dev.multiprocessors}, {"memory_bytes", dev.global_memory_bytes},
                  {"driver", specula::bench::nvidia_driver()},
                  {"cuda_driver_api_version", dev.driver_version}, {"runtime_version", dev.runtime_version}}},
      {"host", specula::bench::host_info()},
      {"commit", commit},
      {"command", specula::bench::command_line(argc, argv)},
      {"bytes_counted", "read + write (2 x buffer per copy)"},
      {"sizes", sizes},
      {"copy_bandwidth_GBps", best / 1e9},
  };
  std::puts(out.dump(2).c_str());
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}
