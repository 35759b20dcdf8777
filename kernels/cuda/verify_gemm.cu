// verify_gemm.h's product on wgmma. A CTA = 2 consumer warpgroups + 1 producer warpgroup
// (FlashAttention-3's / tree_attention_ws.cuh's split, setmaxnreg moving registers to the
// consumers), over one tile of W rows and one range of K:
//   - the producer's first lane fills a ring of stages with TMA: the stage's 64-wide K slice of
//     the W tile ([tile rows][64] bf16, 128B-swizzled, rows past N read as zeros) and of the
//     CTA's block of X rows ([x_rows][64], rows past M zeros; blockIdx.z picks the block when
//     65-128 rows run as two of 64), completing on the slot's `full` mbarrier; the W
//     slices of the first ring's worth are issued before the programmatic-launch wait (weights are
//     never written), X's after it;
//   - consumer warpgroup c owns W rows [64c, 64c + 64) of the tile: per stage 4 k16 steps of
//     wgmma m64nNk16 (A = W rows, B = X rows, both K-major from shared memory), one group in
//     flight while the next stage's wait runs, and every consumer thread arrives on the slot's
//     `empty` barrier once the group that read it is done;
//   - the accumulator of m64nN holds, per warp, 16 W rows x N X rows: d[4i + 2r + c] is W row
//     16·warp + g + 8r, X row 8i + 2t + c (g = lane / 4, t = lane % 4), the mma.sync m16n8 layout.
// With K split over a cluster of S CTAs (blockIdx.y = split = cluster rank), each CTA writes its
// partial tile into its own (now idle) ring memory, the cluster syncs, and CTA q sums X rows
// q, q + S, ... of all S partials in rank order 0..S-1 (distributed shared memory), so the bits do
// not depend on which CTA finishes first.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/verify_gemm.h"

namespace specula::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace hopper;

constexpr int kBK = 64;        // K a stage: one 128-byte swizzled row of bf16
constexpr int kConsumers = 2;  // consumer warpgroups
constexpr int kThreads = (kConsumers + 1) * 128;
constexpr int kProducerRegs = 40;
constexpr int kMaxSplits = 8;  // the portable cluster size

// NT: X rows of the MMA (64 or 128). One CTA an SM: a 2-CTAs-an-SM variant (half the ring
// each, 96 registers a consumer) was slower at every shape but SmolLM2's lm_head
// (verify_gemm_sweep_s18b_*).
// A consumer warpgroup owns one m64 tile of W rows: two (256-row CTA tiles) measured as fast or
// slower everywhere but the lm_head (bench/results/verify_gemm_sweep_s18_*).
template <int NT>
struct Tile {
  static constexpr int kRows = kConsumers * 64;  // W rows a CTA
  static constexpr int kRingBytes = 192 * 1024;
  // setmaxnreg moves registers inside the CTA's own allocation (its launch bound's count a
  // thread, in steps of 8): the producer warpgroup's drop to kProducerRegs pays for the
  // consumers' rise. Asking for more than the allocation holds blocks forever (a 2-CTAs-an-SM
  // build asked 104 of a possible 100 and hung).
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kConsumerRegs = (kLaunchRegs * (kConsumers + 1) - kProducerRegs) / kConsumers / 8 * 8;
  static constexpr int kWBytes = kRows * kBK * 2;
  static constexpr int kXBytes = NT * kBK * 2;
  static constexpr int kStageBytes = kWBytes + kXBytes;  // a multiple of 1024: the swizzle's period
  static constexpr int kStages = std::min(8, kRingBytes / kStageBytes);
  static constexpr size_t kSmem = 1024 + size_t(kStages) * kStageBytes + 2 * kStages * sizeof(uint64_t);
  static_assert(kStages >= 3, "a ring of at least three stages");
  static_assert(kConsumerRegs >= NT / 2 + 40, "the accumulators fit the consumer's registers");
};

struct Args {
  float* y;
  int64_t ldy;
  int n, m;
  int k_steps;       // 64-wide K steps in all
  bool vector_rows;  // Y and ldy allow float4 stores
};

