#pragma once
// The projection shapes the GEMM benches time (bench_skinny_gemm, bench_verify_gemm): SmolLM2-135M's
// fused projections and lm_head, Llama-3.1-8B's, and the attention side and router of a
// 2048-wide MoE model (OLMoE-1B-7B; Qwen1.5-MoE-A2.7B has the same qkv and o, 60 experts, and a
// 151936-row lm_head). The large ones run on random weights: timing only, and the model names
// say "synthetic".
#include <cstdint>
#include <vector>

namespace specula::bench {

struct ProjectionShape {
  const char* model;
  const char* name;
  int64_t N, K;  // W is (N, K)
};

inline const std::vector<ProjectionShape>& projection_shapes() {
  static const std::vector<ProjectionShape> shapes = {
      {"SmolLM2-135M", "qkv", 960, 576},
      {"SmolLM2-135M", "gate_up", 3072, 576},
      {"SmolLM2-135M", "down", 576, 1536},
      {"SmolLM2-135M", "lm_head", 49152, 576},
      {"llama-3.1-8b (synthetic)", "qkv", 6144, 4096},
      {"llama-3.1-8b (synthetic)", "o", 4096, 4096},
      {"llama-3.1-8b (synthetic)", "gate_up", 28672, 4096},
      {"llama-3.1-8b (synthetic)", "down", 4096, 14336},
      {"llama-3.1-8b (synthetic)", "lm_head", 128256, 4096},
      {"olmoe-1b-7b (synthetic)", "qkv", 6144, 2048},
      {"olmoe-1b-7b (synthetic)", "o", 2048, 2048},
      {"olmoe-1b-7b (synthetic)", "router", 64, 2048},
      {"olmoe-1b-7b (synthetic)", "lm_head", 50304, 2048},
  };
  return shapes;
}

}  // namespace specula::bench
