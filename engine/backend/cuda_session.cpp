// CudaSession (cuda_session.h): its KV cache, forwards (launched or replayed as CUDA graphs),
// outputs picked on the GPU, commits and rollbacks. Planned tree verifies and the sparse FFN are
// in cuda_session_sparse.cpp.
#if defined(SPECULA_HAVE_CUDA)

#include "engine/backend/cuda_session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/skinny_gemm.h"

namespace specula {

Status CudaSession::init() {
  const auto& c = b_->cfg;
  // The KV rows allocated: the capacity rounded up to whole blocks of decode attention's split
  // (256 rows), so that prompts of similar length ask for the same memory and graphs.
  constexpr int64_t kRowsQuantum = 256;
  const int64_t rows = (std::max<int64_t>(capacity_, B_) + kRowsQuantum - 1) / kRowsQuantum * kRowsQuantum;
  if (auto& spare = b_->spare_kv) {
    // The last session's memory and graphs, where it has room for this one and its attention
    // split (planned for its own rows, the graphs' launch shapes) has at most twice the splits
    // this capacity would get: more splits past the committed rows run empty.
    const int want = cuda::attention_split_for(rows, c.head_dim).splits;
    // Its rows hold that sequence's keys and values, which nothing reads: attention stops at the
    // committed rows, and a block's key min/max is recomputed over the rows present whenever
    // rows are committed.
    if (spare->block_size == B_ && spare->rows >= rows && spare->split.splits <= 2 * want) {
      mem_ = std::move(spare);
      n_blocks_ = mem_->rows / B_ + (mem_->rows % B_ != 0);
      return map_layers();
    }
    spare.reset();  // its memory may be what this session needs
  }
  mem_ = std::make_unique<KvMemory>();
  mem_->block_size = B_;
  mem_->rows = rows;
  n_blocks_ = mem_->rows / B_ + (mem_->rows % B_ != 0);
  const int64_t kv_per_layer = n_blocks_ * c.n_kv_heads * B_ * c.head_dim;
  const int64_t meta_per_layer = n_blocks_ * c.n_kv_heads * c.head_dim;
  const uint64_t need = static_cast<uint64_t>(c.n_layers) * (2 * kv_per_layer * 2 + 2 * meta_per_layer * 2);
  if (auto ok = b_->check_free_memory(need, "a KV cache of " + std::to_string(mem_->rows) + " tokens"); !ok) return ok;
  if (auto ok = mem_->keys.allocate(c.n_layers * kv_per_layer, "KV keys"); !ok) return ok;
  if (auto ok = mem_->values.allocate(c.n_layers * kv_per_layer, "KV values"); !ok) return ok;
  if (auto ok = mem_->kmin.allocate(c.n_layers * meta_per_layer, "KV key min"); !ok) return ok;
  if (auto ok = mem_->kmax.allocate(c.n_layers * meta_per_layer, "KV key max"); !ok) return ok;
  if (auto ok = mem_->table.allocate(n_blocks_, "KV block table"); !ok) return ok;
  // Decode steps and verifies (up to kMaxGraphRows tokens) split long contexts over blocks.
  mem_->split = cuda::attention_split_for(mem_->rows, c.head_dim);
  if (mem_->split.splits > 1) {
    if (auto ok = mem_->split_partial.allocate(kMaxGraphRows * c.n_heads * mem_->split.partial_floats_per_pair,
                                               "attention split");
        !ok) {
      return ok;
    }
    if (auto ok = mem_->split_counters.allocate(kMaxGraphRows * c.n_heads, "attention split counters"); !ok) return ok;
    SPECULA_CUDA_TRY(cudaMemset(mem_->split_counters.get(), 0, kMaxGraphRows * c.n_heads * sizeof(int32_t)),
                     "attention split counters");
    mem_->split.partial = mem_->split_partial.get();
    mem_->split.counters = mem_->split_counters.get();
  }
  // One sequence: logical block i is physical block i. The table is there so a shared pool
  // (prefix sharing, several sequences) can later hand out blocks in any order.
  std::vector<int32_t> table(static_cast<size_t>(n_blocks_));
  for (int64_t i = 0; i < n_blocks_; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  SPECULA_CUDA_TRY(cudaMemcpy(mem_->table.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice),
                   "block table upload");
  return map_layers();
}

// Per-layer views of the KV memory, and the strides one launch over all layers uses.
Status CudaSession::map_layers() {
  const auto& c = b_->cfg;
  const int64_t kv_per_layer = n_blocks_ * c.n_kv_heads * B_ * c.head_dim;
  const int64_t meta_per_layer = n_blocks_ * c.n_kv_heads * c.head_dim;
  layers_.clear();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    cuda::PagedKvLayer k;
    k.keys = mem_->keys.get() + l * kv_per_layer;
    k.values = mem_->values.get() + l * kv_per_layer;
    k.key_min = mem_->kmin.get() + l * meta_per_layer;
    k.key_max = mem_->kmax.get() + l * meta_per_layer;
    k.block_table = mem_->table.get();
    k.n_kv_heads = c.n_kv_heads;
    k.head_dim = c.head_dim;
    k.block_size = B_;
    layers_.push_back(k);
  }
  // One launch moves rows (commit) or recomputes min/max (commit, rollback) in every layer.
  layer_strides_ = cuda::KvLayerStrides{kv_per_layer, meta_per_layer, static_cast<int>(c.n_layers)};
  return {};
}

Status CudaSession::forward(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                            const AttentionMask* mask, std::span<float> logits, LogitRows rows,
                            const ForwardContext* context) {
  const int64_t V = b_->cfg.vocab_size;
  const int64_t n_out = rows == LogitRows::All ? static_cast<int64_t>(tokens.size()) : 1;
  if (static_cast<int64_t>(logits.size()) != n_out * V) {
    return make_error("forward: logits buffer has " + std::to_string(logits.size()) + " floats, need " +
                      std::to_string(n_out * V));
  }
  return run_forward(tokens, positions, mask, rows, context, [&]() -> Status {
    SPECULA_CUDA_TRY(
        cudaMemcpyAsync(logits.data(), b_->logits.get(), n_out * V * 4, cudaMemcpyDeviceToHost, b_->stream),
        "logits download");
    return {};
  });
}

// The forward with each output row's argmax taken on the GPU (kernels/cuda/sampling.h): only
// the ids come back, through a pinned buffer.
Status CudaSession::forward_greedy(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                   const AttentionMask* mask, std::span<int32_t> greedy, LogitRows rows,
                                   const ForwardContext* context) {
  const int64_t n_out = rows == LogitRows::All ? static_cast<int64_t>(tokens.size()) : 1;
  if (static_cast<int64_t>(greedy.size()) != n_out) {
    return make_error("forward_greedy: room for " + std::to_string(greedy.size()) + " tokens, the forward gives " +
                      std::to_string(n_out));
  }
  if (auto ok = ensure_choice_buffers(n_out); !ok) return ok;
  auto ran = run_forward(tokens, positions, mask, rows, context, [&]() -> Status {
    cuda::argmax_rows(b_->logits.get(), n_out, b_->cfg.vocab_size, choice_ids_.get(), b_->stream);
    SPECULA_CUDA_TRY(cudaGetLastError(), "argmax launch");
    SPECULA_CUDA_TRY(cudaMemcpyAsync(host_choice_ids_, choice_ids_.get(), n_out * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, b_->stream),
                     "greedy token download");
    return {};
  });
  if (!ran) return ran;
  std::memcpy(greedy.data(), host_choice_ids_, greedy.size_bytes());
  return {};
}

// The last row's top-k under softmax(logits / temperature) on the GPU; k ids and k
// probabilities come back.
Status CudaSession::forward_top_k(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                  const AttentionMask* mask, float temperature, std::span<int32_t> ids,
                                  std::span<float> probs, const ForwardContext* context) {
  const auto k = static_cast<int64_t>(ids.size());
  if (k < 1 || k > cuda::kTopKMax || probs.size() != ids.size()) {
    return make_error("forward_top_k: " + std::to_string(ids.size()) + " ids and " + std::to_string(probs.size()) +
                      " probabilities; want the same count, 1.." + std::to_string(cuda::kTopKMax));
  }
  if (!(temperature > 0))
    return make_error("forward_top_k: temperature " + std::to_string(temperature) + " is not > 0");
  if (k > b_->cfg.vocab_size) return make_error("forward_top_k: more ids than the vocabulary has tokens");
  if (auto ok = ensure_choice_buffers(k); !ok) return ok;
  auto ran = run_forward(tokens, positions, mask, LogitRows::Last, context, [&]() -> Status {
    cuda::top_k_softmax_row(b_->logits.get(), b_->cfg.vocab_size, static_cast<int>(k), temperature, choice_ids_.get(),
                            choice_probs_.get(), b_->stream);
    SPECULA_CUDA_TRY(cudaGetLastError(), "top-k launch");
    SPECULA_CUDA_TRY(
        cudaMemcpyAsync(host_choice_ids_, choice_ids_.get(), k * sizeof(int32_t), cudaMemcpyDeviceToHost, b_->stream),
        "top-k id download");
    SPECULA_CUDA_TRY(
        cudaMemcpyAsync(host_choice_probs_, choice_probs_.get(), k * sizeof(float), cudaMemcpyDeviceToHost, b_->stream),
        "top-k probability download");
    return {};
  });
  if (!ran) return ran;
  std::memcpy(ids.data(), host_choice_ids_, ids.size_bytes());
  std::memcpy(probs.data(), host_choice_probs_, probs.size_bytes());
  return {};
}

// Validates, uploads and launches a forward (a graph replay where its shape has one), then
// enqueue_outputs() queues what comes back to the host (logits, or ids picked on the GPU), and
// the forward waits for it.
Status CudaSession::run_forward(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                const AttentionMask* mask, LogitRows rows, const ForwardContext* context,
                                const std::function<Status()>& enqueue_outputs) {
  auto& b = *b_;
  const auto& c = b.cfg;
  const auto T = static_cast<int64_t>(tokens.size());
  if (auto ok = check_forward_inputs(tokens, positions, mask, c.vocab_size); !ok) return ok;
  const SparseConfig* sparse = context && context->sparse && !context->sparse->strict() ? context->sparse : nullptr;
  if (sparse) {
    if (auto ok = cuda_sparse_supported(*sparse); !ok) return ok;
  }
  const int64_t first_new = committed_ + provisional_;
  if (first_new + T > capacity_) {
    return make_error("forward: KV cache full (" + std::to_string(first_new) + " + " + std::to_string(T) +
                      " rows > capacity " + std::to_string(capacity_) + ")");
  }
  if (auto ok = b.ensure_scratch(T); !ok) return ok;
  // MoE layers have no dense FFN to thin out (the CPU runs them whole too).
  const SparseConfig* ffn_sparse = sparse && sparse->ffn && !c.is_moe() ? sparse : nullptr;
  const bool moe_skipping = sparse && sparse->moe && sparse->moe_skip_budget > 0 && c.is_moe();
  if (moe_skipping) {
    if (auto ok = set_moe_skip(*sparse); !ok) return ok;
  }
  if (ffn_sparse) {
    if (auto ok = prepare_sparse_ffn(T); !ok) return ok;
  }
  // Sparse verification past L_b, or a dense verify on the tree-attention kernels.
  std::optional<SparsePlan> plan;
  if (auto ok = plan_tree_verify(T, mask, first_new, sparse, context, &plan); !ok) return ok;
  if (min_max_stale_) update_min_max(committed_ + provisional_);
  provisional_ += T;

  cudaStream_t s = b.stream;
  std::memcpy(b.host_ids, tokens.data(), T * 4);
  std::memcpy(b.host_ids + T, positions.data(), T * 4);
  b.host_ids[2 * T] = static_cast<int32_t>(committed_);
  b.host_ids[2 * T + 1] = static_cast<int32_t>(first_new);
  SPECULA_CUDA_TRY(cudaMemcpyAsync(b.ids.get(), b.host_ids, (2 * T + 2) * 4, cudaMemcpyHostToDevice, s),
                   "token upload");
  const uint8_t* mask_dev = nullptr;
  if (mask) {
    for (int64_t i = 0; i < T; ++i) std::memcpy(b.host_mask + i * T, mask->row(i), static_cast<size_t>(T));
    SPECULA_CUDA_TRY(cudaMemcpyAsync(b.mask.get(), b.host_mask, T * T, cudaMemcpyHostToDevice, s), "mask upload");
    mask_dev = b.mask.get();
  }
  // Decode steps and tree verifies replay graphs (one per shape); a prefill is launched. A
  // planned tree verify is launched too: its grids and list sizes follow the committed length
  // (select_blocks sizes its launches on the host), so a graph would be re-captured every step.
  // A sparse FFN forward is launched too: it is not one of the graphs' shapes, and its counts
  // are copied out per layer.
  // An expert-skipping forward is launched too: its thresholds are launch parameters.
  const bool graphed = !plan && !ffn_sparse && !moe_skipping && b.cuda_graphs &&
                       ((T == 1 && !mask && rows == LogitRows::Last) || (mask && T <= kMaxGraphRows));
  if (plan) {
    SPECULA_CUDA_TRY(cudaMemsetAsync(listed_rows_.get(), 0, sizeof(unsigned long long), s), "sparse verify");
  }
  if (T > 1 && !plan) min_max_stale_ = true;  // enqueue_forward leaves it to the commit
  // The skip rule reaches enqueue_forward through moe_skip_, set above for this forward only: a
  // graph captured later must not see it (an earlier forward that failed may have left it).
  if (!moe_skipping) moe_skip_.clear();
  if (graphed) {
    if (auto ok = launch_graph(T, mask_dev, rows); !ok) return ok;
  } else {
    const Status ok = enqueue_forward(T, mask_dev, rows, plan ? &*plan : nullptr, ffn_sparse);
    moe_skip_.clear();
    if (!ok) return ok;
  }
  SPECULA_CUDA_TRY(cudaGetLastError(), "kernel launch in forward");
  if (auto ok = enqueue_outputs(); !ok) return ok;
  if (plan) {
    SPECULA_CUDA_TRY(
        cudaMemcpyAsync(host_listed_rows_, listed_rows_.get(), sizeof(unsigned long long), cudaMemcpyDeviceToHost, s),
        "sparse verify");
  }
  // The forward's one host synchronization: its outputs must be on the host.
  SPECULA_CUDA_TRY(cudaStreamSynchronize(s), "forward");
  if (ffn_sparse && context) report_sparse_ffn(T, *context);
  if (c.is_moe() && context &&
      (context->moe_stats || context->stats || observes(context->observer, EventKind::kMoeStats))) {
    if (auto ok = report_moe(T, *context); !ok) return ok;
  }
  if (context && context->sparse && context->stats) {
    // Bytes this backend reads: bf16 K and V rows, bf16 block min/max for scoring.
    const int64_t row_bytes = c.head_dim * 2 * 2;
    const int64_t dense_bytes = c.n_layers * c.n_kv_heads * committed_ * row_bytes;
    context->stats->kv_bytes_dense += dense_bytes;
    context->stats->kv_bytes_read +=
        plan ? static_cast<int64_t>(*host_listed_rows_) * row_bytes + plan->meta_bytes + plan->dense_layer_bytes
             : dense_bytes;
  }
  return {};
}

// Bench only: see cuda_fill_kv_random_for_bench.
Status CudaSession::fill_kv_random(int64_t rows, uint64_t seed) {
  if (rows <= 0 || rows > capacity_) {
    return make_error("fill_kv_random: " + std::to_string(rows) + " rows outside 1.." + std::to_string(capacity_));
  }
  cuda::fill_uniform_bf16(mem_->keys.get(), static_cast<int64_t>(mem_->keys.size()), seed * 2 + 1, 1.0f, b_->stream);
  cuda::fill_uniform_bf16(mem_->values.get(), static_cast<int64_t>(mem_->values.size()), seed * 2 + 2, 1.0f,
                          b_->stream);
  committed_ = 0;
  provisional_ = 0;
  if (auto ok = finish(rows); !ok) return ok;
  SPECULA_CUDA_TRY(cudaStreamSynchronize(b_->stream), "fill_kv_random");
  return {};
}

CudaSession::~CudaSession() {
  // A session whose init() completed leaves its memory and graphs to the next (KvMemory). Not
  // after a CUDA error: the next session should not inherit graphs a failed launch may have left
  // half-run.
  if (mem_ && !layers_.empty() && cudaPeekAtLastError() == cudaSuccess) b_->spare_kv = std::move(mem_);
  if (rows_uploaded_) cudaEventDestroy(rows_uploaded_);
  if (host_rows_) cudaFreeHost(host_rows_);
  if (host_listed_rows_) cudaFreeHost(host_listed_rows_);
  if (host_ffn_counts_) cudaFreeHost(host_ffn_counts_);
  if (host_choice_ids_) cudaFreeHost(host_choice_ids_);
  if (host_choice_probs_) cudaFreeHost(host_choice_probs_);
}

Status CudaSession::commit(std::span<const int> keep_rows) {
  const auto n = static_cast<int64_t>(keep_rows.size());
  std::vector<bool> seen(static_cast<size_t>(provisional_), false);
  for (int64_t i = 0; i < n; ++i) {
    const int r = keep_rows[static_cast<size_t>(i)];
    if (r < 0 || r >= provisional_ || seen[static_cast<size_t>(r)]) {
      return make_error("commit: provisional row " + std::to_string(r) + " is out of range (0.." +
                        std::to_string(provisional_ - 1) + ") or repeated");
    }
    seen[static_cast<size_t>(r)] = true;
  }
  if (n > 0) {
    const auto& c = b_->cfg;
    if (n > move_capacity_) {
      if (auto ok = move_rows_.allocate(2 * n, "commit rows"); !ok) return ok;
      if (auto ok = move_scratch_.allocate(c.n_layers * n * 2 * c.n_kv_heads * c.head_dim, "commit scratch"); !ok) {
        return ok;
      }
      if (host_rows_) cudaFreeHost(host_rows_);
      host_rows_ = nullptr;
      SPECULA_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&host_rows_), 2 * n * sizeof(int32_t)),
                       "cudaMallocHost");
      move_capacity_ = n;
    }
    // The staging buffer may still feed the last commit's copy if no forward (which waits for
    // the stream) came between: wait for that copy only.
    if (rows_uploaded_) SPECULA_CUDA_TRY(cudaEventSynchronize(rows_uploaded_), "commit");
    for (int64_t i = 0; i < n; ++i) {
      host_rows_[i] = static_cast<int32_t>(committed_ + keep_rows[static_cast<size_t>(i)]);
      host_rows_[n + i] = static_cast<int32_t>(committed_ + i);
    }
    SPECULA_CUDA_TRY(
        cudaMemcpyAsync(move_rows_.get(), host_rows_, 2 * n * sizeof(int32_t), cudaMemcpyHostToDevice, b_->stream),
        "commit");
    if (!rows_uploaded_) SPECULA_CUDA_TRY(cudaEventCreateWithFlags(&rows_uploaded_, cudaEventDisableTiming), "commit");
    SPECULA_CUDA_TRY(cudaEventRecord(rows_uploaded_, b_->stream), "commit");
    cuda::kv_move_rows_layers(layers_.front(), layer_strides_, move_rows_.get(), move_rows_.get() + n, n,
                              move_scratch_.get(), b_->stream);
  }
  return finish(n);
}

