// What a stage boundary of a decode step costs (issue 7: fewer kernel boundaries was the lever
// left): `--stages` dependent stages (a decode step of the default model is 152 kernels) replayed
// as one CUDA graph, as a chain of kernels with and without programmatic dependent launch, and as
// one persistent kernel with a grid-wide barrier between stages (one and two blocks an SM). Each
// stage's work is the smallest dependent step (bench/boundary_cost_kernels.h); with --work false
// the boundaries alone. Prints the median microseconds a stage over --reps replays.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "bench/boundary_cost_kernels.h"
#include "bench/cuda_timing.h"
#include "kernels/cuda/model_ops.h"

const char* const specula::bench::kBenchName = "bench_boundary_cost";

namespace {

using namespace specula;

// Median microseconds a stage of the graph that enqueue() captures, over `reps` replays.
template <class F>
double us_per_stage(F&& enqueue, int stages, int reps) {
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  enqueue(s);
  CHECK_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = bench::median_ms(
      [&](int) {
        CHECK_CUDA(cudaGraphLaunch(exec, s));
        CHECK_CUDA(cudaStreamSynchronize(s));
      },
      reps);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  return ms * 1000.0 / stages;
}

}  // namespace

int main(int argc, char** argv) {
  std::string commit = "unknown", out_path;
  int stages = 150, reps = 50;
  CLI::App app{"bench_boundary_cost: a kernel boundary against a grid barrier, per decode-step stage"};
  app.add_option("--stages", stages, "dependent stages a replay")->check(CLI::Range(2, 100000));
  app.add_option("--reps", reps, "timed graph replays")->check(CLI::Range(1, 10000));
  app.add_option("--commit", commit);
  app.add_option("--out", out_path);
  CLI11_PARSE(app, argc, argv);
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_boundary_cost: skipped: no GPU (%s)\n", cuda::no_device_reason().c_str());
    return 0;
  }
  cuda::DeviceInfo dev;
  cuda::device_info(0, &dev);
  const int sms = dev.multiprocessors;
  const int64_t n = int64_t{2} * sms * 256;
  auto* a = static_cast<float*>(bench::dalloc(n * 4));
  auto* b = static_cast<float*>(bench::dalloc(n * 4));
  auto* sync = static_cast<unsigned*>(bench::dalloc(8));
  CHECK_CUDA(cudaMemset(a, 0, n * 4));
  CHECK_CUDA(cudaMemset(sync, 0, 8));
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-34s %7s %6s %10s\n", "variant", "blocks", "work", "us/stage");
  for (bool work : {false, true}) {
    for (int per_sm : {1, 2}) {
      const int blocks = per_sm * sms;
      const int64_t elems = int64_t{blocks} * 256;
      auto record = [&](const char* variant, double us) {
        rows.push_back({{"variant", variant}, {"blocks", blocks}, {"work", work}, {"us_per_stage", us}});
        std::printf("%-34s %7d %6d %10.3f\n", variant, blocks, work, us);
      };
      for (bool pdl : {true, false}) {
        cuda::set_programmatic_dependent_launch(pdl);
        record(pdl ? "kernel chain, programmatic launch" : "kernel chain, plain launch",
               us_per_stage([&](cudaStream_t s) { bench::enqueue_kernel_chain(a, b, elems, stages, blocks, work, s); },
                            stages, reps));
      }
      record(
          "persistent kernel, grid barrier",
          us_per_stage([&](cudaStream_t s) { bench::enqueue_persistent(a, b, elems, stages, blocks, work, sync, s); },
                       stages, reps));
    }
  }
  CHECK_CUDA(cudaGetLastError());
  nlohmann::json out = {{"bench", "boundary_cost"},
                        {"date", bench::utc_now()},
                        {"device", bench::device_json()},
                        {"host", bench::host_info()},
                        {"commit", commit},
                        {"command", bench::command_line(argc, argv)},
                        {"stages", stages},
                        {"reps", reps},
                        {"rows", rows}};
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(1) << "\n";
  return 0;
}
