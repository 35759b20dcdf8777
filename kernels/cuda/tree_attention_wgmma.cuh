// The > 128-rows tier of tree_attention.cu on Hopper's warpgroup MMA (wgmma, sm_90a). Included by
// tree_attention.cu only, inside its anonymous namespace after its helpers (cp_async16, ex2,
// pack_bf16, pdl) and KernelArgs: not a standalone header.
//
// One CTA = WG warpgroups x 64 query rows over one chunk of the (group, kv head)'s blocks, as the
// mma.sync kernel. Per stage of 4 blocks (64 keys): S = Q K^T as 8 wgmma m64n64k16 per warpgroup
// (Q and K from shared memory), the online softmax on the S accumulators, O += P V as 4 wgmma
// m64n128k16 (P from registers, V from shared memory, N-major). The accumulator fragment of
// m64nN is the mma.sync m16n8 one per warp (warp w of the warpgroup holds rows 16w..16w+15,
// 8-column tile i in d[4i..4i+3]), and the register A fragment of m64k16 is the m16k16 one, so the
// softmax and the S -> P repacking are the mma.sync kernel's with MT = 1.
//
// Shared-memory operands follow the PTX ISA's "Shared Memory Matrix Layout" and "Matrix
// Descriptor Format" sections of the asynchronous warpgroup-level MMA chapter (128B swizzling,
// canonical layouts): every tile (Q rows, or a stage's 64 keys of K or V) is stored as
// [2 halves of 64 dims][rows][64] bf16 with 128-byte rows whose 16-byte chunk c sits at c ^ (row % 8),
// each half 1024-byte aligned. As K-major operands (Q as A, K as B of S = Q K^T) the stride between
// 8-row groups (SBO) is 1024 B and a 16-dim k step moves the start address 32 B inside the row; as
// the N-major B operand of P V (V: n = dims contiguous, k = keys), LBO = the half stride (64 dims to
// the next 64) and SBO = 1024 B (8 keys to the next 8).
#pragma once

namespace wg {

using namespace hopper;  // descriptors, wgmma, mbarriers, TMA (hopper.cuh)

constexpr int kNB = 4;                  // blocks a stage: 64 keys, one softmax step
constexpr int kKeys = kNB * B;          // keys a stage
constexpr int kStageElems = kKeys * D;  // bf16 per stage of K (or V)

// Element offset of (row, col) in a [2][rows][64] 128B-swizzled tile.
__device__ __forceinline__ int swz(int rows, int row, int col) {
  return (col >> 6) * rows * 64 + row * 64 + ((((col & 63) >> 3) ^ (row & 7)) << 3) + (col & 7);
}

// d (64 x 128, f32) += A (64 x 16, registers) * B (16 x 128, smem, N-major: imm-trans-b = 1).
__device__ __forceinline__ void mma_pv(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// Shared memory of the kernel below for a CTA of cta_rows rows (a multiple of 64): 1 KB of
// alignment slack, K and V stages, Q, the stages' block metadata.
constexpr size_t smem_bytes(int stages, int cta_rows) {
  return 1024 + size_t(stages) * 2 * kStageElems * 2 + size_t(cta_rows) * D * 2 +
         size_t(stages) * kNB * (sizeof(uint64_t) + sizeof(int32_t));
}

// One online-softmax step of a warp over NBS blocks: s holds its 16 rows x NBS * 16 keys as
// s[4j + 2r + c] = row g + 8r, key 8j + 2t + c (the mma.sync kernel's layout with MT = 1). Masks
// (block presence, sparse membership, context end, tree ancestors) unless whole, updates the
// running max and sum, turns s into P and sets alpha, the rescale of O's row halves. Returns
// whether any lane's max moved (one vote: otherwise O needs no rescale).
template <int NBS>
__device__ __forceinline__ bool softmax_step(float (&s)[NBS * 8], const KernelArgs& a, const int* logical,
                                             const uint64_t* members, bool whole, const int (&row_node)[2], int t,
                                             float (&m_run)[2], float (&l_run)[2], float (&alpha)[2]) {
  const int total_len = a.prefix_len + a.nodes;
  float mx[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = -INFINITY;
    if (whole) {
      mx[r] = row_max(s, r);
    } else {
      const int node = row_node[r];
#pragma unroll
      for (int b = 0; b < NBS; ++b) {
        const bool member = node >= 0 && logical[b] >= 0 && ((a.list_blocks ? (members[b] >> node) & 1ull : 1ull) != 0);
        const bool tree = member && (logical[b] + 1) * B > a.prefix_len;
        const uint64_t anc = tree ? a.ancestors[node] : 0ull;
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& x = s[4 * (2 * b + jj) + 2 * r + c];
            const int pos = logical[b] * B + jj * 8 + 2 * t + c;
            bool visible = member && pos < total_len;
            if (visible && pos >= a.prefix_len) visible = (anc >> (pos - a.prefix_len)) & 1ull;
            if (!visible) x = -INFINITY;
            mx[r] = fmaxf(mx[r], x);
          }
        }
      }
    }
  }
  const bool moved = online_softmax_update(s, mx, a.scale_log2, m_run, l_run, alpha);
  return __any_sync(0xffffffffu, moved);
}

