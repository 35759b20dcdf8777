#include "engine/model/cpu_transformer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "engine/model/moe.h"
#include "engine/model/packed_weights.h"
#include "engine/model/qkv_extras.h"
#include "engine/observer/phase_span.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"

namespace specula {

AttentionMask AttentionMask::causal(int64_t n) {
  AttentionMask mask(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) mask.set(i, j, true);
  return mask;
}

AttentionMask AttentionMask::from_parents(std::span<const int> parents) {
  const auto n = static_cast<int64_t>(parents.size());
  AttentionMask mask(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i; j >= 0 && j < n; j = parents[j] < j ? parents[j] : -1) mask.set(i, j, true);
  }
  return mask;
}

namespace {

struct PackedLayer {
  std::vector<float> attn_norm;  // (dim)
  std::vector<float> ffn_norm;   // (dim)
  PackedMatrix qkv;              // (n_heads·head_dim + 2·n_kv_heads·head_dim, dim): Q rows, K rows, V rows
  PackedMatrix wo;               // (dim, n_heads·head_dim)
  PackedMatrix gate_up;          // (2·ffn_dim, dim): gate rows, then up rows
  PackedMatrix down;             // (dim, ffn_dim)
  QkvExtras extras;              // biases, q/k norms, clipping (MoE architectures); inactive for llama
  std::unique_ptr<MoeFfn> moe;   // MoE layers: replaces gate_up/down (engine/model/moe.h)
};

}  // namespace

struct CpuTransformer::Impl {
  const Model* model;
  ModelConfig cfg;
  Precision precision;
  ThreadPool pool;
  std::vector<PackedLayer> layers;
  std::vector<float> output_norm;  // (dim)
  PackedMatrix output;             // (vocab, dim)

  // Scratch, grown to the largest batch seen. T = new tokens.
  AlignedBuffer<float> x;                              // (T, dim) residual stream
  AlignedBuffer<float> xn;                             // (T, max(dim, ffn)) normalized / activated input of a matmul
  AlignedBuffer<float> qkv;                            // (T, q_dim + 2 kv_dim)
  AlignedBuffer<float> att;                            // (T, q_dim)
  AlignedBuffer<float> gu;                             // (T, 2 ffn)
  AlignedBuffer<float> ffn_act;                        // (T, ffn): sparse FFN activations
  AlignedBuffer<float> rope;                           // (T, head_dim)
  QuantizedRows xq;                                    // quantized matmul input
  std::vector<std::vector<float>> scores;              // per thread: (group, context)
  std::vector<std::vector<KvSpan>> spans;              // per thread
  std::vector<AlignedBuffer<float>> tree_q, tree_out;  // per thread: (kTreeChunk · group, head_dim)
  MoeScratch moe_scratch;
  // Rows of xn that hold the last forward's final-norm output, one per logits row (0: none).
  int64_t feature_rows = 0;

  Impl(const Model& m, const CpuTransformerOptions& options)
      : model(&m), cfg(m.config), precision(options.precision), pool(options.threads) {
    const bool bf16 = precision == Precision::Bf16Storage;
    const bool exact = precision == Precision::Exact || bf16;
    auto round = [&](PackedMatrix& m) {
      if (bf16) round_to_bf16(std::span<float>(m.f32.data(), m.f32.size()));
    };
    // int8 activations read quantized weights in 16-row tiles (kernels/cpu/matmul.h, tile_rows).
    const bool tile = precision == Precision::Int8Activations;
    const auto& w = m.weights;
    layers.resize(static_cast<size_t>(cfg.n_layers));
    pool.run([&](int index, int n_threads) {
      int64_t begin, end;
      ThreadPool::split(cfg.n_layers + 1, 1, index, n_threads, begin, end);
      for (int64_t l = begin; l < end; ++l) {
        if (l == cfg.n_layers) {
          output = pack_fused({&w.output}, exact);
          round(output);
          if (tile) tile_rows(output);
          output_norm = to_f32(w.output_norm);
          continue;
        }
        const LayerWeights& src = w.layers[static_cast<size_t>(l)];
        PackedLayer& dst = layers[static_cast<size_t>(l)];
        dst.attn_norm = to_f32(src.attn_norm);
        dst.ffn_norm = to_f32(src.ffn_norm);
        dst.qkv = pack_fused({&src.wq, &src.wk, &src.wv}, exact);
        dst.wo = pack_fused({&src.wo}, exact);
        dst.extras = QkvExtras::for_layer(cfg, src);
        if (src.is_moe()) {
          dst.moe = std::make_unique<MoeFfn>(cfg, src, exact);
          if (bf16) dst.moe->round_to_bf16();
        } else {
          dst.gate_up = pack_fused({&src.w_gate, &src.w_up}, exact);
          dst.down = pack_fused({&src.w_down}, exact);
        }
        for (PackedMatrix* matrix : {&dst.qkv, &dst.wo, &dst.gate_up, &dst.down}) round(*matrix);
        if (tile) {
          for (PackedMatrix* matrix : {&dst.qkv, &dst.wo, &dst.gate_up, &dst.down}) tile_rows(*matrix);
        }
      }
    });
  }

