// CudaSession's planned tree verifies (sparse verification past L_b, dense tree-attention
// kernels), their selection events, and the sparse FFN (cuda_session.h).
#if defined(SPECULA_HAVE_CUDA)

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "engine/backend/cuda_session.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/skinny_gemm.h"
#include "kernels/cuda/sparse_ffn.h"
#include "kernels/cuda/sparse_verify.h"

namespace specula {

// Decides whether forward() takes a planned path and sizes its buffers. The budget is the CPU's:
// k = kept_blocks(L) blocks per KV head among the committed ones, sink and local included.
// select_blocks forces the sink blocks, the blocks from prefix_len / B - local on (which holds a
// partly committed last block and the tree's rows) and takes top_k more by score; so local is
// passed one lower when the last committed block is partial, and top_k = k minus the forced
// committed blocks: the same kept set as the CPU (with local_blocks 0 and a partial last block,
// the CUDA path keeps that block too, as it holds the tree's own rows).
Status CudaSession::plan_tree_verify(int64_t T, const AttentionMask* mask, int64_t first_new,
                                     const SparseConfig* sparse, const ForwardContext* context,
                                     std::optional<SparsePlan>* out) {
  const auto& c = b_->cfg;
  const bool fast_shape = c.head_dim == cuda::kAttnHeadDim && B_ == cuda::kAttnBlockSize && first_new == committed_ &&
                          T <= cuda::kAttnMaxNodes;
  const int64_t nb = (committed_ + B_ - 1) / B_;
  const int64_t k = sparse ? kept_blocks(*sparse, committed_, static_cast<int>(B_)) : nb;
  const bool sparse_active = sparse && sparse->attention && committed_ > 0 && k < nb;
  // A wide verify already off the exact path may take the kernels at long contexts
  // (CudaBackendOptions::tree_attention_from_context).
  const bool wide_and_long = b_->tree_attention_from_context > 0 && committed_ >= b_->tree_attention_from_context &&
                             b_->stacked(b_->qkv_dim(), c.dim, T);
  const bool dense_fast = !sparse_active && (b_->tree_attention_kernels || wide_and_long) && mask && fast_shape &&
                          committed_ > 0;
  if (!sparse_active && !dense_fast) return {};
  if (sparse_active && T > cuda::kAttnMaxNodes) {
    return make_error("forward: sparse verification on the CUDA backend takes at most " +
                      std::to_string(cuda::kAttnMaxNodes) + " rows (the pending token and " +
                      std::to_string(cuda::kAttnMaxNodes - 1) + " tree nodes), got " + std::to_string(T));
  }
  if (sparse_active && c.head_dim != 64 && c.head_dim != 128) {
    return make_error("forward: sparse verification on the CUDA backend needs head_dim 64 or 128 (this model: " +
                      std::to_string(c.head_dim) + "); use --backend cpu");
  }
  SparsePlan& p = out->emplace();
  p.cfg = sparse_active ? sparse : nullptr;
  p.context = context;
  p.fast = fast_shape;
  p.committed = committed_;
  p.nb = nb;
  p.order.resize(static_cast<size_t>(T));
  std::iota(p.order.begin(), p.order.end(), 0);
  if (sparse_active && context && static_cast<int64_t>(context->query_order.size()) == T) {
    p.order.assign(context->query_order.begin(), context->query_order.end());
    std::vector<bool> seen(static_cast<size_t>(T), false);
    for (int32_t r : p.order) {
      if (r < 0 || r >= T || seen[static_cast<size_t>(r)])
        return make_error("forward: query_order is not a permutation of the rows");
      seen[static_cast<size_t>(r)] = true;
    }
  }
  if (sparse_active) {
    const SparseConfig& cfg = *sparse;
    int64_t forced = 0;
    for (int64_t blk = 0; blk < nb; ++blk) forced += (blk < cfg.sink_blocks || blk >= nb - cfg.local_blocks) ? 1 : 0;
    p.sp.top_k = static_cast<int>(std::max<int64_t>(0, k - forced));
    p.sp.sink_blocks = cfg.sink_blocks;
    p.sp.local_blocks = committed_ % B_ != 0 && cfg.local_blocks > 0 ? cfg.local_blocks - 1 : cfg.local_blocks;
    p.sp.group_size = cfg.group_size;
    switch (cfg.query_mode) {
      case QueryMode::kFirst:
        p.sp.mode = cuda::QueryMode::kFirstQuery;
        break;
      case QueryMode::kPerQuery:
        p.sp.mode = cuda::QueryMode::kPerQuery;
        break;
      case QueryMode::kGroupUnion:
        p.sp.mode = cuda::QueryMode::kGroupUnion;
        break;
      case QueryMode::kGroupShared:
        p.sp.mode = cuda::QueryMode::kGroupShared;
        break;
    }
    p.sp.block_size = static_cast<int>(B_);
    p.sp.head_dim = static_cast<int>(c.head_dim);
  }
  // Host staging: order (T int32) then ancestors (T uint64, node order) for the fast kernels.
  std::vector<uint64_t> ancestors(static_cast<size_t>(T), 0);
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j < T; ++j) {
      const int32_t r = p.order[static_cast<size_t>(i)], q = p.order[static_cast<size_t>(j)];
      const bool sees = mask ? mask->row(r)[q] != 0 : q <= r;
      if (sees) ancestors[static_cast<size_t>(i)] |= uint64_t{1} << j;
    }
  }
  // Device buffers, grown to this verify's sizes.
  cuda::TreeQueries tq{nullptr, nullptr, static_cast<int>(T), static_cast<int>(c.n_heads), static_cast<int>(committed_),
                       0.0f};
  const int kvh = static_cast<int>(c.n_kv_heads);
  size_t select_ws = 0, attn_ws = 0, list_entries = 0;
  if (sparse_active) {
    int groups = 0, gs = 0, max_blocks = 0;
    cuda::select_list_shape(tq, p.sp, &groups, &gs, &max_blocks);
    select_ws = cuda::select_workspace_bytes(tq, kvh, p.sp);
    list_entries = size_t(groups) * kvh * max_blocks;
    if (p.fast) attn_ws = cuda::attention_workspace_bytes(tq, kvh, groups, gs, max_blocks);
  }
  if (p.fast) {
    const int all_blocks = static_cast<int>((committed_ + T + B_ - 1) / B_);
    attn_ws = std::max(attn_ws, cuda::attention_workspace_bytes(tq, kvh, 1, static_cast<int>(T), all_blocks));
  }
  const size_t qd = static_cast<size_t>(b_->q_dim());
  if (auto ok = grow(sparse_q_, size_t(T) * qd, "sparse verify queries"); !ok) return ok;
  if (auto ok = grow(sparse_out_, size_t(T) * qd, "sparse verify output"); !ok) return ok;
  if (auto ok = grow(select_ws_, select_ws, "block selection workspace"); !ok) return ok;
  if (auto ok = grow(attn_ws_, attn_ws, "tree attention workspace"); !ok) return ok;
  if (auto ok = grow(list_blocks_, list_entries, "block lists"); !ok) return ok;
  if (auto ok = grow(list_members_, list_entries, "block list members"); !ok) return ok;
  if (auto ok = grow(list_counts_, size_t(T) * kvh, "block list counts"); !ok) return ok;
  if (!p.fast && sparse_active) {
    if (auto ok = grow(visible_, size_t(T) * kvh * nb, "block visibility"); !ok) return ok;
  }
  if (auto ok = grow(order_dev_, size_t(cuda::kAttnMaxNodes), "row order"); !ok) return ok;
  if (auto ok = grow(ancestors_dev_, size_t(cuda::kAttnMaxNodes), "tree ancestors"); !ok) return ok;
  if (auto ok = grow(listed_rows_, 1, "listed rows"); !ok) return ok;
  if (!host_listed_rows_) {
    SPECULA_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&host_listed_rows_), sizeof(unsigned long long)),
                     "cudaMallocHost");
  }
  // Synchronous copies from pageable memory: these buffers may still feed the previous
  // forward's kernels only if it had not returned, and forward() always waits for its logits.
  SPECULA_CUDA_TRY(cudaMemcpy(order_dev_.get(), p.order.data(), size_t(T) * 4, cudaMemcpyHostToDevice),
                   "row order upload");
  SPECULA_CUDA_TRY(cudaMemcpy(ancestors_dev_.get(), ancestors.data(), size_t(T) * 8, cudaMemcpyHostToDevice),
                   "ancestors upload");
  return {};
}

