#include "engine/sparse/calibration.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace specula {
namespace {

LayerSelectionEvent selection(int64_t round, int layer, std::vector<int32_t> blocks) {
  LayerSelectionEvent e;
  e.round = round;
  e.layer = layer;
  e.total_blocks = 16;
  e.block_bits = pack_block_bits(blocks, 16);
  return e;
}

TEST(Calibration, JaccardOfAdjacentLayersAndAnchors) {
  LayerSimilarity sim(4);
  for (int64_t round = 0; round < 2; ++round) {
    sim.on_event(selection(round, 0, {0, 1, 2, 3}));
    sim.on_event(selection(round, 1, {0, 1, 2, 3}));    // J = 1
    sim.on_event(selection(round, 2, {0, 1, 8, 9}));    // J = 2/6
    sim.on_event(selection(round, 3, {0, 1, 8, 10}));   // J = 3/5
    LayerSelectionEvent per_query = selection(round, 3, {15});
    per_query.query = 2;  // per-query rows are not the layer's selection
    sim.on_event(per_query);
  }
  const auto j = sim.mean_jaccard_prev();
  ASSERT_EQ(j.size(), 4u);
  EXPECT_DOUBLE_EQ(j[1], 1.0);
  EXPECT_DOUBLE_EQ(j[2], 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(j[3], 3.0 / 5.0);
  EXPECT_EQ(sim.rounds(), 2);
  EXPECT_EQ(pick_anchors(j, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(pick_anchors(j, 3), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(pick_anchors(j, 10), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Calibration, FileIsBoundToItsModel) {
  const std::string path = ::testing::TempDir() + "/calib_" + std::to_string(::getpid()) + ".json";
  Calibration c;
  c.model_name = "m";
  c.model_sha256 = std::string(64, 'a');
  c.n_layers = 30;
  c.jaccard_prev.assign(30, 0.5);
  c.anchors = {0, 7};
  ASSERT_TRUE(save_calibration(c, path).ok());
  auto same = load_calibration(path, std::string(64, 'a'), 30);
  ASSERT_TRUE(same) << same.error().message;
  EXPECT_EQ(same->anchors, (std::vector<int>{0, 7}));
  auto other = load_calibration(path, std::string(64, 'b'), 30);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("another model"), std::string::npos);
  EXPECT_FALSE(load_calibration(path, std::string(64, 'a'), 24).ok());
  std::ofstream(path) << "{\"kind\": \"something else\"}";
  EXPECT_NE(load_calibration(path, std::string(64, 'a'), 30).error().message.find("not a Specula calibration"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace specula
