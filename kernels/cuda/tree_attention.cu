// Tree-verify attention (dense and block-sparse) over the paged KV: split-K (flash-decoding).
// One CTA = one (group of tree nodes, kv head, chunk of the group's block list). It streams the
// chunk's K/V blocks through shared memory once (cp.async, kStages deep) and every query row of
// the group -- gqa q heads x group nodes, up to 4 x 64 = 256 rows -- uses each load: warp w owns
// rows [16w, 16w+16) and runs QK^T and PV on the tensor cores (mma.sync m16n8k16 bf16, f32
// accumulate), with the online softmax in registers. A second kernel merges the chunks.
// Hand-written rather than CUTLASS/FlashInfer: neither is a Debian package, and the tree mask plus
// per-node block membership is not an option of theirs.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>

#include "kernels/cuda/attention.h"

namespace specula::cuda {
namespace {

constexpr int B = kAttnBlockSize;
constexpr int D = kAttnHeadDim;
constexpr int kRowPad = D + 8;  // bf16 per smem row: 272 B keeps mma/ldmatrix reads conflict-free
constexpr int kStages = 4;      // K/V blocks in flight per CTA
constexpr int kMaxWarps = 16;

struct Plan {
  int rows = 0, rows_pad = 0, warps = 0, threads = 0;
  int per_chunk = 0, chunks = 0;
  size_t smem = 0;
};

Plan make_plan(const TreeQueries& tq, int kv_heads, int groups, int group_size, int max_blocks) {
  Plan p;
  const int gqa = tq.q_heads / kv_heads;
  p.rows = group_size * gqa;
  p.rows_pad = (p.rows + 15) / 16 * 16;
  p.warps = std::max(4, p.rows_pad / 16);
  p.threads = p.warps * 32;
  // CTAs for 132 SMs: 4 per SM for small trees (<= 4 warps), 2 for larger ones -- the best of
  // 2 and 4 in each case, measured on the H100 (2026-11-22). Each CTA takes at least 8 blocks, and
  // rows_pad / 4 (its f32 partials, rows_pad x 512 B, then stay <= 1/4 of its KV bytes) where that
  // still leaves two CTAs per SM: short sparse lists keep the GPU full instead.
  const int ctas_wanted = 132 * (p.warps <= 4 ? 4 : 2);
  const int base = std::max(1, groups * kv_heads);
  const int chunks = std::max(1, (ctas_wanted + base - 1) / base);
  p.per_chunk = std::max(8, (max_blocks + chunks - 1) / chunks);
  const int bounded = std::max(p.per_chunk, p.rows_pad / 4);
  if ((max_blocks + bounded - 1) / bounded * base >= 264) p.per_chunk = bounded;
  p.chunks = std::max(1, (max_blocks + p.per_chunk - 1) / p.per_chunk);
  p.smem = size_t(kStages) * 2 * B * kRowPad * sizeof(__nv_bfloat16);
  return p;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

struct KernelArgs {
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  const int32_t* block_table;
  const __nv_bfloat16* q;
  const uint64_t* ancestors;
  const int32_t* list_blocks;  // null: dense (entry i = logical block i, every node a member)
  const uint64_t* list_members;
  const int32_t* list_counts;
  float* part_o;   // [groups][Hk][chunks][rows_pad][D]
  float2* part_ml; // [groups][Hk][chunks][rows_pad]  (running max in log2 units, sum)
  int kv_heads, q_heads, nodes, prefix_len, group_size, max_blocks, per_chunk, chunks, rows, rows_pad;
  float scale_log2;
};

__global__ void __launch_bounds__(kMaxWarps * 32) tree_attention_chunk_kernel(KernelArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kStages][B][kRowPad]
  __nv_bfloat16* vs = ks + kStages * B * kRowPad;          // [kStages][B][kRowPad]

  const int chunk = blockIdx.x, kvh = blockIdx.y, group = blockIdx.z;
  const int gqa = a.q_heads / a.kv_heads;
  const size_t list_base = (size_t(group) * a.kv_heads + kvh) * a.max_blocks;
  const int count = a.list_blocks ? a.list_counts[group * a.kv_heads + kvh] : a.max_blocks;
  const int begin = chunk * a.per_chunk;
  const int n_entries = max(0, min(count, begin + a.per_chunk) - begin);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const bool computes = warp * 16 < a.rows;
  const int node0 = group * a.group_size;
  const int total_len = a.prefix_len + a.nodes;

  // This thread's two rows (g and g+8 of the warp's tile): node, q head, ancestors.
  int row_node[2], row_head[2];
  uint64_t row_anc[2];
  bool row_valid[2];
  for (int r = 0; r < 2; ++r) {
    const int row = warp * 16 + g + 8 * r;
    const int local = row / gqa;
    row_valid[r] = row < a.rows && node0 + local < a.nodes;
    row_node[r] = row_valid[r] ? node0 + local : 0;
    row_head[r] = kvh * gqa + row % gqa;
    row_anc[r] = row_valid[r] ? a.ancestors[row_node[r]] : 0;
  }

  // Q fragments (A operand, 16 rows x 128 dims) for 8 k-steps, loaded once.
  uint32_t qf[8][4];
  for (int kk = 0; kk < 8; ++kk) {
    for (int r = 0; r < 2; ++r) {
      for (int half = 0; half < 2; ++half) {
        uint32_t val = 0;
        if (row_valid[r]) {
          const __nv_bfloat16* src =
              a.q + (size_t(row_node[r]) * a.q_heads + row_head[r]) * D + kk * 16 + half * 8 + 2 * t;
          val = *reinterpret_cast<const uint32_t*>(src);
        }
        qf[kk][r + 2 * half] = val;  // a0: row g, a1: row g+8, a2: g cols+8, a3: g+8 cols+8
      }
    }
  }

  float o[16][4];
  for (int i = 0; i < 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  auto load_stage = [&](int entry, int stage) {
    const int logical = a.list_blocks ? a.list_blocks[list_base + begin + entry] : begin + entry;
    const size_t phys = static_cast<size_t>(a.block_table[logical]);
    const __nv_bfloat16* kg = a.k + (phys * a.kv_heads + kvh) * B * D;
    const __nv_bfloat16* vg = a.v + (phys * a.kv_heads + kvh) * B * D;
    for (int c = threadIdx.x; c < 2 * B * D / 8; c += blockDim.x) {
      const int which = c / (B * D / 8), rem = c % (B * D / 8), key = rem / (D / 8), col = rem % (D / 8) * 8;
      __nv_bfloat16* dst = (which ? vs : ks) + (stage * B + key) * kRowPad + col;
      cp_async16(dst, (which ? vg : kg) + key * D + col);
    }
  };

  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_entries) load_stage(s, s);
    cp_async_commit();
  }

