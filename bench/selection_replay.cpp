#include "bench/selection_replay.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

namespace specula::bench {
namespace {

struct Reader {
  const std::vector<char>& data;
  size_t at = 0;
  bool take(void* out, size_t n) {
    if (at + n > data.size()) return false;
    std::memcpy(out, data.data() + at, n);
    at += n;
    return true;
  }
};

// Problem blocks [first, last) that source block b of a case with nb blocks stands for.
std::pair<int, int> stretch(int b, int nb, int S) {
  return {static_cast<int>(int64_t{b} * S / nb), static_cast<int>(int64_t{b + 1} * S / nb)};
}

}  // namespace

bool read_selection_file(const std::string& path, std::vector<SelectionCase>* cases, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open " + path;
    return false;
  }
  const std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Reader r{data};
  char magic[8];
  int32_t n = 0;
  if (!r.take(magic, 8) || std::memcmp(magic, "SPSEL001", 8) != 0 || !r.take(&n, 4) || n < 0) {
    *error = path + ": not a selection file (magic SPSEL001 and a case count expected)";
    return false;
  }
  cases->clear();
  for (int i = 0; i < n; ++i) {
    const auto bad = [&](const std::string& what) {
      *error = path + ": case " + std::to_string(i) + ": " + what;
      return false;
    };
    SelectionCase c;
    int32_t h[8];
    if (!r.take(h, sizeof h)) return bad("truncated header");
    c.session = h[0], c.round = h[1], c.layer = h[2], c.kv_heads = h[3], c.rows = h[4];
    c.committed_tokens = h[5], c.committed_blocks = h[6], c.group_size = h[7];
    if (c.kv_heads < 1 || c.rows < 1 || c.rows > 64 || c.committed_blocks < 1 || c.committed_tokens < 1)
      return bad("kv_heads, rows (1..64), committed tokens and blocks must be positive");
    c.parent.resize(size_t(c.rows));
    c.order.resize(size_t(c.rows));
    if (!r.take(c.parent.data(), 4 * size_t(c.rows)) || !r.take(c.order.data(), 4 * size_t(c.rows)))
      return bad("truncated parents or order");
    std::vector<int32_t> seen = c.order;
    std::sort(seen.begin(), seen.end());
    for (int j = 0; j < c.rows; ++j) {
      if (seen[size_t(j)] != j) return bad("order is not a permutation of the rows");
      const int p = c.parent[size_t(j)];
      if (j == 0 ? p != -1 : (p < 0 || p >= j))
        return bad("row " + std::to_string(j) + " has parent " + std::to_string(p));
    }
    const size_t width = (size_t(c.committed_blocks) + 7) / 8;
    std::vector<uint8_t> bits(width);
    c.blocks.assign(size_t(c.kv_heads), std::vector<std::vector<int32_t>>(size_t(c.rows)));
    for (auto& head : c.blocks) {
      for (auto& row : head) {
        if (!r.take(bits.data(), width)) return bad("truncated block bits");
        for (int b = 0; b < c.committed_blocks; ++b) {
          if (bits[size_t(b) / 8] >> (b % 8) & 1) row.push_back(b);
        }
        if (row.empty()) return bad("a row selects no block");
      }
    }
    cases->push_back(std::move(c));
  }
  if (r.at != data.size()) {
    *error = path + ": " + std::to_string(data.size() - r.at) + " bytes after the last case";
    return false;
  }
  return true;
}

std::vector<std::vector<std::vector<int32_t>>> mapped_sets(const std::vector<SelectionCase>& cases,
                                                           const std::vector<HeadSource>& heads,
                                                           const ReplayShape& shape) {
  std::vector<std::vector<std::vector<int32_t>>> out(size_t(shape.kv_heads),
                                                     std::vector<std::vector<int32_t>>(size_t(shape.nodes)));
  for (int h = 0; h < shape.kv_heads; ++h) {
    const SelectionCase& c = cases.at(size_t(heads.at(size_t(h)).case_index));
    const auto& rows = c.blocks.at(size_t(heads[size_t(h)].head));
    for (int i = 0; i < shape.nodes; ++i) {
      auto& set = out[size_t(h)][size_t(i)];
      const int nb = c.committed_blocks, S = shape.committed_blocks, copies = std::max(1, S / nb);
      for (int32_t b : rows.at(size_t(c.order.at(size_t(i))))) {
        if (shape.interleave) {
          for (int j = 0; j < copies; ++j) set.push_back(b + j * nb);
        } else {
          const auto [first, last] = stretch(b, nb, S);
          for (int x = first; x < last; ++x) set.push_back(x);
        }
      }
      std::sort(set.begin(), set.end());
    }
  }
  return out;
}

