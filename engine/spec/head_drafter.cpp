#include "engine/spec/head_drafter.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <numeric>
#include <unordered_set>
#include <vector>

#include "engine/formats/safetensors.h"
#include "engine/model/packed_weights.h"
#include "engine/spec/sampling_filters.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/thread_pool.h"

namespace specula {
namespace {

constexpr const char* kFormat = "specula-draft-head";
constexpr const char* kVersion = "1";

// Rows of f32 weights (rows, cols), cols a multiple of 32, as Q8_0 blocks: d = max|w| / 127
// per 32 weights, q = round(w / d). What llama.cpp's quantize writes, so pack_rows takes it.
std::vector<std::byte> quantize_q8_0(const float* w, int64_t rows, int64_t cols) {
  const int64_t blocks = cols / kQK;
  std::vector<std::byte> out(static_cast<size_t>(rows * blocks) * sizeof(BlockQ8_0));
  auto* dst = reinterpret_cast<BlockQ8_0*>(out.data());
  for (int64_t b = 0; b < rows * blocks; ++b) {
    const float* x = w + b * kQK;
    float amax = 0;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    dst[b].d = f32_to_f16_bits(d);
    for (int i = 0; i < kQK; ++i) dst[b].qs[i] = static_cast<int8_t>(std::lround(x[i] * inv));
  }
  return out;
}

// A (rows, cols) f32 matrix packed as U8 (Q8_0) for the CPU kernels.
Expected<PackedMatrix> pack_q8_0(const std::vector<float>& w, int64_t rows, int64_t cols, bool tile) {
  PackedMatrix m;
  init_packed_matrix(m, WeightFormat::U8, rows, cols);
  const auto q = quantize_q8_0(w.data(), rows, cols);
  if (auto error = pack_rows(m, 0, TensorType::Q8_0, q.data(), rows); !error.empty()) return make_error(error);
  if (tile) tile_rows(m);
  return m;
}

template <class T>
Expected<T> parse_number(const std::map<std::string, std::string>& metadata, const std::string& key) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) return make_error("__metadata__ has no '" + key + "'");
  T value{};
  const std::string& text = it->second;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return make_error("__metadata__ '" + key + "' is \"" + text + "\", not a number");
  }
  return value;
}

}  // namespace

// ---- the head -------------------------------------------------------------------------------

struct DraftHead::Impl {
  std::filesystem::path file;
  std::map<std::string, std::string> metadata;
  const Model* target = nullptr;
  int64_t H = 0, F = 0, V = 0;
  float eps = 1e-5f;
  bool int8 = true;
  std::unique_ptr<ThreadPool> own_pool;  // when not given the target's
  ThreadPool* pool = nullptr;
  PackedMatrix fc;       // (H, 2H)
  PackedMatrix gate_up;  // (2F, H): gate rows, then up rows
  PackedMatrix down;     // (H, F)
  PackedMatrix out;      // (V rounded up to 16, H): the target's output rows of vocab_ids
  std::vector<float> fc_bias, ffn_norm, out_norm;
  std::vector<int32_t> vocab_ids;
  // Step scratch.
  AlignedBuffer<float> in, u, n, gu, act, h, logits;
  QuantizedRows xq;

  explicit Impl(const DraftHeadOptions& options)
      : own_pool(options.pool ? nullptr : std::make_unique<ThreadPool>(options.threads)),
        pool(options.pool ? options.pool : own_pool.get()) {}

  // y (+)= W · x for one vector x (W.cols floats), rows split over the pool.
  void matvec(const PackedMatrix& w, const float* x, float* y, bool accumulate) {
    if (int8) {
      xq.resize(1, w.cols);
      quantize_rows(x, w.cols, xq, 0, 1);
    }
    const int64_t grain = w.tiled() ? kTileRows : 4;
    auto rows = [&](int64_t begin, int64_t end) {
      if (int8) {
        matmul_quantized(w, xq, y, w.rows, begin, end, accumulate);
      } else {
        matmul_f32(w, x, w.cols, 1, y, w.rows, begin, end, accumulate);
      }
    };
    if (pool->size() == 1) {
      rows(0, w.rows);
      return;
    }
    pool->run([&](int index, int n_threads) {
      int64_t begin, end;
      ThreadPool::split(w.rows, grain, index, n_threads, begin, end);
      if (begin < end) rows(begin, end);
    });
  }