  int64_t q_dim() const { return cfg.n_heads * cfg.head_dim; }
  int64_t kv_dim() const { return cfg.n_kv_heads * cfg.head_dim; }

  void ensure_scratch(int64_t T, int64_t context) {
    const int64_t wide = std::max(cfg.dim, cfg.ffn_dim);
    x.ensure(static_cast<size_t>(T * cfg.dim));
    xn.ensure(static_cast<size_t>(T * wide));
    qkv.ensure(static_cast<size_t>(T * (q_dim() + 2 * kv_dim())));
    att.ensure(static_cast<size_t>(T * q_dim()));
    gu.ensure(static_cast<size_t>(T * 2 * cfg.ffn_dim));
    ffn_act.ensure(static_cast<size_t>(T * cfg.ffn_dim));
    rope.ensure(static_cast<size_t>(T * cfg.head_dim));
    const int64_t group = cfg.n_heads / cfg.n_kv_heads;
    const int64_t queries = group * kTreeChunk;
    scores.resize(static_cast<size_t>(pool.size()));
    spans.resize(static_cast<size_t>(pool.size()));
    tree_q.resize(static_cast<size_t>(pool.size()));
    tree_out.resize(static_cast<size_t>(pool.size()));
    for (auto& s : scores) {
      if (static_cast<int64_t>(s.size()) < queries * context) s.resize(static_cast<size_t>(queries * context));
    }
    for (auto& b : tree_q) b.ensure(static_cast<size_t>(queries * cfg.head_dim));
    for (auto& b : tree_out) b.ensure(static_cast<size_t>(queries * cfg.head_dim));
  }

  // Per-token elementwise work (RMSNorm, SwiGLU, RoPE, int8 quantization) takes about a
  // microsecond a token, less than waking the pool for a region costs, so verify-sized batches
  // (up to a 16-node tree) do it on the calling thread; prefill-sized ones split it.
  static constexpr int64_t kInlineRowsBelow = 17;

  // Runs fn(begin, end) over [0, n) split across the pool, or inline when n is small.
  template <class Fn>
  void parallel_for(int64_t n, int64_t grain, int64_t inline_below, Fn&& fn) {
    if (n < inline_below || pool.size() == 1) {
      fn(int64_t{0}, n);
      return;
    }
    pool.run([&](int index, int n_threads) {
      int64_t begin, end;
      ThreadPool::split(n, grain, index, n_threads, begin, end);
      if (begin < end) fn(begin, end);
    });
  }

  enum class Input { Plain, RmsNorm, SwiGlu };

