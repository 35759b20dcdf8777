#include "engine/spec/acceptance.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>

#include "engine/spec/sampling_filters.h"
#include "kernels/cpu/activation.h"

namespace specula {

std::vector<int32_t> AcceptanceResult::emitted_tokens(const DraftTree& tree) const {
  std::vector<int32_t> tokens;
  tokens.reserve(accepted_path.size() + 1);
  for (DraftNodeId id : accepted_path) tokens.push_back(tree.node(id).token);
  tokens.push_back(next_token);
  return tokens;
}

Status validate_acceptance_input(const DraftTree& tree, const TargetProbs& target) {
  if (target.vocab <= 0)
    return make_error("acceptance: target vocab " + std::to_string(target.vocab) + " is not positive");
  const size_t want = static_cast<size_t>(tree.size() + 1) * static_cast<size_t>(target.vocab);
  if (target.rows.size() != want) {
    return make_error("acceptance: target has " + std::to_string(target.rows.size()) + " probabilities; a tree of " +
                      std::to_string(tree.size()) + " nodes over vocab " + std::to_string(target.vocab) + " needs " +
                      std::to_string(want) + " (1 + nodes rows)");
  }
  for (DraftNodeId id = 0; id < tree.size(); ++id) {
    if (tree.node(id).token >= target.vocab) {
      return make_error("acceptance: node " + std::to_string(id) + " token " + std::to_string(tree.node(id).token) +
                        " outside the target vocab of " + std::to_string(target.vocab));
    }
  }
  return Status::success();
}

namespace {

int32_t argmax_of(std::span<const float> p) {
  return static_cast<int32_t>(argmax_f32(p.data(), static_cast<int64_t>(p.size())));
}

std::string format_tau(float tau) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), tau);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(tau);
}

// Greedy and cascade: each node passes or fails a test that depends only on its parent's target
// row, so the best path is the longest chain of passing nodes, found bottom-up over ids
// (children have larger ids than their parents).
struct DeterministicWalk {
  std::vector<DraftNodeId> path;
  std::vector<NodeDecision> decisions;
};

// Turns one parent's target row into the test for its children's tokens; called once per parent
// with children, so a scan over the vocabulary (argmax, max) is not repeated per sibling.
using TokenTestFactory = std::function<std::function<bool(int32_t token)>(DraftNodeId parent)>;
// The target's probability of token after parent, for the decisions.
using TargetProbFn = std::function<float(DraftNodeId parent, int32_t token)>;

DeterministicWalk walk_longest_passing(const DraftTree& tree, const TokenTestFactory& make_test,
                                       const TargetProbFn& target_prob) {
  const int n = tree.size();
  std::vector<uint8_t> pass(static_cast<size_t>(n));
  for (DraftNodeId parent = kDraftRoot; parent < n; ++parent) {
    if (tree.is_leaf(parent)) continue;
    const auto passes = make_test(parent);
    for (DraftNodeId c : tree.children(parent)) pass[static_cast<size_t>(c)] = passes(tree.node(c).token);
  }
  // best[slot(id)]: accepted drafts below id on its best path; next[slot(id)]: the child to take.
  auto slot = [](DraftNodeId id) {
    const int index = id + 1;  // the root is -1
    return static_cast<size_t>(index);
  };
  std::vector<int> best(static_cast<size_t>(n + 1), 0);
  std::vector<DraftNodeId> next(static_cast<size_t>(n + 1), kDraftRoot);
  for (DraftNodeId id = n - 1; id >= kDraftRoot; --id) {
    for (DraftNodeId c : tree.children(id)) {
      if (!pass[static_cast<size_t>(c)]) continue;
      const int len = 1 + best[slot(c)];
      if (len > best[slot(id)]) {
        best[slot(id)] = len;
        next[slot(id)] = c;
      }
    }
  }

  DeterministicWalk walk;
  for (DraftNodeId at = kDraftRoot;;) {
    const DraftNodeId take = next[slot(at)];
    for (DraftNodeId c : tree.children(at)) {
      const DraftNode& node = tree.node(c);
      const bool ok = pass[static_cast<size_t>(c)];
      NodeDecision d;
      d.node = c;
      d.verdict = c == take ? NodeVerdict::kAccepted : ok ? NodeVerdict::kPassed : NodeVerdict::kRejected;
      d.target_prob = target_prob(at, node.token);
      d.draft_prob = node.draft_prob;
      d.accept_prob = ok ? 1.0f : 0.0f;
      walk.decisions.push_back(d);
    }
    if (take == kDraftRoot) break;
    walk.path.push_back(take);
    at = take;
  }
  return walk;
}

class GreedyRule final : public AcceptanceRule {
 public:
  std::string name() const override { return "greedy"; }
  std::string description() const override {
    return "greedy: accept a draft token iff it is the target's argmax (lossless at temperature 0)";
  }
  bool lossless() const override { return true; }