  for (int e = 0; e < n_entries; ++e) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (e + kStages - 1 < n_entries) load_stage(e + kStages - 1, (e + kStages - 1) % kStages);
    cp_async_commit();
    if (!computes) continue;

    const int stage = e % kStages;
    const int logical = a.list_blocks ? a.list_blocks[list_base + begin + e] : begin + e;
    const uint64_t members = a.list_blocks ? a.list_members[list_base + begin + e] : ~0ull;
    const __nv_bfloat16* kt = ks + stage * B * kRowPad;
    const __nv_bfloat16* vt = vs + stage * B * kRowPad;

    // S = Q K^T: 16 rows x 16 keys as two n-tiles of 8 keys.
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const __nv_bfloat16* kr = kt + (j * 8 + g) * kRowPad + kk * 16 + 2 * t;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(kr);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(kr + 8);
        mma16816(s[j], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b0, b1);
      }
    }

    // Mask (prefix, tree ancestors, block membership) and online softmax, rows g (r=0), g+8 (r=1).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool member = row_valid[r] && ((members >> row_node[r]) & 1ull);
      const bool whole = member && (logical + 1) * B <= a.prefix_len;  // prefix block: no per-key mask
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& x = s[j][2 * r + c];
          if (whole) {
            x *= a.scale_log2;
          } else {
            const int pos = logical * B + j * 8 + 2 * t + c;
            bool visible = member && pos < total_len;
            if (visible && pos >= a.prefix_len) visible = (row_anc[r] >> (pos - a.prefix_len)) & 1ull;
            x = visible ? x * a.scale_log2 : -INFINITY;
          }
          mx = fmaxf(mx, x);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float alpha = (m_new == -INFINITY) ? 1.f : exp2f(m[r] - m_new);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& x = s[j][2 * r + c];
          x = (m_new == -INFINITY) ? 0.f : exp2f(x - m_new);
          sum += x;
        }
      }
      l[r] = l[r] * alpha + sum;
      m[r] = m_new;
      // Once the running max settles, alpha is 1 for whole warps: skip the 32 multiplies.
      if (__any_sync(0xffffffffu, alpha != 1.f)) {
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          o[i][2 * r] *= alpha;
          o[i][2 * r + 1] *= alpha;
        }
      }
    }

    // O += P V: P (16 rows x 16 keys) re-packed from the S accumulators as the A operand.
    const uint32_t p0 = pack_bf16(s[0][0], s[0][1]), p1 = pack_bf16(s[0][2], s[0][3]);
    const uint32_t p2 = pack_bf16(s[1][0], s[1][1]), p3 = pack_bf16(s[1][2], s[1][3]);
    const int vkey = (lane & 7) + ((lane >> 3) & 1) * 8, vcol = (lane >> 4) * 8;
