#pragma once
// A small capture in the layout of `nsys export --type sqlite` (Nsight Systems 2024.x/2025.x, as
// documented in its "SQLite Export Schema Reference"): the nsys tables and column order,
// including columns and tables Specula ignores (ENUM_*, ThreadNames, TARGET_INFO_SESSION_START_TIME),
// NVTX marks and domain events beside ranges, names through StringIds, and nsys-style
// globalPid/globalTid (pid << 24 | tid). It stands in for a real export because nsys cannot make
// a report on the GPU machine (see /work/.library/device/KINDS.md).
#include <sqlite3.h>

#include <string>

#include "profiler/sqlite.h"

namespace specula::testing {

inline constexpr int64_t kNsysPid = 4242;
inline constexpr int64_t kNsysGlobalPid = kNsysPid << 24;
inline constexpr int64_t kNsysGlobalTid = (kNsysPid << 24) | 4243;

inline std::string nsys_fixture_sql() {
  return R"sql(
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER NOT NULL, utcTime TEXT NOT NULL, localTime TEXT NOT NULL);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL REFERENCES StringIds(id), priority INTEGER, globalTid INTEGER);
CREATE TABLE TARGET_INFO_GPU (id INTEGER NOT NULL, name TEXT NOT NULL, busLocation TEXT NOT NULL,
  isDiscrete INTEGER NOT NULL, l2CacheSize INTEGER NOT NULL, totalMemory INTEGER NOT NULL,
  memoryBandwidth INTEGER NOT NULL, clockRate INTEGER NOT NULL, smCount INTEGER NOT NULL, pwGpuId INTEGER NOT NULL,
  uuid TEXT NOT NULL, luid INTEGER, chipName TEXT NOT NULL, cuDevice INTEGER NOT NULL, ctxId INTEGER NOT NULL,
  computeMajor INTEGER NOT NULL, computeMinor INTEGER NOT NULL, maxThreadsPerBlock INTEGER NOT NULL,
  threadsPerWarp INTEGER NOT NULL, maxShmemPerBlock INTEGER NOT NULL, maxRegistersPerBlock INTEGER NOT NULL,
  maxRegistersPerSm INTEGER NOT NULL, maxBlockDimX INTEGER NOT NULL, maxBlockDimY INTEGER NOT NULL,
  maxBlockDimZ INTEGER NOT NULL, maxGridDimX INTEGER NOT NULL, maxGridDimY INTEGER NOT NULL,
  maxGridDimZ INTEGER NOT NULL, maxShmemPerMultiprocessor INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
  globalPid INTEGER, demangledName INTEGER NOT NULL REFERENCES StringIds(id),
  shortName INTEGER NOT NULL REFERENCES StringIds(id), mangledName INTEGER REFERENCES StringIds(id),
  launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL,
  gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
  blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
  localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL,
  sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL REFERENCES StringIds(id),
  returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
  globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER,
  dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER,
  migrationCause INTEGER NOT NULL, graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
  textId INTEGER REFERENCES StringIds(id), domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,
  doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);

INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (34, 'NVTX_MARK', 'NVTX mark'), (59, 'NVTX_PUSHPOP_RANGE', 'NVTX PushPop Range'),
  (60, 'NVTX_STARTEND_RANGE', 'NVTX StartEnd Range'), (75, 'NVTX_DOMAIN_CREATE', 'NVTX domain create');
INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (1, 'CUDA_MEMCPY_KIND_HTOD', 'Host-to-Device'), (8, 'CUDA_MEMCPY_KIND_DTOD', 'Device-to-Device');
INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1763800000000000000, '2025-11-22T08:26:40Z', '2025-11-22T08:26:40');
INSERT INTO StringIds VALUES (1, 'void mul_mat_vec_q<(ggml_type)3, 1>(const void*, const void*, float*, int, int)'),
  (2, 'mul_mat_vec_q'), (3, 'flash_attn_ext_f16'), (4, 'cudaLaunchKernel'), (5, 'cudaMemcpyAsync'),
  (6, 'llama_decode'), (7, 'llama-cli main'), (8, 'ggml');
INSERT INTO ThreadNames VALUES (7, 0, 71160698093245);
INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', '0000:61:00.0', 1, 52428800, 85520809984,
  3352320000000, 1980000000, 132, 0, 'GPU-1234', NULL, 'GH100', 0, 1, 9, 0, 1024, 32, 49152, 65536, 65536, 1024,
  1024, 64, 2147483647, 65535, 65535, 233472);
)sql";
}

// The capture's rows: 3 kernels (two names), 1 memcpy, 2 runtime calls, NVTX: 2 ranges plus a
// mark and a domain event that the importer must skip.
inline Status write_nsys_fixture(const std::string& path) {
  auto db = profiler::sql::Database::open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  if (!db) return db.error();
  const std::string rows = R"sql(
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
  (5000000, 5004000, 0, 1, NULL, 7, 11, )sql" + std::to_string(kNsysGlobalPid) + R"sql(, 1, 2, NULL, 1, 0, 40, 4096, 1, 1, 64, 2, 1, 0, 0, 0, 0, 1, 0, NULL, NULL),
  (5010000, 5013000, 0, 1, NULL, 7, 13, )sql" + std::to_string(kNsysGlobalPid) + R"sql(, 1, 2, NULL, 1, 0, 40, 4096, 1, 1, 64, 2, 1, 0, 0, 0, 0, 2, 0, NULL, NULL),
  (5020000, 5028000, 0, 1, NULL, 14, 15, )sql" + std::to_string(kNsysGlobalPid) + R"sql(, 3, 3, NULL, 1, 0, 128, 32, 8, 1, 128, 1, 1, 1024, 65536, 0, 0, 3, 0, NULL, NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES
  (4999000, 4999500, 0, )sql" + std::to_string(kNsysGlobalTid) + R"sql(, 11, 4, 0, NULL),
  (5009000, 5009600, 0, )sql" + std::to_string(kNsysGlobalTid) + R"sql(, 13, 4, 0, NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES
  (4990000, 4991000, 0, 1, NULL, 7, 10, )sql" + std::to_string(kNsysGlobalPid) + R"sql(, 1048576, 1, NULL, 0, 1, 0, 1, 0, 1, 0, NULL, NULL);
INSERT INTO NVTX_EVENTS (start, end, eventType, rangeId, text, globalTid, textId, domainId, int64Value) VALUES
  (4980000, 5030000, 59, NULL, 'decode step', )sql" + std::to_string(kNsysGlobalTid) + R"sql(, NULL, 0, 17),
  (4985000, 5029000, 60, 1, NULL, )sql" + std::to_string(kNsysGlobalTid) + R"sql(, 6, 0, NULL),
  (5000500, NULL, 34, NULL, 'token', )sql" + std::to_string(kNsysGlobalTid) + R"sql(, NULL, 0, NULL),
  (4970000, NULL, 75, NULL, NULL, )sql" + std::to_string(kNsysGlobalTid) + R"sql(, 8, 1, NULL);
)sql";
  if (Status s = db->exec(nsys_fixture_sql()); !s) return s;
  return db->exec(rows);
}

}  // namespace specula::testing
