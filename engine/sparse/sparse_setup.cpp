#include "engine/sparse/sparse_setup.h"

#include "engine/model/model_identity.h"
#include "engine/model/moe_calibration.h"
#include "engine/sparse/calibration.h"

namespace specula {

Expected<SparseConfig> prepare_sparse_config(SparseConfig config, const Model& model) {
  if (!config.calibration.empty()) {  // anchors from a calibration file made for this model
    auto sha = model_sha256(model.path);
    if (!sha) return sha.error();
    auto calibration = load_calibration(config.calibration, *sha, static_cast<int>(model.config.n_layers));
    if (!calibration) return calibration.error();
    config.anchors = calibration->anchors;
  }
  if (!config.moe_calibration.empty()) {  // expert-skip thresholds made for this model
    if (!model.config.is_moe()) return make_error("moe_calibration was given, but this model has no MoE layers");
    auto sha = model_sha256(model.path);
    if (!sha) return sha.error();
    auto thresholds = load_moe_thresholds(config.moe_calibration, *sha, model.config);
    if (!thresholds) return thresholds.error();
    config.moe_thresholds = thresholds->thresholds;
  }
  if (Status s = validate(config, static_cast<int>(model.config.n_layers), model.config.is_moe()); !s) {
    return s.error();
  }
  return config;
}

}  // namespace specula
