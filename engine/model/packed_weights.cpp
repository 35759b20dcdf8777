#include "engine/model/packed_weights.h"

#include "kernels/cpu/dequant.h"

namespace specula {

int64_t row_bytes(const TensorRef& t) {
  auto traits = tensor_type_traits(t.type);
  return t.cols() / traits->block_elems * traits->block_bytes;
}

std::vector<float> to_f32(const TensorRef& t) {
  std::vector<float> out(static_cast<size_t>(t.cols() * t.rows()));
  for (int64_t r = 0; r < t.rows(); ++r) {
    (void)dequantize_row(t.type, t.data.data() + r * row_bytes(t), out.data() + r * t.cols(), t.cols());
  }
  return out;
}

PackedMatrix pack_fused(std::initializer_list<const TensorRef*> parts, bool exact) {
  WeightFormat format = packed_format_for((*parts.begin())->type, exact);
  int64_t rows = 0;
  for (const TensorRef* part : parts) {
    if (packed_format_for(part->type, exact) != format) format = WeightFormat::F32;
    rows += part->rows();
  }
  PackedMatrix out;
  init_packed_matrix(out, format, rows, (*parts.begin())->cols());
  int64_t row = 0;
  for (const TensorRef* part : parts) {
    // The loader validated types and shapes, so packing cannot fail here.
    (void)pack_rows(out, row, part->type, part->data.data(), part->rows());
    row += part->rows();
  }
  return out;
}

}  // namespace specula
