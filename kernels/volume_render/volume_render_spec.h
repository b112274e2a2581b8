// VolumeRender's attribute and input checks, written once for every kernel of
// the op: the CPU kernels and CUDA registrations (through kernels/spec/checks_tf.h) and
// the Metal kernels (through KernelCall::Check). No TensorFlow API: sizes and
// values in, kernels/spec/checks.h's Result out. Messages start with the op's name
// (`op`) and name the argument; tests match on them.
#ifndef MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_SPEC_H_
#define MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_SPEC_H_

#include <cstdint>
#include <string>

#include "kernels/volume_render/volume_render.h"
#include "kernels/spec/checks.h"

namespace mo {
namespace volume_render {

constexpr const char kForward[] = "MetalOpsVolumeRender";
constexpr const char kBackward[] = "MetalOpsVolumeRenderGrad";

inline Result EarlyTermination(const char* op, float early_termination) {
  if (!(early_termination >= 0.0f && early_termination <= 1.0f)) {
    return Invalid(op, ": 'early_termination' must be in [0, 1], got ", early_termination);
  }
  return Ok();
}

// The attributes of the forward (`forward`) or backward op.
struct Attrs {
  float early_termination = 1e-4f;
  bool return_weights = false;  // the forward's only
  bool validate = true;         // raise for the first invalid ray (RenderArgs::validate)
};

// Reads (kernels/spec/checks.h ReadEach) and checks the attributes: the one attribute
// read of the shape functions, the kernel classes and the Metal kernels, for
// VolumeRender and for every renderer over the same attributes (`op` names it
// in the messages; PackedVolumeRender).
template <typename Get>
Result ReadAttrs(Get&& get, const char* op, bool forward, Attrs* a) {
  MO_RETURN_IF_INVALID(checks::ReadEach(get, op, "early_termination", &a->early_termination));
  if (forward) MO_RETURN_IF_INVALID(checks::ReadEach(get, op, "return_weights", &a->return_weights));
  MO_RETURN_IF_INVALID(checks::ReadEach(get, op, "validate", &a->validate));
  return EarlyTermination(op, a->early_termination);
}

template <typename Get>
Result ReadAttrs(Get&& get, bool forward, Attrs* a) {
  return ReadAttrs(get, forward ? kForward : kBackward, forward, a);
}

// The sizes the inputs shared by forward and backward give.
struct RayShapes {
  int64_t rays = 0;
  int64_t samples = 0;
  bool background_per_ray = false;
};

// background: one colour [3] or one per ray [R, 3] (*per_ray), for every renderer.
inline Result Background(const char* op, const Dims& background, int64_t R, bool* per_ray) {
  *per_ray = background == Dims{R, 3};
  if (!(background == Dims{3} || *per_ray)) {
    return Invalid(op, ": 'background' must be [3] or [R, 3] = [", R, ", 3], got shape ", ShapeString(background));
  }
  return Ok();
}

// sigma [R, S], rgb [R, S, 3], t [R, S + 1], background [3] or [R, 3].
inline Result InputShapes(const char* op, const Dims& sigma, const Dims& rgb, const Dims& t,
                          const Dims& background, RayShapes* shapes) {
  if (sigma.size() != 2) {
    return Invalid(op, ": 'sigma' must be [R, S] (rank 2), got shape ", ShapeString(sigma));
  }
  const int64_t R = sigma[0], S = sigma[1];
  if (rgb != Dims{R, S, 3}) {
    return Invalid(op, ": 'rgb' must be [R, S, 3] = [", R, ", ", S, ", 3] to match 'sigma' ", ShapeString(sigma),
                   ", got shape ", ShapeString(rgb));
  }
  if (t != Dims{R, S + 1}) {
    return Invalid(op, ": 't' must be [R, S + 1] = [", R, ", ", S + 1, "] (interval boundaries) to match 'sigma' ",
                   ShapeString(sigma), ", got shape ", ShapeString(t));
  }
  bool per_ray = false;
  MO_RETURN_IF_INVALID(Background(op, background, R, &per_ray));
  shapes->rays = R;
  shapes->samples = S;
  shapes->background_per_ray = per_ray;
  return Ok();
}

// The forward outputs and upstream gradients a renderer's backward receives,
// for R rays: out_rgb and grad_rgb [R, 3], depth, opacity and their gradients
// [R], weights and grad_weights both `full` (spelt `full_spec`, e.g. "[R, S]")
// or both `none` (`none_spec`). *has_weight_grad: the weights were returned
// (`full`) and there are samples (`samples` > 0).
inline Result RenderGradShapes(const char* op, int64_t R, int64_t samples, const Dims& full, const char* full_spec,
                               const Dims& none, const char* none_spec, const Dims& out_rgb, const Dims& depth,
                               const Dims& opacity, const Dims& weights, const Dims& grad_rgb, const Dims& grad_depth,
                               const Dims& grad_opacity, const Dims& grad_weights, bool* has_weight_grad) {
  const Dims ray3 = {R, 3}, ray = {R};
  if (!(out_rgb == ray3 && grad_rgb == ray3)) {
    return Invalid(op, ": 'out_rgb' and 'grad_rgb' must be [R, 3] = ", ShapeString(ray3), ", got ",
                   ShapeString(out_rgb), " and ", ShapeString(grad_rgb));
  }
  if (!(depth == ray && opacity == ray && grad_depth == ray && grad_opacity == ray)) {
    return Invalid(op, ": 'depth', 'opacity', 'grad_depth' and 'grad_opacity' must be [R] = ", ShapeString(ray));
  }
  const bool weights_full = weights == full;
  if (!((weights_full || weights == none) && grad_weights == weights)) {
    std::string sizes;
    for (size_t d = 0; d < full.size(); ++d) sizes += (d ? ", " : "") + std::to_string(full[d]);
    return Invalid(op, ": 'weights' and 'grad_weights' must both be ", full_spec, " = [", sizes, "] or ", none_spec,
                   ", got ", ShapeString(weights), " and ", ShapeString(grad_weights));
  }
  *has_weight_grad = weights_full && samples > 0;
  return Ok();
}

// VolumeRenderGrad's forward outputs and upstream gradients, for `shapes`
// from InputShapes: weights [R, S] when returned, else [R, 0].
inline Result GradInputShapes(const char* op, const RayShapes& shapes, const Dims& out_rgb, const Dims& depth,
                              const Dims& opacity, const Dims& weights, const Dims& grad_rgb, const Dims& grad_depth,
                              const Dims& grad_opacity, const Dims& grad_weights, bool* has_weight_grad) {
  const int64_t R = shapes.rays, S = shapes.samples;
  return RenderGradShapes(op, R, S, {R, S}, "[R, S]", {R, 0}, "[R, 0]", out_rgb, depth, opacity, weights, grad_rgb,
                          grad_depth, grad_opacity, grad_weights, has_weight_grad);
}

// The forward op's error for ray r, which failed vr_check_ray with `check`;
// sigma_row (S values) and t_row (S + 1) are that ray in host memory.
template <typename T>
Result BadRay(const VrCheck& check, int64_t r, const T* sigma_row, const T* t_row) {
  const int64_t i = check.sample;
  if (check.code == kVrBadSigma) {
    return Invalid(kForward, ": 'sigma' must be non-negative (and not NaN): ray ", r, ", sample ", i,
                   " has sigma = ", static_cast<double>(sigma_row[i]));
  }
  return Invalid(kForward, ": 't' must be non-decreasing along each ray: ray ", r, " has t[", i + 1,
                 "] = ", static_cast<double>(t_row[i + 1]), " < t[", i, "] = ", static_cast<double>(t_row[i]));
}

}  // namespace volume_render
}  // namespace mo

#endif  // MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_SPEC_H_
