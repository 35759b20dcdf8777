// The warp-specialized wgmma tiers of tree_attention.cu (variants ws2s3 and ws3s4), shaped after
// FlashAttention-3's forward kernel. Included by tree_attention.cu only, after
// tree_attention_wgmma.cuh (it uses wg::'s descriptors, softmax step, TMA and mbarrier helpers):
// not a standalone header.
//
// Why another kernel: wg4s4 / wg4p4 run 4 warpgroups of 64 rows over 64-key stages, and each
// warpgroup runs S = Q K^T, then the softmax, then P V, one after the other. Per 64 keys the SM
// reads K four times from shared memory for Q K^T (both operands there: 4 KB per m64n64k16, about
// the tensor core's own time at 128 B/clock) and every warp's softmax leaves the tensor pipe idle
// unless another warpgroup happens to be in its MMAs (ncu at 64 nodes: tensor pipe 38% busy).
// Here a CTA of ws2s3 has 2 consumer warpgroups (128 rows; 256 rows take 2 CTAs over the same
// chunk, whose second read of the K/V comes from L2) and a producer warpgroup, over 128-key stages:
//   - Q K^T is m64n128k16 (6 KB of operands per 262K MACs instead of 4 KB per 131K);
//   - a consumer thread's 232 registers hold O, the next stage's S and the current P at once, so
//     stage st's Q K^T and stage st-1's P V are issued together and stage st's softmax runs while
//     P V is still on the tensor cores (FA3's intra-warpgroup overlap). The producer is a whole
//     warpgroup because setmaxnreg, which moves its registers to the consumers (40 / 232 instead
//     of 168 each at 384 threads), is a warpgroup instruction; at 288 threads (one producer warp)
//     ptxas caps a thread at 168, as 3 warps share an SM sub-partition's 16K registers, and
//     serializes the MMAs;
//   - lanes 0..7 of the producer warpgroup's first warp load a stage's 8 blocks with TMA into a
//     ring guarded by full/empty mbarriers (wg4p4's scheme, 8 blocks a stage).
// ws3s4 has 3 consumer warpgroups (192 rows in one CTA) at 152 registers, which hold S and P of
// 64-key stages only (4 blocks, 4 slots); the pipeline is the same.
#pragma once

namespace ws {

constexpr int kProducerWarps = 4;  // one warpgroup, after the consumers
constexpr int kProducerRegs = 40;
// A consumer thread's registers with WG consumer warpgroups: an SM sub-partition's 16K registers
// hold one producer warp and WG consumer warps, 32 lanes each (2 -> 232, 3 -> 152), in steps of 8.
// (Each sub-partition runs one warp of every warpgroup.)
__host__ __device__ constexpr int consumer_regs(int wg) { return (16384 / 32 - kProducerRegs) / wg / 8 * 8; }

// Shared memory for a CTA of cta_rows rows (a multiple of 64) over stages of nb blocks: 1 KB of
// alignment slack, the K and V ring, Q, the stages' block metadata, then a full and an empty
// mbarrier a slot.
constexpr size_t smem_bytes(int stages, int nb, int cta_rows) {
  return (1024 + size_t(stages) * 2 * nb * B * D * 2 + size_t(cta_rows) * D * 2 +
          size_t(stages) * nb * (sizeof(uint64_t) + sizeof(int32_t)) + 7) /
             8 * 8 +
         size_t(stages) * 2 * sizeof(uint64_t);
}

}  // namespace ws

