#include "engine/observer/observer.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace specula {
namespace {

class CollectingObserver : public Observer {
 public:
  explicit CollectingObserver(ObserveLevel level) : level_(level) {}
  void on_event(const Event& event) override { kinds.push_back(kind_of(event)); }
  ObserveLevel level() const override { return level_; }
  std::vector<EventKind> kinds;

 private:
  ObserveLevel level_;
};

TEST(ObserveLevel, ParsesAndPrintsEveryLevel) {
  for (ObserveLevel level : {ObserveLevel::kOff, ObserveLevel::kSummary, ObserveLevel::kFull}) {
    auto parsed = parse_observe_level(to_string(level));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, level);
  }
  auto bad = parse_observe_level("verbose");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("verbose"), std::string::npos);
}

TEST(ObserveLevel, PerQuerySelectionsNeedFull) {
  LayerSelectionEvent group;
  group.query = -1;
  LayerSelectionEvent query;
  query.query = 3;
  EXPECT_EQ(kind_of(group), EventKind::kLayerSelection);
  EXPECT_EQ(kind_of(query), EventKind::kQuerySelection);
  EXPECT_TRUE(admits(ObserveLevel::kSummary, EventKind::kLayerSelection));
  EXPECT_FALSE(admits(ObserveLevel::kSummary, EventKind::kQuerySelection));
  EXPECT_TRUE(admits(ObserveLevel::kFull, EventKind::kQuerySelection));
  EXPECT_FALSE(admits(ObserveLevel::kOff, EventKind::kRoundBegin));
  EXPECT_FALSE(observes(nullptr, EventKind::kRoundBegin));
}

TEST(FanOut, ForwardsEachEventToTheObserversWhoseLevelAdmitsIt) {
  auto off = std::make_shared<CollectingObserver>(ObserveLevel::kOff);
  auto summary = std::make_shared<CollectingObserver>(ObserveLevel::kSummary);
  auto full = std::make_shared<CollectingObserver>(ObserveLevel::kFull);
  FanOut fan;
  EXPECT_EQ(fan.level(), ObserveLevel::kOff);
  fan.attach(off);
  fan.attach(summary);
  EXPECT_EQ(fan.level(), ObserveLevel::kSummary);
  EXPECT_FALSE(fan.wants(EventKind::kQuerySelection));
  fan.attach(full);
  EXPECT_EQ(fan.level(), ObserveLevel::kFull);
  EXPECT_TRUE(fan.wants(EventKind::kQuerySelection));

  fan.on_event(RoundBeginEvent{0, 10, 5});
  LayerSelectionEvent query;
  query.query = 1;
  fan.on_event(query);
  fan.on_event(RoundEndEvent{0, 20, true, 2, 2});

  EXPECT_TRUE(off->kinds.empty());
  EXPECT_EQ(summary->kinds, (std::vector<EventKind>{EventKind::kRoundBegin, EventKind::kRoundEnd}));
  EXPECT_EQ(full->kinds,
            (std::vector<EventKind>{EventKind::kRoundBegin, EventKind::kQuerySelection, EventKind::kRoundEnd}));
}

TEST(BlockBits, PackUnpackAndCountRoundTrip) {
  const std::vector<int32_t> ids = {0, 3, 8, 15, 16};
  const auto bits = pack_block_bits(ids, 17);
  ASSERT_EQ(bits.size(), 3u);
  EXPECT_EQ(bits[0], 0b0000'1001);
  EXPECT_EQ(bits[1], 0b1000'0001);
  EXPECT_EQ(bits[2], 0b0000'0001);
  EXPECT_EQ(unpack_block_bits(bits), ids);
  EXPECT_EQ(count_block_bits(bits), 5);
  // Ids outside [0, total) are not representable and are left out.
  EXPECT_EQ(unpack_block_bits(pack_block_bits({-1, 2, 17}, 17)), std::vector<int32_t>{2});
}

}  // namespace
}  // namespace specula
