// The CUPTI record parser on synthetic buffers (records built with CUDA 13's struct layouts), and
// CuptiCapture's notice on a machine where it cannot run. No GPU needed.
#include "profiler/cupti_records.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>

#include "profiler/cupti_capture.h"

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define HAVE_CUPTI_HEADERS 1
#else
#define HAVE_CUPTI_HEADERS 0
#endif

namespace specula::profiler {
namespace {

TEST(CuptiRecords, DemanglesKernelNames) {
  EXPECT_EQ(demangle_kernel_name("_Z10vector_addPKfS0_Pfi"), "vector_add(float const*, float const*, float*, int)");
  EXPECT_EQ(demangle_kernel_name("plain_c_kernel"), "plain_c_kernel");
  EXPECT_EQ(demangle_kernel_name(nullptr), "(unnamed)");
}

#if HAVE_CUPTI_HEADERS

CUpti_ActivityKernel10 kernel(uint64_t start, uint64_t end, const char* name, uint32_t stream) {
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = start;
  k.end = end;
  k.deviceId = 0;
  k.contextId = 1;
  k.streamId = stream;
  k.gridX = 132;
  k.gridY = 2;
  k.gridZ = 1;
  k.blockX = 256;
  k.blockY = 1;
  k.blockZ = 1;
  k.registersPerThread = 72;
  k.staticSharedMemory = 1024;
  k.dynamicSharedMemory = 65536;
  k.correlationId = static_cast<uint32_t>(start / 1000);
  k.name = name;
  return k;
}

TEST(CuptiRecords, KernelsRuntimeMemcpyAndMarkersBecomeRows) {
  CuptiRecordParser parser(1'000'000);
  parser.set_runtime_namer([](uint32_t cbid) { return cbid == 211 ? std::string("cudaLaunchKernel") : "other"; });
  const auto k1 = kernel(1'002'000, 1'005'000, "_Z6gemv_qPKvPfi", 7);
  const auto k2 = kernel(1'006'000, 1'006'500, "_Z6gemv_qPKvPfi", 7);
  const auto k3 = kernel(1'007'000, 1'009'000, "softmax", 14);
  CUpti_ActivityAPI api;
  std::memset(&api, 0, sizeof api);
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.cbid = 211;
  api.start = 1'001'500;
  api.end = 1'001'900;
  api.threadId = 4243;
  api.correlationId = 1002;
  CUpti_ActivityMemcpy6 copy;
  std::memset(&copy, 0, sizeof copy);
  copy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  copy.bytes = 1 << 20;
  copy.start = 1'000'500;
  copy.end = 1'001'000;
  copy.streamId = 7;
  CUpti_ActivityMarker2 open_range, close_range, phase_open, phase_close;
  for (auto* m : {&open_range, &close_range, &phase_open, &phase_close}) {
    std::memset(m, 0, sizeof *m);
    m->kind = CUPTI_ACTIVITY_KIND_MARKER;
    m->objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
    m->objectId.pt.threadId = 4243;
  }
  open_range.flags = CUPTI_ACTIVITY_FLAG_MARKER_START;
  open_range.id = 5;
  open_range.timestamp = 1'001'000;
  open_range.name = "cublasGemmEx";
  close_range.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
  close_range.id = 5;
  close_range.timestamp = 1'009'500;
  phase_open = open_range;
  phase_open.id = 6;
  phase_open.name = "verify";  // an engine phase: the observer records it already
  phase_close = close_range;
  phase_close.id = 6;

  for (const void* r : std::initializer_list<const void*>{&copy, &open_range, &phase_open, &api, &k1, &k2, &k3,
                                                          &phase_close, &close_range}) {
    parser.add(r);
  }
  EXPECT_EQ(parser.invalid(), 0);
  EXPECT_EQ(parser.unknown_kinds(), 0);
  const GpuActivityBatch batch = parser.take();
  ASSERT_EQ(batch.kernels.size(), 3u);
  const KernelActivity& k = batch.kernels[0];
  EXPECT_EQ(k.start, 1'002'000);
  EXPECT_EQ(k.end, 1'005'000);
  EXPECT_EQ(k.stream_id, 7);
  EXPECT_EQ(k.context_id, 1);
  EXPECT_EQ(k.correlation_id, 1002);
  EXPECT_EQ(k.demangled_name, "gemv_q(void const*, float*, int)");
  EXPECT_EQ(k.grid[0], 132);
  EXPECT_EQ(k.grid[1], 2);
  EXPECT_EQ(k.block[0], 256);
  EXPECT_EQ(k.registers_per_thread, 72);
  EXPECT_EQ(k.static_shared_memory, 1024);
  EXPECT_EQ(k.dynamic_shared_memory, 65536);
  EXPECT_EQ(batch.kernels[1].demangled_name.data(), k.demangled_name.data()) << "one copy per distinct name";
  EXPECT_EQ(batch.kernels[2].demangled_name, "softmax");
  EXPECT_EQ(batch.kernels[2].stream_id, 14);

  ASSERT_EQ(batch.runtime.size(), 1u);
  EXPECT_EQ(batch.runtime[0].name, "cudaLaunchKernel");
  EXPECT_EQ(batch.runtime[0].correlation_id, 1002);
  EXPECT_EQ(batch.runtime[0].global_tid, 4243);
  ASSERT_EQ(batch.memcpy.size(), 1u);
  EXPECT_EQ(batch.memcpy[0].bytes, 1 << 20);
  EXPECT_EQ(batch.memcpy[0].copy_kind, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
  ASSERT_EQ(batch.ranges.size(), 1u) << "the engine phase marker is left to the observer";
  EXPECT_EQ(batch.ranges[0].text, "cublasGemmEx");
  EXPECT_EQ(batch.ranges[0].start, 1'001'000);
  EXPECT_EQ(batch.ranges[0].end, 1'009'500);
  EXPECT_EQ(batch.ranges[0].global_tid, 4243);
}

TEST(CuptiRecords, InvalidTimestampsAndUnknownKindsAreCountedAndSkipped) {
  CuptiRecordParser parser(1'000'000);
  const auto unknown_time = kernel(0, 0, "k", 7);
  const auto backwards = kernel(1'005'000, 1'004'000, "k", 7);
  const auto before_capture = kernel(900'000, 950'000, "k", 7);
  const auto good = kernel(1'005'000, 1'006'000, "k", 7);
  CUpti_Activity other;
  other.kind = CUPTI_ACTIVITY_KIND_DEVICE;
  for (const void* r : std::initializer_list<const void*>{&unknown_time, &backwards, &before_capture, &good, &other}) {
    parser.add(r);
  }
  EXPECT_EQ(parser.invalid(), 3);
  EXPECT_EQ(parser.unknown_kinds(), 1);
  EXPECT_EQ(parser.parsed(), 1);
  EXPECT_EQ(parser.take().kernels.size(), 1u);
}

#else
TEST(CuptiRecords, KernelsRuntimeMemcpyAndMarkersBecomeRows) {
  GTEST_SKIP() << "skipped: no CUPTI headers in this build";
}
#endif

TEST(CuptiCapture, CannotRunHereGivesOneLineNoticeAndNoCrash) {
  auto recorder = record_to(::testing::TempDir() + "/cupti_notice_" + std::to_string(::getpid()) + ".sqlite");
  ASSERT_TRUE(recorder.ok());
  auto capture = CuptiCapture::start(*recorder, CuptiOptions{1 << 20, false, "/nonexistent/libcupti.so"});
  if (capture) GTEST_SKIP() << "a GPU and CUPTI are present here; the notice path is covered on CPU machines";
  const std::string& notice = capture.error().message;
  EXPECT_EQ(notice.rfind("CUPTI capture off: ", 0), 0u) << notice;
  EXPECT_NE(notice.find("recording CPU spans only"), std::string::npos);
  EXPECT_EQ(notice.find('\n'), std::string::npos);
  // On a machine with a driver and a GPU, the bogus library path is what fails.
  if (notice.find("libcupti not found") != std::string::npos) {
    EXPECT_NE(notice.find("/nonexistent/libcupti.so"), std::string::npos);
  }
  EXPECT_TRUE((*recorder)->finish().ok());
}

}  // namespace
}  // namespace specula::profiler
