#pragma once
// Element-wise and normalization kernels of the llama-family forward pass on the GPU, plus the
// paged KV cache writes (keys, values, per-block key min/max). Host-callable from plain C++:
// no CUDA headers here; bf16 tensors travel as uint16_t (the bit pattern of __nv_bfloat16).
// Every launch is asynchronous on `stream`; callers check cudaGetLastError.
#include <cstdint>

// Callable from kernels and from plain C++ (this header is included by .cpp files too).
#if defined(__CUDACC__)
#define SPECULA_HOST_DEVICE __host__ __device__
#else
#define SPECULA_HOST_DEVICE
#endif

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

using bf16_bits = uint16_t;

// One layer of a paged KV cache. Physical block p of KV head h holds, for rows r in [0, B):
// keys[((p·n_kv_heads + h)·B + r)·head_dim + d] (bf16), likewise values, and
// key_min/key_max[(p·n_kv_heads + h)·head_dim + d] (bf16, over the rows present).
// The min or max of bf16 keys is one of those keys, so bf16 holds it exactly (the writers compare
// in f32, where every bf16 is exact, and round the result back, which changes nothing): the
// metadata loses nothing against f32 and the block scoring reads half the bytes.
// block_table maps a sequence's logical block to its physical block (device memory).
struct PagedKvLayer {
  bf16_bits* keys = nullptr;
  bf16_bits* values = nullptr;
  bf16_bits* key_min = nullptr;
  bf16_bits* key_max = nullptr;
  const int32_t* block_table = nullptr;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;
};

// x[t] = table[tokens[t]] as f32. table: (vocab, dim) bf16; x: (T, dim).
void embed_rows(const bf16_bits* table, const int32_t* tokens, int64_t T, int64_t dim, float* x, cudaStream_t stream);
// out[t] = x[t] / rms(x[t]) · weight. x: (T, dim) f32 with row stride ld_x; out: (T, dim) f32.
// Activations stay f32 up to the projections (kernels/cuda/skinny_gemm.h says why).
void rmsnorm_rows(const float* x, int64_t ld_x, const float* weight, int64_t T, int64_t dim, float eps, float* out,
                  cudaStream_t stream);
// out[t, i] = silu(gu[t, i]) · gu[t, ffn + i]. gu: (T, 2·ffn) f32; out: (T, ffn) f32.
void swiglu_rows(const float* gu, int64_t T, int64_t ffn, float* out, cudaStream_t stream);
// A tree verify of more rows than the skinny kernels take runs each projection through cuBLAS on
// X split into bf16 hi + lo halves, the two halves' products stacked as 2T rows of one output
// (kernels/cuda/skinny_gemm.h: f32_to_bf16_split, add_split_halves). The launches below do the
// work between two such GEMMs in one pass over rows of dim ≤ kMaxSplitRowDim: each reads the
// product halves y2 (2T, N) (row t and row T + t sum to row t of the product) and/or writes the
// next GEMM's input halves, hi (T, width) and lo = hi + T·width, as f32_to_bf16_split would. The
// arithmetic is that of the launches they replace. Needs dim (and ffn) a multiple of 4 and
// 16-byte aligned f32 arrays: split_row_ops_fit() says whether a model's shapes qualify.
inline constexpr int64_t kMaxSplitRowDim = 8192;
inline bool split_row_ops_fit(int64_t dim, int64_t ffn) {
  return dim % 4 == 0 && ffn % 4 == 0 && dim > 0 && dim <= kMaxSplitRowDim;
}
// hi/lo (T, dim) = the halves of rmsnorm_rows(x; weight) (x rows of stride ld_x).
void rmsnorm_split_rows(const float* x, int64_t ld_x, const float* weight, int64_t T, int64_t dim, float eps,
                        bf16_bits* hi, cudaStream_t stream);
// x[t] += y2[t] + y2[T + t] (a residual GEMM's halves, N = dim), then hi/lo (T, dim) = the halves
// of rmsnorm(x[t]; weight): add_split_halves (accumulate) + rmsnorm_rows + f32_to_bf16_split.
void add_halves_rmsnorm_split_rows(const float* y2, int64_t T, int64_t dim, float* x, const float* weight, float eps,
                                   bf16_bits* hi, cudaStream_t stream);
