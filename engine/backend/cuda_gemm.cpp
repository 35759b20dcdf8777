// The CUDA backend's GEMMs: LtGemm (cuBLASLt, timed algorithms) and CudaBackend::Impl's routing
// of each product to our skinny kernels or cuBLAS (cuda_backend_impl.h).
#if defined(SPECULA_HAVE_CUDA)

#include <algorithm>
#include <string>

#include "engine/backend/cuda_backend_impl.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/skinny_gemm.h"
#include "kernels/cuda/verify_gemm.h"

namespace specula {

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

Status LtGemm::run(const bf16_bits* W, int64_t N, int64_t K, const bf16_bits* x, int64_t cols, float* Y,
                   cudaStream_t stream) {
  auto found = plans_.find({N, K, cols});
  if (found == plans_.end()) {
    auto made = tune(W, N, K, x, cols, stream);
    if (!made) return made.error();
    found = plans_.emplace(std::tuple{N, K, cols}, *made).first;
  }
  return launch(found->second, W, x, Y, stream);
}

Status LtGemm::launch(const Plan& p, const bf16_bits* W, const bf16_bits* x, float* Y, cudaStream_t stream) {
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(handle_, p.desc, &one, W, p.a, x, p.b, &zero, Y, p.c, Y, p.c, &p.algo,
                                           workspace_.get(), p.workspace, stream);
  return st == CUBLAS_STATUS_SUCCESS ? Status{} : Status{lt_error("matmul", st)};
}

std::map<std::tuple<int, int64_t, int64_t, int64_t>, LtGemm::Chosen>& LtGemm::chosen(std::mutex*& lock) {
  static std::mutex m;
  static std::map<std::tuple<int, int64_t, int64_t, int64_t>, Chosen> table;
  lock = &m;
  return table;
}

Expected<LtGemm::Plan> LtGemm::tune(const bf16_bits* W, int64_t N, int64_t K, const bf16_bits* x, int64_t cols,
                                    cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  SPECULA_CUDA_TRY(cudaStreamIsCapturing(stream, &capturing), "cuBLASLt tuning");
  if (capturing != cudaStreamCaptureStatusNone) {
    return make_error("CUDA backend: cuBLASLt shape " + std::to_string(N) + "x" + std::to_string(K) + " by " +
                      std::to_string(cols) + " columns first met under graph capture (it must be tuned eagerly)");
  }
  if (!handle_) {
    if (const cublasStatus_t st = cublasLtCreate(&handle_); st != CUBLAS_STATUS_SUCCESS) return lt_error("create", st);
    if (auto ok = workspace_.allocate(kWorkspaceBytes, "cuBLASLt workspace"); !ok) return ok.error();
  }
  if (scratch_.size() < static_cast<size_t>(N * cols)) {
    if (auto ok = scratch_.allocate(static_cast<size_t>(N * cols), "cuBLASLt tuning output"); !ok) return ok.error();
  }
  Plan p;
  const cublasOperation_t transposed = CUBLAS_OP_T;
  cublasStatus_t st = cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof transposed);
  }
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, K, N, K);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, K, cols, K);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, N, cols, N);
  cublasLtMatmulPreference_t pref = nullptr;
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
  const size_t ws = kWorkspaceBytes;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  }
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int returned = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, kCandidates, results, &returned);
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  const auto drop = [&p] {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  };
  if (st != CUBLAS_STATUS_SUCCESS || returned == 0) {
    drop();
    return lt_error(
        "heuristic for " + std::to_string(N) + "x" + std::to_string(K) + " by " + std::to_string(cols) + " columns",
        st == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_NOT_SUPPORTED : st);
  }
  int device = 0;
  SPECULA_CUDA_TRY(cudaGetDevice(&device), "cuBLASLt tuning");
  std::mutex* lock = nullptr;
  auto& table = chosen(lock);
  const std::lock_guard<std::mutex> hold(*lock);
  if (auto known = table.find({device, N, K, cols}); known != table.end()) {
    p.algo = known->second.algo;
    p.workspace = known->second.workspace;
    return p;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best_ms = 0.0f;
  int best = -1;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    p.algo = results[i].algo;
    p.workspace = results[i].workspaceSize;
    if (!launch(p, W, x, scratch_.get(), stream)) continue;  // warm-up; an algorithm that fails is skipped
    cudaEventRecord(start, stream);
    for (int r = 0; r < kReps; ++r) (void)launch(p, W, x, scratch_.get(), stream);
    cudaEventRecord(stop, stream);
    float ms = 0.0f;
    if (cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) continue;
    if (best < 0 || ms < best_ms) {
      best = i;
      best_ms = ms;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (best < 0) {
    drop();
    return lt_error("tuning of " + std::to_string(N) + "x" + std::to_string(K), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  p.algo = results[best].algo;
  p.workspace = results[best].workspaceSize;
  table[{device, N, K, cols}] = Chosen{p.algo, p.workspace};
  return p;
}

// The route of a T-row product with W (N, K): one row always our skinny kernel (a decode
// step); else the forced route of CudaBackendOptions where it can run, else by shape. The
// tensor-core kernel is never picked: in whole verifies it lost to both others at every size
// from 2 to 16 rows (1.9-2.6 ms on SmolLM2, 23-28 against 6.4 ms on Llama-8B), and it is not
// exact either. head: the logits GEMM (28M weights on SmolLM2, exact like the small ones: its
// rows are the logits a greedy verify compares).
CudaBackend::Impl::GemmRoute CudaBackend::Impl::route(int64_t N, int64_t K, int64_t T, bool head) const {
  if (T == 1) return GemmRoute::kSkinny;
  const GemmRoute forced = head ? head_route : layer_route;
  if (forced == GemmRoute::kSkinny && T <= cuda::kSkinnyMaxRows) return GemmRoute::kSkinny;
  const bool tc_fits = T <= cuda::kSkinnyTcMaxRows && N % 16 == 0 && K % 16 == 0;
  if (forced == GemmRoute::kTensorCore && tc_fits) return GemmRoute::kTensorCore;
  if (forced != GemmRoute::kAuto) return GemmRoute::kCublas;
  const bool small = N * K <= kSmallMatrixWeights || head;
  if (T <= (small ? kExactVerifyRowsSmall : kExactVerifyRowsLarge)) return GemmRoute::kSkinny;
  return GemmRoute::kCublas;
}

Status CudaBackend::Impl::gemm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t T, float* Y,
                               int64_t ldy, bool accumulate, bool head) {
  const GemmRoute r = route(N, K, T, head);
  if (r == GemmRoute::kSkinny && cuda::skinny_gemm(W, N, K, X, K, T, Y, ldy, accumulate, stream)) return {};
  if (r == GemmRoute::kTensorCore && cuda::skinny_gemm_tc(W, N, K, X, K, T, Y, ldy, accumulate, stream)) return {};
  bf16_bits* hi = x_bf16.get();
  bf16_bits* lo = x_bf16.get() + T * K;
  cuda::f32_to_bf16_split(X, T * K, hi, lo, stream);
  if (T <= kStackedRows) {
    if (auto ok = gemm_halves(W, N, K, T); !ok) return ok;
    cuda::add_split_halves(y_split.get(), T, N, Y, ldy, accumulate, stream);
    return {};
  }
  const float one = 1.0f, zero = 0.0f;
  if (auto ok = cublas_bf16(W, N, K, hi, T, Y, ldy, accumulate ? &one : &zero); !ok) return ok;
  return cublas_bf16(W, N, K, lo, T, Y, ldy, &one);
}

// Whether gemm() takes the stacked cuBLAS path for this shape of a layer (route() says cuBLAS,
// at most kStackedRows rows): there the forward's row ops may write the halves and sum the
// products themselves (CudaSession::enqueue_forward, model_ops.h's split row ops).
bool CudaBackend::Impl::stacked(int64_t N, int64_t K, int64_t T) const {
  return route(N, K, T, false) == GemmRoute::kCublas && T <= kStackedRows;
}

// y_split (2T, N) = [hi; lo] · Wᵀ: the halves of X, hi (T, K) bf16 at x_bf16 and lo right after
// it, as 2T columns of one GEMM (the weights read once): ours (kernels/cuda/verify_gemm.h) or
// cuBLAS's.
Status CudaBackend::Impl::gemm_halves(const bf16_bits* W, int64_t N, int64_t K, int64_t T) {
  // Small matrices at up to kVerifyGemmRows rows on our wgmma kernel where it runs (it launches
  // nothing and returns false otherwise), large ones up to verify_gemm_large_rows. A forced
  // cuBLAS route (layer_route) keeps cuBLAS.
  const int64_t ours_up_to = N * K <= kSmallMatrixWeights ? kVerifyGemmRows : verify_gemm_large_rows;
  if (verify_gemm && layer_route != GemmRoute::kCublas && T <= ours_up_to &&
      cuda::verify_gemm(W, N, K, x_bf16.get(), 2 * T, y_split.get(), N, stream)) {
    return {};
  }
  // cuBLASLt's timed pick only for large matrices: on Llama-8B's it took a 61-row 64K verify
  // from 13.41 to 13.13 ms, on SmolLM2's small ones it was 0.01-0.06 ms a verify slower.
  if (cublaslt_tuned && N * K > kSmallMatrixWeights) {
    return lt.run(W, N, K, x_bf16.get(), 2 * T, y_split.get(), stream);
  }
  const float zero = 0.0f;
  return cublas_bf16(W, N, K, x_bf16.get(), 2 * T, y_split.get(), N, &zero);
}

// Y (cols, N) = alpha · x (cols, K) · W(N, K)ᵀ + beta · Y, x bf16, f32 out and compute.
Status CudaBackend::Impl::cublas_bf16(const bf16_bits* W, int64_t N, int64_t K, const bf16_bits* x, int64_t cols,
                                      float* Y, int64_t ldy, const float* beta) {
  const float one = 1.0f;
  const cublasStatus_t st =
      cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(cols), static_cast<int>(K),
                   &one, W, CUDA_R_16BF, static_cast<int>(K), x, CUDA_R_16BF, static_cast<int>(K), beta, Y, CUDA_R_32F,
                   static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st == CUBLAS_STATUS_SUCCESS) return {};
  return make_error("CUDA backend: cublasGemmEx (" + std::to_string(N) + "x" + std::to_string(K) + " by " +
                    std::to_string(cols) + " columns) failed: " + cublasGetStatusString(st));
}

// Y(T, N) = rmsnorm(X; gamma) · Wᵀ. One kernel for a decode step (the norm fused into the
// skinny GEMM), else RMSNorm into xn and gemm(). X rows have stride K.
Status CudaBackend::Impl::gemm_norm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t T,
                                    const float* gamma, float* Y, int64_t ldy, bool head) {
  const GemmRoute r = route(N, K, T, head);
  // Not for the logits GEMM: there every warp of the fused kernel re-sums its row's x² and scales
  // by gamma for one of 49152 columns (SmolLM2), which cost more than a kernel of its own: lm_head
  // 34.5 us fused against 20.6 plain at one row, 45.7 against 24.4 at two
  // (bench/results/skinny_lm_head_s11_h100_2026-11-25.json). Decode and verify rows take the same
  // path, so a verify row still equals the decode step's bit for bit.
  if (r == GemmRoute::kSkinny && !head &&
      cuda::skinny_gemm_norm(W, N, K, X, K, T, gamma, cfg.rms_eps, Y, ldy, stream)) {
    return {};
  }
  if (r == GemmRoute::kTensorCore && cuda::skinny_gemm_tc_norm(W, N, K, X, K, T, gamma, cfg.rms_eps, Y, ldy, stream)) {
    return {};
  }
  cuda::rmsnorm_rows(X, K, gamma, T, K, cfg.rms_eps, xn.get(), stream);
  return gemm(W, N, K, xn.get(), T, Y, ldy, false, head);
}

