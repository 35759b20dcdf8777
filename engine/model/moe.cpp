#include "engine/model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "engine/model/packed_weights.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/dequant.h"

namespace specula {

void route_token(std::span<const float> logits, bool normalize, std::span<int32_t> ids, std::span<float> weights) {
  const auto n = static_cast<int64_t>(logits.size());
  const auto k = static_cast<int64_t>(ids.size());
  std::vector<float> p(logits.begin(), logits.end());
  softmax(p.data(), n);
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] ||
           (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
  });
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    ids[static_cast<size_t>(i)] = order[static_cast<size_t>(i)];
    weights[static_cast<size_t>(i)] = p[static_cast<size_t>(order[static_cast<size_t>(i)])];
    sum += weights[static_cast<size_t>(i)];
  }
  if (normalize) {
    for (float& w : weights) w /= sum;
  }
}

double skip_ratio(std::span<const float> w, int s) {
  const auto k = static_cast<int>(w.size());
  double skipped = 0.0, kept = 0.0;
  for (int i = 0; i < k; ++i) (i >= k - s ? skipped : kept) += w[static_cast<size_t>(i)];
  return kept > 0.0 ? skipped / kept : INFINITY;
}

int skip_count(std::span<const float> w, std::span<const double> thresholds, int budget) {
  const int k = static_cast<int>(w.size());
  const int most = std::min({budget, k - 1, static_cast<int>(thresholds.size())});
  for (int s = most; s >= 1; --s) {
    if (skip_ratio(w, s) < thresholds[static_cast<size_t>(s - 1)]) return s;
  }
  return 0;
}

int64_t MoeLayerStats::routed() const {
  int64_t n = 0;
  for (const auto& t : tokens) n += static_cast<int64_t>(t.experts.size());
  return n;
}

int64_t MoeLayerStats::skipped() const {
  int64_t n = 0;
  for (const auto& t : tokens) n += t.skipped;
  return n;
}

std::vector<int32_t> MoeLayerStats::experts_run() const {
  std::set<int32_t> run;
  for (const auto& t : tokens) run.insert(t.experts.begin(), t.experts.end() - t.skipped);
  return {run.begin(), run.end()};
}

std::vector<int32_t> MoeLayerStats::experts_skipped() const {
  const std::vector<int32_t> run = experts_run();
  std::set<int32_t> dropped;
  for (const auto& t : tokens) {
    for (auto it = t.experts.end() - t.skipped; it != t.experts.end(); ++it) {
      if (!std::binary_search(run.begin(), run.end(), *it)) dropped.insert(*it);
    }
  }
  return {dropped.begin(), dropped.end()};
}

int64_t MoeForwardStats::routed() const {
  int64_t n = 0;
  for (const auto& l : layers) n += l.routed();
  return n;
}

int64_t MoeForwardStats::skipped() const {
  int64_t n = 0;
  for (const auto& l : layers) n += l.skipped();
  return n;
}

MoeFfn::MoeFfn(const ModelConfig& c, const LayerWeights& w, bool exact)
    : dim_(c.dim),
      ffn_(c.expert_ffn_dim),
      shared_ffn_(c.shared_expert_ffn_dim),
      k_(c.n_experts_used),
      normalize_(c.norm_topk_prob) {
  router_ = pack_fused({&w.router}, exact);
  experts_.reserve(w.experts.size());
  downs_.reserve(w.experts.size());
  for (const ExpertWeights& e : w.experts) {
    experts_.push_back(pack_fused({&e.gate, &e.up}, exact));
    downs_.push_back(pack_fused({&e.down}, exact));
  }
  if (shared_ffn_ > 0) {
    shared_gate_up_ = pack_fused({&w.shared_expert.gate, &w.shared_expert.up}, exact);
    shared_down_ = pack_fused({&w.shared_expert.down}, exact);
    shared_gate_ = to_f32(w.shared_expert_gate);
  }
}

size_t MoeFfn::bytes() const {
  size_t total = router_.bytes() + shared_gate_up_.bytes() + shared_down_.bytes() + shared_gate_.size() * 4;
  for (size_t e = 0; e < experts_.size(); ++e) total += experts_[e].bytes() + downs_[e].bytes();
  return total;
}

