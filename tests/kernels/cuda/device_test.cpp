// GPU tests: they skip with a visible "skipped: no GPU" on machines without one (CI, dev).
#include "kernels/cuda/device.h"

#include <gtest/gtest.h>

namespace specula::cuda {
namespace {

TEST(CudaDevice, ReportsAHopperOrNewerDeviceWhenPresent) {
  if (device_count() == 0) GTEST_SKIP() << "skipped: no GPU (" << no_device_reason() << ")";
  DeviceInfo info;
  ASSERT_TRUE(device_info(0, &info));
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.sm_major, 9) << "the kernels are built for sm_90a; " << info.name << " is sm_" << info.sm_major
                              << info.sm_minor;
  EXPECT_GT(info.global_memory_bytes, 1ull << 30);
}

TEST(CudaDevice, CopyBandwidthIsMeasurableAndPlausible) {
  if (device_count() == 0) GTEST_SKIP() << "skipped: no GPU (" << no_device_reason() << ")";
  CopyBandwidth memcpy_bw, kernel_bw;
  std::string error;
  ASSERT_TRUE(measure_copy_bandwidth(256ull << 20, 10, &memcpy_bw, &error)) << error;
  ASSERT_TRUE(measure_kernel_copy_bandwidth(256ull << 20, 10, &kernel_bw, &error)) << error;
  // HBM3 on H100/H200 is several TB/s; anything under 100 GB/s means the timing is broken.
  EXPECT_GT(memcpy_bw.bytes_per_s, 100e9);
  EXPECT_GT(kernel_bw.bytes_per_s, 100e9);
  EXPECT_LT(memcpy_bw.bytes_per_s, 20e12);
}

}  // namespace
}  // namespace specula::cuda
