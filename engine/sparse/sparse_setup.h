#pragma once
// Makes a SparseConfig ready for one model: the anchors of its calibration file, the MoE
// thresholds of its moe_calibration file (both checked against the model's SHA-256), then the
// range checks of validate(). The CLI's --sparse/--sparse-config and the desktop app's run panel
// share it, so both refuse the same combinations with the same message.
#include "engine/core/expected.h"
#include "engine/model/loader.h"
#include "engine/sparse/sparse_config.h"

namespace specula {

Expected<SparseConfig> prepare_sparse_config(SparseConfig config, const Model& model);

}  // namespace specula
