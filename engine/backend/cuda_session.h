#pragma once
// CudaSession, the CUDA backend's BackendSession: its class, shared by cuda_session.cpp (KV cache,
// forwards, graphs, commits) and cuda_session_sparse.cpp (planned tree verifies, sparse FFN).
// Internal to the backend like cuda_backend_impl.h; included only where SPECULA_HAVE_CUDA is defined.
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "engine/backend/cuda_backend_impl.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/model_ops.h"

namespace specula::cuda_detail {

class CudaSession final : public BackendSession {
 public:
  CudaSession(CudaBackend::Impl* b, int block_size, int64_t capacity) : b_(b), B_(block_size), capacity_(capacity) {}

  Status init();

  Status forward(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                 std::span<float> logits, LogitRows rows, const ForwardContext* context) override;

  Status forward_greedy(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                        std::span<int32_t> greedy, LogitRows rows, const ForwardContext* context) override;

  Status forward_top_k(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                       float temperature, std::span<int32_t> ids, std::span<float> probs,
                       const ForwardContext* context) override;

  int64_t vocab_size() const override { return b_->cfg.vocab_size; }

  Status run_forward(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                     LogitRows rows, const ForwardContext* context, const std::function<Status()>& enqueue_outputs);

  Status fill_kv_random(int64_t rows, uint64_t seed);
  int64_t graph_count() const { return mem_ ? static_cast<int64_t>(mem_->graphs.size()) : 0; }

  ~CudaSession() override;

  Status commit(std::span<const int> keep_rows) override;

  void commit_all() override {
    if (min_max_stale_) update_min_max(committed_ + provisional_);
    committed_ += provisional_;
    provisional_ = 0;
  }
  void rollback() override { (void)finish(0); }
  Status truncate(int64_t rows) override;
  int64_t committed() const override { return committed_; }
  int64_t capacity() const override { return capacity_; }

 private:
  void update_min_max(int64_t rows);
  Status finish(int64_t n);

  // A tree verify that does not take attention_at's dense graph path: sparse verification past
  // L_b (engine/sparse/sparse_config.h), or (tree_attention_kernels) a dense verify on the
  // tree-attention kernels. Mirrors the CPU's SparseSelection (engine/sparse/sparse_attention.cpp)
  // layer by layer: dense_layers dense, anchors refresh, the other layers reuse the last refresh.
  struct SparsePlan {
    const SparseConfig* cfg = nullptr;  // null: every layer dense (tree_attention_kernels)
    const ForwardContext* context = nullptr;
    bool fast = false;              // tree_attention_sparse/dense (16-token blocks, head_dim 128); else attention_at
    int64_t committed = 0, nb = 0;  // committed rows and blocks
    cuda::SelectParams sp;
    std::vector<int32_t> order;     // kernel node i = forward row order[i]
    int64_t meta_bytes = 0;         // bf16 block min/max read by refresh layers' scoring
    int64_t dense_layer_bytes = 0;  // K/V of the layers that attend densely
    bool lists_on_host = false;     // the last refresh's lists, downloaded for the observer
    std::vector<int32_t> blocks, counts;
    std::vector<uint64_t> members;
    bool attends_densely(int l) const;
    // A layer whose anchor attends densely has no selection to reuse: it selects itself (as on the CPU).
    bool reuses_selection(int l) const;
    // Whether layer l's attention reads the bf16 tree-order queries (sparse_q_): the tree-attention
    // kernels do, and so does a layer that scores blocks itself (not one that attends densely or
    // reuses an anchor's selection) on attention_at.
    bool reads_tree_queries(int l) const;
  };

  // Planned tree verifies (cuda_session_sparse.cpp).
  Status plan_tree_verify(int64_t T, const AttentionMask* mask, int64_t first_new, const SparseConfig* sparse,
                          const ForwardContext* context, std::optional<SparsePlan>* out);
  // halves: null, or the Wo GEMM's input halves (T·q_dim hi, then lo) to write instead of att.
  // queries_written: the RoPE launch already wrote sparse_q_ (tree_query_rows).
  Status planned_attention(SparsePlan& p, int l, const cuda::PagedKvLayer& kv, int64_t T, const uint8_t* mask_dev,
                           const int32_t* step_dev, bf16_bits* halves, bool queries_written);
  // Where layer l's RoPE launch writes the bf16 tree-order queries for the plan (none: {}).
  cuda::TreeQueryRows tree_query_rows(const SparsePlan* plan, int l, int64_t T);
  Status observe_selection(SparsePlan& p, int l, int64_t T, bool reuse, bool dense);