#pragma unroll
    for (int dp = 0; dp < 8; ++dp) {
      const unsigned addr =
          static_cast<unsigned>(__cvta_generic_to_shared(vt + vkey * kRowPad + dp * 16 + vcol));
      uint32_t b0, b1, b2, b3;
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                   : "r"(addr));
      mma16816(o[2 * dp], p0, p1, p2, p3, b0, b1);
      mma16816(o[2 * dp + 1], p0, p1, p2, p3, b2, b3);
    }
  }
  cp_async_wait<0>();
  if (!computes) return;

  const size_t part_row0 = ((size_t(group) * a.kv_heads + kvh) * a.chunks + chunk) * a.rows_pad;
  for (int r = 0; r < 2; ++r) {
    float lr = l[r];
    lr += __shfl_xor_sync(0xffffffffu, lr, 1);
    lr += __shfl_xor_sync(0xffffffffu, lr, 2);
    const int row = warp * 16 + g + 8 * r;
    float* dst = a.part_o + (part_row0 + row) * D;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      *reinterpret_cast<float2*>(dst + i * 8 + 2 * t) = make_float2(o[i][2 * r], o[i][2 * r + 1]);
    }
    if (t == 0) a.part_ml[part_row0 + row] = make_float2(m[r], lr);
  }
}

// Merges the chunks of one (node, q head): out = sum_c 2^(m_c - M) o_c / sum_c 2^(m_c - M) l_c.
__global__ void tree_attention_merge_kernel(KernelArgs a, __nv_bfloat16* out) {
  const int node = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  const int gqa = a.q_heads / a.kv_heads, kvh = head / gqa;
  const int group = node / a.group_size;
  const int row = (node - group * a.group_size) * gqa + head % gqa;
  const int count = a.list_blocks ? a.list_counts[group * a.kv_heads + kvh] : a.max_blocks;
  const int used = (count + a.per_chunk - 1) / a.per_chunk;
  const size_t base = (size_t(group) * a.kv_heads + kvh) * a.chunks;
  float mmax = -INFINITY;
  for (int c = 0; c < used; ++c) mmax = fmaxf(mmax, a.part_ml[(base + c) * a.rows_pad + row].x);
  float num = 0.f, den = 0.f;
  if (mmax != -INFINITY) {
    for (int c = 0; c < used; ++c) {
      const float2 ml = a.part_ml[(base + c) * a.rows_pad + row];
      if (ml.x == -INFINITY) continue;
      const float w = exp2f(ml.x - mmax);
      den += w * ml.y;
      num += w * a.part_o[((base + c) * a.rows_pad + row) * D + d];
    }
  }
  out[(size_t(node) * a.q_heads + head) * D + d] = __float2bfloat16(den > 0.f ? num / den : 0.f);
}

bool check_queries(const PagedKv& kv, const TreeQueries& tq, std::string* error) {
  auto fail = [&](const char* what) {
    if (error) *error = std::string("tree_attention: ") + what;
    return false;
  };
  if (tq.nodes < 1 || tq.nodes > kAttnMaxNodes) return fail("nodes must be 1..64");
  if (kv.kv_heads < 1 || tq.q_heads % kv.kv_heads != 0) return fail("q_heads must be a multiple of kv_heads");
  if (tq.prefix_len < 0) return fail("prefix_len must be >= 0");
  if (!kv.k || !kv.v || !kv.block_table || !tq.q || !tq.ancestors) return fail("null input pointer");
  return true;
}

