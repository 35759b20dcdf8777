#include "profiler/session_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace specula::profiler {
namespace {

namespace fs = std::filesystem;

class SessionStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("specula_store_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  static std::vector<std::string> columns(SessionStore& store, const std::string& table) {
    auto stmt = store.database().prepare("SELECT name FROM pragma_table_info('" + table + "') ORDER BY cid");
    EXPECT_TRUE(stmt.ok());
    std::vector<std::string> names;
    while (true) {
      auto row = stmt->step();
      EXPECT_TRUE(row.ok());
      if (!row.ok() || !*row) break;
      names.push_back(stmt->column_text(0));
    }
    return names;
  }

  static void expect_error(const Expected<SessionStore>& result, const std::string& path,
                           const std::string& keyword) {
    ASSERT_FALSE(result.ok()) << "expected an error containing '" << keyword << "'";
    const std::string& message = result.error().message;
    EXPECT_EQ(message.rfind(path, 0), 0u) << "the error must start with the file name: " << message;
    EXPECT_NE(message.find(keyword), std::string::npos) << message;
  }

  fs::path dir_;
};

bool contains_all(const std::vector<std::string>& have, std::initializer_list<const char*> want) {
  const std::set<std::string> set(have.begin(), have.end());
  for (const char* w : want) {
    if (!set.count(w)) {
      ADD_FAILURE() << "missing column " << w;
      return false;
    }
  }
  return true;
}

