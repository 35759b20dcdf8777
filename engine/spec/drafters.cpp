#include "engine/spec/drafters.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>

#include "engine/backend/cuda_backend.h"
#include "engine/backend/transformer_backend.h"
#include "engine/spec/sampling_filters.h"

namespace specula {
namespace {

// ---- ngram (prompt lookup) ----------------------------------------------------------------

using FollowerCounts = std::vector<std::pair<int32_t, int>>;  // (token, occurrences)

void count_follower(FollowerCounts& counts, int32_t token) {
  const auto at = std::find_if(counts.begin(), counts.end(), [&](const auto& e) { return e.first == token; });
  if (at == counts.end()) {
    counts.emplace_back(token, 1);
  } else {
    ++at->second;
  }
}

// Where each n-gram (n = 1..n_max) of a text occurred, by the position of the token that followed
// it. The text is a series of segments (requests); a gram and its follower never straddle two.
// A lookup is a hash probe plus a check of each candidate's tokens, so a hash collision costs a
// comparison, not a wrong draft. Why not a scan of the text per lookup, as before: at a
// 769-token prompt that took 121 us a draft on the H100 machine's host, a fifth of a GPU decode
// step (bench/results/cuda_graph_reuse_s10_h100_2026-11-24.txt).
class NgramIndex {
 public:
  explicit NgramIndex(int n_max) : n_max_(n_max) {}

  std::span<const int32_t> text() const { return text_; }
  void clear() {
    text_.clear();
    followers_.clear();
    segment_start_ = 0;
  }
  void start_segment() { segment_start_ = text_.size(); }
  // Appends to the current segment, indexing every gram that ends before a new token.
  void append(std::span<const int32_t> tokens) {
    for (int32_t token : tokens) {
      const size_t j = text_.size();
      text_.push_back(token);
      for (int n = 1; n <= n_max_ && j >= segment_start_ + static_cast<size_t>(n); ++n) {
        followers_[key(std::span(text_).subspan(j - n, static_cast<size_t>(n)))].push_back(static_cast<uint32_t>(j));
      }
    }
  }
  // Counts the tokens that followed an occurrence of `gram` (1..n_max tokens).
  void add_followers(std::span<const int32_t> gram, FollowerCounts& counts) const {
    const auto it = followers_.find(key(gram));
    if (it == followers_.end()) return;
    for (uint32_t j : it->second) {
      if (std::equal(gram.begin(), gram.end(), text_.begin() + (j - gram.size()))) count_follower(counts, text_[j]);
    }
  }

 private:
  static uint64_t key(std::span<const int32_t> gram) {
    uint64_t h = 1469598103934665603ull ^ gram.size();  // FNV-1a over the length and the ids
    for (int32_t t : gram) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
    return h;
  }

  int n_max_;
  std::vector<int32_t> text_;
  size_t segment_start_ = 0;
  std::unordered_map<uint64_t, std::vector<uint32_t>> followers_;  // gram key -> follower positions
};

// Earlier sequences' text (NgramOptions::history_tokens), the oldest dropped first.
class NgramHistory {
 public:
  NgramHistory(int n_max, int capacity) : capacity_(capacity), index_(n_max) {}

  void add(std::span<const int32_t> text) {
    if (capacity_ <= 0 || text.size() < 2) return;
    if (text.size() > static_cast<size_t>(capacity_)) text = text.subspan(text.size() - capacity_);
    segments_.emplace_back(text.begin(), text.end());
    tokens_ += text.size();
    if (tokens_ <= static_cast<size_t>(capacity_)) {
      index_.start_segment();
      index_.append(text);
      return;
    }
    while (tokens_ > static_cast<size_t>(capacity_)) {
      tokens_ -= segments_.front().size();
      segments_.pop_front();
    }
    index_.clear();
    for (const auto& segment : segments_) {
      index_.start_segment();
      index_.append(segment);
    }
  }
  void add_followers(std::span<const int32_t> gram, FollowerCounts& counts) const {
    index_.add_followers(gram, counts);
  }

