// The timeline's geometry without a screen: nesting into tracks, the time <-> pixel mapping,
// zoom around the cursor, culling and merging of sub-pixel spans, picking, and the statistics
// of a range.
#include "ui/models/timeline_model.h"

#include <gtest/gtest.h>

namespace specula::ui {
namespace {

using Lane = TimelineModel::LaneInput;

TimelineModel one_lane(std::vector<TimelineSpan> spans, SpanKind kind = SpanKind::kKernel) {
  std::vector<Lane> lanes;
  lanes.push_back({"lane", kind, std::move(spans)});
  return TimelineModel::from_lanes(std::move(lanes), {"a", "b", "c"});
}

TEST(TimelineModel, NestedRangesGoOneTrackDown) {
  const auto m = one_lane({{1000, 1100, 0, 0}, {1010, 1020, 1, 1}, {1030, 1040, 1, 2}, {1200, 1300, 0, 3}},
                          SpanKind::kPhase);
  EXPECT_EQ(m.origin(), 1000);
  ASSERT_EQ(m.lanes().size(), 1u);
  ASSERT_EQ(m.tracks().size(), 2u);
  EXPECT_EQ(m.lanes()[0].track_count, 2);
  ASSERT_EQ(m.tracks()[0].spans.size(), 2u);
  EXPECT_EQ(m.tracks()[0].spans[0].start, 0);    // relative to the origin
  EXPECT_EQ(m.tracks()[0].spans[1].start, 200);
  ASSERT_EQ(m.tracks()[1].spans.size(), 2u);
  EXPECT_EQ(m.tracks()[1].spans[0].source, 1);
  EXPECT_EQ(m.extent().t1, 300);
  EXPECT_EQ(m.span_count(), 4u);
}

TEST(TimelineModel, MappingIsLinearAndInvertible) {
  const TimeMapping map{1000, 3000, 50, 450};
  EXPECT_DOUBLE_EQ(map.to_px(1000), 50);
  EXPECT_DOUBLE_EQ(map.to_px(2000), 250);
  EXPECT_DOUBLE_EQ(map.to_px(3000), 450);
  EXPECT_DOUBLE_EQ(map.to_time(map.to_px(1234.5)), 1234.5);
}

TEST(TimelineModel, ZoomKeepsTheAnchorInPlace) {
  const TimeRange r = zoom_range({0, 1000}, 250, 2.0);
  EXPECT_DOUBLE_EQ(r.t0, 125);
  EXPECT_DOUBLE_EQ(r.t1, 625);
  // The anchor sits at the same fraction of the range before and after.
  EXPECT_DOUBLE_EQ((250 - r.t0) / r.width(), 0.25);
  const TimeRange out = zoom_range(r, 250, 0.5);
  EXPECT_DOUBLE_EQ(out.t0, 0);
  EXPECT_DOUBLE_EQ(out.t1, 1000);
  const TimeRange tight = zoom_range({0, 1000}, 500, 1e6, 100);
  EXPECT_DOUBLE_EQ(tight.width(), 100);  // never narrower than the minimum
  const TimeRange moved = pan_range({10, 20}, -5);
  EXPECT_DOUBLE_EQ(moved.t0, 5);
  EXPECT_DOUBLE_EQ(moved.t1, 15);
}

// Ten 1 ns spans 1 ns apart, then one wide span, drawn at 1 px per ns with a 2 px merge width:
// the ten merge into one run and the wide one stays on its own.
TEST(TimelineModel, SubPixelSpansMergeAndWideOnesStayApart) {
  std::vector<TimelineSpan> spans;
  for (int i = 0; i < 10; ++i) spans.push_back({2 * i, 2 * i + 1, 0, i});
  spans.push_back({20, 1000, 1, 10});
  const auto m = one_lane(spans);
  std::vector<TimelineRect> rects;
  m.visible_rects(0, TimeMapping{0, 1000, 0, 1000}, 2.0, rects);
  ASSERT_EQ(rects.size(), 2u);
  EXPECT_EQ(rects[0].span, -1);
  EXPECT_EQ(rects[0].count, 10);
  EXPECT_DOUBLE_EQ(rects[0].x0, 0);
  EXPECT_DOUBLE_EQ(rects[0].x1, 19);
  EXPECT_EQ(rects[1].span, 10);
  EXPECT_DOUBLE_EQ(rects[1].x0, 20);
  // Zoomed in 10x, every span is 10 px wide and drawn alone.
  rects.clear();
  m.visible_rects(0, TimeMapping{0, 100, 0, 1000}, 2.0, rects);
  ASSERT_EQ(rects.size(), 11u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(rects[static_cast<size_t>(i)].span, i);
}

TEST(TimelineModel, CullsToTheVisibleRange) {
  std::vector<TimelineSpan> spans;
  for (int i = 0; i < 100; ++i) spans.push_back({i * 100, i * 100 + 50, 0, i});
  const auto m = one_lane(spans);
  std::vector<TimelineRect> rects;
  m.visible_rects(0, TimeMapping{2025, 2525, 0, 500}, 2.0, rects);  // spans 20 (partly) .. 25
  ASSERT_EQ(rects.size(), 6u);
  EXPECT_EQ(rects.front().span, 20);
  EXPECT_EQ(rects.back().span, 25);
  EXPECT_DOUBLE_EQ(rects.front().x0, -2);  // clipped just left of the view
}

// 100k one-ns spans over 1 ms at 1000 px: the walk is bounded by the pixels, not the spans.
TEST(TimelineModel, ManySpansGiveAtMostAFewRectsPerPixel) {
  std::vector<TimelineSpan> spans;
  for (int i = 0; i < 100'000; ++i) spans.push_back({i * 10, i * 10 + 1, i % 3, i});
  const auto m = one_lane(spans);
  std::vector<TimelineRect> rects;
  m.visible_rects(0, TimeMapping{0, 1e6, 0, 1000}, 2.0, rects);
  EXPECT_LE(rects.size(), 1000u);
  int64_t covered = 0;
  for (const auto& r : rects) covered += r.count;
  EXPECT_EQ(covered, 100'000);  // every span is in exactly one rect
}

TEST(TimelineModel, PicksTheSpanUnderOrNearTheCursor) {
  const auto m = one_lane({{0, 10, 0, 0}, {20, 30, 1, 1}, {100, 101, 2, 2}});
  EXPECT_EQ(m.span_at(0, 5), 0);
  EXPECT_EQ(m.span_at(0, 25), 1);
  EXPECT_EQ(m.span_at(0, 15), -1);
  EXPECT_EQ(m.span_at(0, 15, 6), 0);    // 5 ns from span 0, 5 from span 1: the earlier wins ties
  EXPECT_EQ(m.span_at(0, 98, 3), 2);
  EXPECT_EQ(m.span_at(0, 500, 3), -1);
  EXPECT_EQ(m.span_at(7, 5), -1);        // no such track
}

// Stream 1: a [0, 10], a [20, 30]; stream 2: b [8, 12]; phases are ignored. Range [5, 25]:
// a: 2 kernels, 5 + 5 ns inside, share 10/20; b: 1 kernel, 4 ns, share 4/20.
TEST(TimelineModel, KernelStatisticsOfARange) {
  std::vector<Lane> lanes;
  lanes.push_back({"phases", SpanKind::kPhase, {{0, 30, 2, 0}}});
  lanes.push_back({"s1", SpanKind::kKernel, {{0, 10, 0, 0}, {20, 30, 0, 1}}});
  lanes.push_back({"s2", SpanKind::kKernel, {{8, 12, 1, 2}}});
  const auto m = TimelineModel::from_lanes(std::move(lanes), {"a", "b", "verify"});
  const auto stats = m.kernel_stats(5, 25);
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].name, "a");
  EXPECT_EQ(stats[0].count, 2);
  EXPECT_EQ(stats[0].total_ns, 10);
  EXPECT_DOUBLE_EQ(stats[0].mean_ns, 5);
  EXPECT_DOUBLE_EQ(stats[0].share, 0.5);
  EXPECT_EQ(stats[1].name, "b");
  EXPECT_EQ(stats[1].count, 1);
  EXPECT_EQ(stats[1].total_ns, 4);
  EXPECT_DOUBLE_EQ(stats[1].share, 0.2);
  EXPECT_TRUE(m.kernel_stats(12, 20).empty());  // a gap
  EXPECT_TRUE(m.kernel_stats(30, 5).empty());   // reversed range
  const auto all = m.kernel_stats(0, 30);
  EXPECT_EQ(all[0].total_ns, 20);
}

}  // namespace
}  // namespace specula::ui

#include "ui/models/range_stats_model.h"

namespace specula::ui {
namespace {

TEST(TimelineModel, NoteSaysWhyGpuLanesAreMissing) {
  SessionData data;
  data.info.backend = "cuda";
  data.info.device = "NVIDIA H100";
  data.info.level = "summary";
  EXPECT_EQ(timeline_note(data),
            "No GPU kernels in this session: it ran on NVIDIA H100, but the kernel capture (CUPTI) was unavailable or "
            "recorded none. No engine phases were recorded either (level summary), so nothing is drawn.");
  data.info.backend = "cpu";
  data.info.device = "Xeon";
  data.nvtx.push_back({0, 10, "verify", 1, 0});
  EXPECT_EQ(timeline_note(data),
            "No GPU records in this session: it was recorded on the CPU (backend cpu, Xeon). Only the engine's phases "
            "are drawn.");
  data.kernels.emplace_back();
  EXPECT_EQ(timeline_note(data), "");
}

TEST(RangeStatsModel, FormatsDurationsAndSortsByRawValues) {
  EXPECT_EQ(format_duration(830), "830 ns");
  EXPECT_EQ(format_duration(250'000), "250 µs");
  EXPECT_EQ(format_duration(1'500'000), "1.5 ms");
  EXPECT_EQ(format_duration(2'204'000'000.0), "2.204 s");
  RangeStatsModel model;
  model.setStats({{"void gemm<128>(float*)", 3, 6000, 2000, 0.6}, {"softmax", 1, 500, 500, 0.05}}, 0, 10'000);
  ASSERT_EQ(model.rowCount(), 2);
  EXPECT_EQ(model.columnCount(), RangeStatsModel::kColumns);
  EXPECT_EQ(model.data(model.index(0, RangeStatsModel::kName)).toString(), "gemm");
  EXPECT_EQ(model.data(model.index(0, RangeStatsModel::kName), Qt::UserRole).toString(), "void gemm<128>(float*)");
  EXPECT_EQ(model.data(model.index(0, RangeStatsModel::kTotal)).toString(), "6 µs");
  EXPECT_EQ(model.data(model.index(0, RangeStatsModel::kTotal), Qt::UserRole).toLongLong(), 6000);
  EXPECT_EQ(model.data(model.index(0, RangeStatsModel::kShare)).toString(), "60.0 %");
  EXPECT_EQ(model.data(model.index(1, RangeStatsModel::kCount), Qt::UserRole).toLongLong(), 1);
}

}  // namespace
}  // namespace specula::ui