HostLists build_lists(const std::vector<SelectionCase>& cases, const std::vector<HeadSource>& heads,
                      const ReplayShape& shape, int group_size) {
  const auto sets = mapped_sets(cases, heads, shape);
  const int B = shape.block_size;
  const int tree_first = shape.prefix_len / B, tree_end = (shape.prefix_len + shape.nodes + B - 1) / B;
  HostLists l;
  l.kv_heads = shape.kv_heads;
  l.group_size = std::max(1, group_size);
  l.groups = (shape.nodes + l.group_size - 1) / l.group_size;
  // [group][head] -> block -> members, ordered by block id.
  std::vector<std::vector<std::vector<std::pair<int32_t, uint64_t>>>> entries(
      size_t(l.groups), std::vector<std::vector<std::pair<int32_t, uint64_t>>>(size_t(shape.kv_heads)));
  for (int g = 0; g < l.groups; ++g) {
    for (int h = 0; h < shape.kv_heads; ++h) {
      std::vector<uint64_t> by_block(size_t(tree_end), 0);
      for (int i = g * l.group_size; i < std::min(shape.nodes, (g + 1) * l.group_size); ++i) {
        const uint64_t bit = uint64_t{1} << i;
        for (int32_t b : sets[size_t(h)][size_t(i)]) by_block[size_t(b)] |= bit;
        for (int b = tree_first; b < tree_end; ++b) by_block[size_t(b)] |= bit;
      }
      for (int b = 0; b < tree_end; ++b) {
        if (by_block[size_t(b)]) entries[size_t(g)][size_t(h)].emplace_back(b, by_block[size_t(b)]);
      }
      l.max_blocks = std::max(l.max_blocks, static_cast<int>(entries[size_t(g)][size_t(h)].size()));
    }
  }
  const size_t n = size_t(l.groups) * shape.kv_heads * l.max_blocks;
  l.blocks.assign(n, 0);
  l.members.assign(n, 0);
  l.counts.assign(size_t(l.groups) * shape.kv_heads, 0);
  for (int g = 0; g < l.groups; ++g) {
    for (int h = 0; h < shape.kv_heads; ++h) {
      const auto& e = entries[size_t(g)][size_t(h)];
      const size_t base = (size_t(g) * shape.kv_heads + h) * l.max_blocks;
      l.counts[size_t(g) * shape.kv_heads + h] = static_cast<int32_t>(e.size());
      for (size_t j = 0; j < e.size(); ++j) {
        l.blocks[base + j] = e[j].first;
        l.members[base + j] = e[j].second;
      }
    }
  }
  return l;
}

HostLists with_capacity(const HostLists& l, int max_blocks) {
  HostLists out = l;
  out.max_blocks = std::max(max_blocks, l.max_blocks);
  const size_t pairs = size_t(l.groups) * l.kv_heads;
  out.blocks.assign(pairs * out.max_blocks, 0);
  out.members.assign(pairs * out.max_blocks, 0);
  for (size_t p = 0; p < pairs; ++p) {
    const auto n = static_cast<std::ptrdiff_t>(l.counts[p]);
    const auto from = static_cast<std::ptrdiff_t>(p * l.max_blocks),
               to = static_cast<std::ptrdiff_t>(p * out.max_blocks);
    std::copy(l.blocks.begin() + from, l.blocks.begin() + from + n, out.blocks.begin() + to);
    std::copy(l.members.begin() + from, l.members.begin() + from + n, out.members.begin() + to);
  }
  return out;
}

std::vector<uint64_t> ancestor_masks(const SelectionCase& c, int nodes) {
  std::vector<int> node_of(size_t(c.rows), -1);
  for (int i = 0; i < nodes; ++i) node_of[size_t(c.order.at(size_t(i)))] = i;
  std::vector<uint64_t> out(size_t(nodes), 0);
  for (int i = 0; i < nodes; ++i) {
    for (int row = c.order[size_t(i)]; row >= 0; row = c.parent[size_t(row)]) {
      const int j = node_of[size_t(row)];
      if (j >= 0) out[size_t(i)] |= uint64_t{1} << j;  // a BFS prefix holds every ancestor
    }
  }
  return out;
}

std::vector<SelectionCase> randomize_selections(const std::vector<SelectionCase>& cases, std::mt19937_64& rng) {
  std::vector<SelectionCase> out = cases;
  for (SelectionCase& c : out) {
    const int nb = c.committed_blocks;
    const auto forced = [&](int32_t b) { return b == 0 || b >= nb - 2; };
    for (auto& head : c.blocks) {
      for (auto& row : head) {
        std::vector<int32_t> kept, others;
        for (int32_t b : row) {
          if (forced(b)) kept.push_back(b);
        }
        const size_t draws = row.size() - kept.size();
        for (int32_t b = 0; b < nb; ++b) {
          if (!forced(b)) others.push_back(b);
        }
        std::shuffle(others.begin(), others.end(), rng);
        kept.insert(kept.end(), others.begin(), others.begin() + static_cast<std::ptrdiff_t>(draws));
        std::sort(kept.begin(), kept.end());
        row = std::move(kept);
      }
    }
  }
  return out;
}

ListCounts count_lists(const HostLists& l) {
  ListCounts c;
  for (int h = 0; h < l.kv_heads; ++h) {
    std::set<int32_t> u;
    for (int g = 0; g < l.groups; ++g) {
      const int32_t n = l.counts[size_t(g) * l.kv_heads + h];
      c.loaded += n;
      const size_t base = (size_t(g) * l.kv_heads + h) * l.max_blocks;
      u.insert(l.blocks.begin() + static_cast<std::ptrdiff_t>(base),
               l.blocks.begin() + static_cast<std::ptrdiff_t>(base + size_t(n)));
    }
    c.unique += static_cast<int64_t>(u.size());
  }
  return c;
}

}  // namespace specula::bench