// hi/lo (T, ffn) = the halves of silu(g)·u, g = y2[t][i] + y2[T + t][i], u the same at ffn + i
// (y2 (2T, 2·ffn), the gate_up GEMM's halves): add_split_halves + swiglu_rows + f32_to_bf16_split.
void swiglu_halves_split_rows(const float* y2, int64_t T, int64_t ffn, bf16_bits* hi, cudaStream_t stream);
// RoPE in place on the first n_heads + n_kv_heads heads of each row of qkv (Q heads then K
// heads, head_dim each, row stride ld). adjacent: pairs (2i, 2i+1), else (i, i + head_dim/2).
void rope_in_place(float* qkv, int64_t ld, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   const int32_t* positions, float theta, bool adjacent, cudaStream_t stream);
// Launches that take the step from the device: step[0] = committed rows, step[1] = first_new
// (int32, device memory), so a captured CUDA graph replays them for every decode step without
// new launch parameters.
//
// Writes rows first_new..first_new+T-1 of kv from qkv (K at column k_col, V at v_col).
void kv_append_at(const PagedKvLayer& kv, const float* qkv, int64_t ld, int64_t k_col, int64_t v_col, int64_t T,
                  const int32_t* step, cudaStream_t stream);
// Recomputes key_min/key_max of the blocks that rows [first_new, first_new + T) fall in, over the
// rows present (first_new + T).
void kv_update_min_max_at(const PagedKvLayer& kv, int64_t T, const int32_t* step, cudaStream_t stream);
// One decode token: rope_in_place + kv_append_at + kv_update_min_max_at in one launch (row 0 of
// qkv; its K heads sit right after its Q heads, its V heads at v_col). Same results:
// the min/max is updated incrementally from the block's rows before first_new.
void rope_append_decode_at(float* qkv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, const int32_t* positions,
                           float theta, bool adjacent, const PagedKvLayer& kv, int64_t v_col, const int32_t* step,
                           cudaStream_t stream);
// The rotated queries also as bf16 rows in tree order, [T][n_heads · head_dim] with row i from
// qkv row order[i] (order a permutation of [0, T)): what q_rows_to_bf16 (sparse_verify.h) writes
// from the rotated qkv, bit for bit, without a launch of its own (a planned verify's tree
// attention and block scoring read these rows). q null: not written.
struct TreeQueryRows {
  bf16_bits* q = nullptr;
  const int32_t* order = nullptr;
};
// T new tokens: rope_in_place + kv_append_at (one launch) + kv_update_min_max_at. Same results.
// update_min_max false leaves key_min/key_max untouched (one launch instead of two), for a caller
// that recomputes them before anything reads them (the CUDA backend's commit).
void rope_append_at(float* qkv, int64_t ld, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                    const int32_t* positions, float theta, bool adjacent, const PagedKvLayer& kv, int64_t v_col,
                    const int32_t* step, bool update_min_max, cudaStream_t stream, TreeQueryRows tree_q = {});
// rope_append_at (update_min_max as there) reading the QKV GEMM's halves y2 (2T, ld): qkv row t
// = y2[t] + y2[T + t] (add_split_halves), all of it written (Q rotated, K and V as summed), so
// the add is no launch of its own.
void rope_append_halves_at(const float* y2, float* qkv, int64_t ld, int64_t T, int64_t n_heads, int64_t n_kv_heads,
                           int64_t head_dim, const int32_t* positions, float theta, bool adjacent,
                           const PagedKvLayer& kv, int64_t v_col, const int32_t* step, bool update_min_max,
                           cudaStream_t stream, TreeQueryRows tree_q = {});
