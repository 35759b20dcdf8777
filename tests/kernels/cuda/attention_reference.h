#pragma once
// CPU reference for the CUDA tree-verify attention and Quest block selection, in double
// precision, written from the definitions in kernels/cuda/attention.h (not from the kernels).
// Also builds the random paged-KV problems the GPU tests and the benchmark share.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace specula::cuda::testing {

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One layer, one sequence; shapes as in kernels/cuda/attention.h.
struct Problem {
  int kv_heads = 2, q_heads = 8, nodes = 8, prefix_len = 100, nblocks = 0, num_physical = 0;
  std::vector<uint16_t> k, v, bmin, bmax, q;  // bf16 bits
  std::vector<int32_t> block_table;          // [nblocks]
  std::vector<uint64_t> ancestors;           // [nodes]
  float scale = 0;
};

// Random tree (parent of node j drawn from 0..j-1), shuffled physical blocks, values in
// [-1, 1] for K/V and [-2, 2] for Q; never zeros.
inline Problem make_problem(std::mt19937_64& rng, int kv_heads, int q_heads, int nodes, int prefix_len,
                            bool fill_values = true) {
  constexpr int B = 16, D = 128;
  Problem p;
  p.kv_heads = kv_heads;
  p.q_heads = q_heads;
  p.nodes = nodes;
  p.prefix_len = prefix_len;
  p.scale = 1.0f / std::sqrt(float(D));
  p.nblocks = (prefix_len + nodes + B - 1) / B;
  p.num_physical = p.nblocks + 3;
  std::vector<int32_t> perm(p.num_physical);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  p.block_table.assign(perm.begin(), perm.begin() + p.nblocks);
  p.ancestors.assign(nodes, 0);
  for (int j = 0; j < nodes; ++j) {
    const int parent = j == 0 ? -1 : static_cast<int>(rng() % j);
    p.ancestors[j] = (1ull << j) | (parent >= 0 ? p.ancestors[parent] : 0ull);
  }
  const size_t kv_elems = size_t(p.num_physical) * kv_heads * B * D;
  p.k.resize(kv_elems);
  p.v.resize(kv_elems);
  p.q.resize(size_t(nodes) * q_heads * D);
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  auto draw = [&](float amp) {
    const float x = u(rng) * amp;
    return to_bf16((rng() & 1) ? x : -x);
  };
  if (fill_values) {
    for (auto& x : p.k) x = draw(1.0f);
    for (auto& x : p.v) x = draw(1.0f);
  } else {  // benchmarks: a cheap non-zero pattern
    for (size_t i = 0; i < kv_elems; ++i) {
      p.k[i] = to_bf16(0.01f * float(int(i * 2654435761u % 199) - 99) + 0.005f);
      p.v[i] = to_bf16(0.01f * float(int(i * 40503u % 197) - 98) + 0.005f);
    }
  }
  for (auto& x : p.q) x = draw(2.0f);
  // Quest metadata over the positions that hold tokens.
  const int total = prefix_len + nodes;
  p.bmin.assign(size_t(p.num_physical) * kv_heads * D, to_bf16(0.f));
  p.bmax.assign(size_t(p.num_physical) * kv_heads * D, to_bf16(0.f));
  for (int b = 0; b < p.nblocks; ++b) {
    const size_t phys = p.block_table[b];
    for (int h = 0; h < kv_heads; ++h) {
      for (int d = 0; d < D; ++d) {
        float mn = INFINITY, mx = -INFINITY;
        for (int t = 0; t < B && b * B + t < total; ++t) {
          const float x = from_bf16(p.k[((phys * kv_heads + h) * B + t) * D + d]);
          mn = std::min(mn, x);
          mx = std::max(mx, x);
        }
        p.bmin[(phys * kv_heads + h) * D + d] = to_bf16(mn);
        p.bmax[(phys * kv_heads + h) * D + d] = to_bf16(mx);
      }
    }
  }
  return p;
}

// Attention of node `node`, q head `head` over the positions the tree mask allows, restricted to
// logical blocks where allowed_block(b) is true. Returns D doubles.
template <class Allowed>
std::vector<double> reference_attention(const Problem& p, int node, int head, Allowed allowed_block) {
  constexpr int B = 16, D = 128;
  const int kvh = head / (p.q_heads / p.kv_heads), total = p.prefix_len + p.nodes;
  std::vector<double> scores, out(D, 0.0);
  std::vector<int> positions;
  for (int pos = 0; pos < total; ++pos) {
    if (!allowed_block(pos / B)) continue;
    if (pos >= p.prefix_len && !((p.ancestors[node] >> (pos - p.prefix_len)) & 1ull)) continue;
    const size_t phys = p.block_table[pos / B];
    const uint16_t* kr = &p.k[((phys * p.kv_heads + kvh) * B + pos % B) * D];
    const uint16_t* qr = &p.q[(size_t(node) * p.q_heads + head) * D];
    double s = 0;
    for (int d = 0; d < D; ++d) s += double(from_bf16(qr[d])) * from_bf16(kr[d]);
    scores.push_back(s * p.scale);
    positions.push_back(pos);
  }
  if (scores.empty()) return out;
  const double mx = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    const double w = std::exp(scores[i] - mx);
    sum += w;
    const size_t phys = p.block_table[positions[i] / B];
    const uint16_t* vr = &p.v[((phys * p.kv_heads + kvh) * B + positions[i] % B) * D];
    for (int d = 0; d < D; ++d) out[d] += w * from_bf16(vr[d]);
  }
  for (auto& x : out) x /= sum;
  return out;
}

// Quest score of logical block b for node `node` and kv head `kvh` (metadata in bf16, as stored).
inline double reference_quest_score(const Problem& p, int node, int kvh, int b) {
  constexpr int D = 128;
  const int gqa = p.q_heads / p.kv_heads;
  const size_t phys = p.block_table[b];
  double acc = 0;
  for (int h = 0; h < gqa; ++h) {
    const uint16_t* qr = &p.q[(size_t(node) * p.q_heads + kvh * gqa + h) * D];
    for (int d = 0; d < D; ++d) {
      const double q = from_bf16(qr[d]);
      acc += std::max(q * from_bf16(p.bmin[(phys * p.kv_heads + kvh) * D + d]),
                      q * from_bf16(p.bmax[(phys * p.kv_heads + kvh) * D + d]));
    }
  }
  return acc;
}

}  // namespace specula::cuda::testing
