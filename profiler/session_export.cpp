#include "profiler/session_export.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

namespace specula::profiler {
namespace {

constexpr int kEnginePid = 1;
constexpr int kGpuPidBase = 100;           // GPU d is process 100 + d
constexpr int64_t kApiTrackOffset = 1 << 24;  // the CUDA API track of thread t is t + this

std::string memcpy_kind_name(int32_t kind) {
  // CUpti_ActivityMemcpyKind
  switch (kind) {
    case 1: return "HtoD";
    case 2: return "DtoH";
    case 3: return "HtoA";
    case 4: return "AtoH";
    case 5: return "AtoA";
    case 6: return "AtoD";
    case 7: return "DtoA";
    case 8: return "DtoD";
    case 9: return "HtoH";
    case 10: return "PtoP";
    default: return "unknown";
  }
}

// Perfetto wants small thread ids; nsys-style global tids are (pid << 24) | tid.
int64_t track_of(int64_t global_tid) { return global_tid & 0xFFFFFF; }

Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(path.string() + ": cannot write: " + std::strerror(errno));
  out << text;
  out.close();
  if (!out) return make_error(path.string() + ": write failed: " + std::strerror(errno));
  return {};
}

}  // namespace

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

Expected<nlohmann::json> perfetto_trace(SessionStore& session) {
  auto info = session.read_session();
  if (!info) return info.error();
  auto rounds = session.read_rounds();
  if (!rounds) return rounds.error();
  auto nvtx = session.read_nvtx();
  if (!nvtx) return nvtx.error();
  auto kernels = session.read_kernels();
  if (!kernels) return kernels.error();
  auto copies = session.read_memcpy();
  if (!copies) return copies.error();
  auto api = session.read_runtime();
  if (!api) return api.error();
  auto gpus = session.read_gpu_info();
  if (!gpus) return gpus.error();

  int64_t origin = info->start_ns;
  for (const auto& r : *nvtx) origin = std::min(origin, r.start);
  for (const auto& k : *kernels) origin = std::min(origin, k.start);
  for (const auto& m : *copies) origin = std::min(origin, m.start);
  for (const auto& a : *api) origin = std::min(origin, a.start);
  const auto us = [origin](int64_t ns) { return static_cast<double>(ns - origin) / 1000.0; };

  nlohmann::json events = nlohmann::json::array();
  const auto meta = [&](int pid, std::optional<int64_t> tid, const char* what, const std::string& name) {
    nlohmann::json e = {{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", {{"name", name}}}};
    if (tid) e["tid"] = *tid;
    events.push_back(std::move(e));
  };
  meta(kEnginePid, std::nullopt, "process_name", "Engine (" + info->backend + ")");

  std::map<int64_t, bool> engine_threads;
  for (const auto& r : *nvtx) {
    engine_threads[track_of(r.global_tid)] = true;
    nlohmann::json e = {{"ph", "X"}, {"cat", "phase"},          {"name", r.text},
                        {"pid", kEnginePid}, {"tid", track_of(r.global_tid)}, {"ts", us(r.start)},
                        {"dur", static_cast<double>(r.end - r.start) / 1000.0}};
    if (r.payload) e["args"] = {{"value", *r.payload}};
    events.push_back(std::move(e));
  }
  for (const auto& [tid, unused] : engine_threads) meta(kEnginePid, tid, "thread_name", "engine phases");

  std::map<int64_t, bool> api_threads;
  for (const auto& a : *api) {
    const int64_t tid = track_of(a.global_tid) + kApiTrackOffset;
    api_threads[tid] = true;
    events.push_back({{"ph", "X"}, {"cat", "cuda_api"}, {"name", a.name}, {"pid", kEnginePid}, {"tid", tid},
                      {"ts", us(a.start)}, {"dur", static_cast<double>(a.end - a.start) / 1000.0},
                      {"args", {{"correlationId", a.correlation_id}, {"returnValue", a.return_value}}}});
  }
  for (const auto& [tid, unused] : api_threads) meta(kEnginePid, tid, "thread_name", "CUDA API");

  for (const auto& r : *rounds) {
    events.push_back({{"ph", "C"}, {"name", "accepted length"}, {"pid", kEnginePid}, {"ts", us(r.start_ns)},
                      {"args", {{"accepted_length", r.accepted_length}}}});
  }

  std::map<int32_t, std::string> gpu_names;
  for (const auto& g : *gpus) gpu_names[g.id] = g.name;
  std::map<std::pair<int32_t, int32_t>, bool> streams;
  for (const auto& k : *kernels) {
    streams[{k.device_id, k.stream_id}] = true;
    events.push_back({{"ph", "X"},
                      {"cat", "kernel"},
                      {"name", k.short_name},
                      {"pid", kGpuPidBase + k.device_id},
                      {"tid", k.stream_id},
                      {"ts", us(k.start)},
                      {"dur", static_cast<double>(k.end - k.start) / 1000.0},
                      {"args",
                       {{"name", k.demangled_name},
                        {"correlationId", k.correlation_id},
                        {"grid", {k.grid[0], k.grid[1], k.grid[2]}},
                        {"block", {k.block[0], k.block[1], k.block[2]}},
                        {"registersPerThread", k.registers_per_thread},
                        {"staticSharedMemory", k.static_shared_memory},
                        {"dynamicSharedMemory", k.dynamic_shared_memory}}}});
  }
  for (const auto& m : *copies) {
    streams[{m.device_id, m.stream_id}] = true;
    events.push_back({{"ph", "X"},
                      {"cat", "memcpy"},
                      {"name", "Memcpy " + memcpy_kind_name(m.copy_kind)},
                      {"pid", kGpuPidBase + m.device_id},
                      {"tid", m.stream_id},
                      {"ts", us(m.start)},
                      {"dur", static_cast<double>(m.end - m.start) / 1000.0},
                      {"args", {{"bytes", m.bytes}, {"correlationId", m.correlation_id}}}});
  }
  std::map<int32_t, bool> devices;
  for (const auto& [key, unused] : streams) {
    devices[key.first] = true;
    meta(kGpuPidBase + key.first, key.second, "thread_name", "Stream " + std::to_string(key.second));
  }
  for (const auto& [device, unused] : devices) {
    const auto name = gpu_names.find(device);
    meta(kGpuPidBase + device, std::nullopt, "process_name",
         "GPU " + std::to_string(device) + (name != gpu_names.end() ? ": " + name->second : std::string()));
  }

  return nlohmann::json{{"traceEvents", std::move(events)},
                        {"displayTimeUnit", "ns"},
                        {"otherData",
                         {{"producer", "specula " + info->version},
                          {"model", info->model_name},
                          {"backend", info->backend},
                          {"device", info->device},
                          {"time_origin_ns", origin}}}};
}

Status export_perfetto(SessionStore& session, const std::string& out_path) {
  auto trace = perfetto_trace(session);
  if (!trace) return trace.error();
  return write_text(out_path, trace->dump());
}

Status export_csv(SessionStore& session, const std::string& out_dir) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return make_error(out_dir + ": cannot create the folder: " + ec.message());
  const std::filesystem::path dir(out_dir);

  auto kernels = session.read_kernels();
  if (!kernels) return kernels.error();
  std::ostringstream k;
  k << "start_ns,end_ns,duration_ns,device,context,stream,correlation_id,short_name,name,grid_x,grid_y,grid_z,"
       "block_x,block_y,block_z,registers_per_thread,static_shared_memory,dynamic_shared_memory\n";
  for (const auto& r : *kernels) {
    k << r.start << ',' << r.end << ',' << (r.end - r.start) << ',' << r.device_id << ',' << r.context_id << ','
      << r.stream_id << ',' << r.correlation_id << ',' << csv_field(r.short_name) << ',' << csv_field(r.demangled_name)
      << ',' << r.grid[0] << ',' << r.grid[1] << ',' << r.grid[2] << ',' << r.block[0] << ',' << r.block[1] << ','
      << r.block[2] << ',' << r.registers_per_thread << ',' << r.static_shared_memory << ','
      << r.dynamic_shared_memory << '\n';
  }
  if (Status s = write_text(dir / "kernels.csv", k.str()); !s) return s;

  auto copies = session.read_memcpy();
  if (!copies) return copies.error();
  std::ostringstream m;
  m << "start_ns,end_ns,duration_ns,device,stream,correlation_id,kind,bytes\n";
  for (const auto& r : *copies) {
    m << r.start << ',' << r.end << ',' << (r.end - r.start) << ',' << r.device_id << ',' << r.stream_id << ','
      << r.correlation_id << ',' << memcpy_kind_name(r.copy_kind) << ',' << r.bytes << '\n';
  }
  if (Status s = write_text(dir / "memcpy.csv", m.str()); !s) return s;

  auto rounds = session.read_rounds();
  if (!rounds) return rounds.error();
  std::ostringstream r;
  std::ostringstream sel;
  r << "round,start_ns,end_ns,speculative,context_len,drafter,tree_nodes,tree_depth,accepted_length,next_token,bonus,"
       "emitted,tokens,rollback_tokens,rejected_kv_bytes\n";
  sel << "round,layer,query,group,mode,anchor_layer,total_blocks,selected_blocks,blocks,overlap_prev,jaccard_prev\n";
  for (const auto& row : *rounds) {
    std::string tokens;
    for (size_t i = 0; i < row.tokens.size(); ++i) {
      if (i) tokens += ' ';
      tokens += std::to_string(row.tokens[i]);
    }
    r << row.round << ',' << row.start_ns << ',' << row.end_ns << ',' << (row.speculative ? 1 : 0) << ','
      << row.context_len << ',' << csv_field(row.drafter) << ',' << row.tree_nodes << ',' << row.tree_depth << ','
      << row.accepted_length << ',' << row.next_token << ',' << (row.bonus ? 1 : 0) << ',' << row.emitted << ','
      << tokens << ',' << row.rollback_tokens << ',' << row.rejected_kv_bytes << '\n';
    auto selections = session.read_layer_selections(row.round);
    if (!selections) return selections.error();
    for (const auto& s : *selections) {
      std::string blocks;
      for (int32_t b : unpack_block_bits(s.selection.block_bits)) {
        if (!blocks.empty()) blocks += ' ';
        blocks += std::to_string(b);
      }
      sel << row.round << ',' << s.selection.layer << ',' << s.selection.query << ',' << s.selection.group << ','
          << (s.selection.mode == SelectionMode::kReuse ? "reuse" : "refresh") << ',' << s.selection.anchor_layer
          << ',' << s.selection.total_blocks << ',' << s.selected_blocks << ',' << blocks << ','
          << (s.overlap_prev ? std::to_string(*s.overlap_prev) : "") << ','
          << (s.jaccard_prev ? std::to_string(*s.jaccard_prev) : "") << '\n';
    }
  }
  if (Status s = write_text(dir / "rounds.csv", r.str()); !s) return s;
  if (Status s = write_text(dir / "selections.csv", sel.str()); !s) return s;

  auto nvtx = session.read_nvtx();
  if (!nvtx) return nvtx.error();
  std::ostringstream n;
  n << "start_ns,end_ns,duration_ns,text,global_tid,value\n";
  for (const auto& row : *nvtx) {
    n << row.start << ',' << row.end << ',' << (row.end - row.start) << ',' << csv_field(row.text) << ','
      << row.global_tid << ',' << (row.payload ? std::to_string(*row.payload) : "") << '\n';
  }
  return write_text(dir / "nvtx.csv", n.str());
}

}  // namespace specula::profiler