 private:
  int capacity_;
  std::deque<std::vector<int32_t>> segments_;
  size_t tokens_ = 0;
  NgramIndex index_;
};

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const NgramOptions& options)
      : options_(options), sequence_(options.n_max), history_(options.n_max, options.history_tokens) {}

  std::string name() const override {
    std::string name = "ngram:n=" + std::to_string(options_.n_max);
    if (options_.n_min != 1) name += ",min=" + std::to_string(options_.n_min);
    if (options_.max_length > 0) name += ",len=" + std::to_string(options_.max_length);
    if (options_.min_confidence > 0) {
      char conf[32];
      std::snprintf(conf, sizeof conf, ",conf=%g", options_.min_confidence);
      name += conf;
    }
    if (options_.history_tokens > 0) name += ",history=" + std::to_string(options_.history_tokens);
    return name;
  }
  void reset() override { archive(); }
  const DrafterStats& stats() const override { return stats_; }

  Expected<DraftTree> draft(std::span<const int32_t> sequence, const DraftRequest& request) override {
    // The index follows the sequence as it grows by rounds; a sequence that does not extend it is
    // a new request without reset(): the last one goes to the history, the new one is indexed anew.
    const auto indexed = sequence_.text();
    if (indexed.size() > sequence.size() || !std::equal(indexed.begin(), indexed.end(), sequence.begin())) archive();
    if (sequence_.text().empty()) prompt_length_ = sequence.empty() ? 0 : sequence.size() - 1;
    sequence_.append(sequence.subspan(sequence_.text().size()));
    std::vector<int32_t> context(sequence.begin(), sequence.end());
    const auto base = context.size();
    // With min_confidence: the estimated chance that each drafted path is accepted whole, by
    // path; the builder asks for parents before children, so a prefix is always known.
    std::map<std::vector<int32_t>, double> path_confidence;
    const DraftDistributionFn lookup = [&](std::span<const int32_t> prefix) -> Expected<DraftDistribution> {
      if (options_.max_length > 0 && static_cast<int>(prefix.size()) >= options_.max_length)
        return DraftDistribution(1, 0.0f);
      context.resize(base);
      context.insert(context.end(), prefix.begin(), prefix.end());
      int match_length = 0;
      DraftDistribution q = continuations(context, match_length);
      if (options_.min_confidence <= 0) return q;
      std::vector<int32_t> path(prefix.begin(), prefix.end());
      const auto known = path_confidence.find(path);
      const double before = known == path_confidence.end() ? 1.0 : known->second;
      for (size_t token = 0; token < q.size(); ++token) {
        if (!(q[token] > 0)) continue;
        const double confidence = before * ngram_token_confidence(match_length, q[token]);
        if (confidence < options_.min_confidence) {
          q[token] = 0.0f;  // not worth a verify slot
          continue;
        }
        path.push_back(static_cast<int32_t>(token));
        path_confidence[path] = confidence;
        path.pop_back();
      }
      return q;
    };
    return build_draft_tree(request.shape, lookup, DraftChoice::kTopK);
  }

 private:
  // The last sequence's generated text, with n_max tokens of its prompt before it (the chat
  // template's "assistant" turn opener, so the history also knows how answers begin).
  void archive() {
    const auto text = sequence_.text();
    if (options_.history_tokens > 0 && !text.empty()) {
      const size_t from = prompt_length_ > static_cast<size_t>(options_.n_max) ? prompt_length_ - options_.n_max : 0;
      history_.add(text.subspan(std::min(from, text.size())));
    }
    sequence_.clear();
  }