  Status step(std::span<const float> feature, int32_t token, std::span<float> next, std::span<float> out_logits) {
    if (static_cast<int64_t>(feature.size()) != H || static_cast<int64_t>(next.size()) != H ||
        static_cast<int64_t>(out_logits.size()) != V) {
      return make_error("draft head step: feature " + std::to_string(feature.size()) + ", next feature " +
                        std::to_string(next.size()) + " and logits " + std::to_string(out_logits.size()) +
                        " floats; want " + std::to_string(H) + ", " + std::to_string(H) + " and " + std::to_string(V));
    }
    const TensorRef& embd = target->weights.token_embd;
    if (token < 0 || token >= target->config.vocab_size) {
      return make_error("draft head step: token " + std::to_string(token) + " outside the vocabulary");
    }
    std::copy(feature.begin(), feature.end(), in.data());
    if (auto r = dequantize_row(embd.type, embd.data.data() + token * row_bytes(embd), in.data() + H, H); !r.ok) {
      return make_error("draft head step: embedding row: " + r.error);
    }
    std::copy(fc_bias.begin(), fc_bias.end(), u.data());
    matvec(fc, in.data(), u.data(), true);
    rmsnorm(u.data(), ffn_norm.data(), n.data(), H, eps);
    matvec(gate_up, n.data(), gu.data(), false);
    swiglu(gu.data(), gu.data() + F, act.data(), F);
    std::copy_n(u.data(), H, h.data());
    matvec(down, act.data(), h.data(), true);
    rmsnorm(h.data(), out_norm.data(), next.data(), H, eps);
    matvec(out, next.data(), logits.data(), false);
    std::copy_n(logits.data(), V, out_logits.data());
    return {};
  }
};

