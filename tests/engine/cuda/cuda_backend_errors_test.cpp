// Bad input and failures of the CUDA backend on a real GPU: a model larger than GPU memory is
// refused before anything is allocated, and a CUDA error in the middle of a run (here a real
// cudaMalloc failure: the test takes the GPU's free memory while a session is open) is an error
// the caller can read, after which the same session runs on and computes what a fresh one does.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "engine/backend/cuda_backend.h"
#include "engine/model/cpu_transformer.h"
#include "engine/model/loader.h"
#include "tests/engine/cuda/cuda_test_support.h"

namespace specula {
namespace {

TEST(CudaBackendErrors, ASyntheticModelLargerThanTheGpuIsRefusedByName) {
  if (!cuda_gpu_available()) {
    std::puts("skipped: no GPU");
    GTEST_SKIP() << "skipped: no GPU";
  }
  auto config = synthetic_config("llama-3.1-405b");
  ASSERT_TRUE(config) << config.error().message;
  auto backend = make_synthetic_cuda_backend(*config, 1, CudaBackendOptions{});
  ASSERT_FALSE(backend) << "811 GB of weights fit on this GPU?";
  const std::string& message = backend.error().message;
  EXPECT_NE(message.find("llama-3.1-405b"), std::string::npos) << message;
  EXPECT_NE(message.find("of GPU memory, but only"), std::string::npos) << message;
  EXPECT_EQ(synthetic_config("llama-9").error().message,
            "--synthetic: unknown shape 'llama-9' (known: llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, smollm2-135m, "
            "mixtral-8x7b, qwen1.5-moe-a2.7b, olmoe-1b-7b)");
}

// Holds all but ~1 MiB of the GPU's free memory until released.
class GpuMemoryHog {
 public:
  GpuMemoryHog() {
    for (size_t chunk = size_t(1) << 30; chunk >= (size_t(1) << 20);) {
      void* p = nullptr;
      if (cudaMalloc(&p, chunk) == cudaSuccess) {
        blocks_.push_back(p);
      } else {
        (void)cudaGetLastError();  // an allocation failure is not sticky; clear it
        chunk /= 2;
      }
    }
  }
  ~GpuMemoryHog() { release(); }
  void release() {
    for (void* p : blocks_) cudaFree(p);
    blocks_.clear();
  }
  size_t blocks() const { return blocks_.size(); }

 private:
  std::vector<void*> blocks_;
};

class CudaBackendMidRunError : public testing::DefaultModelOnGpu {
 protected:
  // Prefill of `prompt` and one decode step of `next`, committed; returns the step's logits.
  std::vector<float> prefill_and_step(BackendSession& session, const std::vector<int32_t>& prompt, int32_t next) {
    const int64_t V = model_->config.vocab_size;
    std::vector<float> logits(static_cast<size_t>(V));
    std::vector<int32_t> pos(prompt.size());
    std::iota(pos.begin(), pos.end(), 0);
    Status s = session.forward(prompt, pos, nullptr, logits, LogitRows::Last);
    EXPECT_TRUE(s) << s.error().message;
    session.commit_all();
    const int32_t p = static_cast<int32_t>(prompt.size());
    s = session.forward(std::vector<int32_t>{next}, std::vector<int32_t>{p}, nullptr, logits, LogitRows::Last);
    EXPECT_TRUE(s) << s.error().message;
    session.commit_all();
    return logits;
  }
};

TEST_F(CudaBackendMidRunError, AnAllocationFailureIsAnErrorAndTheSessionRunsOnAfterIt) {
  const std::vector<int32_t> prompt = {1, 504, 3458, 282, 4649, 314, 216};  // token ids of the real vocabulary
  const int64_t V = model_->config.vocab_size;
  auto opened = cuda_->start(16, 512);
  ASSERT_TRUE(opened) << opened.error().message;
  BackendSession& session = **opened;
  prefill_and_step(session, prompt, 30);

  // A 48-node chain verify needs bigger scratch than the decode steps had, and there is no
  // memory left to grow it into.
  constexpr int kRows = 48;
  std::vector<int32_t> tokens(kRows, 30), positions(kRows);
  std::iota(positions.begin(), positions.end(), static_cast<int32_t>(session.committed()));
  std::vector<int> parents(kRows);
  std::iota(parents.begin(), parents.end(), -1);
  const auto mask = AttentionMask::from_parents(parents);
  std::vector<float> all_logits(static_cast<size_t>(kRows * V));
  const int64_t committed_before = session.committed();
  {
    GpuMemoryHog hog;
    ASSERT_GT(hog.blocks(), 0u);
    const Status s = session.forward(tokens, positions, &mask, all_logits, LogitRows::All);
    ASSERT_FALSE(s) << "the verify ran with the GPU's memory taken";
    EXPECT_NE(s.error().message.find("cudaMalloc"), std::string::npos) << s.error().message;
    session.rollback();
  }
  EXPECT_EQ(session.committed(), committed_before);

  // Memory is back: a decode step (smaller than the scratch the failed growth had freed) and the
  // verify itself run, and the step's logits equal those of a fresh session.
  std::vector<float> step(static_cast<size_t>(V));
  const int32_t p = static_cast<int32_t>(session.committed());
  Status s = session.forward(std::vector<int32_t>{42}, std::vector<int32_t>{p}, nullptr, step, LogitRows::Last);
  ASSERT_TRUE(s) << s.error().message;
  session.rollback();
  s = session.forward(tokens, positions, &mask, all_logits, LogitRows::All);
  ASSERT_TRUE(s) << s.error().message;
  session.rollback();

  auto fresh_opened = cuda_->start(16, 512);
  ASSERT_TRUE(fresh_opened) << fresh_opened.error().message;
  BackendSession& fresh = **fresh_opened;
  prefill_and_step(fresh, prompt, 30);
  std::vector<float> fresh_step(static_cast<size_t>(V));
  s = fresh.forward(std::vector<int32_t>{42}, std::vector<int32_t>{p}, nullptr, fresh_step, LogitRows::Last);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_LE(testing::rel_l2(step, fresh_step), 1e-5);
}

}  // namespace
}  // namespace specula