template <int NT>
__global__ void __launch_bounds__(kThreads, 1)
    verify_gemm_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map, Args a) {
  using T = Tile<NT>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* base = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  auto* full = reinterpret_cast<uint64_t*>(base + size_t(T::kStages) * T::kStageBytes);
  uint64_t* empty = full + T::kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wgi = warp / 4;
  const int n0 = blockIdx.x * T::kRows, split = blockIdx.y, splits = gridDim.y;
  const int x0 = blockIdx.z * NT, m = min(a.m - x0, NT);  // this CTA's X rows (blockIdx.z: row blocks)
  // Split `split` of S takes steps [split·k/S, (split+1)·k/S): none empty while S <= k.
  const int step0 = int(int64_t(split) * a.k_steps / splits);
  const int steps = int(int64_t(split + 1) * a.k_steps / splits) - step0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < T::kStages; ++s) {
      mbar_init(&full[s], 1);                  // the producer's arrival with the stage's bytes
      mbar_init(&empty[s], kConsumers * 128);  // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wgi == kConsumers) {
    set_max_regs_dec<kProducerRegs>();
    if (warp == kConsumers * 4 && lane == 0) {
      auto w_at = [&](int s) { return base + size_t(s) * T::kStageBytes; };
      const int pre = min(T::kStages, steps);
      for (int i = 0; i < pre; ++i) {
        mbar_arrive_expect_tx(&full[i], T::kStageBytes);
        tma_load(w_at(i), &w_map, (step0 + i) * kBK, n0, &full[i]);
      }
      pdl_wait();  // X is the kernel before's output
      for (int i = 0; i < pre; ++i) tma_load(w_at(i) + T::kWBytes, &x_map, (step0 + i) * kBK, x0, &full[i]);
      for (int i = pre; i < steps; ++i) {
        const int s = i % T::kStages;
        mbar_wait(&empty[s], (i / T::kStages - 1) & 1);
        mbar_arrive_expect_tx(&full[s], T::kStageBytes);
        tma_load(w_at(s), &w_map, (step0 + i) * kBK, n0, &full[s]);
        tma_load(w_at(s) + T::kWBytes, &x_map, (step0 + i) * kBK, x0, &full[s]);
      }
    }
    pdl_trigger();
    if (splits > 1) {  // the consumers' two cluster barriers (every thread of the cluster arrives)
      cg::this_cluster().sync();
      cg::this_cluster().sync();
    }
    return;
  }
  // Consumers.
  set_max_regs_inc<T::kConsumerRegs>();
  pdl_wait();  // Y may still be read by the kernel before
  float acc[NT / 2];
  {
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) acc[j] = 0.f;
    constexpr uint32_t kStage16 = T::kStageBytes >> 4, kW16 = T::kWBytes >> 4;
    const uint64_t w_desc = desc(base + size_t(wgi) * 64 * 128, 16, 1024);
    const uint64_t x_desc = desc(base, 16, 1024) + kW16;
    for (int i = 0; i < steps; ++i) {
      const int s = i % T::kStages;
      mbar_wait(&full[s], (i / T::kStages) & 1);
      fence();  // (no pin here: touching the accumulators of the group in flight serializes the MMAs)
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) mma_ss(acc, w_desc + s * kStage16 + kk * 2, x_desc + s * kStage16 + kk * 2);
      commit();
      if (i > 0) {
        wait<1>();
        mbar_arrive(&empty[(i - 1) % T::kStages]);
      }
    }
    wait<0>();
    pin(acc);
  }
  pdl_trigger();

  // Epilogue: the tile, [NT][kStride] f32, into this CTA's ring (idle once both consumer
  // warpgroups are past their last wait), then whole rows of Y as float4 stores. (Storing the
  // accumulators straight from registers, 4-byte stores 4 rows apart, took 7.2 us a SmolLM2
  // projection where cuBLAS took 4.3: verify_gemm_profile_s18_*.) With K split, CTA q of the
  // cluster writes X rows q, q + S, ..., each the sum of the S partial tiles in rank order.
  constexpr int kStride = T::kRows + 4;  // rows 2 apart land 8 banks apart: conflict-free stores
  static_assert(size_t(NT) * kStride * sizeof(float) <= size_t(T::kStages) * T::kStageBytes, "tile fits the ring");
  auto* part = reinterpret_cast<float*>(base);
  const int g = lane / 4, t = lane % 4, w_in = warp % 4;
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers * 128) : "memory");  // both past their MMAs' reads
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int col = wgi * 64 + 16 * w_in + g + 8 * r;
#pragma unroll
    for (int i = 0; i < NT / 8; ++i)