bool launch(const PagedKv& kv, const TreeQueries& tq, const int32_t* blocks, const uint64_t* members,
            const int32_t* counts, int groups, int group_size, int max_blocks, uint16_t* out, void* workspace,
            size_t workspace_bytes, void* stream, std::string* error) {
  if (!check_queries(kv, tq, error)) return false;
  const Plan p = make_plan(tq, kv.kv_heads, groups, group_size, max_blocks);
  if (p.warps > kMaxWarps) {
    if (error) *error = "tree_attention: group has more than 256 query rows";
    return false;
  }
  const size_t need = attention_workspace_bytes(tq, kv.kv_heads, groups, group_size, max_blocks);
  if (workspace_bytes < need) {
    if (error) *error = "tree_attention: workspace too small (" + std::to_string(workspace_bytes) + " < " +
                        std::to_string(need) + " bytes)";
    return false;
  }
  KernelArgs a{};
  a.k = reinterpret_cast<const __nv_bfloat16*>(kv.k);
  a.v = reinterpret_cast<const __nv_bfloat16*>(kv.v);
  a.block_table = kv.block_table;
  a.q = reinterpret_cast<const __nv_bfloat16*>(tq.q);
  a.ancestors = tq.ancestors;
  a.list_blocks = blocks;
  a.list_members = members;
  a.list_counts = counts;
  const size_t parts = size_t(groups) * kv.kv_heads * p.chunks * p.rows_pad;
  a.part_o = static_cast<float*>(workspace);
  a.part_ml = reinterpret_cast<float2*>(a.part_o + parts * D);
  a.kv_heads = kv.kv_heads;
  a.q_heads = tq.q_heads;
  a.nodes = tq.nodes;
  a.prefix_len = tq.prefix_len;
  a.group_size = group_size;
  a.max_blocks = max_blocks;
  a.per_chunk = p.per_chunk;
  a.chunks = p.chunks;
  a.rows = p.rows;
  a.rows_pad = p.rows_pad;
  a.scale_log2 = tq.scale * 1.4426950408889634f;
  auto s = static_cast<cudaStream_t>(stream);
  tree_attention_chunk_kernel<<<dim3(p.chunks, kv.kv_heads, groups), p.threads, p.smem, s>>>(a);
  tree_attention_merge_kernel<<<dim3(tq.nodes, tq.q_heads), D, 0, s>>>(a, reinterpret_cast<__nv_bfloat16*>(out));
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    if (error) *error = std::string("tree_attention: launch failed: ") + cudaGetErrorString(err);
    return false;
  }
  return true;
}

}  // namespace

size_t attention_workspace_bytes(const TreeQueries& tq, int kv_heads, int groups, int group_size, int max_blocks) {
  const Plan p = make_plan(tq, kv_heads, groups, group_size, max_blocks);
  const size_t parts = size_t(groups) * kv_heads * p.chunks * p.rows_pad;
  return parts * D * sizeof(float) + parts * sizeof(float2);
}

bool tree_attention_dense(const PagedKv& kv, const TreeQueries& tq, uint16_t* out, void* workspace,
                          size_t workspace_bytes, void* stream, std::string* error) {
  const int max_blocks = (tq.prefix_len + tq.nodes + B - 1) / B;
  return launch(kv, tq, nullptr, nullptr, nullptr, 1, tq.nodes, max_blocks, out, workspace, workspace_bytes, stream,
                error);
}

bool tree_attention_sparse(const PagedKv& kv, const TreeQueries& tq, const BlockLists& lists, uint16_t* out,
                           void* workspace, size_t workspace_bytes, void* stream, std::string* error) {
  if (!lists.blocks || !lists.members || !lists.counts || lists.groups < 1 || lists.group_size < 1 ||
      lists.groups != (tq.nodes + lists.group_size - 1) / lists.group_size) {
    if (error) *error = "tree_attention_sparse: block lists do not match the tree (groups x group_size)";
    return false;
  }
  return launch(kv, tq, lists.blocks, lists.members, lists.counts, lists.groups, lists.group_size, lists.max_blocks,
                out, workspace, workspace_bytes, stream, error);
}

}  // namespace specula::cuda
