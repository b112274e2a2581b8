// DistortionLoss's input checks, written once for every kernel of the op: the
// CPU kernels and CUDA registrations (through kernels/spec/checks_tf.h) and the Metal
// kernels (through KernelCall::Check). No TensorFlow API: sizes and values in,
// kernels/spec/checks.h's Result out. Messages name the argument; tests match on them.
#ifndef MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_SPEC_H_
#define MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_SPEC_H_

#include <cstdint>

#include "kernels/distortion_loss/distortion_loss.h"
#include "kernels/spec/checks.h"

namespace mo {
namespace distortion_loss {

// weights [R, S] and t [R, S + 1].
inline Result Shapes(const Dims& w, const Dims& t) {
  if (w.size() != 2) return Invalid("DistortionLoss: 'weights' must be [R, S], got shape ", ShapeString(w));
  if (t.size() != 2) return Invalid("DistortionLoss: 't' must be [R, S + 1], got shape ", ShapeString(t));
  if (t[0] != w[0] || t[1] != w[1] + 1) {
    return Invalid("DistortionLoss: 't' must be [R, S + 1] = [", w[0], ", ", w[1] + 1, "] for 'weights' of shape ",
                   ShapeString(w), ", got ", ShapeString(t));
  }
  return Ok();
}

// The upstream gradient of DistortionLossGrad: one value per ray.
inline Result GradShape(const Dims& g, int64_t rays) {
  if (g != Dims{rays}) return Invalid("DistortionLossGrad: 'grad' must be [R] = [", rays, "], got ", ShapeString(g));
  return Ok();
}

// The first decrease (NaN counts) of ray r, whose samples + 1 boundaries
// `row` points to in host memory; OK if there is none.
inline Result RaySorted(const float* row, int64_t r, int64_t samples) {
  const int64_t k = dl_first_decrease(row, samples);
  if (k >= 0) {
    return Invalid("DistortionLoss: 't' must be non-decreasing along each ray, but ray ", r, " has t[", r, ", ", k,
                   "] = ", row[k], " > t[", r, ", ", k + 1, "] = ", row[k + 1]);
  }
  return Ok();
}

}  // namespace distortion_loss
}  // namespace mo

#endif  // MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_SPEC_H_