  // out[t] (+)= W · f(in[t]) for T tokens, where f is nothing, RMSNorm with norm_weight, or
  // SwiGLU of in[t] = [gate | up] (in's row length 2·W.cols).
  void project(const PackedMatrix& w, const float* in, int64_t ld_in, int64_t T, Input input, const float* norm_weight,
               float* out, int64_t ld_out, bool accumulate) {
    const int64_t K = w.cols;
    const float* src = in;
    int64_t ld_src = ld_in;
    const bool int8 = precision == Precision::Int8Activations && w.quantized();
    if (input != Input::Plain || int8) {
      if (int8) xq.resize(T, K);
      if (input != Input::Plain) {
        src = xn.data();
        ld_src = K;
      }
      parallel_for(T, 1, kInlineRowsBelow, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          if (input == Input::RmsNorm) {
            rmsnorm(in + t * ld_in, norm_weight, xn.data() + t * K, K, cfg.rms_eps);
          } else if (input == Input::SwiGlu) {
            swiglu(in + t * ld_in, in + t * ld_in + K, xn.data() + t * K, K);
          }
        }
        if (int8) quantize_rows(src, ld_src, xq, begin, end);
      });
    }
    // Rows in multiples of the kernels' tile height per thread.
    parallel_for(w.rows, w.tiled() ? kTileRows : 4, 0, [&](int64_t begin, int64_t end) {
      if (int8) {
        matmul_quantized(w, xq, out, ld_out, begin, end, accumulate);
      } else {
        matmul_f32(w, src, ld_src, T, out, ld_out, begin, end, accumulate);
      }
    });
  }

  // Tokens of one KV head's query group that share a pass over the keys in masked (tree) attention.
  static constexpr int64_t kTreeChunk = 16;

  // Masked attention for the T new tokens (a verify), dense: a task is one KV head with its whole
  // query group for up to kTreeChunk tokens (group × tokens queries, token-major), which read each
  // committed key and value once together; each token keeps its own mask row over the new rows.
  // attention_group's result for a query does not depend on the other queries of its call, and
  // the spans, their order and the arithmetic are those of attention() below, so the results are
  // the same bit for bit.
  void tree_attention(int64_t layer, int64_t T, const KvCache& kv, int64_t first_new, const AttentionMask& mask) {
    const int64_t hd = cfg.head_dim, group = cfg.n_heads / cfg.n_kv_heads;
    const int64_t B = kv.block_size(), committed = kv.committed();
    const int64_t qkv_ld = q_dim() + 2 * kv_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // Tasks: (KV head, chunk of tokens). 3 KV heads on 2 threads would leave one thread idle for
    // a whole head's time; splitting the tokens until the tasks divide evenly keeps both busy, and
    // costs only repeated reads of keys that stay in cache (a token's arithmetic is unchanged).
    int64_t chunks = (T + kTreeChunk - 1) / kTreeChunk;
    for (int64_t c = chunks; c <= T; ++c) {
      if ((cfg.n_kv_heads * c) % pool.size() == 0) {
        chunks = c;
        break;
      }
    }
    const int64_t chunk = (T + chunks - 1) / chunks;
    chunks = (T + chunk - 1) / chunk;
    pool.run([&](int index, int n_threads) {
      int64_t begin, end;
      ThreadPool::split(cfg.n_kv_heads * chunks, 1, index, n_threads, begin, end);
      auto& my_spans = spans[static_cast<size_t>(index)];
      float* q = tree_q[static_cast<size_t>(index)].data();
      float* out = tree_out[static_cast<size_t>(index)].data();
      for (int64_t task = begin; task < end; ++task) {
        const int64_t h = task / chunks, t0 = (task % chunks) * chunk;  // KV head, first token
        const int64_t n = std::min(chunk, T - t0), width = group * hd;
        for (int64_t i = 0; i < n; ++i) std::copy_n(qkv.data() + (t0 + i) * qkv_ld + h * width, width, q + i * width);
        my_spans.clear();
        for (int64_t b = 0; b * B < committed; ++b) {
          my_spans.push_back({kv.keys(layer, h, b), kv.values(layer, h, b), std::min(B, committed - b * B), nullptr});
        }
        for (int64_t r = first_new; r < first_new + T;) {
          const int64_t b = r / B, in_block = r % B;
          const int64_t rows = std::min(B - in_block, first_new + T - r);
          my_spans.push_back({kv.keys(layer, h, b) + in_block * hd, kv.values(layer, h, b) + in_block * hd, rows,
                              mask.row(t0) + (r - first_new), T, group});
          r += rows;
        }
        attention_group(q, n * group, hd, my_spans, scale, scores[static_cast<size_t>(index)].data(), out);
        for (int64_t i = 0; i < n; ++i)
          std::copy_n(out + i * width, width, att.data() + (t0 + i) * q_dim() + h * width);
      }
    });
  }

  void attention(int64_t layer, int64_t T, const KvCache& kv, int64_t first_new, const AttentionMask* mask,
                 const SparseSelection* sparse) {
    if (mask && T > 1 && !(sparse && sparse->active())) {
      tree_attention(layer, T, kv, first_new, *mask);
      return;
    }
    const int64_t hd = cfg.head_dim, group = cfg.n_heads / cfg.n_kv_heads;
    const int64_t B = kv.block_size(), committed = kv.committed();
    const int64_t qkv_ld = q_dim() + 2 * kv_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // The (token, query head) pairs split evenly over the threads, and each thread takes its pairs
    // in runs that share a token and a KV head: one attention_group call per run, which reads each
    // key and value row once for the run's query heads. A decode step's 9 heads over 2 threads (3
    // KV heads) become heads 0-2 and 3-4 on one thread, 5 and 6-8 on the other, instead of nine
    // one-head calls that read each KV head's rows three times. A query's result does not depend
    // on which queries share its call, so the split changes no bits.
    pool.run([&](int index, int n_threads) {
      int64_t begin, end;
      ThreadPool::split(T * cfg.n_heads, 1, index, n_threads, begin, end);
      auto& my_spans = spans[static_cast<size_t>(index)];
      float* my_scores = scores[static_cast<size_t>(index)].data();
      for (int64_t first = begin; first < end;) {
        const int64_t t = first / cfg.n_heads, first_head = first % cfg.n_heads;
        const int64_t h = first_head / group;  // KV head
        const int64_t per_task = std::min((h + 1) * group - first_head, end - first);
        first += per_task;
        my_spans.clear();
        const auto push_block = [&](int64_t b) {
          my_spans.push_back({kv.keys(layer, h, b), kv.values(layer, h, b), std::min(B, committed - b * B), nullptr});
        };
        if (sparse && sparse->active()) {
          for (int32_t b : sparse->blocks(h, t)) push_block(b);
        } else {
          for (int64_t b = 0; b * B < committed; ++b) push_block(b);
        }
        // New rows [first_new, first_new + visible): all of 0..t when causal, else masked.
        const int64_t visible = mask ? T : t + 1;
        for (int64_t r = first_new; r < first_new + visible;) {
          const int64_t b = r / B, in_block = r % B;
          const int64_t n = std::min(B - in_block, first_new + visible - r);
          my_spans.push_back({kv.keys(layer, h, b) + in_block * hd, kv.values(layer, h, b) + in_block * hd, n,
                              mask ? mask->row(t) + (r - first_new) : nullptr});
          r += n;
        }
        attention_group(qkv.data() + t * qkv_ld + first_head * hd, per_task, hd, my_spans, scale, my_scores,
                        att.data() + t * q_dim() + first_head * hd);
      }
    });
  }

  // Sparse FFN: act = silu(gate)·up with the channels whose |silu(gate)| < tau zeroed (per row,
  // or kept for all rows when any row keeps them), which is what skipping those channels' up
  // and down projections computes. Returns the channels kept, summed over rows.
  int64_t sparse_ffn_activation(int64_t T, const SparseConfig& sc, float* act) {
    const int64_t F = cfg.ffn_dim;
    const auto tau = static_cast<float>(sc.ffn_threshold);
    std::vector<uint8_t> keep(static_cast<size_t>(T * F));
    for (int64_t t = 0; t < T; ++t) {
      const float* g = gu.data() + t * 2 * F;
      swiglu(g, g + F, act + t * F, F);
      for (int64_t c = 0; c < F; ++c) {
        const float silu = g[c] / (1.0f + std::exp(-g[c]));
        keep[static_cast<size_t>(t * F + c)] = std::fabs(silu) >= tau;
      }
    }
    if (sc.ffn_union) {
      for (int64_t c = 0; c < F; ++c) {
        uint8_t any = 0;
        for (int64_t t = 0; t < T; ++t) any |= keep[static_cast<size_t>(t * F + c)];
        for (int64_t t = 0; t < T; ++t) keep[static_cast<size_t>(t * F + c)] = any;
      }
    }
    int64_t kept = 0;
    for (int64_t i = 0; i < T * F; ++i) {
      if (keep[static_cast<size_t>(i)]) {
        ++kept;
      } else {
        act[i] = 0.0f;
      }
    }
    return kept;
  }

  // x += MoE(RMSNorm(x)) for layer l; routing statistics to trace->moe_stats and the observer.
  void moe_ffn(int64_t l, int64_t T, const PackedLayer& L, const SparseConfig* sc, const ForwardContext* trace) {
    const int64_t dim = cfg.dim;
    parallel_for(T, 1, kInlineRowsBelow, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        rmsnorm(x.data() + t * dim, L.ffn_norm.data(), xn.data() + t * dim, dim, cfg.rms_eps);
    });
    MoeSkip skip;
    if (sc && sc->moe && static_cast<size_t>(l) < sc->moe_thresholds.size()) {
      skip = {sc->moe_skip_budget, sc->moe_thresholds[static_cast<size_t>(l)]};
    }
    Observer* observer = trace ? trace->observer : nullptr;
    MoeLayerStats local;
    MoeLayerStats* stats = trace && trace->moe_stats ? &trace->moe_stats->layers.emplace_back() : &local;
    stats->layer = static_cast<int32_t>(l);
    const MoeProjector projector = [&](const PackedMatrix& w, const float* in, int64_t ld_in, int64_t rows, float* out,
                                       int64_t ld_out) {
      project(w, in, ld_in, rows, Input::Plain, nullptr, out, ld_out, false);
    };
    L.moe->forward(xn.data(), T, x.data(), projector, skip.budget > 0 ? &skip : nullptr, moe_scratch, stats);
    if (trace && trace->stats) {
      trace->stats->moe_routed += stats->routed();
      trace->stats->moe_skipped += stats->skipped();
    }
    if (observes(observer, EventKind::kMoeStats)) {
      observer->on_event(MoeStatsEvent{trace->round, static_cast<int32_t>(l), stats->n_experts, stats->experts_run(),
                                       stats->experts_skipped()});
    }
  }

  Status forward(std::span<const int32_t> tokens, std::span<const int32_t> positions, const AttentionMask* mask,
                 KvCache& kv, std::span<float> logits, LogitRows rows, const ForwardContext* trace) {
    const auto T = static_cast<int64_t>(tokens.size());
    feature_rows = 0;
    if (auto ok = check_forward_inputs(tokens, positions, mask, cfg.vocab_size); !ok) return ok;
    const auto& kc = kv.config();
    if (kc.n_layers != cfg.n_layers || kc.n_kv_heads != cfg.n_kv_heads || kc.head_dim != cfg.head_dim) {
      return make_error("forward: KV cache shape (layers " + std::to_string(kc.n_layers) + ", KV heads " +
                        std::to_string(kc.n_kv_heads) + ", head dim " + std::to_string(kc.head_dim) +
                        ") does not match the model");
    }
    const int64_t V = cfg.vocab_size;
    const int64_t want = rows == LogitRows::All ? T * V : V;
    if (static_cast<int64_t>(logits.size()) != want) {
      return make_error("forward: logits buffer has " + std::to_string(logits.size()) + " floats, need " +
                        std::to_string(want));
    }
    auto first = kv.append_provisional(T);
    if (!first) return first.error();
    const int64_t first_new = *first;

    const int64_t dim = cfg.dim, hd = cfg.head_dim, qd = q_dim(), kvd = kv_dim();
    const int64_t qkv_ld = qd + 2 * kvd;
    ensure_scratch(T, kv.committed() + T);

    const TensorRef& embd = model->weights.token_embd;
    const int64_t embd_row = row_bytes(embd);
    for (int64_t t = 0; t < T; ++t) {
      (void)dequantize_row(embd.type, embd.data.data() + tokens[t] * embd_row, x.data() + t * dim, dim);
      if (precision == Precision::Bf16Storage) round_to_bf16(std::span<float>(x.data() + t * dim, dim));
      rope_table(positions[t], hd, cfg.rope_theta, rope.data() + t * hd);
    }
    const RopePairing pairing =
        cfg.rope_style == RopeStyle::AdjacentPairs ? RopePairing::Adjacent : RopePairing::HalfSplit;
    const SparseConfig* sc = trace && trace->sparse && !trace->sparse->strict() ? trace->sparse : nullptr;
    std::optional<SparseSelection> selection;
    if (trace && trace->sparse) {  // strict too: it then only counts the dense bytes
      selection.emplace(*trace->sparse, kv, static_cast<int>(cfg.n_heads), T, trace->query_order, trace->observer,
                        trace->round, trace->stats);
    }
    Observer* observer = trace ? trace->observer : nullptr;

    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      const PackedLayer& L = layers[static_cast<size_t>(l)];
      PhaseSpan layer_span(trace ? trace->observer : nullptr, "layer", trace ? trace->round : -1,
                           static_cast<int32_t>(l));
      project(L.qkv, x.data(), dim, T, Input::RmsNorm, L.attn_norm.data(), qkv.data(), qkv_ld, false);
      parallel_for(T, 1, kInlineRowsBelow, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          float* row = qkv.data() + t * qkv_ld;
          if (L.extras.active()) L.extras.apply(row);
          rope_apply(row, cfg.n_heads, hd, rope.data() + t * hd, pairing);
          rope_apply(row + qd, cfg.n_kv_heads, hd, rope.data() + t * hd, pairing);
        }
      });
      for (int64_t t = 0; t < T; ++t) {
        float* row = qkv.data() + t * qkv_ld;
        if (precision == Precision::Bf16Storage) round_to_bf16(std::span<float>(row + qd, 2 * kvd));
        kv.write(l, first_new + t, row + qd, row + qd + kvd);
      }
      if (selection) {
        if (selection->active()) {
          selection->select(static_cast<int>(l), qkv.data(), qkv_ld);
        } else {
          selection->count_dense_layer();
        }
      }
      attention(l, T, kv, first_new, mask, selection ? &*selection : nullptr);
      project(L.wo, att.data(), qd, T, Input::Plain, nullptr, x.data(), dim, true);
      for (int64_t t = 0; t < T && !L.extras.output_bias.empty(); ++t) L.extras.add_output_bias(x.data() + t * dim);
      if (L.moe) {  // MoE FFN hook (engine/model/moe.h)
        moe_ffn(l, T, L, sc, trace);
        continue;
      }
      project(L.gate_up, x.data(), dim, T, Input::RmsNorm, L.ffn_norm.data(), gu.data(), 2 * cfg.ffn_dim, false);
      if (sc && sc->ffn) {
        const int64_t kept = sparse_ffn_activation(T, *sc, ffn_act.data());
        project(L.down, ffn_act.data(), cfg.ffn_dim, T, Input::Plain, nullptr, x.data(), dim, true);
        if (trace->stats) {
          trace->stats->ffn_active += kept;
          trace->stats->ffn_total += T * cfg.ffn_dim;
        }
        if (observes(observer, EventKind::kFfnStats)) {
          observer->on_event(FfnStatsEvent{trace->round, static_cast<int32_t>(l), static_cast<int32_t>(kept / T),
                                           static_cast<int32_t>(cfg.ffn_dim), false});
        }
      } else {
        project(L.down, gu.data(), 2 * cfg.ffn_dim, T, Input::SwiGlu, nullptr, x.data(), dim, true);
      }
    }

    const int64_t out_first = rows == LogitRows::All ? 0 : T - 1;
    // RMSNorm leaves the normed rows in xn, (T - out_first, dim): last_features() reads them.
    project(output, x.data() + out_first * dim, dim, T - out_first, Input::RmsNorm, output_norm.data(), logits.data(),
            V, false);
    feature_rows = T - out_first;
    return {};
  }
};

