"""The networks the FusedMLP GPU benchmarks time (bench_fused_mlp_gpu,
bench_xla_gpu, cuda/bench_fused_mlp_cuda, and the profilers beside them):
ReLU hidden layers, a linear output."""

CONFIGS = [  # name, in, width, hidden layers, out
    ("w64_in64_h4_out64", 64, 64, 4, 64),
    ("nerf_density_32_64_64_16", 32, 64, 2, 16),
    ("nerf_color_32_64_64_3", 32, 64, 2, 3),
    ("w128_in64_h3_out16", 64, 128, 3, 16),
]