// Several layers of one cache in one launch: layer l's arrays sit at the first layer's plus
// l·kv (keys, values) and l·meta (key_min, key_max) elements; the block table is shared.
struct KvLayerStrides {
  int64_t kv = 0;
  int64_t meta = 0;
  int layers = 1;
  SPECULA_HOST_DEVICE void apply(PagedKvLayer& layer, unsigned l) const {
    layer.keys += l * kv;
    layer.values += l * kv;
    layer.key_min += l * meta;
    layer.key_max += l * meta;
  }
};
// Recomputes key_min/key_max of logical blocks [block_begin, block_end) over rows < rows_present.
void kv_update_min_max_layers(const PagedKvLayer& first, const KvLayerStrides& strides, int64_t block_begin,
                              int64_t block_end, int64_t rows_present, cudaStream_t stream);
// Copies n rows in every layer (scratch: layers · n · 2·n_kv·head_dim bf16); see kv_move_rows.
void kv_move_rows_layers(const PagedKvLayer& first, const KvLayerStrides& strides, const int32_t* from,
                         const int32_t* to, int64_t n, bf16_bits* scratch, cudaStream_t stream);
// Recomputes key_min/key_max of logical blocks [block_begin, block_end) over rows < rows_present.
void kv_update_min_max(const PagedKvLayer& kv, int64_t block_begin, int64_t block_end, int64_t rows_present,
                       cudaStream_t stream);
// Copies n rows: from[i] -> to[i] (row indices on the device), via scratch (n, 2·n_kv·head_dim)
// bf16, so sources may overlap destinations.
void kv_move_rows(const PagedKvLayer& kv, const int32_t* from, const int32_t* to, int64_t n, bf16_bits* scratch,
                  cudaStream_t stream);

// Splitting the rows of each (token, query head) over several blocks, for long contexts and few
// new tokens (a decode step has only n_heads blocks otherwise). Workspace: partial
// (T · n_heads · partial_floats_per_pair floats) and counters (T · n_heads int32, zero before the
// first launch; each launch leaves them at zero). splits ≤ 1: no split, no workspace.
struct AttentionSplit {
  int splits = 1;
  int64_t rows_per_split = 0;
  int64_t partial_floats_per_pair = 0;
  float* partial = nullptr;
  int32_t* counters = nullptr;
};
// The split for a KV cache of max_rows rows (the grid must not depend on the committed count,
// which a replayed graph reads on the device): up to 64 splits of at least 512 rows.
AttentionSplit attention_split_for(int64_t max_rows, int64_t head_dim);

// Attention of T new tokens, one (token, query head) per thread block (per split with one),
// online softmax in f32; 2+ rows of head_dim 64 or 128 over a split take shared_kv_attention_at
// (shared_kv_attention.h: several pairs a block, each K/V row loaded once for them, the same
// bits); unmasked launches of kPrefillMinRows rows and more with head_dim 64 or
// 128 go to prefill_attention (prefill_attention.h: tensor cores, bf16 Q and P). q: row t at q + t·ld_q, heads of
// head_dim. Token t sees KV rows [0, committed) and new rows first_new + j for j allowed by mask (T×T uint8, row-major;
// nullptr = causal j ≤ t). out: (T, n_heads·head_dim) f32. head_dim a multiple of 8, ≤ 256.
// block_visible (sparse verification; nullptr = every committed row): token t sees committed
// rows of logical block b on KV head h only where block_visible[(t·n_kv_heads + h)·nb + b] != 0,
// nb = ceil(committed / block_size); rows of other blocks are never loaded.
void attention_at(const float* q, int64_t ld_q, int64_t T, int64_t n_heads, const PagedKvLayer& kv, const int32_t* step,
                  const uint8_t* mask, float scale, float* out, cudaStream_t stream, const AttentionSplit& split = {},
                  const uint8_t* block_visible = nullptr);

// Programmatic dependent launch for the decode step's kernels (kernels/cuda/pdl.cuh says what
// it is); process-wide, on by default.
void set_programmatic_dependent_launch(bool on);

// Deterministic pseudo-random fill (hash of seed and index): uniform in [-scale, scale).
void fill_uniform_bf16(bf16_bits* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_f32(float* out, int64_t n, float value, cudaStream_t stream);

}  // namespace specula::cuda