  // The tokens that followed earlier occurrences of the longest matching suffix, as a
  // distribution over their counts, and that suffix's length. All zeros (one entry) and length 0
  // when no suffix of n_min.. tokens recurs. The sequence itself first, then the history.
  // context = the indexed sequence + the draft path so far.
  DraftDistribution continuations(std::span<const int32_t> context, int& match_length) const {
    match_length = 0;
    const auto len = static_cast<int64_t>(context.size());
    const auto indexed = static_cast<int64_t>(sequence_.text().size());
    const auto distribution = [](const FollowerCounts& counts) {
      int32_t top = 0;
      int total = 0;
      for (const auto& [t, c] : counts) top = std::max(top, t), total += c;
      // Counts first, one division each: summing 1/k k times in float can exceed 1.
      DraftDistribution q(static_cast<size_t>(top) + 1, 0.0f);
      for (const auto& [t, c] : counts) q[static_cast<size_t>(t)] = static_cast<float>(c) / static_cast<float>(total);
      return q;
    };
    FollowerCounts counts;
    for (int64_t n = std::min<int64_t>(options_.n_max, len - 1); n >= std::max(1, options_.n_min); --n) {
      const auto suffix = context.subspan(static_cast<size_t>(len - n));
      counts.clear();
      // Followers inside the sequence from the index; those inside the draft path (the last
      // few tokens) by comparison. The suffix's own position (follower len) is never counted.
      sequence_.add_followers(suffix, counts);
      for (int64_t j = std::max<int64_t>(n, indexed); j < len; ++j) {
        if (std::equal(suffix.begin(), suffix.end(), context.begin() + (j - n))) {
          count_follower(counts, context[static_cast<size_t>(j)]);
        }
      }
      if (counts.empty()) continue;
      match_length = static_cast<int>(n);
      return distribution(counts);
    }
    if (options_.history_tokens > 0) {
      for (int64_t n = std::min<int64_t>(options_.n_max, len); n >= std::max(1, options_.n_min); --n) {
        counts.clear();
        history_.add_followers(context.subspan(static_cast<size_t>(len - n)), counts);
        if (counts.empty()) continue;
        match_length = static_cast<int>(n);
        return distribution(counts);
      }
    }
    return DraftDistribution(1, 0.0f);
  }

  NgramOptions options_;
  DrafterStats stats_;
  NgramIndex sequence_;  // the sequence of the last draft()
  NgramHistory history_;
  size_t prompt_length_ = 0;  // its prompt's length: the first draft() of a sequence less its one generated token
};

// ---- transformer-backed drafters (layerskip, model) ----------------------------------------

class TransformerDrafter final : public Drafter {
 public:
  TransformerDrafter(std::string name, std::unique_ptr<Model> model, std::unique_ptr<TransformerBackend> backend,
                     std::unique_ptr<BackendSession> session, int kv_block_size, int64_t context)
      : name_(std::move(name)),
        model_(std::move(model)),
        backend_(std::move(backend)),
        session_(std::move(session)),
        kv_block_size_(kv_block_size),
        context_(context),
        logits_(static_cast<size_t>(model_->config.vocab_size)) {}

  std::string name() const override { return name_; }
  const DrafterStats& stats() const override { return stats_; }
  void reset() override {
    // A fresh session: BackendSession has no clear(), and the CUDA one keeps per-block key
    // min/max that must not carry rows of the last sequence.
    if (!seen_.empty()) restart_ = true;
    seen_.clear();
  }