void MoeFfn::round_to_bf16() {
  auto round = [](PackedMatrix& m) { specula::round_to_bf16(std::span<float>(m.f32.data(), m.f32.size())); };
  round(router_);
  for (PackedMatrix& m : experts_) round(m);
  for (PackedMatrix& m : downs_) round(m);
  if (shared_ffn_ > 0) {
    round(shared_gate_up_);
    round(shared_down_);
  }
}

void MoeFfn::expert(const PackedMatrix& gate_up, const PackedMatrix& down, int64_t ffn, const float* in, int64_t n,
                    const MoeProjector& project, MoeScratch& s) const {
  s.gate_up.ensure(static_cast<size_t>(n * 2 * ffn));
  s.act.ensure(static_cast<size_t>(n * ffn));
  s.out.ensure(static_cast<size_t>(n * dim_));
  project(gate_up, in, dim_, n, s.gate_up.data(), 2 * ffn);
  for (int64_t r = 0; r < n; ++r) {
    const float* g = s.gate_up.data() + r * 2 * ffn;
    swiglu(g, g + ffn, s.act.data() + r * ffn, ffn);
  }
  project(down, s.act.data(), ffn, n, s.out.data(), dim_);
}

void MoeFfn::forward(const float* xn, int64_t T, float* x, const MoeProjector& project, const MoeSkip* skip,
                     MoeScratch& s, MoeLayerStats* stats) const {
  const auto E = static_cast<int64_t>(experts_.size());
  s.logits.ensure(static_cast<size_t>(T * E));
  s.ids.resize(static_cast<size_t>(T * k_));
  s.weights.resize(static_cast<size_t>(T * k_));
  project(router_, xn, dim_, T, s.logits.data(), E);

  // Per token: routed experts, then how many of the lowest-weight ones the skip rule drops.
  std::vector<int32_t> kept(static_cast<size_t>(T), static_cast<int32_t>(k_));
  if (stats) {
    stats->n_experts = static_cast<int32_t>(E);
    stats->tokens.resize(static_cast<size_t>(T));
  }
  for (int64_t t = 0; t < T; ++t) {
    std::span<int32_t> ids(s.ids.data() + t * k_, static_cast<size_t>(k_));
    std::span<float> weights(s.weights.data() + t * k_, static_cast<size_t>(k_));
    route_token({s.logits.data() + t * E, static_cast<size_t>(E)}, normalize_, ids, weights);
    const int skipped = skip && skip->budget > 0 ? skip_count(weights, skip->thresholds, skip->budget) : 0;
    kept[static_cast<size_t>(t)] = static_cast<int32_t>(k_ - skipped);
    if (stats)
      stats->tokens[static_cast<size_t>(t)] = {{ids.begin(), ids.end()}, {weights.begin(), weights.end()}, skipped};
  }

  // Each expert runs once over the tokens that kept it; its rows are accumulated in token order.
  std::vector<int64_t> tokens;
  std::vector<float> scale;
  for (int64_t e = 0; e < E; ++e) {
    tokens.clear();
    scale.clear();
    for (int64_t t = 0; t < T; ++t) {
      for (int32_t i = 0; i < kept[static_cast<size_t>(t)]; ++i) {
        if (s.ids[static_cast<size_t>(t * k_ + i)] != e) continue;
        tokens.push_back(t);
        scale.push_back(s.weights[static_cast<size_t>(t * k_ + i)]);
      }
    }
    if (tokens.empty()) continue;
    const auto n = static_cast<int64_t>(tokens.size());
    s.rows.ensure(static_cast<size_t>(n * dim_));
    for (int64_t r = 0; r < n; ++r)
      std::copy_n(xn + tokens[static_cast<size_t>(r)] * dim_, dim_, s.rows.data() + r * dim_);
    expert(experts_[static_cast<size_t>(e)], downs_[static_cast<size_t>(e)], ffn_, s.rows.data(), n, project, s);
    for (int64_t r = 0; r < n; ++r) {
      axpy_f32(scale[static_cast<size_t>(r)], s.out.data() + r * dim_, x + tokens[static_cast<size_t>(r)] * dim_, dim_);
    }
  }

  if (shared_ffn_ > 0) {
    expert(shared_gate_up_, shared_down_, shared_ffn_, xn, T, project, s);
    for (int64_t t = 0; t < T; ++t) {
      const float g = dot_f32(shared_gate_.data(), xn + t * dim_, dim_);
      axpy_f32(1.0f / (1.0f + std::exp(-g)), s.out.data() + t * dim_, x + t * dim_, dim_);
    }
  }
}

}  // namespace specula
