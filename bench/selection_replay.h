#pragma once
// Real per-query block selections (bench/selection_overlap.py export) turned into the block lists
// of the CUDA sparse tree verify (kernels/cuda/attention.h BlockLists), on the host, for
// bench_union_replay. No CUDA here, so tests run anywhere.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace specula::bench {

// One (session, round, layer) of the file: every row's committed blocks on every KV head.
struct SelectionCase {
  int session = 0, round = 0, layer = 0, kv_heads = 0, rows = 0;
  int committed_tokens = 0, committed_blocks = 0, group_size = 0;
  std::vector<int32_t> parent;                            // [rows] parent row, -1 for row 0 (pending token)
  std::vector<int32_t> order;                             // [rows] traversal order: kernel node i = row order[i]
  std::vector<std::vector<std::vector<int32_t>>> blocks;  // [kv head][row] ascending committed block ids
};

// Reads the "SPSEL001" file; false with *error naming the file and the offending case.
bool read_selection_file(const std::string& path, std::vector<SelectionCase>* cases, std::string* error);

// One kernel problem built from real selections. Node i of the kernels is row order[i] of the
// case, for the first `nodes` rows in traversal order (a BFS prefix is a tree, and each row's
// selection depends only on its own query, so these are the lists a tree of `nodes` rows gets).
// KV head h of the problem takes case heads[h].case_index, head heads[h].head.
struct HeadSource {
  int case_index = 0;
  int head = 0;
};
struct ReplayShape {
  int kv_heads = 3;
  int nodes = 64;
  int prefix_len = 0;  // committed tokens in the problem
  int block_size = 16;
  // Committed blocks of the problem (prefix_len / block_size rounded up), S. S = nb (the case's
  // committed blocks) replays the real lists as they are. S > nb maps each real block b to
  // several problem blocks, keeping every set's share of the context and the overlap between sets
  // (Jaccard, union size; exactly when nb divides S):
  //   stretch     [b·S/nb, (b+1)·S/nb): runs of ~S/nb neighbours, one membership mask for the run
  //   interleave  b + j·nb for j < S/nb (floor): the real sequence of blocks and masks repeated
  //               S/nb times, so consecutive blocks change membership as often as the real ones
  int committed_blocks = 0;
  bool interleave = false;
};

// Host copy of BlockLists: [groups][kv_heads][max_blocks] ids (ascending) and member masks,
// [groups][kv_heads] counts. Every node also gets the blocks holding tree positions
// (prefix_len / block_size .. ceil((prefix_len + nodes) / block_size) - 1), as select_blocks adds them.
struct HostLists {
  int groups = 0, group_size = 0, max_blocks = 0, kv_heads = 0;
  std::vector<int32_t> blocks;
  std::vector<uint64_t> members;
  std::vector<int32_t> counts;
};

// group_size 1: per-query lists (one group a node); > 1: group-union (the union of the group's
// nodes' sets, each block's member mask naming the nodes that chose it).
HostLists build_lists(const std::vector<SelectionCase>& cases, const std::vector<HeadSource>& heads,
                      const ReplayShape& shape, int group_size);

// The same lists laid out with room for max_blocks (>= l.max_blocks) entries per (group, kv head),
// counts unchanged: the capacity select_blocks allocates (select_list_shape: group size x the
// per-node list size), which the attention kernel's plan sizes its chunks by.
HostLists with_capacity(const HostLists& l, int max_blocks);

// Ancestor masks of the first `nodes` kernel nodes (bit j of entry i: node j is node i or its ancestor).
std::vector<uint64_t> ancestor_masks(const SelectionCase& c, int nodes);

// Committed blocks per node and KV head mapped into the problem (sorted, no tree blocks): for the
// overlap figures of the replayed lists.
std::vector<std::vector<std::vector<int32_t>>> mapped_sets(const std::vector<SelectionCase>& cases,
                                                           const std::vector<HeadSource>& heads,
                                                           const ReplayShape& shape);

// The same cases with each row's scored blocks replaced by as many drawn uniformly (without
// replacement) from the blocks it did not keep; block 0 (sink) and the last two (local), which the
// selection forces, stay. Same list sizes, the overlap that independent random sets give.
std::vector<SelectionCase> randomize_selections(const std::vector<SelectionCase>& cases, std::mt19937_64& rng);

// Entries over all lists (blocks loaded) and distinct blocks per KV head, summed over heads.
struct ListCounts {
  int64_t loaded = 0;
  int64_t unique = 0;
};
ListCounts count_lists(const HostLists& lists);

}  // namespace specula::bench
