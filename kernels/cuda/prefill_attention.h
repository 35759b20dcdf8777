#pragma once
// Causal attention of many new rows at once (a prefill) on the tensor cores: attention_at
// (model_ops.h) hands it unmasked launches of kPrefillMinRows rows and more. attention_at's own
// kernel runs one (row, query head) a thread block on the CUDA cores and reads every visible KV
// row for each, so a T-row prefill read ~T^2 / 2 rows a head (SmolLM2 at 1000 prompt tokens: 11.7
// ms of a prefill, `cuda_e2e_final_s11_h100_2026-11-25.json`).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/model_ops.h"

namespace specula::cuda {

// Fewer rows stay on attention_at's kernel: a short prompt has too few row tiles to fill the GPU,
// and verifies keep their kernel (a tree verify is masked and never comes here; a chain of up to
// 63 drafts has at most 64 rows; the one 64-draft chain, 65 rows, does come here).
constexpr int64_t kPrefillMinRows = 65;

// Row t of T (query at q + t * ld_q, n_heads heads of kv.head_dim) sees KV rows [0, committed)
// and new rows first_new + j for j <= t (step[0] = committed, step[1] = first_new, on the
// device), as attention_at with mask == nullptr. out: (T, n_heads * head_dim) f32. Q and P enter
// the MMAs as bf16 with f32 accumulation (FlashAttention-2's shape: 64 rows of one query head a
// CTA, 64-key tiles of K and V through shared memory, online softmax in registers).
// Returns false and launches nothing unless head_dim is 64 or 128 and the block size 16.
bool prefill_attention(const float* q, int64_t ld_q, int64_t T, int64_t n_heads, const PagedKvLayer& kv,
                       const int32_t* step, float scale, float* out, cudaStream_t stream);

}  // namespace specula::cuda
