#include "profiler/session_schema.h"

namespace specula::profiler {

std::string_view session_schema_sql() {
  // Column order and types follow the nsys export where a table shares its name. Columns nsys
  // declares that Specula cannot fill yet stay NULL.
  return R"sql(
CREATE TABLE META (key TEXT PRIMARY KEY, value TEXT NOT NULL);

CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);

CREATE TABLE TARGET_INFO_GPU (
  id INTEGER NOT NULL, name TEXT NOT NULL, busLocation TEXT, isDiscrete INTEGER,
  l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER,
  smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER,
  ctxId INTEGER, computeMajor INTEGER, computeMinor INTEGER, maxThreadsPerBlock INTEGER,
  threadsPerWarp INTEGER, maxShmemPerBlock INTEGER);

CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
  greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER NOT NULL REFERENCES StringIds(id), shortName INTEGER NOT NULL REFERENCES StringIds(id),
  mangledName INTEGER REFERENCES StringIds(id), launchType INTEGER, cacheConfig INTEGER,
  registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL,
  blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
  staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
  localMemoryPerThread INTEGER, localMemoryTotal INTEGER, gridId INTEGER, sharedMemoryExecuted INTEGER,
  graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE INDEX CUPTI_ACTIVITY_KIND_KERNEL_start ON CUPTI_ACTIVITY_KIND_KERNEL(start);
CREATE INDEX CUPTI_ACTIVITY_KIND_KERNEL_correlationId ON CUPTI_ACTIVITY_KIND_KERNEL(correlationId);

CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
  start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER, globalTid INTEGER,
  correlationId INTEGER, nameId INTEGER NOT NULL REFERENCES StringIds(id), returnValue INTEGER,
  callchainId INTEGER);
CREATE INDEX CUPTI_ACTIVITY_KIND_RUNTIME_start ON CUPTI_ACTIVITY_KIND_RUNTIME(start);
CREATE INDEX CUPTI_ACTIVITY_KIND_RUNTIME_correlationId ON CUPTI_ACTIVITY_KIND_RUNTIME(correlationId);

CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
  greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER,
  dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER,
  migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER);
CREATE INDEX CUPTI_ACTIVITY_KIND_MEMCPY_start ON CUPTI_ACTIVITY_KIND_MEMCPY(start);
CREATE INDEX CUPTI_ACTIVITY_KIND_MEMCPY_correlationId ON CUPTI_ACTIVITY_KIND_MEMCPY(correlationId);

CREATE TABLE NVTX_EVENTS (
  start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER,
  color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER REFERENCES StringIds(id),
  domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
  int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE INDEX NVTX_EVENTS_start ON NVTX_EVENTS(start);

CREATE TABLE SPECULA_SESSION (
  id INTEGER PRIMARY KEY, start INTEGER NOT NULL, end INTEGER, wallStartNs INTEGER,
  configJson TEXT NOT NULL, modelName TEXT NOT NULL, modelSha256 TEXT NOT NULL, architecture TEXT NOT NULL,
  backend TEXT NOT NULL, device TEXT NOT NULL, version TEXT NOT NULL, level TEXT NOT NULL,
  status TEXT NOT NULL);

CREATE TABLE SPECULA_ROUNDS (
  round INTEGER PRIMARY KEY, start INTEGER NOT NULL, end INTEGER NOT NULL, speculative INTEGER NOT NULL,
  contextLen INTEGER NOT NULL, drafter TEXT, treeNodes INTEGER NOT NULL, treeDepth INTEGER NOT NULL,
  acceptedLength INTEGER NOT NULL, nextToken INTEGER, bonus INTEGER NOT NULL, emitted INTEGER NOT NULL,
  tokens TEXT NOT NULL, rollbackTokens INTEGER NOT NULL, rejectedKvBytes INTEGER NOT NULL);
CREATE INDEX SPECULA_ROUNDS_start ON SPECULA_ROUNDS(start);

CREATE TABLE SPECULA_DRAFT_NODES (
  round INTEGER NOT NULL, node INTEGER NOT NULL, token INTEGER NOT NULL, parent INTEGER NOT NULL,
  depth INTEGER NOT NULL, draftProb REAL NOT NULL, targetProb REAL, visited INTEGER NOT NULL,
  accepted INTEGER NOT NULL, PRIMARY KEY (round, node));

CREATE TABLE SPECULA_LAYER_SELECTIONS (
  round INTEGER NOT NULL, layer INTEGER NOT NULL, query INTEGER NOT NULL, queryGroup INTEGER NOT NULL,
  mode TEXT NOT NULL, anchorLayer INTEGER, totalBlocks INTEGER NOT NULL, selectedBlocks INTEGER NOT NULL,
  blockBits BLOB NOT NULL, overlapPrev INTEGER, jaccardPrev REAL);
CREATE INDEX SPECULA_LAYER_SELECTIONS_round ON SPECULA_LAYER_SELECTIONS(round, layer);

CREATE TABLE SPECULA_FFN_STATS (
  round INTEGER NOT NULL, layer INTEGER NOT NULL, activeChannels INTEGER NOT NULL,
  totalChannels INTEGER NOT NULL, skipped INTEGER NOT NULL);
CREATE INDEX SPECULA_FFN_STATS_round ON SPECULA_FFN_STATS(round, layer);

CREATE TABLE SPECULA_MOE_STATS (
  round INTEGER NOT NULL, layer INTEGER NOT NULL, totalExperts INTEGER NOT NULL,
  routedExperts TEXT NOT NULL, skippedExperts TEXT NOT NULL, routedCount INTEGER NOT NULL,
  skippedCount INTEGER NOT NULL);
CREATE INDEX SPECULA_MOE_STATS_round ON SPECULA_MOE_STATS(round, layer);

CREATE TABLE SPECULA_DECISIONS (
  round INTEGER NOT NULL, time INTEGER NOT NULL, source TEXT NOT NULL, decision TEXT NOT NULL,
  detailJson TEXT NOT NULL);
CREATE INDEX SPECULA_DECISIONS_round ON SPECULA_DECISIONS(round);

CREATE TABLE SPECULA_METRICS (key TEXT PRIMARY KEY, value REAL, valueJson TEXT NOT NULL);
)sql";
}

}  // namespace specula::profiler