#pragma unroll
      for (int c = 0; c < 2; ++c) part[(8 * i + 2 * t + c) * kStride + col] = acc[4 * i + 2 * r + c];
  }
  cg::cluster_group cluster = cg::this_cluster();
  if (splits > 1)
    cluster.sync();  // every thread of the cluster, the producers' too
  else
    asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers * 128) : "memory");
  constexpr int kQuads = T::kRows / 4;
  const int mine = m > split ? (m - split + splits - 1) / splits : 0;
  for (int idx = threadIdx.x; idx < mine * kQuads; idx += kConsumers * 128) {
    const int row = split + idx / kQuads * splits, col = idx % kQuads * 4, off = row * kStride + col;
    float4 sum = *reinterpret_cast<const float4*>((splits > 1 ? cluster.map_shared_rank(part, 0) : part) + off);
    for (int q = 1; q < splits; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(part, q) + off);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    const int n = n0 + col;
    float* dst = a.y + int64_t(x0 + row) * a.ldy + n;
    if (a.vector_rows && n + 3 < a.n) {
      *reinterpret_cast<float4*>(dst) = sum;
    } else {
      const float vals[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (n + e < a.n) dst[e] = vals[e];
    }
  }
  if (splits > 1) cluster.sync();  // peers' partials stay until every CTA has read them
}

// W (N, K) or X (M, K) as a 2D tensor map: K elements x rows, box 64 x box_rows, 128B swizzle
// (the wgmma tiles' layout); rows past `rows` read as zeros.
bool encode_rows_map(CUtensorMap* map, const void* base, int64_t rows, int64_t K, int box_rows) {
  return encode_bf16_map(map, base, uint64_t(K), uint64_t(rows), uint64_t(K) * 2, kBK, uint32_t(box_rows));
}

struct DeviceFacts {
  bool hopper = false;
  int sms = 0;
};

// Queried once per device: the plan's SM count and whether sm_90a's SASS can run.
DeviceFacts device_facts() {
  static std::mutex m;
  static std::map<int, DeviceFacts> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return {};
  const std::lock_guard<std::mutex> hold(m);
  auto found = known.find(dev);
  if (found != known.end()) return found->second;
  DeviceFacts f;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev);
  f.hopper = major == 9 && minor == 0;
  return known.emplace(dev, f).first->second;
}

// A map per (base, shape, box), encoded on the host once: the weights' and the backend's one X
// buffer recur every verify (an eager verify would otherwise encode two maps a product). A map
// holds only these values, so a reused address with the same shape gets the same map; a graph
// captures the bytes.
bool cached_rows_map(CUtensorMap* map, const uint16_t* base, int64_t rows, int64_t K, int box_rows) {
  static std::mutex m;
  static std::map<std::tuple<const void*, int64_t, int64_t, int>, CUtensorMap> known;
  const std::lock_guard<std::mutex> hold(m);
  const auto key = std::tuple{static_cast<const void*>(base), rows, K, box_rows};
  if (auto found = known.find(key); found != known.end()) {
    *map = found->second;
    return true;
  }
  if (!encode_rows_map(map, base, rows, K, box_rows)) return false;
  known.emplace(key, *map);
  return true;
}

// The launch configuration of a variant: grid (tiles, splits, row blocks), a (1, splits, 1)
// cluster when K is split, programmatic launch when on.
struct Launch : LaunchConfig {
  Launch(int tiles, int splits, int row_blocks, size_t smem, cudaStream_t stream)
      : LaunchConfig(dim3(unsigned(tiles), unsigned(splits), unsigned(row_blocks)), dim3(kThreads), smem, stream,
                     dim3(1, unsigned(splits), 1)) {}
};

template <int NT>
bool sized() {
  static const bool ok = cudaFuncSetAttribute(verify_gemm_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              int(Tile<NT>::kSmem)) == cudaSuccess;
  return ok;
}

// CTAs of a variant the device holds at once with K split `splits` ways: clusters of `splits`
// CTAs must fit in one GPC, so this is not the SM count (cudaOccupancyMaxActiveClusters; a split
// count whose clusters leave a second wave measured 1.5-2.5x slower, verify_gemm_sweep_s18_*).
// Queried once per device and variant.
template <int NT>
int resident_ctas(int splits) {
  static std::mutex m;
  static std::map<std::pair<int, int>, int> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || !sized<NT>()) return 0;
  const std::lock_guard<std::mutex> hold(m);
  if (auto found = known.find({dev, splits}); found != known.end()) return found->second;
  int ctas = 0;
  if (splits == 1) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, verify_gemm_kernel<NT>, kThreads, Tile<NT>::kSmem) ==
        cudaSuccess)
      ctas = per_sm * device_facts().sms;
  } else {
    // One column of tiles is enough for the query: it counts clusters, not the grid.
    Launch l(1, splits, 1, Tile<NT>::kSmem, nullptr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, verify_gemm_kernel<NT>, &l.config) == cudaSuccess)
      ctas = clusters * splits;
  }
  (void)cudaGetLastError();  // a refused query is a variant not to plan with, not an error to keep
  known.emplace(std::pair{dev, splits}, ctas);
  return ctas;
}

