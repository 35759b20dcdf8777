#include "ui/models/timeline_model.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

namespace specula::ui {

TimeRange zoom_range(TimeRange range, double anchor, double factor, double min_width) {
  if (factor <= 0) return range;
  double width = range.width() / factor;
  if (width < min_width) width = min_width;
  const double ratio = range.width() > 0 ? (anchor - range.t0) / range.width() : 0.5;
  return {anchor - ratio * width, anchor - ratio * width + width};
}

TimeRange pan_range(TimeRange range, double delta_ns) { return {range.t0 + delta_ns, range.t1 + delta_ns}; }

std::string timeline_note(const SessionData& data) {
  if (!data.kernels.empty()) return {};
  const profiler::SessionInfo& info = data.info;
  const std::string device = info.device.empty() ? std::string("unknown device") : info.device;
  std::string note;
  if (info.backend == "cuda") {
    note = "No GPU kernels in this session: it ran on " + device +
           ", but the kernel capture (CUPTI) was unavailable or recorded none.";
  } else {
    note = "No GPU records in this session: it was recorded on the CPU (backend " +
           (info.backend.empty() ? std::string("unknown") : info.backend) + ", " + device + ").";
  }
  note += data.nvtx.empty() ? " No engine phases were recorded either (level " + info.level + "), so nothing is drawn."
                            : " Only the engine's phases are drawn.";
  return note;
}

TimelineModel TimelineModel::from_session(const SessionData& data) {
  std::vector<std::string> names;
  std::unordered_map<std::string, int32_t> name_ids;
  const auto intern = [&](const std::string& name) {
    auto [it, inserted] = name_ids.try_emplace(name, static_cast<int32_t>(names.size()));
    if (inserted) names.push_back(name);
    return it->second;
  };
  std::vector<LaneInput> lanes;
  std::map<int64_t, size_t> phase_lane;  // global tid -> lane
  for (size_t i = 0; i < data.nvtx.size(); ++i) {
    const auto& r = data.nvtx[i];
    if (r.end < r.start) continue;
    auto [it, inserted] = phase_lane.try_emplace(r.global_tid, lanes.size());
    if (inserted) {
      // nsys packs (pid << 24) | tid into globalTid (profiler::nsys_global_tid).
      lanes.push_back({"phases (thread " + std::to_string(r.global_tid & 0xFFFFFF) + ")", SpanKind::kPhase, {}});
    }
    lanes[it->second].spans.push_back({r.start, r.end, intern(r.text), static_cast<int32_t>(i)});
  }
  std::map<std::pair<int32_t, int32_t>, size_t> stream_lane;  // (device, stream) -> lane
  for (size_t i = 0; i < data.kernels.size(); ++i) {
    const auto& k = data.kernels[i];
    if (k.end < k.start) continue;
    const std::pair<int32_t, int32_t> key{k.device_id, k.stream_id};
    stream_lane.try_emplace(key, 0);
  }
  for (auto& [key, index] : stream_lane) {
    index = lanes.size();
    lanes.push_back({"GPU " + std::to_string(key.first) + " stream " + std::to_string(key.second), SpanKind::kKernel, {}});
  }
  for (size_t i = 0; i < data.kernels.size(); ++i) {
    const auto& k = data.kernels[i];
    if (k.end < k.start) continue;
    lanes[stream_lane[{k.device_id, k.stream_id}]].spans.push_back(
        {k.start, k.end, intern(k.demangled_name), static_cast<int32_t>(i)});
  }
  return from_lanes(std::move(lanes), std::move(names));
}

TimelineModel TimelineModel::from_lanes(std::vector<LaneInput> lanes, std::vector<std::string> names) {
  TimelineModel m;
  m.names_ = std::move(names);
  m.short_names_.reserve(m.names_.size());
  for (const auto& n : m.names_) {
    std::string s = profiler::kernel_short_name(n);
    m.short_names_.push_back(s.empty() ? n : s);
  }
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const auto& lane : lanes) {
    for (const auto& s : lane.spans) origin = std::min(origin, s.start);
  }
  m.origin_ = origin == std::numeric_limits<int64_t>::max() ? 0 : origin;
  for (auto& lane : lanes) {
    for (auto& s : lane.spans) {
      s.start -= m.origin_;
      s.end -= m.origin_;
      m.extent_end_ = std::max(m.extent_end_, s.end);
    }
    m.add_lane(std::move(lane));
  }
  return m;
}

void TimelineModel::add_lane(LaneInput lane) {
  // Outer spans first at equal starts, so nested ranges land one level below their parent.
  std::sort(lane.spans.begin(), lane.spans.end(), [](const TimelineSpan& a, const TimelineSpan& b) {
    return a.start != b.start ? a.start < b.start : a.end > b.end;
  });
  TimelineLane out{lane.label, lane.kind, static_cast<int32_t>(tracks_.size()), 0};
  std::vector<int64_t> level_end;
  const size_t first = tracks_.size();
  for (const auto& s : lane.spans) {
    size_t level = 0;
    while (level < level_end.size() && level_end[level] > s.start) ++level;
    if (level == level_end.size()) {
      level_end.push_back(0);
      tracks_.push_back({static_cast<int32_t>(lanes_.size()), static_cast<int32_t>(level), {}});
    }
    level_end[level] = s.end;
    tracks_[first + level].spans.push_back(s);
  }
  if (level_end.empty()) tracks_.push_back({static_cast<int32_t>(lanes_.size()), 0, {}});  // an empty row
  out.track_count = static_cast<int32_t>(tracks_.size() - first);
  lanes_.push_back(std::move(out));
}

