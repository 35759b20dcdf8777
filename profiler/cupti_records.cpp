#include "profiler/cupti_records.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <string_view>

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define SPECULA_HAVE_CUPTI_HEADERS 1
#else
#define SPECULA_HAVE_CUPTI_HEADERS 0
#endif

namespace specula::profiler {
namespace {

// The engine's own phases arrive through the observer; their NVTX copies would be duplicates.
bool is_engine_phase(std::string_view name) {
  for (std::string_view phase : {"prefill", "draft", "verify", "accept", "commit", "decode", "layer"}) {
    if (name == phase) return true;
  }
  return false;
}

}  // namespace

bool cupti_headers_available() { return SPECULA_HAVE_CUPTI_HEADERS != 0; }

std::string demangle_kernel_name(const char* name) {
  if (!name) return "(unnamed)";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

bool CuptiRecordParser::valid(uint64_t start, uint64_t end) {
  if (start == 0 || end == 0 || end < start || static_cast<int64_t>(start) < min_start_ns_) {
    ++invalid_;
    return false;
  }
  return true;
}

std::string_view CuptiRecordParser::intern(const std::string& raw, bool demangle) {
  auto it = names_.find(raw);
  if (it != names_.end()) return it->second;
  const std::string& own = batch_.names->emplace_back(demangle ? demangle_kernel_name(raw.c_str()) : raw);
  return names_.emplace(raw, own).first->second;
}

GpuActivityBatch CuptiRecordParser::take() {
  GpuActivityBatch out = std::move(batch_);
  batch_ = GpuActivityBatch{};
  names_.clear();  // the views point into `out.names` now
  return out;
}

void CuptiRecordParser::add(const void* record) {
#if SPECULA_HAVE_CUPTI_HEADERS
  const auto* base = static_cast<const CUpti_Activity*>(record);
  switch (base->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = static_cast<const CUpti_ActivityKernel10*>(record);
      if (!valid(k->start, k->end)) return;
      KernelActivity row;
      row.start = static_cast<int64_t>(k->start);
      row.end = static_cast<int64_t>(k->end);
      row.device_id = static_cast<int32_t>(k->deviceId);
      row.context_id = static_cast<int32_t>(k->contextId);
      row.stream_id = static_cast<int32_t>(k->streamId);
      row.correlation_id = k->correlationId;
      row.demangled_name = intern(k->name ? k->name : "(unnamed)", true);
      row.grid[0] = k->gridX;
      row.grid[1] = k->gridY;
      row.grid[2] = k->gridZ;
      row.block[0] = k->blockX;
      row.block[1] = k->blockY;
      row.block[2] = k->blockZ;
      row.registers_per_thread = k->registersPerThread;
      row.static_shared_memory = k->staticSharedMemory;
      row.dynamic_shared_memory = k->dynamicSharedMemory;
      batch_.kernels.push_back(row);
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      const auto* a = static_cast<const CUpti_ActivityAPI*>(record);
      if (!valid(a->start, a->end)) return;
      RuntimeActivity row;
      row.start = static_cast<int64_t>(a->start);
      row.end = static_cast<int64_t>(a->end);
      row.global_tid = a->threadId;
      row.correlation_id = a->correlationId;
      row.name = intern(runtime_name_ ? runtime_name_(a->cbid) : "cbid " + std::to_string(a->cbid), false);
      row.return_value = static_cast<int32_t>(a->returnValue);
      batch_.runtime.push_back(row);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = static_cast<const CUpti_ActivityMemcpy6*>(record);
      if (!valid(m->start, m->end)) return;
      MemcpyActivity row;
      row.start = static_cast<int64_t>(m->start);
      row.end = static_cast<int64_t>(m->end);
      row.device_id = static_cast<int32_t>(m->deviceId);
      row.context_id = static_cast<int32_t>(m->contextId);
      row.stream_id = static_cast<int32_t>(m->streamId);
      row.correlation_id = m->correlationId;
      row.bytes = static_cast<int64_t>(m->bytes);
      row.copy_kind = m->copyKind;
      row.src_kind = m->srcKind;
      row.dst_kind = m->dstKind;
      batch_.memcpy.push_back(row);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
      const auto* m = static_cast<const CUpti_ActivityMarker2*>(record);
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
        open_markers_[m->id] = {m->timestamp, m->name ? m->name : ""};
      } else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
        const auto it = open_markers_.find(m->id);
        if (it == open_markers_.end()) return;
        const auto [start, name] = it->second;
        open_markers_.erase(it);
        if (!valid(start, m->timestamp) || is_engine_phase(name)) return;
        const int64_t tid = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
        batch_.ranges.push_back({static_cast<int64_t>(start), static_cast<int64_t>(m->timestamp), name, tid, std::nullopt});
      }
      break;
    }
    default:
      ++unknown_kinds_;
      return;
  }
  ++parsed_;
#else
  (void)record;
  ++unknown_kinds_;
#endif
}

}  // namespace specula::profiler
