// Which models the CUDA backend takes (engine/backend/cuda_backend.h: cuda_backend_supports and
// the reason it gives otherwise), checked without a GPU: the four MoE fixtures and the default
// model's shape are taken; shapes kernels/cuda/moe.h or attention_at cannot run are refused with
// the number that fails.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/backend/cuda_backend.h"
#include "engine/model/loader.h"

namespace specula {
namespace {

using ::testing::HasSubstr;

TEST(CudaBackendSupport, TakesTheMoeLayoutsAndDenseShapes) {
  const auto dir = std::filesystem::path(SPECULA_TEST_DATA_DIR) / "moe";
  for (const char* name : {"qwen2moe.gguf", "qwen3moe.gguf", "mixtral.gguf", "olmoe.gguf", "qwen3moe-q8_0.gguf"}) {
    auto model = load_model(dir / name);
    ASSERT_TRUE(model) << model.error().message;
    EXPECT_TRUE(cuda_backend_supports(model->config)) << name << ": " << cuda_backend_unsupported(model->config);
  }
  for (const char* shape : {"smollm2-135m", "llama-3.1-8b", "mixtral-8x7b", "qwen1.5-moe-a2.7b", "olmoe-1b-7b"}) {
    auto config = synthetic_config(shape);
    ASSERT_TRUE(config) << config.error().message;
    EXPECT_EQ(cuda_backend_unsupported(*config), "") << shape;
    EXPECT_NE(config->name.find("synthetic"), std::string::npos) << shape;
  }
}

TEST(CudaBackendSupport, RefusesShapesItsKernelsDoNotCoverByName) {
  auto base = synthetic_config("olmoe-1b-7b");
  ASSERT_TRUE(base);
  ModelConfig c = *base;
  c.head_dim = 100;
  EXPECT_THAT(cuda_backend_unsupported(c), HasSubstr("head_dim 100"));
  c = *base;
  c.expert_ffn_dim = 1020;
  EXPECT_THAT(cuda_backend_unsupported(c), HasSubstr("expert FFN 1020"));
  EXPECT_FALSE(cuda_backend_supports(c));
  c = *base;
  c.n_experts_used = 17;
  EXPECT_THAT(cuda_backend_unsupported(c), HasSubstr("top-17 of 64"));
  c = *base;
  c.n_experts = 2048;
  EXPECT_THAT(cuda_backend_unsupported(c), HasSubstr("at most 1024 experts"));
}

}  // namespace
}  // namespace specula