template <int NT>
bool launch(const CUtensorMap& w_map, const CUtensorMap& x_map, const Args& a, int tiles, int splits, int row_blocks,
            cudaStream_t stream) {
  if (!sized<NT>()) return false;
  Launch l(tiles, splits, row_blocks, Tile<NT>::kSmem, stream);
  if (cudaLaunchKernelEx(&l.config, verify_gemm_kernel<NT>, w_map, x_map, a) == cudaSuccess) return true;
  // A refused launch (a configuration error, not sticky) leaves the caller to take cuBLAS; its
  // error must not surface at the next unrelated check.
  (void)cudaGetLastError();
  return false;
}

int resident(int nt, int splits) { return nt == 64 ? resident_ctas<64>(splits) : resident_ctas<128>(splits); }

int g_splits = 0, g_row_blocks = 0;

// Weights up to this many bytes stay in L2 (50 MB on the H100 and H200) between the passes of
// row blocks over them, so a second pass costs no DRAM bytes.
constexpr int64_t kRowBlocksMaxWeightBytes = int64_t{16} << 20;

}  // namespace

void set_verify_gemm_splits(int splits) { g_splits = splits; }
void set_verify_gemm_row_blocks(int mode) { g_row_blocks = mode; }

// The plan: K split as many ways (at most 8, at least 2 steps a split) as keep the grid in one
// wave of resident clusters: a projection of few tiles otherwise runs on few SMs, each streaming
// its tile's K serially (a split count whose clusters need a second wave ran 1.5-2.5x slower,
// bench/results/verify_gemm_sweep_s18_*). Past 64 X rows, weights that stay in L2 take the
// 64-row MMA in blocks of 64 rows (grid z) instead of the 128-row one, which was slower on
// SmolLM2's products by 1.3-1.6 us (verify_gemm_sweep_s18c_*).
VerifyGemmPlan verify_gemm_plan(int64_t N, int64_t K, int64_t M) {
  const bool blocks = M > 64 && (g_row_blocks == 2 || (g_row_blocks == 0 && N * K * 2 <= kRowBlocksMaxWeightBytes));
  const int nt = M <= 64 || blocks ? 64 : 128, row_blocks = int((M + nt - 1) / nt);
  const int64_t k_steps = (K + kBK - 1) / kBK, tiles = (N + Tile<64>::kRows - 1) / Tile<64>::kRows * row_blocks;
  int splits = 1;
  if (g_splits) {
    splits = int(std::min<int64_t>(g_splits, k_steps));
    if (splits > 1 && resident(nt, splits) < splits) splits = 1;  // the device cannot hold such a cluster
  } else {
    for (int s = int(std::min<int64_t>(kMaxSplits, k_steps / 2)); s > 1; --s) {
      if (tiles * s <= resident(nt, s)) {
        splits = s;
        break;
      }
    }
  }
  return {splits, nt, row_blocks};
}

bool verify_gemm(const uint16_t* W, int64_t N, int64_t K, const uint16_t* X, int64_t M, float* Y, int64_t ldy,
                 cudaStream_t stream) {
  if (M < 1 || M > kVerifyGemmMaxRows || N < 1 || K < 8 || K % 8 != 0 || ldy < N) return false;
  if (reinterpret_cast<uintptr_t>(W) % 16 != 0 || reinterpret_cast<uintptr_t>(X) % 16 != 0) return false;
  if (N > (int64_t{1} << 31) - 256 || K > (int64_t{1} << 31) - kBK) return false;
  if (!device_facts().hopper) return false;
  const VerifyGemmPlan p = verify_gemm_plan(N, K, M);
  CUtensorMap w_map, x_map;
  if (!cached_rows_map(&w_map, W, N, K, Tile<64>::kRows) || !cached_rows_map(&x_map, X, M, K, p.x_rows)) return false;
  Args a{};
  a.y = Y;
  a.ldy = ldy;
  a.n = int(N);
  a.m = int(M);
  a.k_steps = int((K + kBK - 1) / kBK);
  a.vector_rows = ldy % 4 == 0 && reinterpret_cast<uintptr_t>(Y) % 16 == 0;
  const int tiles = int((N + Tile<64>::kRows - 1) / Tile<64>::kRows);
  return p.x_rows == 64 ? launch<64>(w_map, x_map, a, tiles, p.splits, p.row_blocks, stream)
                        : launch<128>(w_map, x_map, a, tiles, p.splits, p.row_blocks, stream);
}

}  // namespace specula::cuda