__device__ __forceinline__ void rescale(float (&o)[64], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    o[4 * i + 0] *= alpha[0];
    o[4 * i + 1] *= alpha[0];
    o[4 * i + 2] *= alpha[1];
    o[4 * i + 3] *= alpha[1];
  }
}

// Block b of a step's P (rows g/g+8, keys 2t.. and 2t+8.. of the block) as the k16 A fragment.
template <int NBS>
__device__ __forceinline__ void pack_p(uint32_t (&pf)[4], const float (&s)[NBS * 8], int b) {
  pf[0] = pack_bf16(s[8 * b + 0], s[8 * b + 1]);
  pf[1] = pack_bf16(s[8 * b + 2], s[8 * b + 3]);
  pf[2] = pack_bf16(s[8 * b + 4], s[8 * b + 5]);
  pf[3] = pack_bf16(s[8 * b + 6], s[8 * b + 7]);
}

// One stage of a consumer warpgroup: S = Q K^T over the slot's 64 keys, the online softmax, O +=
// P V, both MMAs waited for (the slot may be reused once this returns). k_st, v_st: the slot's
// descriptors; meta_logical / members: the slot's block metadata.
__device__ __forceinline__ void stage_compute(const KernelArgs& a, uint64_t q_desc, uint32_t q_half, uint64_t k_st,
                                              uint64_t v_st, const int32_t* meta_logical, const uint64_t* members,
                                              const int (&row_node)[2], uint64_t need, int t, float (&m_run)[2],
                                              float (&l_run)[2], float (&o)[64]) {
  constexpr uint32_t kv_half = kKeys * 64 * 2 >> 4, v_block = B * 64 * 2 >> 4;  // 64 dims; 16 keys of V
  int logical[kNB];
  const bool whole = read_stage(a, meta_logical, members, need, logical);
  float alpha[2];
  // S = Q K^T (unscaled), 64 rows x 64 keys a warpgroup: 8 k steps of 16 dims.
  float s[32];
  fence();
  mma_ss_first(s, q_desc, k_st);
#pragma unroll
  for (int kk = 1; kk < 8; ++kk) {
    const uint32_t off = (kk & 3) * 2;  // 32 B (>> 4) a k step inside the 128-byte row
    mma_ss(s, q_desc + (kk >> 2) * q_half + off, k_st + (kk >> 2) * kv_half + off);
  }
  commit();
  wait<0>();
  pin(s);
  if (softmax_step<kNB>(s, a, logical, members, whole, row_node, t, m_run, l_run, alpha)) rescale(o, alpha);
  // O += P V, one k16 step a block.
  uint32_t pf[kNB][4];
#pragma unroll
  for (int b = 0; b < kNB; ++b) pack_p<kNB>(pf[b], s, b);
  pin(o);
  fence();
#pragma unroll
  for (int b = 0; b < kNB; ++b) mma_pv(o, pf[b], v_st + b * v_block);
  commit();
  wait<0>();
  pin(o);
}

