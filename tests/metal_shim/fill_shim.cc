// The zero-fill shader of the Metal plans on the CPU (see tests/metal_shim/msl_shim.h).
#include "tests/metal_shim/msl_shim.h"
#include "fill.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

msl_shim::Kernel kKernels[] = {
#include "fill.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

}  // namespace

extern "C" {

// The entry point PlanBuilder::Zero asks for is instantiated: -1 when it is
// missing, else the number of instantiations it did not reach.
int shim_fill_find_every_kernel() {
  if (!msl_shim::find_kernel<decltype(&fill_zero<int>)>(kKernels, "fill_zero")) return -1;
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"
