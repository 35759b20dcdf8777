#pragma once
// The kernel timeline's data and geometry, Qt-free so tests can drive it without a screen
// (hotspot's timelinedelegate tests are the model). Spans are CUPTI kernels (one lane per device
// and stream) and NVTX engine phases (one lane per thread). Each lane splits into tracks, rows
// in which spans never overlap, so a track's ends ascend with its starts and a binary search
// finds the first visible span. Drawing walks a track at most once per pixel column: a span
// narrower than the merge width starts a merged run that swallows everything up to the next
// free column (Tracy's "zone merging"), so a replot costs O(width * log n) per track, not O(n).
#include <cstdint>
#include <string>
#include <vector>

#include "ui/models/session_data.h"

namespace specula::ui {

enum class SpanKind : uint8_t { kKernel, kPhase };

struct TimelineSpan {
  int64_t start = 0;  // ns, relative to TimelineModel::origin()
  int64_t end = 0;
  int32_t name = 0;    // index into TimelineModel::names()
  int32_t source = 0;  // index into SessionData::kernels or ::nvtx
};

struct TimelineTrack {
  int32_t lane = 0;
  int32_t level = 0;  // 0 = outermost
  std::vector<TimelineSpan> spans;  // by start; non-overlapping, so ends ascend too
};

struct TimelineLane {
  std::string label;  // "GPU 0 stream 7", "phases (thread 1234)"
  SpanKind kind = SpanKind::kKernel;
  int32_t first_track = 0;
  int32_t track_count = 0;
};

// A visible piece of a track in pixels: one span, or a merged run of several.
struct TimelineRect {
  double x0 = 0, x1 = 0;  // pixels, x1 > x0
  int32_t span = -1;      // index into the track's spans; -1 for a merged run
  int32_t count = 1;      // spans covered
};

// Linear time <-> pixel mapping of a visible range [t0, t1] (ns) onto [px0, px1].
struct TimeMapping {
  double t0 = 0, t1 = 1;
  double px0 = 0, px1 = 1;
  double to_px(double t) const { return px0 + (t - t0) * (px1 - px0) / (t1 - t0); }
  double to_time(double px) const { return t0 + (px - px0) * (t1 - t0) / (px1 - px0); }
};

// The range after zooming by factor (>1 zooms in) around anchor, which stays put on screen;
// never narrower than min_width ns.
struct TimeRange {
  double t0 = 0, t1 = 0;
  double width() const { return t1 - t0; }
};
TimeRange zoom_range(TimeRange range, double anchor, double factor, double min_width = 100.0);
TimeRange pan_range(TimeRange range, double delta_ns);

struct KernelRangeStat {
  std::string name;
  int64_t count = 0;     // kernels that overlap the range
  int64_t total_ns = 0;  // their time inside the range (clipped)
  double mean_ns = 0;    // total / count
  double share = 0;      // total / range width (streams add up, so the sum may pass 1)
};

// Why the timeline lacks GPU lanes (or everything), in one or two sentences for the view; empty
// when the session has GPU kernels. E.g. "No GPU records in this session: it was recorded on the
// CPU (backend cpu, device ...). Only the engine's phases are drawn."
std::string timeline_note(const SessionData& data);

class TimelineModel {
 public:
  static TimelineModel from_session(const SessionData& data);
  // For tests and the benchmark: lanes of raw spans (times absolute ns), names by index.
  struct LaneInput {
    std::string label;
    SpanKind kind = SpanKind::kKernel;
    std::vector<TimelineSpan> spans;
  };
  static TimelineModel from_lanes(std::vector<LaneInput> lanes, std::vector<std::string> names);

  int64_t origin() const { return origin_; }  // absolute ns of relative 0
  TimeRange extent() const { return {0.0, static_cast<double>(extent_end_)}; }
  const std::vector<TimelineLane>& lanes() const { return lanes_; }
  const std::vector<TimelineTrack>& tracks() const { return tracks_; }
  const std::vector<std::string>& names() const { return names_; }             // full (demangled)
  const std::vector<std::string>& short_names() const { return short_names_; } // for labels
  size_t span_count() const;

  // Visible pieces of a track; spans narrower than merge_px join a merged run.
  void visible_rects(int32_t track, const TimeMapping& map, double merge_px, std::vector<TimelineRect>& out) const;
  // The span of the track under time t (ns relative), else the nearest one within tolerance
  // ns (so sub-pixel kernels can be clicked), else -1.
  int32_t span_at(int32_t track, double t, double tolerance = 0) const;
  // Kernel statistics over [t0, t1] (relative ns), by total time, largest first.
  std::vector<KernelRangeStat> kernel_stats(double t0, double t1) const;

 private:
  void add_lane(LaneInput lane);

  int64_t origin_ = 0;
  int64_t extent_end_ = 1;
  std::vector<TimelineLane> lanes_;
  std::vector<TimelineTrack> tracks_;
  std::vector<std::string> names_;
  std::vector<std::string> short_names_;
};

}  // namespace specula::ui
