// CudaSession's MoE layers (cuda_session.h): the FFN of every layer of an MoE model on
// kernels/cuda/moe.h, the skip rule of a sparse config, and the routing reported as the CPU
// reports it (CpuTransformer's moe_ffn: ForwardContext::moe_stats, SparseStats, MoeStatsEvent).
#if defined(SPECULA_HAVE_CUDA)

#include <algorithm>
#include <string>

#include "engine/backend/cuda_session.h"
#include "engine/model/moe.h"
#include "engine/sparse/sparse_config.h"
#include "kernels/cuda/moe.h"

namespace specula {

Status CudaSession::moe_layer(const GpuLayer& L, int64_t l, int64_t T) {
  auto& b = *b_;
  const auto& c = b.cfg;
  const int64_t dim = c.dim, k = c.n_experts_used;
  cuda::rmsnorm_rows(b.x.get(), dim, L.ffn_norm.get(), T, dim, c.rms_eps, b.xn.get(), b.stream);
  const cuda::MoeDeviceSkip* skip =
      static_cast<size_t>(l) < moe_skip_.size() && moe_skip_[static_cast<size_t>(l)].budget > 0
          ? &moe_skip_[static_cast<size_t>(l)]
          : nullptr;
  // moe_ffn takes at most kMoeMaxTokens rows (a prefill is chunked); the chunks share the
  // scratch in stream order, and write their routing into this layer's records.
  for (int64_t t0 = 0; t0 < T; t0 += cuda::kMoeMaxTokens) {
    const int64_t n = std::min(T - t0, cuda::kMoeMaxTokens);
    cuda::MoeScratch m = b.moe_scratch;
    m.ids = b.moe_ids.get() + (l * b.scratch_T + t0) * k;
    m.weights = b.moe_weights.get() + (l * b.scratch_T + t0) * k;
    m.skipped = b.moe_skipped.get() + l * b.scratch_T + t0;
    if (!cuda::moe_ffn(b.moe_shape, L.moe_weights(), b.xn.get() + t0 * dim, dim, n, skip, b.x.get() + t0 * dim, dim,
                       true, m, b.stream)) {
      return make_error("CUDA backend: the MoE FFN of layer " + std::to_string(l) +
                        " refused its shapes or alignment (kernels/cuda/moe.h)");
    }
  }
  return {};
}

// tau[l][s - 1] on the device, uploaded when the config's thresholds differ from the last ones.
Status CudaSession::set_moe_skip(const SparseConfig& sc) {
  auto& b = *b_;
  if (sc.moe_thresholds != b.moe_thresholds_host) {
    int64_t stride = 1;
    for (const auto& layer : sc.moe_thresholds) stride = std::max<int64_t>(stride, static_cast<int64_t>(layer.size()));
    std::vector<double> flat(sc.moe_thresholds.size() * static_cast<size_t>(stride), 0.0);
    for (size_t l = 0; l < sc.moe_thresholds.size(); ++l)
      std::copy(sc.moe_thresholds[l].begin(), sc.moe_thresholds[l].end(), flat.begin() + l * stride);
    b.moe_thresholds_host.clear();  // until the upload succeeded
    if (auto ok = b.moe_thresholds.allocate(flat.size(), "MoE skip thresholds"); !ok) return ok;
    if (!flat.empty()) {
      SPECULA_CUDA_TRY(cudaMemcpyAsync(b.moe_thresholds.get(), flat.data(), flat.size() * sizeof(double),
                                       cudaMemcpyHostToDevice, b.stream),
                       "MoE skip thresholds upload");
      SPECULA_CUDA_TRY(cudaStreamSynchronize(b.stream), "MoE skip thresholds upload");
    }
    b.moe_thresholds_host = sc.moe_thresholds;
    b.moe_threshold_stride = stride;
  }
  moe_skip_.assign(static_cast<size_t>(b.cfg.n_layers), cuda::MoeDeviceSkip{});
  for (size_t l = 0; l < moe_skip_.size() && l < sc.moe_thresholds.size(); ++l) {
    moe_skip_[l] = {sc.moe_skip_budget, b.moe_thresholds.get() + static_cast<int64_t>(l) * b.moe_threshold_stride,
                    static_cast<int>(sc.moe_thresholds[l].size())};
  }
  return {};
}

// After the forward's synchronization: every layer's routing of its T rows, in the CPU's terms.
Status CudaSession::report_moe(int64_t T, const ForwardContext& context) {
  auto& b = *b_;
  const auto& c = b.cfg;
  // Only this forward's T rows of each layer's records (their stride is scratch_T rows, which a
  // long prefill leaves large): one strided copy an array, into (n_layers, T) on the host.
  const int64_t k = c.n_experts_used, L = c.n_layers;
  std::vector<int32_t> ids(static_cast<size_t>(L * T * k)), skipped(static_cast<size_t>(L * T));
  std::vector<float> weights(static_cast<size_t>(L * T * k));
  const auto download = [&](void* dst, const void* src, int64_t row_bytes) -> Status {
    SPECULA_CUDA_TRY(cudaMemcpy2D(dst, T * row_bytes, src, b.scratch_T * row_bytes, T * row_bytes, L,
                                  cudaMemcpyDeviceToHost),
                     "MoE routing download");
    return {};
  };
  if (auto ok = download(ids.data(), b.moe_ids.get(), k * 4); !ok) return ok;
  if (auto ok = download(weights.data(), b.moe_weights.get(), k * 4); !ok) return ok;
  if (auto ok = download(skipped.data(), b.moe_skipped.get(), 4); !ok) return ok;
  Observer* observer = context.observer;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    MoeLayerStats local;
    MoeLayerStats& stats = context.moe_stats ? context.moe_stats->layers.emplace_back() : local;
    stats.layer = static_cast<int32_t>(l);
    stats.n_experts = static_cast<int32_t>(c.n_experts);
    stats.tokens.resize(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = l * T + t;
      MoeTokenRouting& r = stats.tokens[static_cast<size_t>(t)];
      r.experts.assign(ids.begin() + row * k, ids.begin() + (row + 1) * k);
      r.weights.assign(weights.begin() + row * k, weights.begin() + (row + 1) * k);
      r.skipped = skipped[static_cast<size_t>(row)];
    }
    if (context.stats) {
      context.stats->moe_routed += stats.routed();
      context.stats->moe_skipped += stats.skipped();
    }
    if (observes(observer, EventKind::kMoeStats)) {
      observer->on_event(MoeStatsEvent{context.round, static_cast<int32_t>(l), stats.n_experts, stats.experts_run(),
                                       stats.experts_skipped()});
    }
  }
  return {};
}

}  // namespace specula

#endif  // SPECULA_HAVE_CUDA