Status CudaSession::truncate(int64_t rows) {
  if (rows < 0 || rows > committed_) {
    return make_error("KV truncate: " + std::to_string(rows) + " rows outside 0.." + std::to_string(committed_));
  }
  committed_ = rows;
  provisional_ = 0;
  return finish(0);  // the block min/max of the cut block, over the rows left in it
}

// Key min/max of the blocks from the last committed row's block up to `rows`, over the rows
// present, in every layer (one launch): after a commit, a rollback or a cut, and where a forward of
// several rows without a sparse plan left it stale (enqueue_forward does not update it then).
void CudaSession::update_min_max(int64_t rows) {
  cuda::kv_update_min_max_layers(layers_.front(), layer_strides_, committed_ / B_, (rows + B_ - 1) / B_, rows,
                                 b_->stream);
  min_max_stale_ = false;
}

// Keeps n rows after the committed ones; block min/max is recomputed over the rows present.
Status CudaSession::finish(int64_t n) {
  const int64_t rows = committed_ + n;
  update_min_max(rows);
  committed_ = rows;
  provisional_ = 0;
  // No wait for the GPU: the moves and min/max run before the next forward on the same stream,
  // and that forward's wait for its logits reports any error they hit.
  SPECULA_CUDA_TRY(cudaGetLastError(), "KV commit");
  return {};
}