// k_map, v_map: as tree_attention_wgmma_tma_kernel's. blockDim = the consumer warps (4 a
// warpgroup of 64 rows, a.cta_rows / 16 of them, at most WG warpgroups) + the producer warpgroup,
// the last. NB blocks a stage (8: 128 keys; 4: 64 keys, for 3 warpgroups' 152 registers), STAGES
// slots.
template <int WG, int NB, int STAGES>
__global__ void __launch_bounds__(WG * 128 + 32 * ws::kProducerWarps, 1)
    tree_attention_ws_kernel(KernelArgs a, const __grid_constant__ CUtensorMap k_map,
                             const __grid_constant__ CUtensorMap v_map) {
  using namespace wg;
  static_assert(NB == 4 || NB == 8, "Q K^T is m64n64 or m64n128");
  constexpr int kKeys = NB * B, kStageElems = kKeys * D;
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
  uint64_t* empty = full + STAGES;              // [STAGES]: every consumer thread is done with the slot

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int consumer_warps = blockDim.x / 32 - ws::kProducerWarps;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], NB);                    // one arrival (with its bytes) a producer lane
      // One arrival a consumer thread, and with kv_pair one a warp of the peer's consumers (the
      // slot is written into both CTAs).
      mbar_init(&empty[s], consumer_warps * 32 + (a.kv_pair ? consumer_warps : 0));
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }

  pdl_wait();  // inputs from earlier kernels; the workspace the last merge read

  const int chunk = blockIdx.x, kvh = blockIdx.y, group = blockIdx.z / a.row_splits;
  const int cta_row0 = blockIdx.z % a.row_splits * a.cta_rows;
  const int gqa = a.q_heads / a.kv_heads;
  const int node0 = group * a.group_size;
  const ChunkRange range = chunk_range(a, chunk, kvh, group);
  // At least one stage, so the consumers' pipeline below has no branch around its MMAs (ptxas
  // serializes a wgmma in a branch): a CTA with no entries computes one stage of absent blocks,
  // all masked, and writes the empty partial (max -inf, sum 0, O 0) the merge expects.
  const int n_stages = max(1, (range.n_entries + NB - 1) / NB);

  load_q(a, qs, cta_row0, kvh, node0, gqa, blockDim.x);
  fence_proxy_async();
  // Q and the barriers' init visible to all (with kv_pair to the peer too, before its multicasts
  // and arrivals reach this CTA's barriers).
  if (a.kv_pair)
    hopper::cluster_sync();
  else
    __syncthreads();
  const int pair_rank = a.kv_pair ? static_cast<int>(hopper::cluster_rank()) : -1;

  if (warp >= consumer_warps) {
    // Producer: lane b < NB of its first warp loads block b of each stage (K and V, two 64-dim
    // halves each: 4 TMA boxes of 16 keys x 128 B); with kv_pair only the lanes of the CTA of rank
    // b % 2 issue it, multicast to both. A sparse list's block ids come from the warp's EntryWindow
    // (all 32 lanes hold entries, so a short list's stages no longer wait on a list read and a
    // table lookup each: group-shared 48-64 nodes 17-23% faster on the H100, though first-query
    // lists there, whole-stage and short, run 3-8% slower; kernel_builds_s30_new4_*). A dense
    // list's come one stage early from fetch_entry, as before the window: through the window, dense
    // 48 nodes ran 15% slower and 60-64 nodes 4-6% (kernel_builds_s30_entry_window_*; files in
    // bench/results). The branch is uniform over the grid.
    hopper::set_max_regs_dec<ws::kProducerRegs>();
    auto produce = [&](int st, int logical, int phys, uint64_t members) {
      const int slot = st % STAGES;
      if (st >= STAGES) hopper::mbar_wait_cluster(&empty[slot], (st / STAGES - 1) & 1);
      produce_block(a, kvh, lane, kKeys, logical, phys, members, ks + slot * kStageElems, vs + slot * kStageElems,
                    meta_logical + slot * NB, meta_members + slot * NB, &full[slot], &k_map, &v_map, pair_rank);
    };
    if (warp == consumer_warps && a.list_blocks) {
      EntryWindow entries;
      entries.start(a, range, lane);
      for (int st = 0; st < n_stages; ++st) {
        int logical, phys;
        uint64_t members;
        entries.stage<NB>(a, range, lane, st, lane % NB, logical, phys, members);
        if (lane < NB) produce(st, logical, phys, members);
      }
    } else if (warp == consumer_warps && lane < NB) {
      int next_logical = -1, next_phys = 0;
      uint64_t next_members = ~0ull;
      fetch_entry(a, range, lane, true, next_logical, next_phys, next_members);
      for (int st = 0; st < n_stages; ++st) {
        produce(st, next_logical, next_phys, next_members);
        next_members = ~0ull;
        fetch_entry(a, range, (st + 1) * NB + lane, true, next_logical, next_phys, next_members);
      }
    }
    // With kv_pair no CTA leaves while its peer may still arrive on its barriers (every thread of
    // the pair meets here, the consumers after their last stage).
    if (a.kv_pair) {
      __syncwarp();
      hopper::cluster_sync();
    }
    return;
  }

  // Consumers: warpgroup wgi, warp-in-CTA `warp` owns rows row0 .. row0 + 15.
  hopper::set_max_regs_inc<ws::consumer_regs(WG)>();
  const int wgi = warp / 4, g = lane / 4, t = lane % 4;
  const int row0 = cta_row0 + warp * 16;
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

  const uint64_t q_desc = desc(qs + wgi * 64 * 64, 16, 1024);
  const uint64_t k_desc = desc(ks, 16, 1024);
  const uint64_t v_desc = desc(vs, kKeys * 64 * 2, 1024);
  const uint32_t q_half = a.cta_rows * 64 * 2 >> 4, kv_half = kKeys * 64 * 2 >> 4, stage = kStageElems * 2 >> 4;
  constexpr uint32_t v_block = B * 64 * 2 >> 4;  // 16 keys of V

  float s[NB * 8];     // S of the stage being softmaxed: s[4j + 2r + c] = row g + 8r, key 8j + 2t + c
  uint32_t pf[NB][4];  // P of the stage whose P V is next, as k16 A fragments (one a block)
  float alpha[2];
  // S = Q K^T (unscaled) of a slot, 64 rows x kKeys keys a warpgroup: 8 k steps of 16 dims.
  auto issue_qk = [&](int slot) {
    const uint64_t k_st = k_desc + slot * stage;
    hopper::mma_ss_first(s, q_desc, k_st);  // m64n128k16 (NB 8) or m64n64k16 (NB 4), by s's size
#pragma unroll
    for (int kk = 1; kk < 8; ++kk) {
      const uint32_t off = (kk & 3) * 2;  // 32 B (>> 4) a k step inside the 128-byte row
      hopper::mma_ss(s, q_desc + (kk >> 2) * q_half + off, k_st + (kk >> 2) * kv_half + off);
    }
    commit();
  };
  // O += P V of a slot, one k16 step a block.
  auto issue_pv = [&](int slot) {
#pragma unroll
    for (int b = 0; b < NB; ++b) mma_pv(o, pf[b], v_desc + slot * stage + b * v_block);
    commit();
  };
  // The online softmax of s (masks from the slot's metadata); returns whether O needs alpha.
  auto softmax = [&](int slot) {
    int logical[NB];
    const bool whole = read_stage(a, meta_logical + slot * NB, meta_members + slot * NB, need, logical);
    return softmax_step<NB>(s, a, logical, meta_members + slot * NB, whole, row_node, t, m_run, l_run, alpha);
  };
  auto pack = [&] {
#pragma unroll
    for (int b = 0; b < NB; ++b) pack_p<NB>(pf[b], s, b);
  };
  // Ping-pong (KernelArgs::pingpong): each issue of a warpgroup's MMAs waits for its turn on named
  // barrier 1 + wgi and passes the turn to the next warpgroup after it, so their softmaxes fall
  // under each other's MMAs instead of meeting at the same stage. A barrier counts 256: its own
  // warpgroup's sync and the previous one's arrive. The last warpgroup gives warpgroup 0 its first
  // turn and keeps its own last, so that every barrier's arrivals match its syncs at exit. (2-8%
  // slower at 48-64 nodes than issuing freely, so off by default: the intra-warpgroup overlap
  // below already hides each softmax, and the turns add a barrier wait.)
  const int n_wg = consumer_warps / 4;
  const bool pingpong = a.pingpong && n_wg > 1;
  auto turn_take = [&] {
    if (pingpong) hopper::named_barrier_sync(1 + wgi, 256);
  };
  auto turn_pass = [&](bool last) {
    if (pingpong && !(last && wgi == n_wg - 1)) hopper::named_barrier_arrive(1 + (wgi + 1) % n_wg, 256);
  };
  if (pingpong && wgi == n_wg - 1) hopper::named_barrier_arrive(1, 256);

  // Stage 0: S, softmax, P (O is still zero: no rescale).
  mbar_wait(&full[0], 0);
  fence();
  turn_take();
  issue_qk(0);
  turn_pass(false);
  wait<0>();
  pin(s);
  softmax(0);
  pack();
  for (int st = 1; st < n_stages; ++st) {
    const int slot = st % STAGES, prev = (st - 1) % STAGES;
    mbar_wait(&full[slot], (st / STAGES) & 1);
    pin(o);
    fence();
    turn_take();
    issue_qk(slot);  // S of stage st ...
    issue_pv(prev);  // ... and O += P V of stage st - 1 behind it
    turn_pass(false);
    wait<1>();  // S is in; P V may still run
    pin(s);
    const bool moved = softmax(slot);
    wait<0>();
    pin(o);
    // Every consumer thread releases the slot (its own metadata reads included): with one arrival a
    // warp after __syncwarp, racecheck flagged the producer's next metadata store against the
    // other lanes' reads (wg4p4's false positive, attention_notes.md 11-25).
    mbar_arrive(&empty[prev]);
    if (a.kv_pair) {  // the peer's producer writes this slot too
      __syncwarp();
      if (lane == 0) hopper::mbar_arrive_cluster(&empty[prev], pair_rank ^ 1);
    }
    if (moved) rescale(o, alpha);
    pack();
  }
  pin(o);
  fence();
  turn_take();
  issue_pv((n_stages - 1) % STAGES);
  turn_pass(true);
  wait<0>();
  pin(o);
  pdl_trigger();
  store_partials(a, chunk, kvh, group, row0, g, t, o, m_run, l_run);
  if (a.kv_pair) hopper::cluster_sync();
}