CpuTransformer::CpuTransformer(const Model& model, const CpuTransformerOptions& options)
    : impl_(std::make_unique<Impl>(model, options)) {}
CpuTransformer::~CpuTransformer() = default;
CpuTransformer::CpuTransformer(CpuTransformer&&) noexcept = default;
CpuTransformer& CpuTransformer::operator=(CpuTransformer&&) noexcept = default;

const ModelConfig& CpuTransformer::config() const { return impl_->cfg; }
int CpuTransformer::threads() const { return impl_->pool.size(); }
ThreadPool& CpuTransformer::thread_pool() { return impl_->pool; }
Precision CpuTransformer::precision() const { return impl_->precision; }

size_t CpuTransformer::packed_weight_bytes() const {
  size_t total = impl_->output.bytes();
  for (const auto& l : impl_->layers) {
    total += l.qkv.bytes() + l.wo.bytes() + l.gate_up.bytes() + l.down.bytes() + (l.moe ? l.moe->bytes() : 0);
  }
  return total;
}

Status check_forward_inputs(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                            const AttentionMask* mask, int64_t vocab_size) {
  const auto T = static_cast<int64_t>(tokens.size());
  if (T == 0) return make_error("forward: no tokens");
  if (static_cast<int64_t>(positions.size()) != T) {
    return make_error("forward: " + std::to_string(T) + " tokens but " + std::to_string(positions.size()) +
                      " positions");
  }
  if (mask && mask->size() != T) {
    return make_error("forward: attention mask is " + std::to_string(mask->size()) + "x" +
                      std::to_string(mask->size()) + " for " + std::to_string(T) + " tokens");
  }
  for (int64_t t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= vocab_size) {
      return make_error("forward: token id " + std::to_string(tokens[t]) + " outside the vocabulary (0.." +
                        std::to_string(vocab_size - 1) + ")");
    }
    if (positions[t] < 0) return make_error("forward: negative position " + std::to_string(positions[t]));
  }
  return {};
}

