#include "bench/selection_replay.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace specula::bench {
namespace {

// The file bench/selection_overlap.py writes, built by hand: one case, 1 KV head, 4 rows
// (parents -1, 0, 0, 1), 120 committed tokens = 8 blocks of 16.
//   row 0 {0, 3, 6, 7}   row 1 {0, 4, 6, 7}   row 2 {0, 3, 6, 7}   row 3 {0, 5, 6, 7}
struct FileWriter {
  std::vector<char> bytes;
  void i32(int32_t x) {
    const char* p = reinterpret_cast<const char*>(&x);
    bytes.insert(bytes.end(), p, p + 4);
  }
  void byte(uint8_t x) { bytes.push_back(static_cast<char>(x)); }
};

std::vector<char> small_file(std::vector<int32_t> order = {0, 1, 2, 3}) {
  FileWriter w;
  for (char c : std::string("SPSEL001")) w.bytes.push_back(c);
  w.i32(1);
  for (int32_t x : {7, 12, 5, 1, 4, 120, 8, 8}) w.i32(x);  // session round layer heads rows tokens blocks C
  for (int32_t p : {-1, 0, 0, 1}) w.i32(p);
  for (int32_t o : order) w.i32(o);
  // LSB first: {0,3,6,7} = 0b11001001, {0,4,6,7} = 0b11010001, {0,5,6,7} = 0b11100001.
  for (uint8_t b : {0xC9, 0xD1, 0xC9, 0xE1}) w.byte(b);
  return w.bytes;
}

std::string write_temp(const std::vector<char>& bytes, const std::string& name) {
  // The process id in the name: ctest runs each test as its own process, in parallel, and two
  // of them writing one path let a reader see a half-written file (a crash in -j2 runs).
  const auto path = std::filesystem::temp_directory_path() /
                    ("selection_replay_test_" + std::to_string(getpid()) + "_" + name + ".bin");
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

std::vector<SelectionCase> read_small(std::vector<int32_t> order = {0, 1, 2, 3}) {
  std::vector<SelectionCase> cases;
  std::string error;
  EXPECT_TRUE(read_selection_file(write_temp(small_file(order), "ok"), &cases, &error)) << error;
  return cases;
}

TEST(SelectionReplay, ReadsTheExportedFormat) {
  const auto cases = read_small();
  ASSERT_EQ(cases.size(), 1u);
  const SelectionCase& c = cases[0];
  EXPECT_EQ(c.session, 7);
  EXPECT_EQ(c.round, 12);
  EXPECT_EQ(c.layer, 5);
  EXPECT_EQ(c.committed_tokens, 120);
  EXPECT_EQ(c.committed_blocks, 8);
  EXPECT_EQ(c.group_size, 8);
  EXPECT_EQ(c.parent, (std::vector<int32_t>{-1, 0, 0, 1}));
  ASSERT_EQ(c.blocks.size(), 1u);
  EXPECT_EQ(c.blocks[0][0], (std::vector<int32_t>{0, 3, 6, 7}));
  EXPECT_EQ(c.blocks[0][1], (std::vector<int32_t>{0, 4, 6, 7}));
  EXPECT_EQ(c.blocks[0][3], (std::vector<int32_t>{0, 5, 6, 7}));
}

TEST(SelectionReplay, RefusesBadFiles) {
  std::vector<SelectionCase> cases;
  std::string error;
  auto bytes = small_file();
  bytes.pop_back();
  EXPECT_FALSE(read_selection_file(write_temp(bytes, "short"), &cases, &error));
  EXPECT_NE(error.find("case 0: truncated block bits"), std::string::npos) << error;
  bytes = small_file();
  bytes[0] = 'X';
  EXPECT_FALSE(read_selection_file(write_temp(bytes, "magic"), &cases, &error));
  EXPECT_NE(error.find("not a selection file"), std::string::npos) << error;
  EXPECT_FALSE(read_selection_file(write_temp(small_file({0, 1, 1, 3}), "perm"), &cases, &error));
  EXPECT_NE(error.find("not a permutation"), std::string::npos) << error;
  EXPECT_FALSE(read_selection_file("/nonexistent/selections.bin", &cases, &error));
}

TEST(SelectionReplay, PerQueryAndGroupUnionLists) {
  const auto cases = read_small();
  ReplayShape shape;
  shape.kv_heads = 1;
  shape.nodes = 4;
  shape.prefix_len = 120;  // tree positions 120..123 lie in block 7, already in every set
  shape.committed_blocks = 8;
  const std::vector<HeadSource> heads = {{0, 0}};

  const HostLists pq = build_lists(cases, heads, shape, 1);
  EXPECT_EQ(pq.groups, 4);
  EXPECT_EQ(pq.max_blocks, 4);
  EXPECT_EQ(pq.counts, (std::vector<int32_t>{4, 4, 4, 4}));
  EXPECT_EQ(std::vector<int32_t>(pq.blocks.begin() + 4, pq.blocks.begin() + 8), (std::vector<int32_t>{0, 4, 6, 7}));
  EXPECT_EQ(pq.members[4], 0b10u);  // node 1's own list names node 1
  const ListCounts pqc = count_lists(pq);
  EXPECT_EQ(pqc.loaded, 16);
  EXPECT_EQ(pqc.unique, 6);  // {0, 3, 4, 5, 6, 7}

  const HostLists gu = build_lists(cases, heads, shape, 4);
  ASSERT_EQ(gu.groups, 1);
  EXPECT_EQ(gu.counts[0], 6);
  EXPECT_EQ(std::vector<int32_t>(gu.blocks.begin(), gu.blocks.begin() + 6), (std::vector<int32_t>{0, 3, 4, 5, 6, 7}));
  EXPECT_EQ(std::vector<uint64_t>(gu.members.begin(), gu.members.begin() + 6),
            (std::vector<uint64_t>{0b1111, 0b0101, 0b0010, 0b1000, 0b1111, 0b1111}));
  EXPECT_EQ(count_lists(gu).loaded, 6);

  const HostLists roomy = with_capacity(gu, 16);
  EXPECT_EQ(roomy.max_blocks, 16);
  EXPECT_EQ(roomy.counts, gu.counts);
  EXPECT_EQ(std::vector<int32_t>(roomy.blocks.begin(), roomy.blocks.begin() + 6),
            std::vector<int32_t>(gu.blocks.begin(), gu.blocks.begin() + 6));
  EXPECT_EQ(roomy.members[1], 0b0101u);
  EXPECT_EQ(count_lists(roomy).loaded, 6);

  const HostLists pairs = build_lists(cases, heads, shape, 2);  // {0,3,4,6,7} and {0,3,5,6,7}
  EXPECT_EQ(pairs.counts, (std::vector<int32_t>{5, 5}));
  EXPECT_EQ(count_lists(pairs).loaded, 10);
  EXPECT_EQ(count_lists(pairs).unique, 6);
  const HostLists pairs_roomy = with_capacity(pairs, 8);  // group 1 now starts at entry 8
  EXPECT_EQ(std::vector<int32_t>(pairs_roomy.blocks.begin() + 8, pairs_roomy.blocks.begin() + 13),
            (std::vector<int32_t>{0, 3, 5, 6, 7}));
  EXPECT_EQ(pairs_roomy.blocks[13], 0);
  EXPECT_EQ(count_lists(pairs_roomy).loaded, 10);
}

TEST(SelectionReplay, StretchKeepsOverlapAndAddsTreeBlocks) {
  const auto cases = read_small();
  ReplayShape shape;
  shape.kv_heads = 2;  // both heads from the case's one head
  shape.nodes = 4;
  shape.prefix_len = 256;
  shape.committed_blocks = 16;  // each real block -> 2
  const std::vector<HeadSource> heads = {{0, 0}, {0, 0}};
  const auto sets = mapped_sets(cases, heads, shape);
  EXPECT_EQ(sets[1][0], (std::vector<int32_t>{0, 1, 6, 7, 12, 13, 14, 15}));
  const HostLists pq = build_lists(cases, heads, shape, 1);
  EXPECT_EQ(pq.max_blocks, 9);  // 8 stretched + tree block 16
  EXPECT_EQ(pq.blocks[8], 16);
  EXPECT_EQ(count_lists(pq).loaded, 2 * 4 * 9);
  EXPECT_EQ(count_lists(pq).unique, 2 * 13);  // 2 · |{0,3,4,5,6,7}| + tree block, per head
  EXPECT_EQ(count_lists(build_lists(cases, heads, shape, 4)).loaded, 2 * 13);
}

TEST(SelectionReplay, InterleaveRepeatsTheRealSequence) {
  const auto cases = read_small();
  ReplayShape shape;
  shape.kv_heads = 1;
  shape.nodes = 4;
  shape.prefix_len = 272;
  shape.committed_blocks = 17;  // 17 / 8 = 2 copies; block 16 never listed as committed
  shape.interleave = true;
  const auto sets = mapped_sets(cases, {{0, 0}}, shape);
  EXPECT_EQ(sets[0][0], (std::vector<int32_t>{0, 3, 6, 7, 8, 11, 14, 15}));
  EXPECT_EQ(sets[0][3], (std::vector<int32_t>{0, 5, 6, 7, 8, 13, 14, 15}));
  const HostLists gu = build_lists(cases, {{0, 0}}, shape, 4);
  // Union {0,3,4,5,6,7} twice + tree block 17; block 3's members (nodes 0, 2) again at 11.
  ASSERT_EQ(gu.counts[0], 13);
  EXPECT_EQ(gu.blocks[12], 17);
  EXPECT_EQ(gu.members[1], 0b0101u);
  EXPECT_EQ(gu.blocks[7], 11);
  EXPECT_EQ(gu.members[7], 0b0101u);
}

TEST(SelectionReplay, AncestorsFollowTheTraversalOrder) {
  EXPECT_EQ(ancestor_masks(read_small()[0], 4), (std::vector<uint64_t>{0b0001, 0b0011, 0b0101, 0b1011}));
  // Nodes 1 and 2 swap rows: node 3 (row 3) now hangs under node 2 (row 1).
  const auto swapped = read_small({0, 2, 1, 3});
  EXPECT_EQ(ancestor_masks(swapped[0], 4), (std::vector<uint64_t>{0b0001, 0b0011, 0b0101, 0b1101}));
  EXPECT_EQ(ancestor_masks(swapped[0], 2), (std::vector<uint64_t>{0b01, 0b11}));
  ReplayShape shape;
  shape.kv_heads = 1;
  shape.nodes = 2;
  shape.prefix_len = 120;
  shape.committed_blocks = 8;
  // Node 1 is row 2 under this order: its list is row 2's set.
  const HostLists pq = build_lists(swapped, {{0, 0}}, shape, 1);
  EXPECT_EQ(std::vector<int32_t>(pq.blocks.begin() + 4, pq.blocks.begin() + 8), (std::vector<int32_t>{0, 3, 6, 7}));
}

TEST(SelectionReplay, RandomizedKeepsSizesAndForcedBlocks) {
  std::vector<SelectionCase> cases = read_small();
  // A wider case so that the draws have room: 64 blocks, every row 8 of them.
  SelectionCase& c = cases[0];
  c.committed_blocks = 64;
  c.committed_tokens = 1024;
  for (auto& row : c.blocks[0]) row = {0, 10, 11, 12, 13, 14, 62, 63};
  std::mt19937_64 rng(42);
  const auto random = randomize_selections(cases, rng);
  int same = 0;
  for (size_t r = 0; r < 4; ++r) {
    const auto& row = random[0].blocks[0][r];
    ASSERT_EQ(row.size(), 8u);
    EXPECT_TRUE(std::is_sorted(row.begin(), row.end()));
    EXPECT_EQ(std::adjacent_find(row.begin(), row.end()), row.end());
    EXPECT_EQ(row.front(), 0);
    EXPECT_EQ(row[6], 62);
    EXPECT_EQ(row[7], 63);
    same += row == c.blocks[0][r];
  }
  EXPECT_LT(same, 4);  // 5 of 61 free blocks drawn four times: all four equal to the input is ~1e-28
  EXPECT_EQ(random[0].parent, c.parent);
}

}  // namespace
}  // namespace specula::bench
