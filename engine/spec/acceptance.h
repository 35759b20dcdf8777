#pragma once
// AcceptanceRule: given a draft tree and the target's distributions at every node, decide which
// root-to-node path the target accepts and which token comes after it (the correction after a
// rejection, or the bonus token when the path reaches a leaf). Each round therefore emits
// accepted_path.size() + 1 tokens.
//
//  greedy      token-exact: a node is accepted iff its token is the target's argmax after its
//              parent; the longest such path wins; then the target's argmax. With temperature 0
//              on both sides this reproduces plain greedy decoding.
//  sample      lossless speculative sampling: the emitted tokens are distributed exactly as the
//              target would sample them. Chains accept x with min(1, p(x)/q(x)) and on rejection
//              draw from norm(max(0, p - q)); trees apply the same step to siblings in id order
//              (recursive rejection sampling, as in SpecInfer / EAGLE): after a rejection p
//              becomes that residual and q drops the rejected token and is renormalised.
//  cascade:T   LOSSY probabilistic match: a node is accepted iff p(token) >= T * max p; the
//              longest such path wins; the next token is sampled from the target. Faster, but
//              the output no longer follows the target distribution (T = 1 is greedy-like).
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/expected.h"
#include "engine/spec/draft_tree.h"

namespace specula {

// The target's probabilities, already through apply_sampling_filters, one row per prefix:
// row 0 after the last committed token, row 1 + i after draft node i. (1 + n, vocab) row-major.
struct TargetProbs {
  std::span<const float> rows;
  int vocab = 0;

  std::span<const float> after(DraftNodeId id) const {
    const int row = id + 1;  // row 0 is the root's
    return rows.subspan(static_cast<size_t>(row) * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
  }
};

enum class NodeVerdict : uint8_t {
  kAccepted,  // on the accepted path
  kRejected,  // failed the rule's test
  kPassed,    // passed a deterministic rule's test, but a longer sibling branch was taken
};

// One visited node. Nodes the rule never reached (below a rejection, or siblings after the one
// taken by the sample rule) have no record.
struct NodeDecision {
  DraftNodeId node = kDraftRoot;
  NodeVerdict verdict = NodeVerdict::kRejected;
  float target_prob = 0;  // p(token) the test used (the residual for later siblings under sample)
  float draft_prob = 0;   // q(token) the test used (renormalised without earlier siblings)
  float accept_prob = 0;  // chance the test accepts: min(1, p/q) for sample, 0 or 1 otherwise
};

struct AcceptanceResult {
  std::vector<DraftNodeId> accepted_path;  // root to leaf; empty when the first level was rejected
  int32_t next_token = -1;                 // correction, or bonus when `bonus` is set
  bool bonus = false;                      // the path ended at a leaf: every draft on it survived
  std::vector<NodeDecision> decisions;     // in the order the rule made them

  // The tokens this round commits: the accepted drafts, then next_token.
  std::vector<int32_t> emitted_tokens(const DraftTree& tree) const;
};

class AcceptanceRule {
 public:
  virtual ~AcceptanceRule() = default;
  virtual std::string name() const = 0;         // as parsed: "greedy", "sample", "cascade:0.3"
  virtual std::string description() const = 0;  // one line for UIs and logs
  virtual bool lossless() const = 0;            // true when the output follows the target exactly
  // rng is only drawn from by rules that sample. Fails on inputs that do not fit the tree.
  virtual Expected<AcceptanceResult> accept(const DraftTree& tree, const TargetProbs& target,
                                            std::mt19937_64& rng) const = 0;
};

// "greedy", "sample" or "cascade:T" with T in (0, 1].
Expected<std::unique_ptr<AcceptanceRule>> make_acceptance_rule(std::string_view spec);

std::unique_ptr<AcceptanceRule> make_greedy_rule();
std::unique_ptr<AcceptanceRule> make_sample_rule();
std::unique_ptr<AcceptanceRule> make_cascade_rule(float tau);

// The greedy rule from each row's argmax alone: greedy[0] after the committed context, greedy[1 + i]
// after node i (BackendSession::forward_greedy of a verify). The same result, decisions included,
// as make_greedy_rule()->accept on the rows apply_sampling_filters gives at temperature 0 (one-hot
// at the argmax), without the (1 + n, vocab) probabilities.
Expected<AcceptanceResult> accept_greedy_tokens(const DraftTree& tree, std::span<const int32_t> greedy);

// Checks that target has 1 + tree.size() rows of a positive vocab and that every draft token is
// inside it; the rules call it first.
Status validate_acceptance_input(const DraftTree& tree, const TargetProbs& target);

}  // namespace specula