bool CudaSession::SparsePlan::attends_densely(int l) const { return !cfg || l < cfg->dense_layers; }

bool CudaSession::SparsePlan::reuses_selection(int l) const {
  return !attends_densely(l) && cfg->reuses(l) && cfg->anchor_for(l) >= cfg->dense_layers;
}

bool CudaSession::SparsePlan::reads_tree_queries(int l) const {
  return fast || (!attends_densely(l) && !reuses_selection(l));
}

cuda::TreeQueryRows CudaSession::tree_query_rows(const SparsePlan* plan, int l, int64_t T) {
  // One row goes through rope_append_decode_at, which writes no tree rows.
  if (!plan || T < 2 || !plan->reads_tree_queries(l)) return {};
  return {sparse_q_.get(), order_dev_.get()};
}

// Layer l's attention under the plan: att (T, q_dim) f32 from the rows' queries in b.qkv, or with
// `halves` the Wo GEMM's input halves of it (the split row ops' path), which the tree-attention
// kernels' bf16 rows give in one launch instead of two (rows_bf16_to_split).
Status CudaSession::planned_attention(SparsePlan& p, int l, const cuda::PagedKvLayer& kv, int64_t T,
                                      const uint8_t* mask_dev, const int32_t* step_dev, bf16_bits* halves,
                                      bool queries_written) {
  auto& b = *b_;
  const auto& c = b.cfg;
  cudaStream_t s = b.stream;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t qd = b.q_dim(), ld = b.qkv_dim();
  const int kvh = static_cast<int>(c.n_kv_heads);
  const bool dense = p.attends_densely(l), reuse = p.reuses_selection(l);
  cuda::PagedKv pkv;
  pkv.k = kv.keys;
  pkv.v = kv.values;
  pkv.block_min = kv.key_min;
  pkv.block_max = kv.key_max;
  pkv.block_table = kv.block_table;
  pkv.kv_heads = kvh;
  const cuda::TreeQueries tq{sparse_q_.get(),
                             ancestors_dev_.get(),
                             static_cast<int>(T),
                             static_cast<int>(c.n_heads),
                             static_cast<int>(p.committed),
                             scale};
  if (!queries_written && p.reads_tree_queries(l)) {
    cuda::q_rows_to_bf16(b.qkv.get(), ld, T, qd, order_dev_.get(), sparse_q_.get(), s);
  }
  // The kernels' bf16 rows [T][Hq][D] in tree order to the backend's rows, and attention_at's f32
  // rows to the halves.
  const auto rows_out = [&] {
    if (halves) {
      cuda::rows_bf16_to_split(sparse_out_.get(), T, qd, order_dev_.get(), halves, halves + T * qd, s);
    } else {
      cuda::rows_bf16_to_f32(sparse_out_.get(), T, qd, order_dev_.get(), b.att.get(), s);
    }
  };
  const auto split_att = [&] {
    if (halves) cuda::f32_to_bf16_split(b.att.get(), T * qd, halves, halves + T * qd, s);
  };
  std::string error;
  const auto failed = [&](const char* what) {
    return make_error("CUDA backend: layer " + std::to_string(l) + " " + what + ": " + error);
  };
  if (dense) {
    p.dense_layer_bytes += c.n_kv_heads * p.committed * c.head_dim * 2 * 2;
    if (p.fast) {
      if (!cuda::tree_attention_dense(pkv, tq, sparse_out_.get(), attn_ws_.get(), attn_ws_.size(), s, &error)) {
        return failed("dense tree attention");
      }
      rows_out();
    } else {
      cuda::attention_at(b.qkv.get(), ld, T, c.n_heads, kv, step_dev, mask_dev, scale, b.att.get(), s, mem_->split);
      split_att();
    }
    return p.cfg ? observe_selection(p, l, T, false, true) : Status{};
  }
  if (!reuse) {
    lists_ = cuda::BlockLists{list_blocks_.get(), list_members_.get(), list_counts_.get(), 0, 0, 0};
    if (!cuda::select_blocks(pkv, tq, p.sp, &lists_, select_ws_.get(), select_ws_.size(), nullptr, s, &error)) {
      return failed("block selection");
    }
    p.meta_bytes += c.n_kv_heads * p.nb * 2 * c.head_dim * 2;
    if (!p.fast) {
      cuda::block_lists_to_visibility(lists_, static_cast<int>(T), kvh, static_cast<int>(p.nb), order_dev_.get(),
                                      visible_.get(), s);
    }
    p.lists_on_host = false;
  }
  cuda::add_listed_rows(lists_, kvh, p.committed, static_cast<int>(B_), listed_rows_.get(), s);
  if (p.fast) {
    if (!cuda::tree_attention_sparse(pkv, tq, lists_, sparse_out_.get(), attn_ws_.get(), attn_ws_.size(), s, &error)) {
      return failed("sparse tree attention");
    }
    rows_out();
  } else {
    cuda::attention_at(b.qkv.get(), ld, T, c.n_heads, kv, step_dev, mask_dev, scale, b.att.get(), s, mem_->split,
                       visible_.get());
    split_att();
  }
  return observe_selection(p, l, T, reuse, false);
}