// The most rows a verify takes through tree_decode_attention_at. Every block of it rotates the
// keys of all T new rows (ceil(T / 4) rounds of double-precision cos and sin a thread at head_dim
// 64), which the launch it saves pays for only at small T: SmolLM2-135M chain verifies on the
// H100, median greedy ms, main -> fused at 2/5/9/13/16 rows: 0.647/0.822/1.135/1.356/1.349 ->
// 0.569/0.763/1.124/1.409/1.404 (bench/results/cuda_verify_fused_attention_s10_h100_2026-11-24.json).
// 8 keeps the two-round sizes (5 measured, 6 to 8 not); from 9 rows the old pair of launches.
constexpr int64_t kMaxFusedVerifyRows = 8;
// ... and the most attention splits (256 rows of capacity each) it takes them at: its blocks, one
// a (row, query head), each read the whole context, where attention_at's shared_kv_attention
// (kernels/cuda/shared_kv_attention.h) reads it once for 4 pairs. SmolLM2-shaped verifies on the
// H200, last-logits ms fused / unfused (bench/results/shared_kv_attention_s19_h200_2026-12-02.json):
// 5 and 8 rows at 1024 committed 0.97 / 1.02, 1.00 / 1.10; at 2048 0.99 / 1.13, 1.34 / 1.16; at
// 4096 1.38 / 1.20, 1.76 / 1.23; at 8000 8 rows 2.53 / 1.66. 8 splits: up to 2048 rows.
constexpr int kMaxFusedVerifySplits = 8;