// A warp's 16 rows of the chunk's partial O and (max, sum) into the workspace.
__device__ __forceinline__ void store_partials(const KernelArgs& a, int chunk, int kvh, int group, int row0, int g,
                                               int t, const float (&o)[64], const float (&m_run)[2],
                                               const float (&l_run)[2]) {
  const size_t part_row0 = ((size_t(group) * a.kv_heads + kvh) * a.chunks + chunk) * a.rows_pad;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float lr = l_run[r];
    lr += __shfl_xor_sync(0xffffffffu, lr, 1);
    lr += __shfl_xor_sync(0xffffffffu, lr, 2);
    const int row = row0 + g + 8 * r;
    if (row >= a.rows_pad) continue;
    float* dst = a.part_o + (part_row0 + row) * D;
#pragma unroll
    for (int i = 0; i < 16; ++i)
      *reinterpret_cast<float2*>(dst + i * 8 + 2 * t) = make_float2(o[4 * i + 2 * r], o[4 * i + 2 * r + 1]);
    if (t == 0) a.part_ml[part_row0 + row] = make_float2(m_run[r] * a.scale_log2, lr);
  }
}

// The CTA's Q rows (zeros for padding), swizzled, by threads [0, threads) of the CTA; the caller's
// barrier publishes them (after fence_proxy_async: wgmma reads them).
__device__ __forceinline__ void load_q(const KernelArgs& a, __nv_bfloat16* qs, int cta_row0, int kvh, int node0,
                                       int gqa, int threads) {
  for (int i = threadIdx.x; i < a.cta_rows * (D / 8); i += threads) {
    const int row = cta_row0 + i / (D / 8), col = i % (D / 8) * 8, local = row / gqa;
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (row < a.rows && node0 + local < a.nodes)
      x = *reinterpret_cast<const uint4*>(a.q + (size_t(node0 + local) * a.q_heads + kvh * gqa + row % gqa) * D + col);
    *reinterpret_cast<uint4*>(qs + swz(a.cta_rows, row - cta_row0, col)) = x;
  }
}

}  // namespace wg