  Expected<DraftTree> draft(std::span<const int32_t> sequence, const DraftRequest& request) override {
    if (sequence.empty()) return make_error(name_ + ": cannot draft after an empty sequence");
    // The draft KV must hold a prefix of the sequence; anything else (a new prompt) starts over.
    if (seen_.size() > sequence.size() || !std::equal(seen_.begin(), seen_.end(), sequence.begin())) reset();
    if (restart_) {
      auto session = backend_->start(kv_block_size_, context_);
      if (!session) return make_error(name_ + ": " + session.error().message);
      session_ = std::move(*session);
      restart_ = false;
    }
    BackendSession& kv = *session_;
    const DraftPick pick = draft_pick(request);
    if (seen_.size() == sequence.size() && !(pick == root_pick_)) {
      // The root distribution is wanted in another form than the one kept: run the last token again.
      if (auto cut = kv.truncate(static_cast<int64_t>(seen_.size()) - 1); !cut) return cut.error();
      seen_.pop_back();
    }
    if (seen_.size() == sequence.size()) {
      // Nothing new since the last call: root_q_ is still the distribution after sequence.back().
    } else {
      const auto fresh = sequence.subspan(seen_.size());
      std::vector<int32_t> positions(fresh.size());
      std::iota(positions.begin(), positions.end(), static_cast<int32_t>(seen_.size()));
      const auto causal = catch_up_mask(fresh.size());
      auto q = next_distribution(kv, fresh, positions, causal ? &*causal : nullptr, request, pick);
      if (!q) {
        kv.rollback();
        return make_error(name_ + ": " + q.error().message);
      }
      root_q_ = std::move(*q);
      root_pick_ = pick;
      kv.commit_all();
      ++stats_.draft_forwards;
      stats_.draft_tokens += static_cast<int64_t>(fresh.size());
      seen_.assign(sequence.begin(), sequence.end());
    }
    // Room for the deepest draft path as provisional rows (the target checks its own context).
    if (kv.committed() + request.shape.max_nodes() > kv.capacity()) return DraftTree{};

    // The draft path grows one token a step: each step forwards only the tokens past the longest
    // prefix it shares with the path already in the draft KV (committed rows base, base + 1, ...),
    // cut back to it first. Re-running the whole path every step, as before, made a chain of K
    // cost K forwards of 1..K rows, each a separate graph shape on the CUDA backend. The path's
    // rows are dropped after the round, so the draft KV again holds `seen_` only.
    const int64_t base = kv.committed();
    std::vector<int32_t> path;  // tokens at rows base, base + 1, ...
    const DraftDistributionFn next = [&](std::span<const int32_t> prefix) -> Expected<DraftDistribution> {
      if (prefix.empty()) return root_q_;
      size_t keep = 0;
      while (keep < path.size() && keep + 1 < prefix.size() && path[keep] == prefix[keep]) ++keep;
      if (keep < path.size()) {
        stats_.rollback_tokens += static_cast<int64_t>(path.size() - keep);
        if (auto cut = kv.truncate(base + static_cast<int64_t>(keep)); !cut) return cut.error();
        path.resize(keep);
      }
      const auto fresh = prefix.subspan(keep);
      std::vector<int32_t> positions(fresh.size());
      std::iota(positions.begin(), positions.end(), static_cast<int32_t>(base + static_cast<int64_t>(keep)));
      const auto causal = catch_up_mask(fresh.size());
      auto q = next_distribution(kv, fresh, positions, causal ? &*causal : nullptr, request, pick);
      if (!q) {
        kv.rollback();
        return q.error();
      }
      kv.commit_all();
      path.insert(path.end(), fresh.begin(), fresh.end());
      ++stats_.draft_forwards;
      stats_.draft_tokens += static_cast<int64_t>(fresh.size());
      return q;
    };
    auto tree = build_draft_tree(request.shape, next, request.choice, request.rng);
    stats_.rollback_tokens += static_cast<int64_t>(path.size());
    if (auto cut = kv.truncate(base); !cut) return make_error(name_ + ": " + cut.error().message);
    if (!tree) return make_error(name_ + ": " + tree.error().message);
    return tree;
  }

 private:
  static constexpr size_t kGraphedCatchUpRows = 65;  // CudaSession's largest graphed masked forward

