#pragma once
// SessionStore: one recorded run in a SQLite file (docs/session-schema.md). Writers create a
// new file in WAL mode and write each round in one transaction, so a killed run loses at most
// the round in flight; close() checkpoints and switches the file back to a single-file
// (DELETE journal) database, which opens anywhere, read-only media included. Readers open an
// existing session and get a clear error for anything else: a non-SQLite file, a corrupt one, a
// SQLite database of another application, a newer schema, or a read-only file opened to write.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/core/expected.h"
#include "engine/observer/observer.h"
#include "profiler/session_schema.h"
#include "profiler/sqlite.h"

namespace specula::profiler {

struct SessionInfo {
  int64_t start_ns = 0;
  std::optional<int64_t> end_ns;
  int64_t wall_start_ns = 0;
  std::string config_json = "{}";
  std::string model_name;
  std::string model_sha256;
  std::string architecture;
  std::string backend;
  std::string device;
  std::string version;
  std::string level = "summary";
  std::string status = "recording";  // "recording" until finish_session(): "finished"
};

// One CUPTI kernel record (CUPTI_ACTIVITY_KIND_KERNEL); names are interned into StringIds.
struct KernelActivity {
  int64_t start = 0;
  int64_t end = 0;
  int32_t device_id = 0;
  int32_t context_id = 0;
  int32_t stream_id = 0;
  int64_t correlation_id = 0;
  int64_t global_pid = 0;
  std::string_view demangled_name;  // must stay valid for the call only
  int32_t grid[3] = {1, 1, 1};
  int32_t block[3] = {1, 1, 1};
  int32_t registers_per_thread = 0;
  int32_t static_shared_memory = 0;
  int32_t dynamic_shared_memory = 0;
};

struct RuntimeActivity {  // CUPTI_ACTIVITY_KIND_RUNTIME
  int64_t start = 0;
  int64_t end = 0;
  int64_t global_tid = 0;
  int64_t correlation_id = 0;
  std::string_view name;  // "cudaLaunchKernel"
  int32_t return_value = 0;
};

struct MemcpyActivity {  // CUPTI_ACTIVITY_KIND_MEMCPY
  int64_t start = 0;
  int64_t end = 0;
  int32_t device_id = 0;
  int32_t context_id = 0;
  int32_t stream_id = 0;
  int64_t correlation_id = 0;
  int64_t global_pid = 0;
  int64_t bytes = 0;
  int32_t copy_kind = 0;  // CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 8 DtoD, ...
  int32_t src_kind = 0;
  int32_t dst_kind = 0;
};

struct GpuInfo {  // TARGET_INFO_GPU
  int32_t id = 0;
  std::string name;
  std::string bus_location;
  std::string uuid;
  int64_t total_memory = 0;
  int64_t memory_bandwidth = 0;  // bytes/s
  int64_t clock_rate = 0;        // Hz
  int64_t l2_cache_size = 0;
  int32_t sm_count = 0;
  int32_t compute_major = 0;
  int32_t compute_minor = 0;
};

struct NvtxRange {  // NVTX_EVENTS push/pop range (eventType 59)
  int64_t start = 0;
  int64_t end = 0;
  std::string text;
  int64_t global_tid = 0;
  std::optional<int64_t> payload;  // int64Value: the round for engine phases, tokens for prefill
};

struct RoundRow {
  int64_t round = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  bool speculative = false;
  int64_t context_len = 0;
  std::string drafter;
  int32_t tree_nodes = 0;
  int32_t tree_depth = 0;
  int32_t accepted_length = 1;
  int32_t next_token = -1;
  bool bonus = false;
  int32_t emitted = 0;
  std::vector<int32_t> tokens;
  int64_t rollback_tokens = 0;
  int64_t rejected_kv_bytes = 0;
};

struct DraftNodeRow {
  int64_t round = 0;
  int32_t node = 0;
  int32_t token = 0;
  int32_t parent = -1;
  int32_t depth = 1;
  float draft_prob = 0;
  std::optional<float> target_prob;  // only for nodes the acceptance rule visited
  bool visited = false;
  bool accepted = false;
};

struct LayerSelectionRow {
  LayerSelectionEvent selection;
  int64_t selected_blocks = 0;
  std::optional<int64_t> overlap_prev;  // |this ∩ previous layer's| for the same round and query
  std::optional<double> jaccard_prev;   // |∩| / |∪| with the previous layer's
};

// Everything one transaction writes: a finished round with its rows, or rows outside rounds.
struct SessionBatch {
  std::optional<RoundRow> round;
  std::vector<DraftNodeRow> draft_nodes;
  std::vector<LayerSelectionRow> selections;
  std::vector<FfnStatsEvent> ffn_stats;
  std::vector<MoeStatsEvent> moe_stats;
  std::vector<DecisionEvent> decisions;
  std::vector<NvtxRange> nvtx;
  bool empty() const {
    return !round && draft_nodes.empty() && selections.empty() && ffn_stats.empty() && moe_stats.empty() &&
           decisions.empty() && nvtx.empty();
  }
};

struct KernelRow {  // read back, names resolved
  int64_t start = 0;
  int64_t end = 0;
  int32_t device_id = 0;
  int32_t stream_id = 0;
  int64_t correlation_id = 0;
  std::string demangled_name;
  std::string short_name;
  int32_t grid[3] = {};
  int32_t block[3] = {};
  int32_t context_id = 0;
  int32_t registers_per_thread = 0;
  int32_t static_shared_memory = 0;
  int32_t dynamic_shared_memory = 0;
};

struct RuntimeRow {  // read back, name resolved
  int64_t start = 0;
  int64_t end = 0;
  int64_t global_tid = 0;
  int64_t correlation_id = 0;
  std::string name;
  int32_t return_value = 0;
};

enum class OpenMode { kReadOnly, kReadWrite };

class SessionStore;
// What the CLI and the UI call to read a recorded session (read-only, validated).
Expected<SessionStore> open_session(const std::string& path);

// "void foo::bar<int>(float*, int)" -> "bar": the function name nsys stores as shortName.
std::string kernel_short_name(std::string_view demangled);

class SessionStore {
 public:
  struct CreateOptions {
    bool overwrite = false;  // replace an existing file (and its -wal/-shm) at the path
  };

