#pragma once
// What the CUDA engine tests share: why a test cannot run here, and relative L2 of GPU logits
// against a reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/cuda_backend.h"
#include "engine/model/loader.h"

namespace specula::testing {

// The skip reason when there is no GPU or no default model (the tests print "skipped: ..." and
// GTEST_SKIP with it); nullopt when both are here.
inline std::optional<std::string> gpu_and_default_model_missing() {
  if (!cuda_gpu_available()) return std::string("skipped: no GPU");
  const auto path = resolve_model_path("default");
  if (!std::filesystem::exists(path)) return "skipped: default model not found at " + path.string();
  return std::nullopt;
}

// A fixture's base: the default model loaded and a CUDA backend over it, or the test skipped with
// the reason printed. A derived SetUp calls this one first and returns when IsSkipped() or
// HasFatalFailure().
class DefaultModelOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto missing = gpu_and_default_model_missing()) {
      std::puts(missing->c_str());
      GTEST_SKIP() << *missing;
    }
    auto m = load_model(resolve_model_path("default"));
    ASSERT_TRUE(m) << m.error().message;
    model_ = std::make_unique<Model>(std::move(*m));
    auto cuda = make_cuda_backend(*model_, CudaBackendOptions{});
    ASSERT_TRUE(cuda) << cuda.error().message;
    cuda_ = std::move(*cuda);
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<CudaBackend> cuda_;
};

// ||a - ref|| / ||ref||; a NaN or infinity anywhere gives 1e30 (never within a bound).
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::isfinite(num) ? std::sqrt(num / den) : 1e30;
}

}  // namespace specula::testing