// WG: warpgroups a CTA (64 rows each); STAGES: 4-block stages in the ring (STAGES - 1 in flight);
// MINB: CTAs an SM for the register cap (__launch_bounds__).
template <int WG, int STAGES, int MINB>
__global__ void __launch_bounds__(WG * 128, MINB) tree_attention_wgmma_kernel(KernelArgs a) {
  using namespace wg;
  constexpr int NB = kNB;
  constexpr int LEAD = STAGES - 1;  // stages loaded ahead of the one computed
  static_assert(LEAD >= 1, "at least one stage in flight");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The swizzle pattern repeats every 1024 B and the descriptors carry no base offset: align.
  unsigned char* base = smem_raw + ((1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023);
  auto* ks = reinterpret_cast<__nv_bfloat16*>(base);                            // [STAGES][2][kKeys][64]
  __nv_bfloat16* vs = ks + STAGES * kStageElems;                                // [STAGES][2][kKeys][64]
  __nv_bfloat16* qs = vs + STAGES * kStageElems;                                // [2][cta_rows][64]
  auto* meta_members = reinterpret_cast<uint64_t*>(qs + a.cta_rows * D);        // [STAGES][NB]
  auto* meta_logical = reinterpret_cast<int32_t*>(meta_members + STAGES * NB);  // [STAGES][NB], -1: none

  pdl_wait();  // as the mma.sync kernel: inputs from earlier kernels, workspace the last merge read

  const int chunk = blockIdx.x, kvh = blockIdx.y, group = blockIdx.z / a.row_splits;
  const int cta_row0 = blockIdx.z % a.row_splits * a.cta_rows;
  const int gqa = a.q_heads / a.kv_heads;
  const ChunkRange range = chunk_range(a, chunk, kvh, group);
  const int n_stages = (range.n_entries + NB - 1) / NB;

  // Loading as the mma.sync kernel: NB teams, team b copies block b of each stage into keys
  // 16b..16b+15 of the stage's swizzled tiles; block ids fetched one stage early.
  const int team = blockDim.x / NB, my_blk = threadIdx.x / team, my_t = threadIdx.x % team;
  int next_logical = -1, next_phys = -1;
  uint64_t next_members = ~0ull;
  auto fetch = [&](int st) {
    fetch_entry(a, range, st * NB + my_blk, my_t == 0, next_logical, next_phys, next_members);
  };
  auto issue = [&](int slot) {
    __nv_bfloat16* kd = ks + slot * kStageElems;
    __nv_bfloat16* vd = vs + slot * kStageElems;
    const size_t head_off = (size_t(next_phys) * a.kv_heads + kvh) * B * D;
    static_assert(kPieces == 4 * 128, "the fast path below is 4 pieces a thread at a team of 128");
    if (WG == 4 && team == 128) {
      // All 4 warpgroups launched: 4 pieces a thread at fixed offsets -- keys my_t / 16 and + 8
      // (same row & 7, so the same swizzled chunk, 8 rows on) of K, then of V.
      const int key = my_t >> 4, col = (my_t & 15) * 8;
      const int d0 = swz(kKeys, my_blk * B + key, col), s0 = key * D + col;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        __nv_bfloat16* dst = (i < 2 ? kd : vd) + d0 + (i & 1) * 8 * 64;
        if (next_logical >= 0)
          cp_async16(dst, (i < 2 ? a.k : a.v) + head_off + s0 + (i & 1) * 8 * D);
        else  // absent block (partial last stage), as below
          *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    } else {
      for (int p = my_t; p < kPieces; p += team) {
        const int which = p / (kPieces / 2), key = (p % (kPieces / 2)) / (D / 8), col = p % (D / 8) * 8;
        __nv_bfloat16* dst = (which ? vd : kd) + swz(kKeys, my_blk * B + key, col);
        if (next_logical >= 0) {
          cp_async16(dst, (which ? a.v : a.k) + head_off + key * D + col);
        } else {
          // Absent block (partial last stage): zeros, masked to -inf scores and P = 0 below.
          *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
        }
      }
    }
    if (my_t == 0) {
      meta_logical[slot * NB + my_blk] = next_logical;
      meta_members[slot * NB + my_blk] = next_members;
    }
  };

  fetch(0);
  for (int s = 0; s < LEAD; ++s) {
    if (s < n_stages) issue(s);
    cp_async_commit();
    fetch(s + 1);
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wgi = warp / 4;
  const int g = lane / 4, t = lane % 4;
  // Every warpgroup computes, also one wholly past a.rows (a row-split CTA's last, Q all zeros):
  // a branch around the wgmma would be divergent to ptxas, which then serializes them (C7518).
  const int row0 = cta_row0 + warp * 16;  // this warp's 16 rows
  const int node0 = group * a.group_size;

  // The CTA's Q rows (zeros for padding), swizzled; published by the main loop's first barrier.
  for (int i = threadIdx.x; i < a.cta_rows * (D / 8); i += blockDim.x) {
    const int row = cta_row0 + i / (D / 8), col = i % (D / 8) * 8, local = row / gqa;
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (row < a.rows && node0 + local < a.nodes)
      x = *reinterpret_cast<const uint4*>(a.q + (size_t(node0 + local) * a.q_heads + kvh * gqa + row % gqa) * D + col);
    *reinterpret_cast<uint4*>(qs + swz(a.cta_rows, row - cta_row0, col)) = x;
  }

  int row_node[2];  // rows g and g+8 of the warp's 16; -1 for padding
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + g + 8 * r, local = row / gqa;
    row_node[r] = row < a.rows && node0 + local < a.nodes ? node0 + local : -1;
  }
  const uint64_t need = warp_nodes(row_node);

  float o[64];  // O: 16 dim tiles of 8, o[4i..4i+3] as the m16n8 accumulator
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // max of unscaled scores, sum

  // Descriptors at offset 0 of the warpgroup's Q, stage 0's K and V; steps add (bytes >> 4).
  const uint64_t q_desc = desc(qs + wgi * 64 * 64, 16, 1024);
  const uint64_t k_desc = desc(ks, 16, 1024);
  const uint64_t v_desc = desc(vs, kKeys * 64 * 2, 1024);
  const uint32_t q_half = a.cta_rows * 64 * 2 >> 4, kv_half = kKeys * 64 * 2 >> 4, stage = kStageElems * 2 >> 4;

  for (int st = 0; st < n_stages; ++st) {
    cp_async_wait<LEAD - 1>();
    fence_proxy_async();
    __syncthreads();
    if (st + LEAD < n_stages) issue((st + LEAD) % STAGES);
    cp_async_commit();
    fetch(st + LEAD + 1);

    // The stage's body is stage_compute()'s, written out: calling it here compiled wg4s4 4-5%
    // slower at 128K / 64 nodes (kernels/cuda/attention_notes.md, 11-25), so the text stays.
    const int slot = st % STAGES;
    int logical[NB];
    const uint64_t* members = meta_members + slot * NB;
    const bool whole = read_stage(a, meta_logical + slot * NB, members, need, logical);

    const uint64_t k_st = k_desc + slot * stage, v_st = v_desc + slot * stage;
    constexpr uint32_t v_block = B * 64 * 2 >> 4;  // 16 keys of V
    float alpha[2];
    // S = Q K^T (unscaled), 64 rows x 64 keys a warpgroup: 8 k steps of 16 dims.
    float s[32];
    fence();
    mma_ss_first(s, q_desc, k_st);
#pragma unroll
    for (int kk = 1; kk < 8; ++kk) {
      const uint32_t off = (kk & 3) * 2;  // 32 B (>> 4) a k step inside the 128-byte row
      mma_ss(s, q_desc + (kk >> 2) * q_half + off, k_st + (kk >> 2) * kv_half + off);
    }
    commit();
    wait<0>();
    pin(s);
    if (softmax_step<NB>(s, a, logical, members, whole, row_node, t, m_run, l_run, alpha)) rescale(o, alpha);
    // O += P V, one k16 step a block.
    uint32_t pf[NB][4];
#pragma unroll
    for (int b = 0; b < NB; ++b) pack_p<NB>(pf[b], s, b);
    pin(o);
    fence();
#pragma unroll
    for (int b = 0; b < NB; ++b) mma_pv(o, pf[b], v_st + b * v_block);
    commit();
    wait<0>();
    pin(o);
  }
  cp_async_wait<0>();
  pdl_trigger();

  const size_t part_row0 = ((size_t(group) * a.kv_heads + kvh) * a.chunks + chunk) * a.rows_pad;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float lr = l_run[r];
    lr += __shfl_xor_sync(0xffffffffu, lr, 1);
    lr += __shfl_xor_sync(0xffffffffu, lr, 2);
    const int row = row0 + g + 8 * r;
    if (row >= a.rows_pad) continue;
    float* dst = a.part_o + (part_row0 + row) * D;
#pragma unroll
    for (int i = 0; i < 16; ++i)
      *reinterpret_cast<float2*>(dst + i * 8 + 2 * t) = make_float2(o[4 * i + 2 * r], o[4 * i + 2 * r + 1]);
    if (t == 0) a.part_ml[part_row0 + row] = make_float2(m_run[r] * a.scale_log2, lr);
  }
}