TEST_F(SessionStoreTest, CreatesEveryTableWithNsightNamesAndColumns) {
  auto store = SessionStore::create(file("s.sqlite"));
  ASSERT_TRUE(store.ok()) << store.error().message;
  for (std::string_view table : kSessionTables) {
    auto n = store->count_rows(table);
    ASSERT_TRUE(n.ok()) << n.error().message;
  }
  EXPECT_EQ(columns(*store, "StringIds"), (std::vector<std::string>{"id", "value"}));
  EXPECT_TRUE(contains_all(columns(*store, "CUPTI_ACTIVITY_KIND_KERNEL"),
                           {"start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
                            "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                            "registersPerThread", "staticSharedMemory", "dynamicSharedMemory"}));
  EXPECT_TRUE(contains_all(columns(*store, "CUPTI_ACTIVITY_KIND_RUNTIME"),
                           {"start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"}));
  EXPECT_TRUE(contains_all(columns(*store, "CUPTI_ACTIVITY_KIND_MEMCPY"),
                           {"start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
                            "bytes", "copyKind", "srcKind", "dstKind"}));
  EXPECT_TRUE(contains_all(columns(*store, "NVTX_EVENTS"), {"start", "end", "eventType", "rangeId", "text", "textId",
                                                            "globalTid", "domainId", "int64Value"}));
  EXPECT_TRUE(contains_all(columns(*store, "TARGET_INFO_GPU"), {"id", "name", "busLocation", "totalMemory", "smCount"}));

  auto version = store->database().query_int("SELECT CAST(value AS INTEGER) FROM META WHERE key='schema_version'");
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, kSessionSchemaVersion);
  EXPECT_EQ(*store->database().query_int("PRAGMA application_id"), kSessionApplicationId);
  auto wal = store->database().prepare("PRAGMA journal_mode");
  ASSERT_TRUE(wal.ok());
  ASSERT_TRUE(*wal->step());
  EXPECT_EQ(wal->column_text(0), "wal");
  wal->reset();

  // Indexed on start, correlationId and round.
  for (const char* index : {"CUPTI_ACTIVITY_KIND_KERNEL_start", "CUPTI_ACTIVITY_KIND_KERNEL_correlationId",
                            "CUPTI_ACTIVITY_KIND_RUNTIME_correlationId", "NVTX_EVENTS_start",
                            "SPECULA_LAYER_SELECTIONS_round"}) {
    auto n = store->database().query_int(std::string("SELECT count(*) FROM sqlite_master WHERE type='index' AND name='") +
                                         index + "'");
    EXPECT_EQ(*n, 1) << index;
  }
}

TEST(KernelShortName, StripsReturnTypeNamespacesTemplatesAndParameters) {
  EXPECT_EQ(kernel_short_name("void specula::cuda::gemv_q8<128, float>(float const*, int)"), "gemv_q8");
  EXPECT_EQ(kernel_short_name("ampere_sgemm_128x64_nn"), "ampere_sgemm_128x64_nn");
  EXPECT_EQ(kernel_short_name("void at::native::(anonymous namespace)::softmax<float>(float*)"), "softmax");
  EXPECT_EQ(kernel_short_name("void ns::Outer<int>::inner(int)"), "inner");
}

TEST_F(SessionStoreTest, KernelsRuntimeAndMemcpyAnswerNsightStyleSql) {
  auto store = SessionStore::create(file("k.sqlite"));
  ASSERT_TRUE(store.ok()) << store.error().message;
  std::vector<KernelActivity> kernels(3);
  const std::string gemv = "void specula::gemv<float>(float const*, float*, int)";
  for (int i = 0; i < 3; ++i) {
    kernels[i].start = 1000 * (i + 1);
    kernels[i].end = 1000 * (i + 1) + 500;
    kernels[i].stream_id = 7;
    kernels[i].correlation_id = 40 + i;
    kernels[i].demangled_name = i == 2 ? std::string_view("rmsnorm_kernel") : std::string_view(gemv);
    kernels[i].grid[0] = 132;
    kernels[i].block[0] = 256;
  }
  ASSERT_TRUE(store->write_kernels(kernels).ok());
  std::vector<RuntimeActivity> calls = {{900, 950, 1, 40, "cudaLaunchKernel", 0},
                                        {1900, 1950, 1, 41, "cudaLaunchKernel", 0}};
  ASSERT_TRUE(store->write_runtime(calls).ok());
  MemcpyActivity copy;
  copy.start = 5000;
  copy.end = 6000;
  copy.bytes = 1 << 20;
  copy.copy_kind = 1;
  ASSERT_TRUE(store->write_memcpy({&copy, 1}).ok());
  GpuInfo gpu;
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.sm_count = 132;
  ASSERT_TRUE(store->write_gpu_info(gpu).ok());

  auto read = store->read_kernels();
  ASSERT_TRUE(read.ok()) << read.error().message;
  ASSERT_EQ(read->size(), 3u);
  EXPECT_EQ((*read)[0].demangled_name, gemv);
  EXPECT_EQ((*read)[0].short_name, "gemv");
  EXPECT_EQ((*read)[2].short_name, "rmsnorm_kernel");
  EXPECT_EQ((*read)[1].grid[0], 132);
  // Names are interned once: gemv, its short name, rmsnorm (short = itself), cudaLaunchKernel.
  EXPECT_EQ(*store->count_rows("StringIds"), 4);

  // The nsys recipe "correlate CUDA kernel launches with CUDA API kernel launches".
  auto joined = store->database().query_int(
      "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r "
      "ON k.correlationId = r.correlationId JOIN StringIds AS s ON s.id = r.nameId "
      "WHERE s.value = 'cudaLaunchKernel' AND r.start < k.start");
  ASSERT_TRUE(joined.ok()) << joined.error().message;
  EXPECT_EQ(*joined, 2);
  EXPECT_EQ(*store->database().query_int("SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL"), 1500);
  EXPECT_EQ(*store->database().query_int("SELECT bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY"), 1 << 20);
  EXPECT_EQ(*store->database().query_int("SELECT smCount FROM TARGET_INFO_GPU"), 132);
}

TEST_F(SessionStoreTest, ClosedSessionIsOneFileAndReopensReadOnly) {
  const std::string path = file("closed.sqlite");
  {
    auto store = SessionStore::create(path);
    ASSERT_TRUE(store.ok());
    SessionInfo info;
    info.model_name = "m";
    ASSERT_TRUE(store->write_session(info).ok());
    ASSERT_TRUE(fs::exists(path + "-wal"));
    ASSERT_TRUE(store->close().ok());
  }
  EXPECT_FALSE(fs::exists(path + "-wal"));
  EXPECT_FALSE(fs::exists(path + "-shm"));
  auto reopened = open_session(path);
  ASSERT_TRUE(reopened.ok()) << reopened.error().message;
  EXPECT_EQ(reopened->schema_version(), kSessionSchemaVersion);
  EXPECT_EQ(reopened->read_session()->model_name, "m");
  // Read-only connections refuse writes with a message naming the file.
  SessionInfo again;
  const Status write = reopened->write_session(again);
  ASSERT_FALSE(write.ok());
  EXPECT_NE(write.error().message.find(path), std::string::npos);
}

TEST_F(SessionStoreTest, CreateRefusesToClobberUnlessAsked) {
  const std::string path = file("exists.sqlite");
  std::ofstream(path) << "precious";
  auto refused = SessionStore::create(path);
  expect_error(refused, path, "already exists");
  EXPECT_TRUE(fs::exists(path));
  auto replaced = SessionStore::create(path, SessionStore::CreateOptions{true});
  ASSERT_TRUE(replaced.ok()) << replaced.error().message;
  auto missing_dir = SessionStore::create(file("no/such/dir/s.sqlite"));
  expect_error(missing_dir, file("no/such/dir/s.sqlite"), "cannot create");
}

TEST_F(SessionStoreTest, MissingEmptyAndNonSqliteFilesGiveClearErrors) {
  expect_error(SessionStore::open(file("absent.sqlite")), file("absent.sqlite"), "No such file");
  std::ofstream(file("empty.sqlite")).close();
  expect_error(SessionStore::open(file("empty.sqlite")), file("empty.sqlite"), "empty file");
  std::ofstream(file("notes.txt")) << "this is a text file, long enough to hold a header and more besides.\n";
  expect_error(SessionStore::open(file("notes.txt")), file("notes.txt"), "not a SQLite database");
  fs::create_directories(file("a_dir"));
  expect_error(SessionStore::open(file("a_dir")), file("a_dir"), "not a regular file");
}

TEST_F(SessionStoreTest, CorruptFileGivesAClearError) {
  const std::string path = file("corrupt.sqlite");
  {
    auto store = SessionStore::create(path);
    ASSERT_TRUE(store.ok());
    SessionBatch batch;
    for (int i = 0; i < 2000; ++i) batch.nvtx.push_back({i, i + 1, "span " + std::to_string(i), 1, std::nullopt});
    ASSERT_TRUE(store->write_batch(batch).ok());
    ASSERT_TRUE(store->close().ok());
  }
  const auto size = fs::file_size(path);
  ASSERT_GT(size, 16384u);
  {
    // Keep the 100-byte header, scribble over the schema page and the pages after it.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    const std::string junk(8192, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto opened = SessionStore::open(path);
  expect_error(opened, path, "corrupt");
}

TEST_F(SessionStoreTest, ForeignSqliteDatabasesAreRefusedByName) {
  const std::string other = file("other_app.sqlite");
  {
    auto db = sql::Database::open(other, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->exec("CREATE TABLE contacts (name TEXT, phone TEXT); INSERT INTO contacts VALUES ('a','1');").ok());
  }
  auto refused = SessionStore::open(other);
  expect_error(refused, other, "not a Specula session");
  EXPECT_NE(refused.error().message.find("contacts"), std::string::npos) << refused.error().message;

  const std::string nsys = file("report1.sqlite");
  {
    auto db = sql::Database::open(nsys, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->exec("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
                         "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, end INT NOT NULL);")
                    .ok());
  }
  auto nsys_refused = SessionStore::open(nsys);
  expect_error(nsys_refused, nsys, "import-nsys");

  const std::string meta_other = file("meta_other.sqlite");
  {
    auto db = sql::Database::open(meta_other, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->exec("CREATE TABLE META (key TEXT PRIMARY KEY, value TEXT);"
                         "INSERT INTO META VALUES ('application', 'someone-else');")
                    .ok());
  }
  expect_error(SessionStore::open(meta_other), meta_other, "someone-else");

  const std::string future = file("future.sqlite");
  {
    auto store = SessionStore::create(future);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(store->database().exec("UPDATE META SET value = '99' WHERE key = 'schema_version'").ok());
  }
  expect_error(SessionStore::open(future), future, "schema version 99");
}

TEST_F(SessionStoreTest, ReadOnlyFileOpensToReadButNotToWrite) {
  const std::string path = file("ro.sqlite");
  {
    auto store = SessionStore::create(path);
    ASSERT_TRUE(store.ok());
    SessionInfo info;
    info.model_name = "ro-model";
    ASSERT_TRUE(store->write_session(info).ok());
  }
  ASSERT_EQ(::chmod(path.c_str(), 0444), 0);
  expect_error(SessionStore::open(path, OpenMode::kReadWrite), path, "read-only");
  auto read = SessionStore::open(path, OpenMode::kReadOnly);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(read->read_session()->model_name, "ro-model");
  auto overwrite = SessionStore::create(path, SessionStore::CreateOptions{true});
  if (::geteuid() != 0) expect_error(overwrite, path, "cannot overwrite");
}

}  // namespace
}  // namespace specula::profiler
