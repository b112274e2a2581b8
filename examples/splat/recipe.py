"""The training recipe: the reference's learning rates, schedule and density control.

3D Gaussian splatting's reference (graphdeco-inria/gaussian-splatting,
arguments/__init__.py) and gsplat's DefaultStrategy use these numbers for a
30,000-step run. `Recipe.for_steps` fits them to a shorter or longer run:
refinement still averages each Gaussian's gradient over 100 steps and starts
after at most 500 (Adam's progress per step does not scale with the run) and
stops at half the run; the opacity reset scales with the run (at least 1000
steps apart) and every SH band is in by the run's first fifth at the latest.
"""
import dataclasses

REFERENCE_STEPS = 30_000


@dataclasses.dataclass(frozen=True)
class Recipe:
    steps: int = REFERENCE_STEPS
    # Adam's learning rates per parameter (means': times the scene's extent, decaying exponentially).
    lr_means: float = 1.6e-4
    lr_means_final: float = 1.6e-6
    lr_scales: float = 5e-3
    lr_quats: float = 1e-3
    lr_opacities: float = 5e-2
    lr_sh0: float = 2.5e-3
    lr_shN: float = 2.5e-3 / 20.0
    ssim_weight: float = 0.2          # loss = (1 - w) L1 + w (1 - SSIM)
    sh_degree: int = 3
    sh_degree_every: int = 1000       # one band more every this many steps
    # Density control (gsplat's DefaultStrategy).
    refine_start: int = 500
    refine_stop: int = 15_000
    refine_every: int = 100
    reset_every: int = 3000
    grow_grad2d: float = 2e-4         # mean view-space gradient norm (NDC units) that clones or splits
    grow_scale3d: float = 0.01        # below this largest scale (times the extent): clone; above: split
    prune_opacity: float = 0.005
    prune_scale3d: float = 0.1        # after the first reset, larger Gaussians (times the extent) are pruned

    @classmethod
    def for_steps(cls, steps, **overrides):
        """The reference recipe fitted to a run of `steps` (the module's docstring says how)."""
        ref = cls()
        f = steps / REFERENCE_STEPS
        return dataclasses.replace(
            ref, steps=steps, sh_degree_every=max(1, min(ref.sh_degree_every, steps // 5)),
            refine_start=min(ref.refine_start, steps // 4), refine_stop=int(round(ref.refine_stop * f)),
            reset_every=max(1000, int(round(ref.reset_every * f))), **overrides)

    def sh_degree_at(self, step):
        return min(self.sh_degree, step // self.sh_degree_every)