  Status enqueue_forward(int64_t T, const uint8_t* mask_dev, LogitRows rows, SparsePlan* plan = nullptr,
                         const SparseConfig* ffn_sparse = nullptr);

  // A scratch buffer grown to at least n elements (kept across forwards).
  template <class T>
  static Status grow(DeviceBuffer<T>& buffer, size_t n, const char* what) {
    return n > buffer.size() ? buffer.allocate(n, what) : Status{};
  }

  // MoE layers (cuda_session_moe.cpp): x += MoE(rmsnorm(x)) in chunks of kMoeMaxTokens rows,
  // each layer's routing kept in the backend's records; the skip rule of a sparse config
  // (moe_skip_ per layer, empty: every routed expert runs); the routing to the observer and stats.
  Status moe_layer(const GpuLayer& L, int64_t l, int64_t T);
  Status set_moe_skip(const SparseConfig& sc);
  Status report_moe(int64_t T, const ForwardContext& context);
  std::vector<cuda::MoeDeviceSkip> moe_skip_;

  // The sparse FFN (cuda_session_sparse.cpp).
  Status prepare_sparse_ffn(int64_t T);
  Status sparse_ffn_layer(const GpuLayer& L, int64_t T, const SparseConfig& sc, int64_t l);
  void report_sparse_ffn(int64_t T, const ForwardContext& context);

  // A decode step or a tree verify as one graph launch. Each shape (rows T, all logits or the
  // last, mask or none) is captured on its first use and again after the shared scratch moved;
  // every launch parameter it holds is a device pointer, and what changes per step (tokens,
  // positions, committed, first_new, the mask) is read on the device from b.ids and b.mask.
  static constexpr int64_t kMaxGraphRows = 65;  // the pending token + a 64-node tree
  Status map_layers();
  Status launch_graph(int64_t T, const uint8_t* mask_dev, LogitRows rows);
  Status ensure_choice_buffers(int64_t n);

  CudaBackend::Impl* b_;
  DeviceBuffer<int32_t> choice_ids_;  // ensure_choice_buffers
  DeviceBuffer<float> choice_probs_;
  int32_t* host_choice_ids_ = nullptr;  // pinned
  float* host_choice_probs_ = nullptr;  // pinned
  int64_t choice_capacity_ = 0;
  cuda::KvLayerStrides layer_strides_;   // layers_[l] = layers_[0] + l strides
  int32_t* host_rows_ = nullptr;         // pinned staging of commit()'s row moves (from, to)
  int64_t move_capacity_ = 0;            // rows move_rows_, move_scratch_ and host_rows_ hold
  cudaEvent_t rows_uploaded_ = nullptr;  // the last commit's staging copy
  int64_t B_;
  int64_t capacity_;  // rows this session may hold (capacity())
  // Its KV memory and graphs (graphs by shape key, launch_graph): its own, or the last session's
  // (init()). Holds capacity_ rows or more.
  std::unique_ptr<KvMemory> mem_;
  int64_t n_blocks_ = 0;
  int64_t committed_ = 0, provisional_ = 0;
  // A forward of several rows without a sparse plan left the key min/max of its blocks for the
  // commit to recompute: finish() does for commit(), rollback() and truncate(), update_min_max() for
  // commit_all() and for a forward that comes before any of them (its decode step updates the
  // min/max incrementally, and sparse selection reads it).
  bool min_max_stale_ = false;
  DeviceBuffer<bf16_bits> move_scratch_;
  DeviceBuffer<int32_t> move_rows_;
  std::vector<cuda::PagedKvLayer> layers_;
  // Planned tree verifies (plan_tree_verify): bf16 queries and outputs [T][Hq][D], the current
  // block lists (the last refresh layer's), scratch, and the committed rows the lists load.
  DeviceBuffer<bf16_bits> sparse_q_, sparse_out_;
  DeviceBuffer<uint8_t> select_ws_, attn_ws_, visible_;
  DeviceBuffer<int32_t> list_blocks_, list_counts_, order_dev_;
  DeviceBuffer<uint64_t> list_members_, ancestors_dev_;
  DeviceBuffer<unsigned long long> listed_rows_;
  unsigned long long* host_listed_rows_ = nullptr;  // pinned
  DeviceBuffer<float> ffn_scratch_;                 // sparse_ffn_scratch_bytes, as floats
  int32_t* host_ffn_counts_ = nullptr;              // pinned, [n_layers][2] (kept pairs, active channels)
  cuda::BlockLists lists_;
};

}  // namespace specula::cuda_detail