  // A new, empty session at path.
  static Expected<SessionStore> create(const std::string& path, CreateOptions options);
  static Expected<SessionStore> create(const std::string& path) { return create(path, CreateOptions{}); }
  // An existing session; validates it first.
  static Expected<SessionStore> open(const std::string& path, OpenMode mode = OpenMode::kReadOnly);

  SessionStore(SessionStore&&) noexcept;
  SessionStore& operator=(SessionStore&&) noexcept;
  ~SessionStore();

  const std::string& path() const { return db_.path(); }
  int schema_version() const { return schema_version_; }
  sql::Database& database() { return db_; }  // for exporters and ad-hoc queries

  // ---- Writing (each call is one transaction) ----
  Status write_session(const SessionInfo& info);
  Status finish_session(int64_t end_ns, std::string_view metrics_json);
  Status write_batch(const SessionBatch& batch);
  Status write_kernels(std::span<const KernelActivity> kernels);
  Status write_runtime(std::span<const RuntimeActivity> calls);
  Status write_memcpy(std::span<const MemcpyActivity> copies);
  Status write_gpu_info(const GpuInfo& gpu);
  // Checkpoints the WAL and leaves a single-file database. Also done by the destructor.
  Status close();

  // ---- Reading ----
  Expected<SessionInfo> read_session();
  Expected<std::vector<RoundRow>> read_rounds();
  Expected<std::vector<DraftNodeRow>> read_draft_nodes(int64_t round);
  Expected<std::vector<LayerSelectionRow>> read_layer_selections(int64_t round);
  Expected<std::vector<NvtxRange>> read_nvtx();
  Expected<std::vector<KernelRow>> read_kernels();
  // In profiler/session_reader.cpp:
  Expected<std::vector<MemcpyActivity>> read_memcpy();
  Expected<std::vector<RuntimeRow>> read_runtime();
  Expected<std::vector<GpuInfo>> read_gpu_info();
  Expected<std::vector<FfnStatsEvent>> read_ffn_stats();  // every round, by round then layer
  Expected<std::vector<MoeStatsEvent>> read_moe_stats();  // every round, by round then layer
  Expected<std::vector<DecisionEvent>> read_decisions();
  Expected<std::vector<std::pair<std::string, double>>> read_metrics();  // numeric metrics
  Expected<int64_t> count_rows(std::string_view table);

 private:
  SessionStore();
  Status prepare_writers();
  Expected<int64_t> intern(std::string_view text);
  Status transaction(const std::function<Status()>& body);
  Status reload_string_cache();

  sql::Database db_;  // declared first: statements below are finalized before it closes
  int schema_version_ = 0;
  bool writable_ = false;
  bool closed_ = false;
  // Transparent hashing: lookups by string_view allocate nothing (the kernel bulk path).
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  template <class V>
  using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;
  StringMap<int64_t> string_ids_;
  StringMap<std::pair<int64_t, int64_t>> kernel_name_ids_;  // demangled -> (demangledName, shortName)
  int64_t next_string_id_ = 0;
  struct Writers;
  std::unique_ptr<Writers> writers_;
};

}  // namespace specula::profiler