// The CPU's layer-selection events (engine/sparse/sparse_attention.cpp, observe()): the union
// over rows, each group's union under grouped modes, and (kQuerySelection) each row's blocks;
// bit h·nb + b is committed block b of KV head h. Downloads the lists (a host sync per refresh
// layer), so only when someone listens.
Status CudaSession::observe_selection(SparsePlan& p, int l, int64_t T, bool reuse, bool dense) {
  Observer* observer = p.context ? p.context->observer : nullptr;
  if (!observes(observer, EventKind::kLayerSelection)) return {};
  const int64_t H = b_->cfg.n_kv_heads, nb = p.nb;
  // rows[h][r]: committed blocks row r reads on KV head h.
  std::vector<std::vector<std::vector<int32_t>>> rows(static_cast<size_t>(H),
                                                      std::vector<std::vector<int32_t>>(static_cast<size_t>(T)));
  if (dense) {
    std::vector<int32_t> all(static_cast<size_t>(nb));
    std::iota(all.begin(), all.end(), 0);
    for (auto& per_head : rows) {
      for (auto& r : per_head) r = all;
    }
  } else {
    if (!p.lists_on_host) {
      const size_t entries = size_t(lists_.groups) * H * lists_.max_blocks;
      p.blocks.resize(entries);
      p.members.resize(entries);
      p.counts.resize(size_t(lists_.groups) * H);
      SPECULA_CUDA_TRY(cudaMemcpyAsync(p.blocks.data(), lists_.blocks, entries * 4, cudaMemcpyDeviceToHost, b_->stream),
                       "block lists download");
      SPECULA_CUDA_TRY(
          cudaMemcpyAsync(p.members.data(), lists_.members, entries * 8, cudaMemcpyDeviceToHost, b_->stream),
          "block lists download");
      SPECULA_CUDA_TRY(
          cudaMemcpyAsync(p.counts.data(), lists_.counts, p.counts.size() * 4, cudaMemcpyDeviceToHost, b_->stream),
          "block lists download");
      SPECULA_CUDA_TRY(cudaStreamSynchronize(b_->stream), "block lists download");
      p.lists_on_host = true;
    }
    for (int g = 0; g < lists_.groups; ++g) {
      for (int64_t h = 0; h < H; ++h) {
        const size_t base = (size_t(g) * H + h) * lists_.max_blocks;
        for (int e = 0; e < p.counts[size_t(g) * H + h]; ++e) {
          const int32_t blk = p.blocks[base + e];
          if (blk >= nb) continue;
          for (int i = 0; i < T; ++i) {
            if (p.members[base + e] >> i & 1) rows[size_t(h)][size_t(p.order[size_t(i)])].push_back(blk);
          }
        }
      }
    }
    for (auto& per_head : rows) {
      for (auto& r : per_head) std::sort(r.begin(), r.end());
    }
  }
  const auto event = [&](int32_t query, int32_t group, const std::function<bool(int64_t row)>& includes) {
    LayerSelectionEvent e;
    e.round = p.context->round;
    e.layer = l;
    e.query = query;
    e.group = group;
    e.mode = reuse ? SelectionMode::kReuse : SelectionMode::kRefresh;
    e.anchor_layer = reuse ? p.cfg->anchor_for(l) : -1;
    e.total_blocks = static_cast<int32_t>(H * nb);
    std::vector<int32_t> ids;
    for (int64_t h = 0; h < H; ++h) {
      std::vector<bool> in(static_cast<size_t>(nb), false);
      for (int64_t r = 0; r < T; ++r) {
        if (!includes(r)) continue;
        for (int32_t blk : rows[size_t(h)][size_t(r)]) in[size_t(blk)] = true;
      }
      for (int64_t blk = 0; blk < nb; ++blk) {
        if (in[size_t(blk)]) ids.push_back(static_cast<int32_t>(h * nb + blk));
      }
    }
    e.block_bits = pack_block_bits(ids, e.total_blocks);
    observer->on_event(e);
  };
  event(-1, -1, [](int64_t) { return true; });
  const QueryMode mode = p.cfg->query_mode;
  const int64_t C = p.cfg->group_size;
  const bool grouped = mode == QueryMode::kGroupUnion || mode == QueryMode::kGroupShared;
  std::vector<int32_t> group_of(static_cast<size_t>(T), -1);  // row -> its group (traversal order)
  if (grouped) {
    for (int64_t i = 0; i < T; ++i) group_of[size_t(p.order[size_t(i)])] = static_cast<int32_t>(i / C);
    for (int32_t g = 0; g * C < T; ++g) event(-1, g, [&](int64_t r) { return group_of[size_t(r)] == g; });
  }
  if (observes(observer, EventKind::kQuerySelection)) {
    for (int64_t r = 0; r < T; ++r) {
      event(static_cast<int32_t>(r), group_of[size_t(r)], [r](int64_t row) { return row == r; });
    }
  }
  return {};
}

