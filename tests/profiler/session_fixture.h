#pragma once
// Sessions with known contents for the profiler tests: synthetic engine rounds through the real
// recorder (synthetic_session.h) plus GPU activity written through the session store.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "profiler/recorder.h"
#include "profiler/session_store.h"
#include "synthetic_session.h"

namespace specula::testing {

// Records `rounds` synthetic rounds at `level` into path.
inline std::string record_synthetic(const std::string& path, ObserveLevel level, int rounds,
                                    const std::string& config_json = "") {
  auto recorder = profiler::record_to(path, level);
  EXPECT_TRUE(recorder.ok()) << recorder.error().message;
  profiler::Recorder& r = **recorder;
  int64_t t = 1'000'000;
  emit_session_start(r, t, config_json);
  r.on_event(PrefillEvent{t, t + 5000, 12});
  t += 10'000;
  for (int64_t round = 0; round < rounds; ++round) emit_round_events(r, round, t);
  r.on_event(SessionEndEvent{t, R"({"tokens_per_s": 42.5, "rounds": 6, "acceptance_by_depth": [0.5, 0.25]})"});
  EXPECT_TRUE(r.finish().ok()) << r.status().error().message;
  const profiler::RecorderStats stats = r.stats();
  EXPECT_EQ(stats.rounds_written, rounds);
  EXPECT_EQ(stats.dropped, 0);
  return path;
}

struct SyntheticKernel {
  std::string name;
  int64_t start, end;
  int32_t stream;
};

// Kernels on streams 7 and 13 of GPU 0 (one name has a comma, for CSV quoting), a memcpy, two
// runtime calls and the GPU's TARGET_INFO_GPU row. Times (ns) fall inside the synthetic rounds.
inline std::vector<SyntheticKernel> synthetic_kernels(int64_t scale = 1) {
  return {{"void gemm_bf16<128>(float*, int)", 1'020'000, 1'020'000 + 1000 * scale, 7},
          {"void gemm_bf16<128>(float*, int)", 1'030'000, 1'030'000 + 2000 * scale, 7},
          {"void gemm_bf16<128>(float*, int)", 1'040'000, 1'040'000 + 3000 * scale, 13},
          {"softmax_kernel", 1'050'000, 1'050'500, 7},
          {"softmax_kernel", 1'060'000, 1'060'500, 13},
          {"void attn<8, 64>(const __nv_bfloat16*)", 1'070'000, 1'074'000, 7}};
}

inline void add_gpu_activity(const std::string& path, int64_t scale = 1) {
  auto store = profiler::SessionStore::open(path, profiler::OpenMode::kReadWrite);
  ASSERT_TRUE(store.ok()) << store.error().message;
  std::vector<profiler::KernelActivity> kernels;
  const auto spec = synthetic_kernels(scale);
  int64_t correlation = 100;
  for (const auto& k : spec) {
    profiler::KernelActivity a;
    a.start = k.start;
    a.end = k.end;
    a.stream_id = k.stream;
    a.correlation_id = correlation++;
    a.demangled_name = k.name;
    a.grid[0] = 132;
    a.block[0] = 256;
    a.registers_per_thread = 64;
    a.dynamic_shared_memory = 49152;
    kernels.push_back(a);
  }
  ASSERT_TRUE(store->write_kernels(kernels).ok());
  profiler::MemcpyActivity copy;
  copy.start = 1'010'000;
  copy.end = 1'012'000;
  copy.stream_id = 7;
  copy.bytes = 4096;
  copy.copy_kind = 1;  // HtoD
  ASSERT_TRUE(store->write_memcpy(std::span(&copy, 1)).ok());
  const profiler::RuntimeActivity calls[] = {{1'019'000, 1'019'400, 42, 100, "cudaLaunchKernel", 0},
                                             {1'029'000, 1'029'300, 42, 101, "cudaLaunchKernel", 0}};
  ASSERT_TRUE(store->write_runtime(calls).ok());
  profiler::GpuInfo gpu;
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.sm_count = 132;
  ASSERT_TRUE(store->write_gpu_info(gpu).ok());
  ASSERT_TRUE(store->close().ok());
}

}  // namespace specula::testing