  Expected<AcceptanceResult> accept(const DraftTree& tree, const TargetProbs& target,
                                    std::mt19937_64& /*rng*/) const override {
    if (Status s = validate_acceptance_input(tree, target); !s) return s.error();
    auto walk = walk_longest_passing(
        tree,
        [&](DraftNodeId parent) {
          return [best = argmax_of(target.after(parent))](int32_t token) { return token == best; };
        },
        [&](DraftNodeId parent, int32_t token) { return target.after(parent)[static_cast<size_t>(token)]; });
    AcceptanceResult result;
    result.accepted_path = std::move(walk.path);
    result.decisions = std::move(walk.decisions);
    const DraftNodeId last = result.accepted_path.empty() ? kDraftRoot : result.accepted_path.back();
    result.next_token = argmax_of(target.after(last));
    result.bonus = tree.is_leaf(last);
    return result;
  }
};

class CascadeRule final : public AcceptanceRule {
 public:
  explicit CascadeRule(float tau) : tau_(tau) {}
  std::string name() const override { return "cascade:" + format_tau(tau_); }
  std::string description() const override {
    return "cascade (lossy): accept a draft token iff p_target >= " + format_tau(tau_) +
           " x max p_target; output does not follow the target distribution";
  }
  bool lossless() const override { return false; }

  Expected<AcceptanceResult> accept(const DraftTree& tree, const TargetProbs& target,
                                    std::mt19937_64& rng) const override {
    if (Status s = validate_acceptance_input(tree, target); !s) return s.error();
    const float tau = tau_;
    auto walk = walk_longest_passing(
        tree,
        [&](DraftNodeId parent) {
          const std::span<const float> row = target.after(parent);
          const float top = row[static_cast<size_t>(argmax_of(row))];
          return
              [row, bar = tau * top, top](int32_t token) { return top > 0 && row[static_cast<size_t>(token)] >= bar; };
        },
        [&](DraftNodeId parent, int32_t token) { return target.after(parent)[static_cast<size_t>(token)]; });
    AcceptanceResult result;
    result.accepted_path = std::move(walk.path);
    result.decisions = std::move(walk.decisions);
    const DraftNodeId last = result.accepted_path.empty() ? kDraftRoot : result.accepted_path.back();
    const std::span<const float> p = target.after(last);
    result.next_token = sample_index(p, rng);
    if (result.next_token < 0) {
      return make_error("acceptance cascade: target row after " +
                        (last == kDraftRoot ? std::string("the committed context") : "node " + std::to_string(last)) +
                        " has no probability mass");
    }
    result.bonus = tree.is_leaf(last);
    return result;
  }

 private:
  float tau_;
};

class SampleRule final : public AcceptanceRule {
 public:
  std::string name() const override { return "sample"; }
  std::string description() const override {
    return "sample: speculative sampling with recursive rejection over siblings (lossless)";
  }
  bool lossless() const override { return true; }

  Expected<AcceptanceResult> accept(const DraftTree& tree, const TargetProbs& target,
                                    std::mt19937_64& rng) const override {
    if (Status s = validate_acceptance_input(tree, target); !s) return s.error();
    const size_t vocab = static_cast<size_t>(target.vocab);
    AcceptanceResult result;
    std::vector<double> p(vocab), q(vocab);
    std::vector<int32_t> rejected;  // tokens of the rejected earlier siblings

    for (DraftNodeId at = kDraftRoot;;) {
      // p: the target after `at`, normalised; it turns into the residual as siblings fail.
      const std::span<const float> row = target.after(at);
      double mass = 0;
      for (size_t i = 0; i < vocab; ++i) mass += p[i] = row[i] > 0 ? row[i] : 0.0;
      if (!(mass > 0)) {
        return make_error("acceptance sample: target row after " +
                          (at == kDraftRoot ? std::string("the committed context") : "node " + std::to_string(at)) +
                          " has no probability mass");
      }
      for (double& v : p) v /= mass;

      if (tree.is_leaf(at)) {  // every draft on the path survived: the bonus comes from p itself
        result.next_token = sample_index(std::span<const double>(p), rng);
        result.bonus = true;
        return result;
      }

      rejected.clear();
      DraftNodeId taken = kDraftRoot;
      for (DraftNodeId c : tree.children(at)) {
        const DraftNode& node = tree.node(c);
        const size_t x = static_cast<size_t>(node.token);
        draft_for_sibling(node, rejected, q);
        const double px = p[x], qx = q[x];
        NodeDecision d;
        d.node = c;
        d.target_prob = static_cast<float>(px);
        d.draft_prob = static_cast<float>(qx);
        d.accept_prob = static_cast<float>(qx > 0 ? std::min(1.0, px / qx) : px > 0 ? 1.0 : 0.0);
        // Accept with probability min(1, p/q), written without the division.
        if (uniform_unit(rng) * qx < px) {
          d.verdict = NodeVerdict::kAccepted;
          result.decisions.push_back(d);
          taken = c;
          break;
        }
        d.verdict = NodeVerdict::kRejected;
        result.decisions.push_back(d);
        // p <- norm(max(0, p - q)). Rejection has probability sum(max(0, q - p)) = sum(max(0, p - q)),
        // so the residual has mass whenever this branch can actually be reached; if rounding
        // leaves none, p stays as it was.
        double residual = 0;
        for (size_t i = 0; i < vocab; ++i) residual += std::max(0.0, p[i] - q[i]);
        if (residual > 0) {
          for (size_t i = 0; i < vocab; ++i) p[i] = std::max(0.0, p[i] - q[i]) / residual;
        }
        rejected.push_back(node.token);
      }

      if (taken == kDraftRoot) {  // every child rejected: the correction comes from the residual
        result.next_token = sample_index(std::span<const double>(p), rng);
        result.bonus = false;
        return result;
      }
      result.accepted_path.push_back(taken);
      at = taken;
    }
  }