DraftHead::DraftHead(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DraftHead::~DraftHead() = default;
int64_t DraftHead::hidden_size() const { return impl_->H; }
int64_t DraftHead::ffn_size() const { return impl_->F; }
std::span<const int32_t> DraftHead::vocab_ids() const { return impl_->vocab_ids; }
const std::map<std::string, std::string>& DraftHead::metadata() const { return impl_->metadata; }
const std::filesystem::path& DraftHead::file() const { return impl_->file; }
size_t DraftHead::weight_bytes() const {
  return impl_->fc.bytes() + impl_->gate_up.bytes() + impl_->down.bytes() + impl_->out.bytes();
}
Status DraftHead::step(std::span<const float> feature, int32_t token, std::span<float> next_feature,
                       std::span<float> logits) {
  return impl_->step(feature, token, next_feature, logits);
}

Expected<std::unique_ptr<DraftHead>> DraftHead::load(const Model& target, const std::filesystem::path& file,
                                                     const DraftHeadOptions& options) {
  const std::string who = "draft head " + file.string() + ": ";
  auto fail = [&](const std::string& what) -> Expected<std::unique_ptr<DraftHead>> { return make_error(who + what); };
  auto opened = SafetensorsFile::open(file);
  if (!opened) return make_error("draft head: " + opened.error().message);
  const SafetensorsFile& st = *opened;
  const auto& meta = st.metadata();
  const auto field = [&](const char* key) -> std::string {
    const auto it = meta.find(key);
    return it == meta.end() ? std::string() : it->second;
  };
  if (field("format") != kFormat) {
    return fail("__metadata__ 'format' is \"" + field("format") + "\", expected \"" + kFormat + "\"");
  }
  if (field("version") != kVersion) {
    return fail("__metadata__ 'version' is \"" + field("version") + "\", this build reads version " + kVersion);
  }
  const ModelConfig& cfg = target.config;
  auto H = parse_number<int64_t>(meta, "hidden_size");
  if (!H) return fail(H.error().message);
  if (*H != cfg.dim) {
    return fail("hidden_size " + std::to_string(*H) + " does not match the target's " + std::to_string(cfg.dim) + " (" +
                target.path.filename().string() + "): a head for another model");
  }
  auto vocab = parse_number<int64_t>(meta, "vocab_size");
  if (!vocab) return fail(vocab.error().message);
  if (*vocab != cfg.vocab_size) {
    return fail("vocab_size " + std::to_string(*vocab) + " does not match the target's " +
                std::to_string(cfg.vocab_size) + ": a head for another model");
  }
  auto F = parse_number<int64_t>(meta, "ffn_size");
  if (!F) return fail(F.error().message);
  if (*F <= 0 || *F % kQK != 0) return fail("ffn_size " + std::to_string(*F) + " is not a positive multiple of 32");
  if (cfg.dim % kQK != 0)
    return fail("the target's hidden size " + std::to_string(cfg.dim) + " is not a multiple of 32");
  auto eps = parse_number<float>(meta, "rms_eps");
  if (!eps) return fail(eps.error().message);
  if (!(*eps > 0) || !std::isfinite(*eps)) return fail("rms_eps " + field("rms_eps") + " is not positive");

  // A weight tensor of the given row-major shape, as f32.
  const auto weight = [&](const std::string& name, std::vector<int64_t> shape) -> Expected<std::vector<float>> {
    const SafetensorsTensor* t = st.find(name);
    if (!t) return make_error(who + "missing tensor '" + name + "'");
    if (t->type != TensorType::F32 && t->type != TensorType::BF16 && t->type != TensorType::F16) {
      return make_error(who + "tensor '" + name + "' is " + std::string(tensor_type_name(t->type)) +
                        "; weights must be F32, F16 or BF16");
    }
    if (t->shape != shape) {
      std::vector<int64_t> want(shape.rbegin(), shape.rend()), got(t->shape.rbegin(), t->shape.rend());
      return make_error(who + "tensor '" + name + "' has shape " + format_shape(got) + " (ggml order), expected " +
                        format_shape(want));
    }
    TensorRef ref{name, t->type, std::vector<int64_t>(shape.rbegin(), shape.rend()), t->data};
    return to_f32(ref);
  };
  auto fc = weight("fc.weight", {*H, 2 * *H});
  if (!fc) return fc.error();
  auto fc_bias = weight("fc.bias", {*H});
  if (!fc_bias) return fc_bias.error();
  auto ffn_norm = weight("ffn_norm.weight", {*H});
  if (!ffn_norm) return ffn_norm.error();
  auto gate = weight("ffn_gate.weight", {*F, *H});
  if (!gate) return gate.error();
  auto up = weight("ffn_up.weight", {*F, *H});
  if (!up) return up.error();
  auto down = weight("ffn_down.weight", {*H, *F});
  if (!down) return down.error();
  auto out_norm = weight("out_norm.weight", {*H});
  if (!out_norm) return out_norm.error();

  const SafetensorsTensor* ids = st.find("vocab_ids");
  if (!ids) return fail("missing tensor 'vocab_ids'");
  if (ids->type != TensorType::I32) {
    return fail("tensor 'vocab_ids' is " + std::string(tensor_type_name(ids->type)) + ", expected I32");
  }
  if (ids->shape.size() != 1 || ids->shape[0] < 1) {
    return fail("tensor 'vocab_ids' must be one non-empty dimension, has shape " + format_shape(ids->shape));
  }
  std::vector<int32_t> vocab_ids(static_cast<size_t>(ids->shape[0]));
  std::memcpy(vocab_ids.data(), ids->data.data(), vocab_ids.size() * sizeof(int32_t));
  std::unordered_set<int32_t> seen;
  for (size_t j = 0; j < vocab_ids.size(); ++j) {
    const int32_t id = vocab_ids[j];
    if (id < 0 || id >= cfg.vocab_size) {
      return fail("tensor 'vocab_ids' entry " + std::to_string(j) + " is " + std::to_string(id) + ", outside 0.." +
                  std::to_string(cfg.vocab_size - 1));
    }
    if (!seen.insert(id).second) {
      return fail("tensor 'vocab_ids' lists id " + std::to_string(id) + " twice (again at entry " + std::to_string(j) +
                  ")");
    }
  }

  auto impl = std::make_unique<Impl>(options);
  impl->file = file;
  impl->metadata = meta;
  impl->target = &target;
  impl->H = *H;
  impl->F = *F;
  impl->V = static_cast<int64_t>(vocab_ids.size());
  impl->eps = *eps;
  impl->int8 = options.int8_activations;
  const bool tile = options.int8_activations;
  auto packed = pack_q8_0(*fc, *H, 2 * *H, tile);
  if (!packed) return fail("fc.weight: " + packed.error().message);
  impl->fc = std::move(*packed);
  std::vector<float> gate_up = std::move(*gate);
  gate_up.insert(gate_up.end(), up->begin(), up->end());
  packed = pack_q8_0(gate_up, 2 * *F, *H, tile);
  if (!packed) return fail("ffn_gate/ffn_up: " + packed.error().message);
  impl->gate_up = std::move(*packed);
  packed = pack_q8_0(*down, *H, *F, tile);
  if (!packed) return fail("ffn_down.weight: " + packed.error().message);
  impl->down = std::move(*packed);

  // The output rows of vocab_ids, padded to whole 16-row tiles with copies of the first (their
  // logits are never read).
  const TensorRef& w_out = target.weights.output;
  const int64_t padded = (impl->V + kTileRows - 1) / kTileRows * kTileRows;
  const int64_t out_row = row_bytes(w_out);
  const WeightFormat stored = packed_format_for(w_out.type, false);
  if (stored != WeightFormat::F32) {
    init_packed_matrix(impl->out, stored, padded, *H);
    for (int64_t j = 0; j < padded; ++j) {
      const int32_t id = vocab_ids[static_cast<size_t>(j < impl->V ? j : 0)];
      if (auto e = pack_rows(impl->out, j, w_out.type, w_out.data.data() + id * out_row, 1); !e.empty()) {
        return fail("target output row " + std::to_string(id) + ": " + e);
      }
    }
    if (tile) tile_rows(impl->out);
  } else {  // F16, BF16, K-quants...: dequantized and re-quantized to Q8_0
    std::vector<float> rows(static_cast<size_t>(padded * *H));
    for (int64_t j = 0; j < padded; ++j) {
      const int32_t id = vocab_ids[static_cast<size_t>(j < impl->V ? j : 0)];
      if (auto r = dequantize_row(w_out.type, w_out.data.data() + id * out_row, rows.data() + j * *H, *H); !r.ok) {
        return fail("target output row " + std::to_string(id) + ": " + r.error);
      }
    }
    packed = pack_q8_0(rows, padded, *H, tile);
    if (!packed) return fail("target output rows: " + packed.error().message);
    impl->out = std::move(*packed);
  }
  impl->fc_bias = std::move(*fc_bias);
  impl->ffn_norm = std::move(*ffn_norm);
  impl->out_norm = std::move(*out_norm);
  impl->vocab_ids = std::move(vocab_ids);
  impl->in.ensure(static_cast<size_t>(2 * *H));
  impl->u.ensure(static_cast<size_t>(*H));
  impl->n.ensure(static_cast<size_t>(*H));
  impl->gu.ensure(static_cast<size_t>(2 * *F));
  impl->act.ensure(static_cast<size_t>(*F));
  impl->h.ensure(static_cast<size_t>(*H));
  impl->logits.ensure(static_cast<size_t>(padded));
  return std::unique_ptr<DraftHead>(new DraftHead(std::move(impl)));
}

// ---- the drafter ----------------------------------------------------------------------------

namespace {

class HeadDrafter final : public Drafter {
 public:
  HeadDrafter(std::unique_ptr<DraftHead> head, double min_confidence)
      : head_(std::move(head)),
        min_confidence_(min_confidence),
        name_("head:" + head_->file().filename().string()),
        logits_(head_->vocab_ids().size()),
        compact_(head_->vocab_ids().size()) {
    const auto ids = head_->vocab_ids();
    support_ = static_cast<size_t>(*std::max_element(ids.begin(), ids.end())) + 1;
    position_.assign(support_, -1);
    for (size_t j = 0; j < ids.size(); ++j) position_[static_cast<size_t>(ids[j])] = static_cast<int32_t>(j);
  }

  std::string name() const override { return name_; }
  void reset() override {}
  const DrafterStats& stats() const override { return stats_; }
  bool wants_target_feature() const override { return true; }

  Expected<DraftTree> draft(std::span<const int32_t> sequence, const DraftRequest& request) override {
    if (request.target_feature.empty() || sequence.empty()) return DraftTree{};
    const auto H = static_cast<size_t>(head_->hidden_size());
    if (request.target_feature.size() != H) {
      return make_error(name_ + ": target feature has " + std::to_string(request.target_feature.size()) +
                        " floats, the head's hidden size is " + std::to_string(H));
    }
    const int k = top_k_children(request);
    // What each step produced, by the draft path it consumed ([] = the root step's).
    Steps steps;
    std::vector<int32_t> key;
    const DraftDistributionFn next = [&](std::span<const int32_t> prefix) -> Expected<DraftDistribution> {
      std::span<const float> feature = request.target_feature;
      int32_t token = sequence.back();
      if (!prefix.empty()) {
        key.assign(prefix.begin(), prefix.end() - 1);
        const auto parent = steps.find(key);
        if (parent == steps.end()) return make_error(name_ + ": a draft node came before its parent");
        feature = parent->second.feature;
        token = prefix.back();
      }
      std::vector<float> produced(H);
      if (auto s = head_->step(feature, token, produced, logits_); !s) return s.error();
      ++stats_.draft_forwards;
      ++stats_.draft_tokens;
      steps.emplace(std::vector<int32_t>(prefix.begin(), prefix.end()),
                    Step{std::move(produced), min_confidence_ > 0 ? head_probs() : std::vector<float>{}});
      return distribution(request, k);
    };
    if (min_confidence_ > 0 && request.shape.kind == TreeShape::Kind::kChain && request.choice == DraftChoice::kTopK) {
      return confident_chain(request, next, steps);
    }
    auto tree = build_draft_tree(request.shape, next, request.choice, request.rng);
    if (!tree) return make_error(name_ + ": " + tree.error().message);
    if (min_confidence_ > 0) return confident_part(*tree, steps);
    return tree;
  }

 private:
  struct Step {
    std::vector<float> feature;  // (H) the predicted next feature
    // With min_confidence: the head's own softmax (temperature 1, vocab_ids order). The request's
    // filters may make q a point mass (greedy), so q cannot say how sure the head is.
    std::vector<float> probs;
  };
  using Steps = std::map<std::vector<int32_t>, Step>;

  // The most children the builder takes from one q when it takes the top-k of an unfiltered
  // softmax (then only those need to be listed, as TransformerDrafter's forward_top_k path
  // does), else 0: the whole distribution through the filters.
  static int top_k_children(const DraftRequest& request) {
    const SamplingParams& f = request.filters;
    if (request.choice != DraftChoice::kTopK || f.top_k > 0 || f.top_p < 1.0f || !(f.temperature > 0)) return 0;
    const TreeShape& shape = request.shape;
    int k = shape.kind == TreeShape::Kind::kDynamic ? shape.top_k : 0;
    for (int b : shape.branching) k = std::max(k, b);
    return k >= 1 && k <= 64 ? k : 0;
  }

  // q over token ids (zero outside vocab_ids) from logits_: with k > 0 only the k most probable
  // (exact probabilities, ties lower id first), else everything the filters leave.
  DraftDistribution distribution(const DraftRequest& request, int k) {
    const auto ids = head_->vocab_ids();
    if (k > 0) {
      const float inv_t = 1.0f / request.filters.temperature;
      for (size_t j = 0; j < logits_.size(); ++j) compact_[j] = logits_[j] * inv_t;
      softmax(compact_.data(), static_cast<int64_t>(compact_.size()));
      order_.resize(ids.size());
      std::iota(order_.begin(), order_.end(), 0);
      const auto take = std::min<size_t>(static_cast<size_t>(k), order_.size());
      std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(take), order_.end(),
                        [&](int32_t a, int32_t b) {
                          const float pa = compact_[static_cast<size_t>(a)], pb = compact_[static_cast<size_t>(b)];
                          return pa > pb || (pa == pb && ids[static_cast<size_t>(a)] < ids[static_cast<size_t>(b)]);
                        });
      int32_t last = 0;
      for (size_t j = 0; j < take; ++j) last = std::max(last, ids[static_cast<size_t>(order_[j])]);
      DraftDistribution q(static_cast<size_t>(last) + 1, 0.0f);
      for (size_t j = 0; j < take; ++j) {
        const auto c = static_cast<size_t>(order_[j]);
        q[static_cast<size_t>(ids[c])] = compact_[c];
      }
      return q;
    }
    const auto p = apply_sampling_filters(logits_, request.filters);
    DraftDistribution q(support_, 0.0f);
    for (size_t j = 0; j < p.size(); ++j) q[static_cast<size_t>(ids[j])] = p[j];
    return q;
  }

  // A chain that stops at the first draft whose path probability falls below min_confidence_,
  // without running the head steps a longer chain would have thrown away.
  Expected<DraftTree> confident_chain(const DraftRequest& request, const DraftDistributionFn& next,
                                      const Steps& steps) const {
    DraftTree chain;
    std::vector<int32_t> prefix;
    double path = 1.0;
    for (size_t depth = 0; depth < request.shape.branching.size(); ++depth) {
      auto q = next(prefix);
      if (!q) return q.error();
      const auto best = std::max_element(q->begin(), q->end());
      if (best == q->end() || *best <= 0) break;
      const auto token = static_cast<int32_t>(best - q->begin());
      path *= head_prob(steps.at(prefix).probs, token);
      if (path < min_confidence_) break;
      auto added = chain.add_child(chain.empty() ? kDraftRoot : chain.size() - 1, token, *best);
      if (!added) return make_error(name_ + ": " + added.error().message);
      prefix.push_back(token);
    }
    return chain;
  }

  // The nodes whose path confidence (the head's probabilities multiplied from the first draft
  // down) is at least min_confidence_, with their ancestors (which have at least the same),
  // renumbered; parents precede children in both trees.
  Expected<DraftTree> confident_part(const DraftTree& tree, const Steps& steps) const {
    DraftTree kept;
    std::vector<double> path_prob(static_cast<size_t>(tree.size()));
    std::vector<DraftNodeId> new_id(static_cast<size_t>(tree.size()), kDraftRoot);
    for (DraftNodeId id = 0; id < tree.size(); ++id) {
      DraftNode node = tree.node(id);
      const bool root_child = node.parent == kDraftRoot;
      const auto after = steps.find(root_child ? std::vector<int32_t>{} : tree.path_tokens(node.parent));
      if (after == steps.end()) return make_error(name_ + ": no head step for a drafted node's parent");
      const double p =
          (root_child ? 1.0 : path_prob[static_cast<size_t>(node.parent)]) * head_prob(after->second.probs, node.token);
      path_prob[static_cast<size_t>(id)] = p;
      if (p < min_confidence_ || (!root_child && new_id[static_cast<size_t>(node.parent)] == kDraftRoot)) continue;
      node.parent = root_child ? kDraftRoot : new_id[static_cast<size_t>(node.parent)];
      auto added = kept.add_node(std::move(node));
      if (!added) return make_error(name_ + ": " + added.error().message);
      new_id[static_cast<size_t>(id)] = *added;
    }
    return kept;
  }

  // softmax(logits_) at temperature 1, in vocab_ids order.
  std::vector<float> head_probs() const {
    std::vector<float> p(logits_);
    softmax(p.data(), static_cast<int64_t>(p.size()));
    return p;
  }
  // The probability of `token` in such a vector (0 outside vocab_ids).
  double head_prob(const std::vector<float>& probs, int32_t token) const {
    const int32_t j = token >= 0 && static_cast<size_t>(token) < support_ ? position_[static_cast<size_t>(token)] : -1;
    return j < 0 ? 0.0 : probs[static_cast<size_t>(j)];
  }

  std::unique_ptr<DraftHead> head_;
  double min_confidence_ = 0;
  std::string name_;
  std::vector<float> logits_;      // (V) of the latest step, in vocab_ids order
  std::vector<float> compact_;     // (V) scratch
  std::vector<int32_t> order_;     // (V) scratch
  size_t support_ = 0;             // largest vocab id + 1
  std::vector<int32_t> position_;  // (support_) a token's index in vocab_ids, -1 when not drafted
  DrafterStats stats_;
};

}  // namespace

Expected<std::unique_ptr<Drafter>> make_head_drafter(const Model& target, const std::filesystem::path& head_file,
                                                     const DraftHeadOptions& options) {
  if (!(options.min_confidence >= 0 && options.min_confidence <= 1)) {
    return make_error("head drafter: min_confidence " + std::to_string(options.min_confidence) + " is outside [0, 1]");
  }
  auto head = DraftHead::load(target, head_file, options);
  if (!head) return head.error();
  return std::unique_ptr<Drafter>(std::make_unique<HeadDrafter>(std::move(*head), options.min_confidence));
}

bool drafter_uses_head(std::string_view drafter) { return drafter == "head" || drafter == "ngram+head"; }

Expected<std::string> head_drafter_target_backend(const std::string& requested) {
  if (requested == "auto" || requested == "cpu") return std::string("cpu");
  return make_error(
      "the head drafter runs on the CPU backend (it reads the target's final-norm features, which "
      "only the CPU backend keeps), not on " +
      requested + "; use the cpu or auto backend");
}

}  // namespace specula
