#pragma once
// Drafters: the cheap guessers of speculative decoding. Each one answers "what might follow
// this sequence?" as a DraftTree of the requested shape (engine/spec/draft_tree.h).
//
//  ngram      prompt lookup: the longest suffix (n_max down to n_min tokens) of the sequence
//             that occurred before; the tokens that followed its earlier occurrences form the
//             draft distribution, so several matches branch into a tree. No weights.
//  layerskip  self-speculation: the target's own weights with a subset of its layers
//             ("every-other", "first:N", "last:N", "list:0,2,5"); its own KV cache.
//  model      a separate draft model that shares the target's tokenizer; its own KV cache.
//  head       a trained draft head (engine/spec/head_drafter.h): from the target's final-norm
//             feature of the row that produced the last token, and that token, it predicts the
//             next feature and reads draft logits through the target's output matrix; no KV
//             cache. Needs the target's features (DraftRequest::target_feature), so the CPU
//             backend only.
//
// The sequence handed to draft() is everything committed so far, prompt included, ending with
// the token the tree hangs off. It only ever grows by whole rounds, so a drafter with a KV
// cache keeps exactly a prefix of it committed: before drafting it feeds the tokens it has not
// seen (the accepted path and the correction of the last round) and commits them; every draft
// node it evaluates is provisional and rolled back before draft() returns. Nothing a rejected
// branch wrote survives the round.
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/expected.h"
#include "engine/model/loader.h"
#include "engine/sampling/sampler.h"
#include "engine/spec/draft_tree.h"

namespace specula {

struct DraftRequest {
  TreeShape shape;
  // Transform from draft logits to the draft distribution q. Lossless sampling needs the
  // target's; greedy and cascade acceptance ignore q, so any ranking transform works there.
  SamplingParams filters;
  DraftChoice choice = DraftChoice::kTopK;
  std::mt19937_64* rng = nullptr;  // for DraftChoice::kSample
  // For a drafter that wants_target_feature(): the target's final-RMSNorm output (model dim
  // floats) at the row whose logits produced sequence.back(). Empty when not asked for or not
  // available (the speculative loop fetches it only for such a drafter).
  std::span<const float> target_feature;
};

struct DrafterStats {
  int64_t draft_forwards = 0;   // forward passes of a draft transformer (0 for ngram)
  int64_t draft_tokens = 0;     // tokens those passes processed
  int64_t rollback_tokens = 0;  // provisional draft-KV rows discarded
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;  // "ngram:n=3", "layerskip:every-other", "model:path"
  // Forgets all state (a new sequence starts).
  virtual void reset() = 0;
  // A tree hanging off sequence.back(). May be empty (nothing worth proposing).
  virtual Expected<DraftTree> draft(std::span<const int32_t> sequence, const DraftRequest& request) = 0;
  virtual const DrafterStats& stats() const = 0;
  // true: draft() reads DraftRequest::target_feature (the loop then copies it out of the target).
  virtual bool wants_target_feature() const { return false; }
};

struct NgramOptions {
  int n_max = 3;       // longest suffix tried
  int n_min = 1;       // shortest suffix accepted as a match
  int max_length = 0;  // deepest draft (0 = whatever the tree shape allows)
  // > 0: a draft token is proposed only while the estimated chance that the whole path up to it
  // is accepted stays at or above this (0 = fill the tree shape whenever anything matches). See
  // ngram_token_confidence(); the tree shape is then only the upper bound.
  double min_confidence = 0;
  // > 0: also look the suffix up in the generated text of the sequences this drafter drafted for
  // before (SuffixDecoding's cross-request history: a server's earlier answers share phrasing),
  // keeping at most this many tokens, the oldest sequences dropped first. The current sequence
  // is searched first; the history only answers a suffix the sequence itself never saw.
  int history_tokens = 0;
};

// The estimated chance that an ngram draft token is accepted, given the length m of the suffix
// that matched and the share f of the earlier occurrences that continued with this token:
// f · (1 − 0.6 · 0.75^(m−1)). Measured with bench_draft_replay on Spec-Bench dev items with
// SmolLM2-135M (docs/performance.md): a 1-token match is accepted about 40% of the time when
// it is unambiguous, a 6-token match about 90%.
double ngram_token_confidence(int match_length, double share);

std::unique_ptr<Drafter> make_ngram_drafter(const NgramOptions& options = {});

// "every-other" (layers 0, 2, 4, ...), "first:N", "last:N", or "list:I,J,..." for a model of
// n_layers layers. Sorted, distinct, non-empty; the last layer alone ("last:1") is allowed.
Expected<std::vector<int>> parse_layer_subset(std::string_view spec, int64_t n_layers);

// Where a transformer-backed drafter (layerskip, model) runs its forwards and keeps its KV cache.
// On the CUDA backend its weights are uploaded as bf16 beside the target's and every draft
// forward stays on the GPU; drafting on the CPU for a GPU target pays a CPU forward per draft
// token, more than the GPU verify it saves.
struct DrafterPlacement {
  int threads = 0;              // CPU backend: as CpuTransformerOptions (0 = all cores)
  int kv_block_size = 16;       // the draft KV cache's block size
  std::string backend = "cpu";  // cpu | cuda | auto (as BackendOptions::kind)
};

// `target` must outlive the drafter.
Expected<std::unique_ptr<Drafter>> make_layerskip_drafter(const Model& target, std::string_view layers,
                                                          const DrafterPlacement& where = {});

// Checks that the draft model can speak for the target: same vocabulary size and the same bytes
// for every token id. The error names both models and the first difference.
Status check_same_tokenizer(const Model& target, const Model& draft);

// "first|second": each round first's tree, or second's when first proposes nothing (e.g. ngram,
// which copies from the context when it matches, then a draft head for the rounds it has no
// match in). second is asked only in those rounds; every drafter here catches up on the tokens
// it has not seen whenever it is asked. Stats are the sum of both; wants the target's feature
// when either does.
std::unique_ptr<Drafter> make_fallback_drafter(std::unique_ptr<Drafter> first, std::unique_ptr<Drafter> second);

// Takes ownership of the draft model; refuses one whose tokenizer differs from target's.
Expected<std::unique_ptr<Drafter>> make_model_drafter(const Model& target, std::unique_ptr<Model> draft,
                                                      const DrafterPlacement& where = {});

}  // namespace specula