// xn(T, ffn) = SwiGLU of rmsnorm(X; gamma) · gate_upᵀ: one kernel for a decode step, else
// RMSNorm, the GEMM into gu and SwiGLU.
Status CudaBackend::Impl::gate_up_swiglu(const GpuLayer& L, const float* X, int64_t T) {
  const int64_t dim = cfg.dim, ffn = cfg.ffn_dim;
  const GemmRoute r = route(2 * ffn, dim, T, false);
  if (r == GemmRoute::kSkinny && cuda::skinny_gemm_norm_swiglu(L.gate_up.get(), ffn, dim, X, dim, T, L.ffn_norm.get(),
                                                               cfg.rms_eps, xn.get(), ffn, stream)) {
    return {};
  }
  if (r == GemmRoute::kTensorCore &&
      cuda::skinny_gemm_tc_norm_swiglu(L.gate_up.get(), ffn, dim, X, dim, T, L.ffn_norm.get(), cfg.rms_eps, xn.get(),
                                       ffn, stream)) {
    return {};
  }
  cuda::rmsnorm_rows(X, dim, L.ffn_norm.get(), T, dim, cfg.rms_eps, xn.get(), stream);
  if (auto ok = gemm(L.gate_up.get(), 2 * ffn, dim, xn.get(), T, gu.get(), 2 * ffn, false); !ok) return ok;
  cuda::swiglu_rows(gu.get(), T, ffn, xn.get(), stream);
  return {};
}

}  // namespace specula

#endif  // SPECULA_HAVE_CUDA