// Sparse FFN (SparseConfig::ffn, kernels/cuda/sparse_ffn.h): its scratch, carved for the
// kernels' largest batch, and pinned room for every layer's counts.
Status CudaSession::prepare_sparse_ffn(int64_t T) {
  const auto& c = b_->cfg;
  if (T > cuda::kSparseFfnMaxRows) {
    return make_error("sparse FFN on the CUDA backend takes at most " + std::to_string(cuda::kSparseFfnMaxRows) +
                      " rows a forward (a draft tree of at most " + std::to_string(cuda::kSparseFfnMaxRows - 1) +
                      " nodes), not " + std::to_string(T) + "; use --backend cpu or a smaller tree");
  }
  const size_t bytes = cuda::sparse_ffn_scratch_bytes(cuda::kSparseFfnMaxRows, c.ffn_dim);
  if (auto ok = grow(ffn_scratch_, (bytes + 3) / 4, "sparse FFN scratch"); !ok) return ok;
  if (!host_ffn_counts_) {
    SPECULA_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&host_ffn_counts_), size_t(c.n_layers) * 2 * 4),
                     "cudaMallocHost");
  }
  return {};
}

// x += the sparse SwiGLU FFN of rmsnorm(x) for layer l: the dense gate through gemm() above
// one row (cuBLAS where it pays), the rest in sparse_ffn's kernels; the layer's counts are
// copied to host_ffn_counts_, read after the forward's synchronization.
Status CudaSession::sparse_ffn_layer(const GpuLayer& L, int64_t T, const SparseConfig& sc, int64_t l) {
  auto& b = *b_;
  const auto& c = b.cfg;
  const int64_t dim = c.dim, F = c.ffn_dim;
  const auto scratch = cuda::sparse_ffn_scratch(ffn_scratch_.get(), cuda::kSparseFfnMaxRows, F);
  const auto tau = static_cast<float>(sc.ffn_threshold);
  cuda::rmsnorm_rows(b.x.get(), dim, L.ffn_norm.get(), T, dim, c.rms_eps, b.xn.get(), b.stream);
  bool launched = false;
  if (T == 1) {
    launched = cuda::sparse_ffn(L.gate_up.get(), L.down.get(), dim, F, b.xn.get(), dim, T, tau, sc.ffn_union, b.x.get(),
                                dim, true, scratch, b.stream);
  } else {
    if (auto ok = b.gemm(L.gate_up.get(), F, dim, b.xn.get(), T, scratch.gate, F, false); !ok) return ok;
    launched = cuda::sparse_ffn_from_gate(L.gate_up.get(), L.down.get(), dim, F, b.xn.get(), dim, T, tau, sc.ffn_union,
                                          b.x.get(), dim, true, scratch, b.stream);
  }
  if (!launched) {
    return make_error("sparse FFN: the kernels refused layer " + std::to_string(l) + " (dim " + std::to_string(dim) +
                      ", ffn " + std::to_string(F) + ", " + std::to_string(T) + " rows; both must be multiples of 8)");
  }
  SPECULA_CUDA_TRY(
      cudaMemcpyAsync(host_ffn_counts_ + 2 * l, scratch.counts, 2 * sizeof(int32_t), cudaMemcpyDeviceToHost, b.stream),
      "sparse FFN counts");
  return {};
}

// What the CPU reports of a sparse FFN forward: kept (row, channel) pairs into the stats, and
// one FfnStatsEvent a layer with the mean channels kept per row.
void CudaSession::report_sparse_ffn(int64_t T, const ForwardContext& context) {
  const auto& c = b_->cfg;
  Observer* observer = context.observer;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const int64_t kept = host_ffn_counts_[2 * l];
    if (context.stats) {
      context.stats->ffn_active += kept;
      context.stats->ffn_total += T * c.ffn_dim;
    }
    if (observes(observer, EventKind::kFfnStats)) {
      observer->on_event(FfnStatsEvent{context.round, static_cast<int32_t>(l), static_cast<int32_t>(kept / T),
                                       static_cast<int32_t>(c.ffn_dim), false});
    }
  }
}

}  // namespace specula

#endif  // SPECULA_HAVE_CUDA
