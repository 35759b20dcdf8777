#include "profiler/cupti_capture.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <regex>
#include <vector>

#include "profiler/clock.h"
#include "profiler/cupti_records.h"

#if __has_include(<cupti.h>)
#include <cuda.h>
#include <cupti.h>
#define SPECULA_HAVE_CUPTI 1
#else
#define SPECULA_HAVE_CUPTI 0
#endif

namespace specula::profiler {

#if SPECULA_HAVE_CUPTI

struct CuptiCapture::Api {
  void* cupti = nullptr;
  void* driver = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiGetCallbackName) callback_name = nullptr;
  ~Api() {
    // libcupti stays loaded: CUPTI keeps threads and callbacks that outlive a dlclose.
    if (driver) dlclose(driver);
  }
  std::string why(CUptiResult r) const {
    const char* text = nullptr;
    if (result_string) result_string(r, &text);
    return text ? text : "CUPTI error " + std::to_string(static_cast<int>(r));
  }
};

// The callbacks CUPTI calls are plain functions; they reach the one active capture here.
struct CaptureCallbacks {
  static inline std::mutex mutex;
  static inline CuptiCapture* active = nullptr;

  static void CUPTIAPI request(uint8_t** buffer, size_t* size, size_t* max_records) {
    std::lock_guard lock(mutex);
    const size_t bytes = active ? active->options_.buffer_bytes : (1 << 20);
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, bytes));
    *size = *buffer ? bytes : 0;
    *max_records = 0;  // as many as fit
  }

  static void CUPTIAPI completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
    std::lock_guard lock(mutex);
    if (active && buffer) {
      CuptiCapture& c = *active;
      CuptiRecordParser parser(c.start_ns_);
      const CuptiCapture::Api& api = *c.api_;
      parser.set_runtime_namer([&api](uint32_t cbid) {
        const char* name = nullptr;
        if (api.callback_name) api.callback_name(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name);
        // "cudaLaunchKernel_v7000" -> "cudaLaunchKernel", the name nsys shows.
        static const std::regex version_suffix("_v[0-9]+$");
        return name ? std::regex_replace(std::string(name), version_suffix, "") : "cbid " + std::to_string(cbid);
      });
      CUpti_Activity* record = nullptr;
      while (api.next_record(buffer, valid, &record) == CUPTI_SUCCESS) parser.add(record);
      size_t dropped = 0;
      if (api.dropped_records(context, stream, &dropped) == CUPTI_SUCCESS) c.dropped_ += static_cast<int64_t>(dropped);
      c.buffers_ += 1;
      c.records_ += parser.parsed();
      c.invalid_ += parser.invalid();
      c.unknown_ += parser.unknown_kinds();
      c.recorder_->record_gpu(parser.take());
    }
    std::free(buffer);
  }
};