 private:
  // q for one sibling: its draft distribution without the earlier (rejected) siblings' tokens,
  // renormalised, when it was sampled; a point mass at its token when it was chosen
  // deterministically. A restricted draft support leaves the ids past its end at 0.
  static void draft_for_sibling(const DraftNode& node, std::span<const int32_t> rejected, std::vector<double>& q) {
    std::fill(q.begin(), q.end(), 0.0);
    if (!node.sampled) {
      q[static_cast<size_t>(node.token)] = 1.0;
      return;
    }
    const DraftDistribution& dist = *node.draft_dist;
    const size_t support = std::min(dist.size(), q.size());
    double total = 0;
    for (size_t i = 0; i < support; ++i) total += q[i] = dist[i] > 0 ? dist[i] : 0.0;
    for (int32_t t : rejected) {
      const size_t i = static_cast<size_t>(t);
      if (i < support) {
        total -= q[i];
        q[i] = 0;
      }
    }
    if (!(total > 0)) {
      std::fill(q.begin(), q.end(), 0.0);
      return;
    }
    for (size_t i = 0; i < support; ++i) q[i] /= total;
  }
};

}  // namespace

Expected<AcceptanceResult> accept_greedy_tokens(const DraftTree& tree, std::span<const int32_t> greedy) {
  if (greedy.size() != static_cast<size_t>(tree.size() + 1)) {
    return make_error("acceptance greedy: " + std::to_string(greedy.size()) + " greedy tokens for a tree of " +
                      std::to_string(tree.size()) + " nodes (want 1 + nodes)");
  }
  const auto best_after = [&](DraftNodeId parent) { return greedy[static_cast<size_t>(parent + 1)]; };
  auto walk = walk_longest_passing(
      tree, [&](DraftNodeId parent) { return [best = best_after(parent)](int32_t token) { return token == best; }; },
      // The one-hot row apply_sampling_filters gives at temperature 0.
      [&](DraftNodeId parent, int32_t token) { return token == best_after(parent) ? 1.0f : 0.0f; });
  AcceptanceResult result;
  result.accepted_path = std::move(walk.path);
  result.decisions = std::move(walk.decisions);
  const DraftNodeId last = result.accepted_path.empty() ? kDraftRoot : result.accepted_path.back();
  result.next_token = best_after(last);
  result.bonus = tree.is_leaf(last);
  return result;
}

std::unique_ptr<AcceptanceRule> make_greedy_rule() { return std::make_unique<GreedyRule>(); }
std::unique_ptr<AcceptanceRule> make_sample_rule() { return std::make_unique<SampleRule>(); }
std::unique_ptr<AcceptanceRule> make_cascade_rule(float tau) { return std::make_unique<CascadeRule>(tau); }

Expected<std::unique_ptr<AcceptanceRule>> make_acceptance_rule(std::string_view spec) {
  const std::string where = "acceptance rule \"" + std::string(spec) + "\"";
  if (spec == "greedy") return make_greedy_rule();
  if (spec == "sample") return make_sample_rule();
  if (spec.substr(0, 8) == "cascade:") {
    const std::string_view text = spec.substr(8);
    float tau = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), tau);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      return make_error(where + ": threshold \"" + std::string(text) + "\" is not a number");
    }
    if (!(tau > 0.0f && tau <= 1.0f)) {
      return make_error(where + ": threshold " + std::string(text) + " outside (0, 1]");
    }
    return make_cascade_rule(tau);
  }
  if (spec == "cascade") return make_error(where + ": cascade needs a threshold, e.g. cascade:0.3");
  return make_error(where + ": expected greedy, sample or cascade:T");
}

}  // namespace specula