// Enqueues the forward of T new tokens, from the embedding to the logits GEMM, reading the
// tokens, positions and step scalars that forward() uploaded to b.ids.
Status CudaSession::enqueue_forward(int64_t T, const uint8_t* mask_dev, LogitRows rows, SparsePlan* plan,
                                    const SparseConfig* ffn_sparse) {
  auto& b = *b_;
  const auto& c = b.cfg;
  cudaStream_t s = b.stream;
  const int32_t* tok_dev = b.ids.get();
  const int32_t* pos_dev = b.ids.get() + T;
  const int32_t* step_dev = b.ids.get() + 2 * T;
  const int64_t dim = c.dim, qd = b.q_dim(), kvd = b.kv_dim(), ld = b.qkv_dim(), ffn = c.ffn_dim, V = c.vocab_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const bool adjacent = c.rope_style == RopeStyle::AdjacentPairs;
  // Every projection on cuBLAS's stacked split path (a verify of more rows than the skinny
  // kernels take, e.g. a 60-node tree): the row ops between two GEMMs then read the product
  // halves and write the next GEMM's input halves themselves (model_ops.h), 5 small launches a
  // layer instead of 11 (add, norm, split, add, SwiGLU, split, add of the unfused path).
  // Not with the MoE FFN or the attention extras, which read and write plain f32 rows.
  const bool moe = c.is_moe(), extras = b.layers[0].extras(c).active();
  const bool split_ops = !ffn_sparse && !moe && !extras && !c.output_bias && b.stacked(ld, dim, T) &&
                         b.stacked(dim, qd, T) && b.stacked(2 * ffn, dim, T) && b.stacked(dim, ffn, T) &&
                         cuda::split_row_ops_fit(dim, ffn);
  bf16_bits* halves = b.x_bf16.get();
  // The new rows' block key min/max only where this forward's sparse selection reads it (a plan
  // with a config; a plan without one attends densely in every layer); else the commit
  // recomputes it for all layers at once: a launch a layer less in every verify (5.7 us each at 5
  // rows on the H100, bench/results/cuda_verify_profile_smollm2_h100_2026-11-24.json; 7.4 us at
  // 61 rows of the 8B, cuda_verify_8b_64k_profile_s9_db2b338_h100_2026-11-24.json).
  const bool min_max_now = plan && plan->cfg;
  if (T > 1 && !min_max_now) min_max_stale_ = true;
  cuda::embed_rows(b.embd.get(), tok_dev, T, dim, b.x.get(), s);
  if (split_ops) cuda::rmsnorm_split_rows(b.x.get(), dim, b.layers[0].attn_norm.get(), T, dim, c.rms_eps, halves, s);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const GpuLayer& L = b.layers[static_cast<size_t>(l)];
    const cuda::PagedKvLayer& kv = layers_[static_cast<size_t>(l)];
    // Five launches a layer at decode: norm+QKV, RoPE+append+attention, Wo (+residual),
    // norm+gate_up+SwiGLU, down (+residual); larger batches split the fused ones.
    if (split_ops) {
      // The halves of rmsnorm(x) are in x_bf16 (the launch before the loop or the last layer's).
      if (auto ok = b.gemm_halves(L.qkv.get(), ld, dim, T); !ok) return ok;
    } else if (auto ok = b.gemm_norm(L.qkv.get(), ld, dim, b.x.get(), T, L.attn_norm.get(), b.qkv.get(), ld); !ok) {
      return ok;
    }
    if (extras) cuda::qkv_extras_rows(b.qkv.get(), ld, T, L.extras(c), s);  // before RoPE, as the CPU
    // A decode step's RoPE, K/V append and attention in one launch (kernels/cuda/decode_attention.h;
    // it takes head_dim 64 and 128), and so a verify's of up to kMaxFusedVerifyRows rows (its key
    // min/max are left stale for the commit, as rope_append_at's here), else RoPE+append, then
    // attention.
    const bool fused =
        !plan && !split_ops && b.fused_decode_attention &&
        (T == 1 ? !mask_dev && cuda::decode_attention_at(b.qkv.get(), c.n_heads, qd + kvd, pos_dev, c.rope_theta,
                                                         adjacent, kv, step_dev, scale, b.att.get(), mem_->split, s)
                : T <= kMaxFusedVerifyRows && mem_->split.splits <= kMaxFusedVerifySplits &&
                      cuda::tree_decode_attention_at(b.qkv.get(), ld, T, c.n_heads, qd + kvd, pos_dev, c.rope_theta,
                                                     adjacent, kv, step_dev, mask_dev, scale, b.att.get(), mem_->split,
                                                     s));
    if (!fused) {
      const cuda::TreeQueryRows tree_q = tree_query_rows(plan, static_cast<int>(l), T);
      if (T == 1) {
        cuda::rope_append_decode_at(b.qkv.get(), c.n_heads, c.n_kv_heads, c.head_dim, pos_dev, c.rope_theta, adjacent,
                                    kv, qd + kvd, step_dev, s);
      } else if (split_ops) {
        cuda::rope_append_halves_at(b.y_split.get(), b.qkv.get(), ld, T, c.n_heads, c.n_kv_heads, c.head_dim, pos_dev,
                                    c.rope_theta, adjacent, kv, qd + kvd, step_dev, min_max_now, s, tree_q);
      } else {
        cuda::rope_append_at(b.qkv.get(), ld, T, c.n_heads, c.n_kv_heads, c.head_dim, pos_dev, c.rope_theta, adjacent,
                             kv, qd + kvd, step_dev, min_max_now, s, tree_q);
      }
      if (plan) {
        if (auto ok = planned_attention(*plan, static_cast<int>(l), kv, T, mask_dev, step_dev,
                                        split_ops ? halves : nullptr, tree_q.q != nullptr);
            !ok) {
          return ok;
        }
      } else {
        cuda::attention_at(b.qkv.get(), ld, T, c.n_heads, kv, step_dev, mask_dev, scale, b.att.get(), s,
                           T <= kMaxGraphRows ? mem_->split : cuda::AttentionSplit{});
      }
    }
    if (split_ops) {
      // x += att·Woᵀ, then the halves of rmsnorm(x; ffn_norm) for gate_up, SwiGLU's halves for
      // down, and x += down's product with the next layer's norm halves (or a plain add after
      // the last layer: the logits GEMM has a norm of its own).
      // (A planned attention wrote the halves itself.)
      if (!plan) cuda::f32_to_bf16_split(b.att.get(), T * qd, halves, halves + T * qd, s);
      if (auto ok = b.gemm_halves(L.wo.get(), dim, qd, T); !ok) return ok;
      cuda::add_halves_rmsnorm_split_rows(b.y_split.get(), T, dim, b.x.get(), L.ffn_norm.get(), c.rms_eps, halves, s);
      if (auto ok = b.gemm_halves(L.gate_up.get(), 2 * ffn, dim, T); !ok) return ok;
      cuda::swiglu_halves_split_rows(b.y_split.get(), T, ffn, halves, s);
      if (auto ok = b.gemm_halves(L.down.get(), dim, ffn, T); !ok) return ok;
      if (l + 1 < c.n_layers) {
        cuda::add_halves_rmsnorm_split_rows(b.y_split.get(), T, dim, b.x.get(),
                                            b.layers[static_cast<size_t>(l + 1)].attn_norm.get(), c.rms_eps, halves, s);
      } else {
        cuda::add_split_halves(b.y_split.get(), T, dim, b.x.get(), dim, true, s);
      }
      continue;
    }
    if (auto ok = b.gemm(L.wo.get(), dim, qd, b.att.get(), T, b.x.get(), dim, true); !ok) return ok;
    if (L.o_bias.get()) cuda::add_bias_rows(b.x.get(), dim, T, dim, L.o_bias.get(), s);
    if (moe) {
      if (auto ok = moe_layer(L, l, T); !ok) return ok;
      continue;
    }
    if (ffn_sparse) {
      if (auto ok = sparse_ffn_layer(L, T, *ffn_sparse, l); !ok) return ok;
      continue;
    }
    if (auto ok = b.gate_up_swiglu(L, b.x.get(), T); !ok) return ok;
    if (auto ok = b.gemm(L.down.get(), dim, ffn, b.xn.get(), T, b.x.get(), dim, true); !ok) return ok;
  }
  const int64_t first_out = rows == LogitRows::All ? 0 : T - 1;
  const int64_t n_out = T - first_out;
  return b.gemm_norm(b.output, V, dim, b.x.get() + first_out * dim, n_out, b.output_norm.get(), b.logits.get(), V,
                     true);
}