namespace {

Error notice(const std::string& why) { return Error{"CUPTI capture off: " + why + "; recording CPU spans only"}; }

template <class F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

std::vector<std::string> cupti_candidates(const CuptiOptions& options) {
  if (!options.library_path.empty()) return {options.library_path};
  std::vector<std::string> names;
  if (const char* env = std::getenv("SPECULA_CUPTI_PATH"); env && *env) names.emplace_back(env);
  for (const char* n : {"libcupti.so", "libcupti.so.13", "libcupti.so.12", "/usr/local/cuda/lib64/libcupti.so",
                        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"}) {
    names.emplace_back(n);
  }
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) {
    names.push_back(std::string(home) + "/lib64/libcupti.so");
    names.push_back(std::string(home) + "/extras/CUPTI/lib64/libcupti.so");
  }
  return names;
}

// GPU rows for TARGET_INFO_GPU from the driver API; empty when the driver says nothing.
std::vector<GpuInfo> gpu_rows(void* driver, int count) {
  using GetName = CUresult (*)(char*, int, CUdevice);
  using GetAttr = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  using TotalMem = CUresult (*)(size_t*, CUdevice);
  GetName get_name = nullptr;
  GetAttr get_attr = nullptr;
  TotalMem total_mem = nullptr;
  bind(driver, "cuDeviceGetName", get_name);
  bind(driver, "cuDeviceGetAttribute", get_attr);
  bind(driver, "cuDeviceTotalMem_v2", total_mem);
  std::vector<GpuInfo> rows;
  for (int d = 0; d < count; ++d) {
    GpuInfo g;
    g.id = d;
    char name[256] = {};
    if (get_name && get_name(name, sizeof name - 1, d) == CUDA_SUCCESS) g.name = name;
    int value = 0;
    if (get_attr && get_attr(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d) == CUDA_SUCCESS) g.sm_count = value;
    if (get_attr && get_attr(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) == CUDA_SUCCESS) g.compute_major = value;
    if (get_attr && get_attr(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d) == CUDA_SUCCESS) g.compute_minor = value;
    if (get_attr && get_attr(&value, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d) == CUDA_SUCCESS) g.l2_cache_size = value;
    size_t bytes = 0;
    if (total_mem && total_mem(&bytes, d) == CUDA_SUCCESS) g.total_memory = static_cast<int64_t>(bytes);
    rows.push_back(std::move(g));
  }
  return rows;
}

}  // namespace

Expected<std::unique_ptr<CuptiCapture>> CuptiCapture::start(std::shared_ptr<Recorder> recorder, CuptiOptions options) {
  if (!recorder) return notice("no recorder");
  {
    std::lock_guard lock(CaptureCallbacks::mutex);
    if (CaptureCallbacks::active) return notice("a capture is already running in this process");
  }
  auto api = std::make_unique<Api>();
  // The driver first: no driver or no GPU is the common case on CPU-only machines.
  api->driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->driver) return notice("no NVIDIA driver (libcuda.so.1 not loadable)");
  using Init = CUresult (*)(unsigned);
  using Count = CUresult (*)(int*);
  Init cu_init = nullptr;
  Count cu_count = nullptr;
  if (!bind(api->driver, "cuInit", cu_init) || !bind(api->driver, "cuDeviceGetCount", cu_count)) {
    return notice("libcuda.so.1 lacks cuInit/cuDeviceGetCount");
  }
  int devices = 0;
  if (const CUresult r = cu_init(0); r != CUDA_SUCCESS) {
    return notice("no CUDA GPU (cuInit failed with CUresult " + std::to_string(static_cast<int>(r)) + ")");
  }
  if (cu_count(&devices) != CUDA_SUCCESS || devices == 0) return notice("no CUDA GPU");

  std::string tried;
  std::string library;
  for (const std::string& name : cupti_candidates(options)) {
    api->cupti = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (api->cupti) {
      library = name;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + name;
  }
  if (!api->cupti) return notice("libcupti not found (tried " + tried + "; set SPECULA_CUPTI_PATH)");
  const bool bound = bind(api->cupti, "cuptiActivityRegisterCallbacks", api->register_callbacks) &&
                     bind(api->cupti, "cuptiActivityEnable", api->enable) &&
                     bind(api->cupti, "cuptiActivityDisable", api->disable) &&
                     bind(api->cupti, "cuptiActivityFlushAll", api->flush_all) &&
                     bind(api->cupti, "cuptiActivityGetNextRecord", api->next_record) &&
                     bind(api->cupti, "cuptiActivityGetNumDroppedRecords", api->dropped_records) &&
                     bind(api->cupti, "cuptiGetTimestamp", api->timestamp) &&
                     bind(api->cupti, "cuptiGetResultString", api->result_string);
  if (!bound) return notice(library + " lacks a CUPTI activity entry point");
  bind(api->cupti, "cuptiGetCallbackName", api->callback_name);  // optional: names runtime calls

  std::unique_ptr<CuptiCapture> capture(new CuptiCapture());
  capture->recorder_ = std::move(recorder);
  capture->options_ = options;
  capture->library_ = library;
  if (const char* inject = std::getenv("NVTX_INJECTION64_PATH"); inject && *inject) capture->options_.markers = true;
  uint64_t now = 0;
  const int64_t before = monotonic_ns();
  api->timestamp(&now);
  const int64_t after = monotonic_ns();
  capture->start_ns_ = static_cast<int64_t>(now);
  capture->clock_offset_ns_ = static_cast<int64_t>(now) - (before + (after - before) / 2);
  capture->api_ = std::move(api);
  const Api& a = *capture->api_;
  {
    std::lock_guard lock(CaptureCallbacks::mutex);
    CaptureCallbacks::active = capture.get();
  }
  const auto undo = [&](const std::string& why) {
    std::lock_guard lock(CaptureCallbacks::mutex);
    CaptureCallbacks::active = nullptr;
    return notice(why);
  };
  if (const CUptiResult r = a.register_callbacks(&CaptureCallbacks::request, &CaptureCallbacks::completed);
      r != CUPTI_SUCCESS) {
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) return undo("insufficient privileges for GPU profiling (" + a.why(r) + ")");
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) return undo("another profiler is attached (" + a.why(r) + ")");
    return undo("cuptiActivityRegisterCallbacks: " + a.why(r));
  }
  std::vector<CUpti_ActivityKind> kinds = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
                                           CUPTI_ACTIVITY_KIND_MEMCPY};
  if (capture->options_.markers) kinds.push_back(CUPTI_ACTIVITY_KIND_MARKER);
  for (CUpti_ActivityKind kind : kinds) {
    if (const CUptiResult r = a.enable(kind); r != CUPTI_SUCCESS) {
      for (CUpti_ActivityKind k : kinds) a.disable(k);
      if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) return undo("insufficient privileges for GPU profiling (" + a.why(r) + ")");
      if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) return undo("another profiler is attached (" + a.why(r) + ")");
      return undo("cuptiActivityEnable(kind " + std::to_string(static_cast<int>(kind)) + "): " + a.why(r));
    }
  }
  GpuActivityBatch gpus;
  gpus.gpus = gpu_rows(a.driver, devices);
  capture->recorder_->record_gpu(std::move(gpus));
  capture->recorder_->set_clock_offset(capture->clock_offset_ns_);
  return capture;
}