// ---- Producer/consumer variant (wg4pS): the same consumer math, loads by one producer ----
//
// The kernel above has every thread issue its share of each stage's cp.async copies (~50
// instructions a stage a thread with the address math) and all warpgroups meet at one
// __syncthreads a stage, so the CTA runs at its slowest warp's pace and the tensor pipe idles while
// all 16 warps run the softmax together (ncu: tensor 38%, issue 45%). Here lanes 0..3 of warp 0
// produce: lane b loads block b of a stage with 4 bulk tensor copies (TMA: K and V, two 64-dim
// halves each, 16 keys x 128 B, written 128B-swizzled by the copy engine itself, so the tile layout
// is the one above) that complete on the slot's `full` mbarrier. Every warp waits on `full`,
// computes, and arrives on the slot's `empty` mbarrier; after its own stage st warp 0 waits until
// every warp has left stage st - 1 and refills that slot. So there is no CTA barrier in the loop:
// warpgroups drift apart within the ring, and one warpgroup's softmax overlaps another's wgmma. (A 17th, producer-only
// warp does not fit: 16 consumer warps at 128 registers fill the register file, and at 120 ptxas spills O around the
// MMAs.) Absent blocks (a partial last stage) load from row -B: wholly outside the tensor map, so the copy engine
// writes zeros (and still counts the bytes), as the zero fill above.
namespace wg {

// One producer lane's block of a stage (used by wg4pS and tree_attention_ws.cuh): its metadata into
// the slot's, its bytes announced on the slot's `full` barrier, and its K and V as 4 TMA boxes (two
// 64-dim halves, 16 keys each) at key offset `lane` x 16 of the slot's [2][keys][64] tiles. An
// absent block (logical < 0) loads from row -B, wholly outside the map: zeros, bytes still counted.
__device__ __forceinline__ void produce_block(const KernelArgs& a, int kvh, int lane, int keys, int logical, int phys,
                                              uint64_t members, __nv_bfloat16* k_slot, __nv_bfloat16* v_slot,
                                              int32_t* slot_logical, uint64_t* slot_members, uint64_t* full,
                                              const CUtensorMap* k_map, const CUtensorMap* v_map, int pair_rank = -1) {
  constexpr uint32_t kBlockBytes = 2 * B * D * 2;  // K and V of one block, one kv head
  slot_logical[lane] = logical;
  slot_members[lane] = members;
  mbar_arrive_expect_tx(full, kBlockBytes);
  // pair_rank >= 0 (KernelArgs::kv_pair): the block's bytes come from the CTA of rank lane % 2,
  // multicast to both.
  if (pair_rank >= 0 && (lane & 1) != pair_rank) return;
  const int row = logical >= 0 ? (phys * a.kv_heads + kvh) * B : -B;
  __nv_bfloat16* kd = k_slot + lane * B * 64;
  __nv_bfloat16* vd = v_slot + lane * B * 64;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (pair_rank >= 0) {
      tma_load_multicast(kd + h * keys * 64, k_map, h * 64, row, full, 0x3);
      tma_load_multicast(vd + h * keys * 64, v_map, h * 64, row, full, 0x3);
    } else {
      tma_load(kd + h * keys * 64, k_map, h * 64, row, full);
      tma_load(vd + h * keys * 64, v_map, h * 64, row, full);
    }
  }
}