  // How a draft step turns the forward into q: where the draft is greedy (top-k choice, no top-k
  // or top-p filter) only the tokens it can choose leave the backend (BackendSession::
  // forward_greedy / forward_top_k); otherwise the whole row, through apply_sampling_filters.
  struct DraftPick {
    enum class Kind { kNone, kFull, kGreedy, kTopK } kind = Kind::kNone;
    int k = 0;
    float temperature = 0;
    bool operator==(const DraftPick&) const = default;
  };

  static DraftPick draft_pick(const DraftRequest& request) {
    DraftPick pick;
    pick.kind = DraftPick::Kind::kFull;
    const SamplingParams& f = request.filters;
    if (request.choice != DraftChoice::kTopK || f.top_k > 0 || f.top_p < 1.0f) return pick;
    const TreeShape& shape = request.shape;
    // The most children a node gets: what the tree builder takes from one q.
    int k = shape.kind == TreeShape::Kind::kDynamic ? shape.top_k : 0;
    for (int b : shape.branching) k = std::max(k, b);
    if (k < 1 || k > 64) return pick;
    if (!(f.temperature > 0)) {
      pick.kind = DraftPick::Kind::kGreedy;  // q is one-hot at the argmax
      return pick;
    }
    pick.kind = DraftPick::Kind::kTopK;
    pick.k = k;
    pick.temperature = f.temperature;
    return pick;
  }

  // On the GPU several new tokens (last round's accepted path and correction, or a draft path
  // past a branch point) go in under an explicit causal mask: the same attention, but a CUDA
  // forward with a mask of up to 65 rows replays a graph where an unmasked one is launched kernel
  // by kernel. Nothing (nullopt) for one token or on the CPU.
  std::optional<AttentionMask> catch_up_mask(size_t tokens) const {
    if (backend_->name() != "cuda" || tokens < 2 || tokens > kGraphedCatchUpRows) return std::nullopt;
    std::vector<int> parents(tokens);
    std::iota(parents.begin(), parents.end(), -1);
    return AttentionMask::from_parents(parents);
  }

  // One draft forward whose last row becomes q as `pick` says. A restricted q (greedy, top-k) is
  // zero past its largest listed id, which the builders read as probability 0.
  Expected<DraftDistribution> next_distribution(BackendSession& kv, std::span<const int32_t> tokens,
                                                std::span<const int32_t> positions, const AttentionMask* mask,
                                                const DraftRequest& request, const DraftPick& pick) {
    if (pick.kind == DraftPick::Kind::kGreedy) {
      int32_t best = -1;
      if (auto s = kv.forward_greedy(tokens, positions, mask, {&best, 1}, LogitRows::Last); !s) return s.error();
      DraftDistribution q(static_cast<size_t>(best) + 1, 0.0f);
      q[static_cast<size_t>(best)] = 1.0f;
      return q;
    }
    if (pick.kind == DraftPick::Kind::kTopK) {
      top_ids_.resize(static_cast<size_t>(pick.k));
      top_probs_.resize(static_cast<size_t>(pick.k));
      if (auto s = kv.forward_top_k(tokens, positions, mask, pick.temperature, top_ids_, top_probs_); !s) {
        return s.error();
      }
      int32_t last = 0;
      for (int32_t id : top_ids_) last = std::max(last, id);
      DraftDistribution q(static_cast<size_t>(last) + 1, 0.0f);
      for (size_t j = 0; j < top_ids_.size(); ++j) {
        if (top_ids_[j] >= 0) q[static_cast<size_t>(top_ids_[j])] = top_probs_[j];
      }
      return q;
    }
    if (auto s = kv.forward(tokens, positions, mask, logits_, LogitRows::Last); !s) return s.error();
    return apply_sampling_filters(logits_, request.filters);
  }

