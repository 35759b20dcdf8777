#pragma once
// CUDA device discovery and the measured ceilings every GPU benchmark reports against.
// Host-callable from plain C++ (no CUDA headers here), so the CLI and benches stay .cpp.
#include <cstdint>
#include <string>

namespace specula::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  uint64_t global_memory_bytes = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;
};

// Number of usable GPUs; 0 (never an error) when there is no driver or no device.
int device_count();
// Why device_count() is 0, in one line ("no CUDA driver", "no CUDA-capable device", ...).
std::string no_device_reason();
bool device_info(int index, DeviceInfo* out);

struct CopyBandwidth {
  double bytes_per_s = 0;  // counts read + write: 2 * buffer bytes per copy
  double seconds_per_copy = 0;
  uint64_t buffer_bytes = 0;
  int iterations = 0;
};
// Device-to-device cudaMemcpy bandwidth of one buffer size, timed with CUDA events.
bool measure_copy_bandwidth(uint64_t buffer_bytes, int iterations, CopyBandwidth* out, std::string* error);

// A kernel copy (16-byte vector loads/stores) over the same buffers: the memory-system ceiling
// our own kernels can reach, to compare with cudaMemcpy's.
bool measure_kernel_copy_bandwidth(uint64_t buffer_bytes, int iterations, CopyBandwidth* out, std::string* error);

}  // namespace specula::cuda
