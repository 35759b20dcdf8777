// import_nsys on a capture in the nsys export layout (nsys_fixture.h), and on foreign files.
#include "profiler/nsys_import.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "nsys_fixture.h"
#include "profiler/session_store.h"
#include "session_fixture.h"

namespace specula::profiler {
namespace {

namespace fs = std::filesystem;
using namespace specula::testing;

class NsysImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("specula_nsys_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    capture_ = (dir_ / "capture.sqlite").string();
    ASSERT_TRUE(write_nsys_fixture(capture_).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
  std::string capture_;
};

TEST_F(NsysImportTest, KernelsMemcpyRuntimeNvtxAndGpuArriveWithTheirValues) {
  auto stats = import_nsys(capture_, file("s.sqlite"));
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->kernels, 3);
  EXPECT_EQ(stats->memcpys, 1);
  EXPECT_EQ(stats->runtime_calls, 2);
  EXPECT_EQ(stats->nvtx_ranges, 2) << "the mark and the domain event are not ranges";
  EXPECT_EQ(stats->gpus, 1);

  auto s = open_session(file("s.sqlite"));
  ASSERT_TRUE(s) << s.error().message;
  auto info = s->read_session();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->backend, "nsys");
  EXPECT_EQ(info->device, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(info->start_ns, 4980000);
  EXPECT_EQ(info->end_ns, 5030000);
  EXPECT_EQ(info->status, "finished");

  auto kernels = s->read_kernels();
  ASSERT_TRUE(kernels);
  ASSERT_EQ(kernels->size(), 3u);
  const KernelRow& k = (*kernels)[2];
  EXPECT_EQ(k.start, 5020000);
  EXPECT_EQ(k.end, 5028000);
  EXPECT_EQ(k.stream_id, 14);
  EXPECT_EQ(k.correlation_id, 15);
  EXPECT_EQ(k.demangled_name, "flash_attn_ext_f16");
  EXPECT_EQ(k.short_name, "flash_attn_ext_f16");
  EXPECT_EQ(k.grid[0], 32);
  EXPECT_EQ(k.grid[1], 8);
  EXPECT_EQ(k.block[0], 128);
  EXPECT_EQ(k.registers_per_thread, 128);
  EXPECT_EQ(k.static_shared_memory, 1024);
  EXPECT_EQ(k.dynamic_shared_memory, 65536);
  EXPECT_EQ((*kernels)[0].short_name, "mul_mat_vec_q");

  auto copies = s->read_memcpy();
  ASSERT_TRUE(copies);
  ASSERT_EQ(copies->size(), 1u);
  EXPECT_EQ((*copies)[0].bytes, 1048576);
  EXPECT_EQ((*copies)[0].copy_kind, 1);

  auto api = s->read_runtime();
  ASSERT_TRUE(api);
  ASSERT_EQ(api->size(), 2u);
  EXPECT_EQ((*api)[1].name, "cudaLaunchKernel");
  EXPECT_EQ((*api)[1].correlation_id, 13);
  EXPECT_EQ((*api)[1].global_tid, kNsysGlobalTid);

  auto nvtx = s->read_nvtx();
  ASSERT_TRUE(nvtx);
  ASSERT_EQ(nvtx->size(), 2u);
  EXPECT_EQ((*nvtx)[0].text, "decode step");
  EXPECT_EQ((*nvtx)[0].payload, 17);
  EXPECT_EQ((*nvtx)[1].text, "llama_decode") << "a registered string comes through textId";

  auto gpus = s->read_gpu_info();
  ASSERT_TRUE(gpus);
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0].sm_count, 132);
  EXPECT_EQ((*gpus)[0].compute_major, 9);
}

TEST_F(NsysImportTest, ForeignCorruptMissingAndSpeculaFilesAreRefusedClearly) {
  const auto message = [&](const std::string& capture) {
    auto r = import_nsys(capture, file("out.sqlite"), true);
    EXPECT_FALSE(r.ok());
    return r ? std::string() : r.error().message;
  };
  EXPECT_NE(message(file("missing.sqlite")).find("no such file"), std::string::npos);

  std::ofstream(file("junk.sqlite")) << "this is not sqlite at all, just text that is long enough to be a header";
  EXPECT_NE(message(file("junk.sqlite")).find("junk.sqlite"), std::string::npos);

  {
    auto db = sql::Database::open(file("other.sqlite"), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->exec("CREATE TABLE customers (id INTEGER, name TEXT)").ok());
  }
  EXPECT_NE(message(file("other.sqlite")).find("not an Nsight Systems SQLite export"), std::string::npos);

  const auto session = record_synthetic(file("specula.sqlite"), ObserveLevel::kSummary, 1);
  EXPECT_NE(message(session).find("already a Specula session"), std::string::npos);

  {
    auto db = sql::Database::open(file("broken.sqlite"), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->exec("CREATE TABLE StringIds (id INTEGER, value TEXT);"
                         "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, finish INTEGER)").ok());
  }
  const std::string m = message(file("broken.sqlite"));
  EXPECT_NE(m.find("CUPTI_ACTIVITY_KIND_KERNEL has no column 'end'"), std::string::npos) << m;
}

TEST_F(NsysImportTest, AnExistingOutputIsKeptUnlessOverwrite) {
  std::ofstream(file("taken.sqlite")) << "keep me";
  auto r = import_nsys(capture_, file("taken.sqlite"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("already exists"), std::string::npos);
  std::ifstream in(file("taken.sqlite"));
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "keep me");
  EXPECT_TRUE(import_nsys(capture_, file("taken.sqlite"), true).ok());
}

}  // namespace
}  // namespace specula::profiler