  std::string name_;
  std::unique_ptr<Model> model_;                 // the weights backend_ reads; stable address
  std::unique_ptr<TransformerBackend> backend_;  // CPU or CUDA
  std::unique_ptr<BackendSession> session_;      // the draft KV cache
  int kv_block_size_;
  int64_t context_;
  bool restart_ = false;       // session_ holds rows of an earlier sequence
  std::vector<int32_t> seen_;  // the sequence tokens session_ holds, all committed
  std::vector<float> logits_;  // (vocab) scratch
  DraftDistribution root_q_;   // the draft distribution after seen_.back(), as root_pick_ made it
  DraftPick root_pick_;
  std::vector<int32_t> top_ids_;  // forward_top_k scratch
  std::vector<float> top_probs_;
  DrafterStats stats_;
};

Expected<std::unique_ptr<Drafter>> make_transformer_drafter(std::string name, std::unique_ptr<Model> model,
                                                            int64_t context, const DrafterPlacement& where) {
  BackendOptions options;
  options.kind = where.backend;
  options.threads = where.threads;
  if (options.kind == "cuda" && !cuda_backend_supports(model->config)) {
    return make_error(name + ": the CUDA backend does not run this " + model->config.architecture + " model (" +
                      cuda_backend_unsupported(model->config) + "); draft on the CPU (--draft-backend cpu)");
  }
  auto backend = make_backend(*model, options);
  if (!backend)
    return make_error("drafter " + name + " on the " + where.backend + " backend: " + backend.error().message);
  auto session = (*backend)->start(where.kv_block_size, context);
  if (!session) return make_error(name + ": " + session.error().message);
  if ((*backend)->name() != "cpu") name += "@" + (*backend)->name();
  return std::unique_ptr<Drafter>(std::make_unique<TransformerDrafter>(
      std::move(name), std::move(model), std::move(*backend), std::move(*session), where.kv_block_size, context));
}

Expected<int> parse_int(std::string_view text, std::string_view where) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return make_error(std::string(where) + ": \"" + std::string(text) + "\" is not a whole number");
  }
  return value;
}

}  // namespace

double ngram_token_confidence(int match_length, double share) {
  if (match_length < 1 || !(share > 0)) return 0.0;
  return std::min(share, 1.0) * (1.0 - 0.6 * std::pow(0.75, match_length - 1));
}

std::unique_ptr<Drafter> make_ngram_drafter(const NgramOptions& options) {
  return std::make_unique<NgramDrafter>(options);
}

Expected<std::vector<int>> parse_layer_subset(std::string_view spec, int64_t n_layers) {
  const std::string where = "layer subset \"" + std::string(spec) + "\"";
  const std::string expected = "; expected every-other, first:N, last:N or list:I,J,...";
  std::vector<int> layers;
  const auto colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
  if (kind == "every-other" && colon == std::string_view::npos) {
    for (int l = 0; l < n_layers; l += 2) layers.push_back(l);
  } else if ((kind == "first" || kind == "last") && !arg.empty()) {
    auto n = parse_int(arg, where);
    if (!n) return n.error();
    if (*n < 1 || *n > n_layers) {
      return make_error(where + ": " + std::to_string(*n) + " layers of a model with " + std::to_string(n_layers));
    }
    const int first = kind == "first" ? 0 : static_cast<int>(n_layers) - *n;
    for (int l = first; l < first + *n; ++l) layers.push_back(l);
  } else if (kind == "list" && !arg.empty()) {
    for (size_t begin = 0; begin <= arg.size();) {
      const size_t comma = std::min(arg.find(',', begin), arg.size());
      auto l = parse_int(arg.substr(begin, comma - begin), where);
      if (!l) return l.error();
      if (*l < 0 || *l >= n_layers) {
        return make_error(where + ": layer " + std::to_string(*l) + " outside 0.." + std::to_string(n_layers - 1));
      }
      layers.push_back(*l);
      begin = comma + 1;
    }
    std::sort(layers.begin(), layers.end());
    if (std::adjacent_find(layers.begin(), layers.end()) != layers.end())
      return make_error(where + ": a layer is listed twice");
  } else {
    return make_error(where + ": unknown form" + expected);
  }
  if (layers.empty()) return make_error(where + ": no layers" + expected);
  return layers;
}