Status CudaSession::launch_graph(int64_t T, const uint8_t* mask_dev, LogitRows rows) {
  auto& b = *b_;
  if (mem_->graph_generation != b.scratch_generation) {
    for (auto& [key, exec] : mem_->graphs) cudaGraphExecDestroy(exec);
    mem_->graphs.clear();
    mem_->graph_generation = b.scratch_generation;
  }
  const int64_t key = T * 4 + (rows == LogitRows::All ? 2 : 0) + (mask_dev ? 1 : 0);
  auto found = mem_->graphs.find(key);
  // A shape's first forward runs eagerly: the stacked GEMMs' cuBLASLt algorithms are timed at
  // their first use (LtGemm), which a capture cannot hold.
  if (found == mem_->graphs.end() && b.cublaslt_tuned && mem_->eager_shapes.insert(key).second) {
    return enqueue_forward(T, mask_dev, rows);
  }
  if (found == mem_->graphs.end()) {
    cudaGraph_t graph = nullptr;
    SPECULA_CUDA_TRY(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal), "forward graph capture");
    const Status enqueued = enqueue_forward(T, mask_dev, rows);
    const cudaError_t captured = cudaStreamEndCapture(b.stream, &graph);
    if (!enqueued) {
      if (graph) cudaGraphDestroy(graph);
      return enqueued;
    }
    SPECULA_CUDA_TRY(captured, "forward graph capture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    SPECULA_CUDA_TRY(made, "forward graph instantiation");
    found = mem_->graphs.emplace(key, exec).first;
  }
  SPECULA_CUDA_TRY(cudaGraphLaunch(found->second, b.stream), "forward graph launch");
  return {};
}

