#pragma once
// The head drafter: a small trained draft head (EAGLE / ReDrafter style) that predicts the
// target's next final-norm feature from the current one and the token it produced, and reads
// draft logits through the target's own output matrix. No KV cache, no attention: a draft
// step is four small matrix-vector products on the CPU.
//
// Head file (safetensors, written by the trainer's exporter). __metadata__ strings:
// format = "specula-draft-head", version = "1", hidden_size (H, the target's), ffn_size (F),
// vocab_size (the target's), rms_eps, target, target_sha256, plus free-form training notes.
// Tensors (BF16, F16 or F32; vocab_ids I32), shapes row-major:
//   fc.weight [H, 2H], fc.bias [H], ffn_norm.weight [H], ffn_gate.weight [F, H],
//   ffn_up.weight [F, H], ffn_down.weight [H, F], out_norm.weight [H],
//   vocab_ids [V]: distinct ids in [0, vocab_size), the tokens the head can draft.
// One step, from f (H: the target's final-RMSNorm output at the row whose logits produced
// token x) and x:
//   u  = fc.weight · [f ; embed(x)] + fc.bias       embed = the target's input embedding row
//   n  = rmsnorm(u) ⊙ ffn_norm.weight                rmsnorm(v) = v / sqrt(mean(v²) + eps)
//   h  = u + ffn_down · (silu(ffn_gate · n) ⊙ (ffn_up · n))
//   f' = rmsnorm(h) ⊙ out_norm.weight                the predicted next feature
//   logits[j] = W_out[vocab_ids[j]] · f'             W_out = the target's output matrix
// The draft distribution is softmax(logits) through the request's filters, zero outside
// vocab_ids; a child node runs its own step from its parent's f'.
//
// Speed: the head's matrices are quantized to Q8_0 at load and the output rows of vocab_ids
// are gathered once in their stored quantized type (Q4_0/Q4_1/Q8_0; others are re-quantized
// to Q8_0), so a step runs the target's own packed-matrix kernels (kernels/cpu/matmul.h).
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "engine/core/expected.h"
#include "engine/model/loader.h"
#include "engine/spec/drafters.h"

namespace specula {

class ThreadPool;

struct DraftHeadOptions {
  int threads = 0;  // 0 = all cores; ignored with `pool`
  // Run on this pool (the target's: CpuTransformer::thread_pool()) instead of an own one of
  // `threads`. Must outlive the head; never used while a target forward runs on it.
  ThreadPool* pool = nullptr;
  // true: activations quantized to int8 per 32 values for the matmuls (the target's
  // --precision int8 kernel, fastest); false: f32 activations against the Q8_0 weights.
  bool int8_activations = true;
  // > 0: the drafter keeps a node only while the head's confidence in its whole path (the
  // product, from the first draft down, of each token's probability under the head's own
  // softmax at temperature 1, whatever the request's filters make of q) stays at or above this,
  // as ngram's min_confidence does; the tree shape is then an upper bound and a round may draft
  // nothing.
  // A verified row costs about a fifth of a CPU decode step, so a draft that is likely
  // rejected costs more than it can save.
  double min_confidence = 0;
};

// A loaded head. `target` must outlive it (the embedding rows are read from its mapping).
class DraftHead {
 public:
  static Expected<std::unique_ptr<DraftHead>> load(const Model& target, const std::filesystem::path& file,
                                                   const DraftHeadOptions& options = {});
  ~DraftHead();

  int64_t hidden_size() const;
  int64_t ffn_size() const;
  std::span<const int32_t> vocab_ids() const;
  const std::map<std::string, std::string>& metadata() const;
  const std::filesystem::path& file() const;
  size_t weight_bytes() const;  // packed bytes a step reads

  // One draft step (the formula above): feature (H) and token in, the predicted next feature
  // (H) and the logits (vocab_ids().size(), in vocab_ids order) out. The hook a reference test
  // against the trainer's PyTorch forward calls.
  Status step(std::span<const float> feature, int32_t token, std::span<float> next_feature, std::span<float> logits);

 private:
  struct Impl;
  explicit DraftHead(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "head:<file name>". Refuses (one error naming the file and what is wrong) a file that is not
// a draft head of this format version or does not fit the target: hidden or vocabulary size,
// a missing tensor, a wrong shape or dtype, a vocab id repeated or out of range. The drafter
// wants DraftRequest::target_feature; without one it proposes nothing.
Expected<std::unique_ptr<Drafter>> make_head_drafter(const Model& target, const std::filesystem::path& head_file,
                                                     const DraftHeadOptions& options);

// Whether the drafter named `drafter` (the CLI's --drafter, the GUI's choice) runs a draft head:
// "head", or "ngram+head" (ngram's tree when it matches, else the head's).
bool drafter_uses_head(std::string_view drafter);

// Where the target of a head drafter runs, from a requested backend kind: "auto" and "cpu" give
// "cpu" (only the CPU backend keeps the target's features); "cuda" is refused, saying why.
Expected<std::string> head_drafter_target_backend(const std::string& requested);

}  // namespace specula