Expected<KvCache> CpuTransformer::make_kv_cache(int block_size, int64_t max_tokens) const {
  return KvCache::for_model(impl_->cfg, block_size, max_tokens);
}

Status CpuTransformer::forward(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                               const AttentionMask* mask, KvCache& kv, std::span<float> logits, LogitRows rows,
                               const ForwardContext* trace) {
  PrefillCache* cache = prefill_cache_;
  const bool cacheable = cache && kv.size() == 0 && !mask && rows == LogitRows::Last &&
                         (!trace || (!trace->observer && !trace->stats && !trace->moe_stats &&
                                     (!trace->sparse || trace->sparse->strict())));
  if (cacheable && cache->restore(tokens, positions, kv, logits)) {
    impl_->feature_rows = 0;  // the cache keeps logits, not features
    return {};
  }
  Status status = impl_->forward(tokens, positions, mask, kv, logits, rows, trace);
  if (status && cacheable) cache->store(tokens, positions, kv, logits);
  return status;
}

Status CpuTransformer::last_features(int64_t row, std::span<float> out) const {
  const int64_t dim = impl_->cfg.dim;
  if (impl_->feature_rows == 0) {
    return make_error("last_features: no features (no forward yet, it failed, or it came from the prefill cache)");
  }
  if (row < 0 || row >= impl_->feature_rows) {
    return make_error("last_features: row " + std::to_string(row) + " outside the last forward's " +
                      std::to_string(impl_->feature_rows) + " logits rows");
  }
  if (static_cast<int64_t>(out.size()) != dim) {
    return make_error("last_features: room for " + std::to_string(out.size()) + " floats, a row has " +
                      std::to_string(dim));
  }
  std::copy_n(impl_->xn.data() + row * dim, dim, out.data());
  return {};
}

void CpuTransformer::set_prefill_cache(PrefillCache* cache) { prefill_cache_ = cache; }

}  // namespace specula