// Room for n ids and n probabilities picked on the GPU (forward_greedy, forward_top_k), on the
// device and pinned on the host; grown, never shrunk. Only called between forwards: the last
// forward waited for its downloads, so the old buffers are idle.
Status CudaSession::ensure_choice_buffers(int64_t n) {
  if (n <= choice_capacity_) return {};
  const int64_t want = std::max<int64_t>({n, 2 * choice_capacity_, int64_t{cuda::kTopKMax}});
  if (auto ok = choice_ids_.allocate(static_cast<size_t>(want), "greedy token ids"); !ok) return ok;
  if (auto ok = choice_probs_.allocate(static_cast<size_t>(want), "top-k probabilities"); !ok) return ok;
  choice_capacity_ = 0;
  if (host_choice_ids_) cudaFreeHost(host_choice_ids_);
  if (host_choice_probs_) cudaFreeHost(host_choice_probs_);
  host_choice_ids_ = nullptr;
  host_choice_probs_ = nullptr;
  SPECULA_CUDA_TRY(
      cudaMallocHost(reinterpret_cast<void**>(&host_choice_ids_), static_cast<size_t>(want) * sizeof(int32_t)),
      "pinned greedy token ids");
  SPECULA_CUDA_TRY(
      cudaMallocHost(reinterpret_cast<void**>(&host_choice_probs_), static_cast<size_t>(want) * sizeof(float)),
      "pinned top-k probabilities");
  choice_capacity_ = want;
  return {};
}

}  // namespace specula

#endif  // SPECULA_HAVE_CUDA