Status CuptiCapture::flush() {
  if (stopped_ || !api_) return {};
  if (const CUptiResult r = api_->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); r != CUPTI_SUCCESS) {
    return make_error("cuptiActivityFlushAll: " + api_->why(r));
  }
  return {};
}

Status CuptiCapture::stop() {
  if (stopped_ || !api_) return {};
  // Deliver every record while the kinds are still enabled: kernel name strings in the records
  // belong to CUPTI and may be released once the activity is disabled.
  const Status flushed = flush();
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
                                  CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MARKER}) {
    api_->disable(kind);
  }
  (void)flush();  // whatever completed in between
  stopped_ = true;
  std::lock_guard lock(CaptureCallbacks::mutex);
  if (CaptureCallbacks::active == this) CaptureCallbacks::active = nullptr;
  return flushed;
}

#else  // built without the CUPTI headers

struct CuptiCapture::Api {};

Expected<std::unique_ptr<CuptiCapture>> CuptiCapture::start(std::shared_ptr<Recorder>, CuptiOptions) {
  return Error{"CUPTI capture off: this build has no CUPTI headers (CUDA toolkit not found at configure time); "
               "recording CPU spans only"};
}
Status CuptiCapture::flush() { return {}; }
Status CuptiCapture::stop() { return {}; }

#endif

CuptiCapture::~CuptiCapture() { (void)stop(); }

CuptiStats CuptiCapture::stats() const {
  return CuptiStats{buffers_.load(), records_.load(), invalid_.load(), dropped_.load(), unknown_.load()};
}

}  // namespace specula::profiler