size_t TimelineModel::span_count() const {
  size_t n = 0;
  for (const auto& t : tracks_) n += t.spans.size();
  return n;
}

namespace {

// First span whose end is after t (ends ascend within a track).
size_t first_ending_after(const std::vector<TimelineSpan>& spans, double t) {
  return static_cast<size_t>(std::partition_point(spans.begin(), spans.end(),
                                                  [t](const TimelineSpan& s) { return static_cast<double>(s.end) <= t; }) -
                             spans.begin());
}

// First span at or after `from` that starts at or after t.
size_t first_starting_at(const std::vector<TimelineSpan>& spans, size_t from, double t) {
  return static_cast<size_t>(
      std::partition_point(spans.begin() + static_cast<ptrdiff_t>(from), spans.end(),
                           [t](const TimelineSpan& s) { return static_cast<double>(s.start) < t; }) -
      spans.begin());
}

}  // namespace

void TimelineModel::visible_rects(int32_t track, const TimeMapping& map, double merge_px,
                                  std::vector<TimelineRect>& out) const {
  const auto& spans = tracks_[static_cast<size_t>(track)].spans;
  const double lo = std::min(map.px0, map.px1) - 2, hi = std::max(map.px0, map.px1) + 2;
  const auto clip = [&](double x) { return std::clamp(x, lo, hi); };
  const size_t n = spans.size();
  size_t i = first_ending_after(spans, map.t0);
  while (i < n && static_cast<double>(spans[i].start) < map.t1) {
    const double x0 = map.to_px(static_cast<double>(spans[i].start));
    double x1 = map.to_px(static_cast<double>(spans[i].end));
    if (x1 - x0 >= merge_px) {
      out.push_back({clip(x0), clip(x1), static_cast<int32_t>(i), 1});
      ++i;
      continue;
    }
    // A merged run: absorb every span that starts within merge_px of the run's end. Only the
    // last span a jump reaches can be wide (a wide span pushes every later start past the
    // target), so checking it alone keeps wide spans out of runs.
    int32_t count = 1;
    size_t last = i;
    for (;;) {
      const size_t k = first_starting_at(spans, last + 1, map.to_time(x1 + merge_px));
      if (k == last + 1) break;
      const auto& tail = spans[k - 1];
      const bool tail_wide = map.to_px(static_cast<double>(tail.end)) - map.to_px(static_cast<double>(tail.start)) >= merge_px;
      const size_t absorbed_end = tail_wide ? k - 1 : k;
      if (absorbed_end == last + 1) break;
      count += static_cast<int32_t>(absorbed_end - last - 1);
      last = absorbed_end - 1;
      x1 = map.to_px(static_cast<double>(spans[last].end));
      if (tail_wide || x1 > hi) break;
    }
    out.push_back({clip(x0), clip(std::max(x1, x0 + 1.0)), count == 1 ? static_cast<int32_t>(i) : -1, count});
    i = last + 1;
  }
}

int32_t TimelineModel::span_at(int32_t track, double t, double tolerance) const {
  if (track < 0 || static_cast<size_t>(track) >= tracks_.size()) return -1;
  const auto& spans = tracks_[static_cast<size_t>(track)].spans;
  const size_t i = first_ending_after(spans, t);
  if (i < spans.size() && static_cast<double>(spans[i].start) <= t) return static_cast<int32_t>(i);
  // Nearest neighbour on either side within tolerance.
  double best = tolerance;
  int32_t found = -1;
  if (i < spans.size() && static_cast<double>(spans[i].start) - t <= best) {
    best = static_cast<double>(spans[i].start) - t;
    found = static_cast<int32_t>(i);
  }
  if (i > 0 && t - static_cast<double>(spans[i - 1].end) <= best) found = static_cast<int32_t>(i - 1);
  return found;
}

std::vector<KernelRangeStat> TimelineModel::kernel_stats(double t0, double t1) const {
  std::vector<KernelRangeStat> stats;
  if (t1 <= t0) return stats;
  std::unordered_map<int32_t, size_t> index_of;  // name -> stats row
  for (const auto& track : tracks_) {
    if (lanes_[static_cast<size_t>(track.lane)].kind != SpanKind::kKernel) continue;
    const auto& spans = track.spans;
    for (size_t i = first_ending_after(spans, t0); i < spans.size() && static_cast<double>(spans[i].start) < t1; ++i) {
      auto [it, inserted] = index_of.try_emplace(spans[i].name, stats.size());
      if (inserted) stats.push_back({names_[static_cast<size_t>(spans[i].name)], 0, 0, 0, 0});
      KernelRangeStat& s = stats[it->second];
      ++s.count;
      const double clipped = std::min<double>(static_cast<double>(spans[i].end), t1) -
                             std::max<double>(static_cast<double>(spans[i].start), t0);
      s.total_ns += static_cast<int64_t>(clipped);
    }
  }
  for (auto& s : stats) {
    s.mean_ns = static_cast<double>(s.total_ns) / static_cast<double>(s.count);
    s.share = static_cast<double>(s.total_ns) / (t1 - t0);
  }
  std::sort(stats.begin(), stats.end(), [](const KernelRangeStat& a, const KernelRangeStat& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  return stats;
}

}  // namespace specula::ui