// Shared memory of the producer/consumer kernel: the ring, Q and metadata as above, then a full
// and an empty mbarrier a slot.
constexpr size_t smem_bytes_tma(int stages, int cta_rows) {
  return (smem_bytes(stages, cta_rows) + 7) / 8 * 8 + size_t(stages) * 2 * sizeof(uint64_t);
}

}  // namespace wg

// k_map, v_map: K and V as 2D tensor maps (128 dims x every (physical block, kv head, key) row,
// 256 B a row; box 64 dims x 16 keys, 128B swizzle). WG warpgroups (64 rows each); STAGES slots in
// the ring. After its stage st, warp 0 refills the slot of stage st - 1 (waiting until every warp
// has left it) with stage st - 1 + STAGES: loads run STAGES - 1 stages ahead of warp 0.
template <int WG, int STAGES>
__global__ void __launch_bounds__(WG * 128, 1)
    tree_attention_wgmma_tma_kernel(KernelArgs a, const __grid_constant__ CUtensorMap k_map,
                                    const __grid_constant__ CUtensorMap v_map) {
  using namespace wg;
  constexpr int NB = kNB;
  static_assert(STAGES >= 2, "a slot computed while the next loads");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* base = smem_raw + ((1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023);
  auto* ks = reinterpret_cast<__nv_bfloat16*>(base);                            // [STAGES][2][kKeys][64]
  __nv_bfloat16* vs = ks + STAGES * kStageElems;                                // [STAGES][2][kKeys][64]
  __nv_bfloat16* qs = vs + STAGES * kStageElems;                                // [2][cta_rows][64]
  auto* meta_members = reinterpret_cast<uint64_t*>(qs + a.cta_rows * D);        // [STAGES][NB]
  auto* meta_logical = reinterpret_cast<int32_t*>(meta_members + STAGES * NB);  // [STAGES][NB], -1: none
  auto* full = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(meta_logical + STAGES * NB) + 7) / 8 *
                                           8);  // [STAGES]: the slot is loaded
  uint64_t* empty = full + STAGES;              // [STAGES]: every warp is done with the slot

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], NB);                // one arrival (with its bytes) a producer lane
      mbar_init(&empty[s], blockDim.x / 32);  // one arrival a warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }

  pdl_wait();  // as the mma.sync kernel: inputs from earlier kernels, workspace the last merge read

  const int chunk = blockIdx.x, kvh = blockIdx.y, group = blockIdx.z / a.row_splits;
  const int cta_row0 = blockIdx.z % a.row_splits * a.cta_rows;
  const int gqa = a.q_heads / a.kv_heads;
  const int node0 = group * a.group_size;
  const ChunkRange range = chunk_range(a, chunk, kvh, group);
  const int n_stages = (range.n_entries + NB - 1) / NB;

  // Producer state (lanes 0..NB-1 of warp 0): the next stage's block, fetched a stage early.
  const bool producer = warp == 0 && lane < NB;
  int next_logical = -1, next_phys = 0;
  uint64_t next_members = ~0ull;
  auto fetch = [&](int st) {
    next_members = ~0ull;
    fetch_entry(a, range, st * NB + lane, true, next_logical, next_phys, next_members);
  };
  // Stage st into its slot (the caller has waited for the slot to be empty).
  auto produce = [&](int st) {
    const int slot = st % STAGES;
    produce_block(a, kvh, lane, kKeys, next_logical, next_phys, next_members, ks + slot * kStageElems,
                  vs + slot * kStageElems, meta_logical + slot * NB, meta_members + slot * NB, &full[slot], &k_map,
                  &v_map);
    fetch(st + 1);
  };

  load_q(a, qs, cta_row0, kvh, node0, gqa, blockDim.x);
  fence_proxy_async();
  __syncthreads();  // Q and the barriers' init visible to all
  if (producer) {
    fetch(0);
    for (int st = 0; st < STAGES - 1 && st < n_stages; ++st) produce(st);
  }

  const int wgi = warp / 4, g = lane / 4, t = lane % 4;
  const int row0 = cta_row0 + warp * 16;  // this warp's 16 rows
  int row_node[2];                        // rows g and g+8 of the warp's 16; -1 for padding
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + g + 8 * r, local = row / gqa;
    row_node[r] = row < a.rows && node0 + local < a.nodes ? node0 + local : -1;
  }
  const uint64_t need = warp_nodes(row_node);
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  const uint64_t q_desc = desc(qs + wgi * 64 * 64, 16, 1024);
  const uint64_t k_desc = desc(ks, 16, 1024);
  const uint64_t v_desc = desc(vs, kKeys * 64 * 2, 1024);
  const uint32_t q_half = a.cta_rows * 64 * 2 >> 4, stage = kStageElems * 2 >> 4;
  for (int st = 0; st < n_stages; ++st) {
    const int slot = st % STAGES;
    mbar_wait(&full[slot], (st / STAGES) & 1);
    stage_compute(a, q_desc, q_half, k_desc + slot * stage, v_desc + slot * stage, meta_logical + slot * NB,
                  meta_members + slot * NB, row_node, need, t, m_run, l_run, o);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[slot]);
    // Refill the slot of stage st - 1 (the first round's last slot is fresh).
    const int next = st + STAGES - 1;
    if (producer && next < n_stages) {
      if (next >= STAGES) mbar_wait(&empty[next % STAGES], (next / STAGES - 1) & 1);
      produce(next);
    }
  }
  pdl_trigger();
  store_partials(a, chunk, kvh, group, row0, g, t, o, m_run, l_run);
}