Expected<std::unique_ptr<Drafter>> make_layerskip_drafter(const Model& target, std::string_view spec,
                                                          const DrafterPlacement& where) {
  auto layers = parse_layer_subset(spec, target.config.n_layers);
  if (!layers) return layers.error();
  // A model that is the target minus some layers: the same mapped weights (shared storage),
  // no tokenizer (the transformer never reads it).
  auto subset = std::make_unique<Model>();
  subset->config = target.config;
  subset->config.n_layers = static_cast<int64_t>(layers->size());
  subset->weights = target.weights;
  subset->weights.layers.clear();
  for (int l : *layers) subset->weights.layers.push_back(target.weights.layers[static_cast<size_t>(l)]);
  subset->path = target.path;
  subset->format = target.format;
  return make_transformer_drafter("layerskip:" + std::string(spec), std::move(subset), target.config.context_length,
                                  where);
}

Status check_same_tokenizer(const Model& target, const Model& draft) {
  const std::string who = "draft model " + draft.path.string() + " and target " + target.path.string();
  const int32_t tv = target.tokenizer.vocab_size(), dv = draft.tokenizer.vocab_size();
  if (tv != dv || target.config.vocab_size != draft.config.vocab_size) {
    return make_error(who + " have different vocabularies (" + std::to_string(dv) + " vs " + std::to_string(tv) +
                      " tokens, " + std::to_string(draft.config.vocab_size) + " vs " +
                      std::to_string(target.config.vocab_size) +
                      " logits); a draft model must share the target's tokenizer");
  }
  for (int32_t id = 0; id < tv; ++id) {
    if (target.tokenizer.token_bytes(id) != draft.tokenizer.token_bytes(id)) {
      return make_error(who + " have different tokenizers (token " + std::to_string(id) +
                        " differs); a draft model must share the target's tokenizer");
    }
  }
  return Status::success();
}

namespace {

class FallbackDrafter final : public Drafter {
 public:
  FallbackDrafter(std::unique_ptr<Drafter> first, std::unique_ptr<Drafter> second)
      : first_(std::move(first)), second_(std::move(second)), name_(first_->name() + "|" + second_->name()) {}

  std::string name() const override { return name_; }
  void reset() override {
    first_->reset();
    second_->reset();
  }
  bool wants_target_feature() const override {
    return first_->wants_target_feature() || second_->wants_target_feature();
  }
  const DrafterStats& stats() const override {
    const DrafterStats &a = first_->stats(), &b = second_->stats();
    stats_ = {a.draft_forwards + b.draft_forwards, a.draft_tokens + b.draft_tokens,
              a.rollback_tokens + b.rollback_tokens};
    return stats_;
  }
  Expected<DraftTree> draft(std::span<const int32_t> sequence, const DraftRequest& request) override {
    auto tree = first_->draft(sequence, request);
    if (!tree || !tree->empty()) return tree;
    return second_->draft(sequence, request);
  }

 private:
  std::unique_ptr<Drafter> first_, second_;
  std::string name_;
  mutable DrafterStats stats_;
};

}  // namespace

std::unique_ptr<Drafter> make_fallback_drafter(std::unique_ptr<Drafter> first, std::unique_ptr<Drafter> second) {
  return std::make_unique<FallbackDrafter>(std::move(first), std::move(second));
}

Expected<std::unique_ptr<Drafter>> make_model_drafter(const Model& target, std::unique_ptr<Model> draft,
                                                      const DrafterPlacement& where) {
  if (!draft) return make_error("model drafter: no draft model");
  if (auto same = check_same_tokenizer(target, *draft); !same) return same.error();
  const int64_t context = std::min(target.config.context_length, draft->config.context_length);
  std::string name = "model:" + draft->path.filename().string();
  return make_transformer_drafter(std::move(name), std::move(draft), context, where);
}

}  // namespace specula
