# tf-metal-ops build. `make` builds python/metal_ops/_metal_ops.so (every op +
# CPU kernels; Metal kernels on macOS; CUDA kernels when TF is a CUDA build).
# Sources are found by wildcard: adding an op means adding files, not rules.

SHELL := /bin/bash
comma := ,
# Compile in parallel by default (CI has 2 cores); `make -j1` overrides.
# The number of CPUs: nproc (Linux), sysctl (macOS has no nproc).
JOBS := $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)
MAKEFLAGS += --jobs=$(JOBS)
export TF_CPP_MIN_LOG_LEVEL ?= 2
UNAME_S ?= $(shell uname -s)
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
BUILD := build
PKG := python/metal_ops
LIB := $(PKG)/_metal_ops.so
BUILD_INFO := $(PKG)/_build_info.json
NVCC ?= nvcc
CXX ?= g++
PYTEST_ARGS ?=
# `make test` runs the suite in this many pytest-xdist workers, each a whole
# module at a time (--dist loadfile: a module's fixtures are made once);
# PYTEST_WORKERS=0 runs it in this process.
PYTEST_WORKERS ?= $(JOBS)

# The macOS build. MACOS_MIN is the oldest macOS the library loads on (the
# Metal kernels then check at run time whether the OS compiles the shader
# language version they need: docs/BUILDING.md). `make metal-check` runs this
# same build on Linux with MACOS_CROSS=1: clang for arm64-apple-macos, a macOS
# SDK folder and ld64.lld.
MACOS_MIN ?= 12.0
MACOS_SDK ?= /opt/macos-sdk/root
LD64_LLD ?= $(firstword $(shell command -v ld64.lld ld64.lld-14 ld64.lld-15 ld64.lld-16 2>/dev/null))
# MACOS_STACK: the TensorFlow a Mac's .venv gets (chosen when .venv is made;
# `rm -rf .venv` to switch): cpu (requirements-macos.txt: TensorFlow 2.21,
# Python 3.10-3.13, no tensorflow-metal) or metal (requirements-macos-metal.txt:
# TensorFlow 2.19.1 + tensorflow-metal 1.2.0, Python 3.9-3.12). docs/METAL_COMPAT.md.
MACOS_STACK ?= cpu
ifeq ($(UNAME_S),Darwin)
  REQUIREMENTS := $(if $(filter metal,$(MACOS_STACK)),requirements-macos-metal.txt,requirements-macos.txt)
  ifeq ($(MACOS_CROSS),1)
    CXX := clang++ -target arm64-apple-macos$(MACOS_MIN) -isysroot $(MACOS_SDK) -stdlib=libc++
    # -mlinker-version: clang then passes ld64.lld the -platform_version it requires.
    # MPSCore is named because an SDK copy whose .tbd stubs lost their
    # re-export lists (hexops-graveyard/sdk-macos-12.0) hides it behind
    # MetalPerformanceShaders; Xcode's SDK re-exports it.
    CROSS_LDFLAGS := --ld-path=$(LD64_LLD) -mlinker-version=609 \
      -F$(MACOS_SDK)/System/Library/Frameworks/MetalPerformanceShaders.framework/Frameworks -framework MPSCore
  else
    CXX := clang++ -mmacosx-version-min=$(MACOS_MIN)
  endif
else
  REQUIREMENTS := requirements.txt
endif

.PHONY: FORCE all venv test gpu-check cross-tools wheels wheel-test demo splat-demo bazel cuda-check cuda-harness metal-shim metal-check msl-clang msl-check fuzz asan-test bench perf-doc clean help
all: $(LIB) $(BUILD_INFO)

help:
	@echo "make            build $(LIB)"
	@echo "make test       venv + build + pytest (the README's test command)"
	@echo "make demo       train the NeRF sample (examples/nerf)"
	@echo "make splat-demo train the Gaussian splatting sample (examples/splat)"
	@echo "make bazel      build the op library with Bazel, offline"
	@echo "make cuda-check compile every CUDA source with nvcc (no GPU needed)"
	@echo "make metal-check cross-compile and link the macOS (Metal) build on Linux against a macOS SDK"
	@echo "make msl-check  check the embedded Metal shaders against MSL's rules (clang, no Mac)"
	@echo "make cuda-harness build $(BUILD)/libmetal_ops_cuda.so for tests/cuda on a GPU"
	@echo "make gpu-check ENV=existing  the GPU checks through an installed TensorFlow CUDA build (tools/check/gpu_check.sh)"
	@echo "make cuda-lib   build $(PKG)/_metal_ops_cuda.so, the Linux wheel's GPU kernels (static CUDA runtime)"
	@echo "make fuzz       long hypothesis fuzz profile; make asan-test: ASan/UBSan CPU tests"
	@echo "make perf-doc   docs/PERFORMANCE.md and the NeRF results table from benchmarks/results"

# ---- Python environment ---------------------------------------------------------
# The project itself is installed editable (its python/ folder on the venv's
# path; the .so that `make` builds in place is found there): tests, benchmarks
# and examples import metal_ops without editing sys.path. METAL_OPS_SKIP_MAKE:
# setup.py leaves the compiling to this Makefile.
# On a Mac, tools/check/check_macos_env.py first checks that MACOS_STACK's pinned
# stack can install here (an arm64 Python 3.10-3.13 for cpu, 3.9-3.12 for
# metal; macOS 12.0 / 12.1) and says what to use instead; VENV_PYTHON is the
# interpreter that makes the venv.
VENV_PYTHON ?= python3
ifeq ($(UNAME_S)$(MACOS_CROSS),Darwin)
  MACOS_ENV_CHECK = $(if $(wildcard $(PYTHON)),$(PYTHON),$(VENV_PYTHON)) tools/check/check_macos_env.py --stack $(MACOS_STACK)
endif
# ENV=existing: build and test against the TensorFlow already installed in
# PYTHON's environment (e.g. TensorFlow's CUDA build installed offline on a GPU
# machine, docs/BUILDING.md "TensorFlow's CUDA build"); no venv is made.
ifeq ($(ENV),existing)
  PYTHON := $(if $(filter $(VENV)/bin/python,$(PYTHON)),python3,$(PYTHON))
  VENV_STAMP :=
else
  VENV_STAMP := $(VENV)/.installed
endif
# PYTHON is the interpreter pip installs into: the venv's, or an existing
# file. A bare name (`make PYTHON=python3.12`) would make the venv with
# VENV_PYTHON and then run pip under that other interpreter (on Homebrew's,
# PEP 668 refuses): stop before anything runs and name the right variable.
PYTHON_CHECK = $(if $(or $(wildcard $(PYTHON)),$(filter $(VENV)/bin/python,$(PYTHON))),,$(error PYTHON=$(PYTHON) \
  is not the venv's interpreter ($(VENV)/bin/python) nor an existing file: PYTHON is the interpreter pip installs \
  into; to choose the Python that makes the venv, run `make VENV_PYTHON=$(PYTHON)`))
$(VENV)/.installed: $(REQUIREMENTS) pyproject.toml setup.py
	$(PYTHON_CHECK)$(MACOS_ENV_CHECK)
	test -x $(PYTHON) || $(VENV_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -r $(REQUIREMENTS)
	METAL_OPS_SKIP_MAKE=1 $(PYTHON) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@
venv: $(VENV)/.installed

# Compile/link flags come from the installed TensorFlow, computed once (for
# metal-check: from the unpacked macOS wheel in MACOS_TF_DIR).
ifeq ($(MACOS_CROSS),1)
$(BUILD)/tf_flags.mk: tools/build/tf_flags.py $(MACOS_TF_DIR)/.unpacked
	@mkdir -p $(BUILD)
	python3 tools/build/tf_flags.py --macos-wheel-dir $(MACOS_TF_DIR) > $@
else
$(BUILD)/tf_flags.mk: $(VENV_STAMP) tools/build/tf_flags.py
	@mkdir -p $(BUILD)
	$(PYTHON) tools/build/tf_flags.py > $@
endif
-include $(BUILD)/tf_flags.mk

# ---- Sources ---------------------------------------------------------------------
# Found by name (docs/ARCHITECTURE.md, "The layout"; docs/ADDING_AN_OP.md): an
# op's folder kernels/<op>/ holds its files for every backend, told apart by
# their endings; the shared folders (kernels/common, cpu, cuda, metal,
# metal_plan, xla, ...) hold what several ops use, under the same endings.
# An op folder has the op shape of docs/ADDING_AN_OP.md (<op>_op.cc,
# <op>_cpu.cc, <op>.cu.cc, <op>_cuda.cc, <op>_metal.cc, <op>_xla.cc).
KERNEL_SRCS := $(wildcard kernels/*/*.cc)
OP_FOLDERS := $(dir $(filter kernels/%_op.cc,$(KERNEL_SRCS)))
# The CUDA sources (nvcc): launchers and their kernels, and the harness entry
# points (tests/cuda/<op>_harness.cu.cc, or <op>_harness.cu.cc in an op's
# folder) that tests/cuda drives without TensorFlow.
CU_ALL := $(filter %.cu.cc,$(KERNEL_SRCS))
HARNESS_SRCS := $(filter %_harness.cu.cc,$(CU_ALL)) $(wildcard tests/cuda/*_harness.cu.cc)
CU_SRCS := $(filter-out %_harness.cu.cc,$(CU_ALL))
# TensorFlow's GPU kernel registrations and XLA's CUDA handlers (<op>_cuda.cc;
# host compiler), with kernels/xla/register_xla_gpu.cc under XLA (below).
CUDA_TF_SRCS := $(filter %_cuda.cc,$(KERNEL_SRCS))
# The Metal glue's C++ (kernels/metal/*.cc: kernel registrations and host glue
# over the interface to Metal) joins the op library on macOS only, with the
# Objective-C++ adapter under it (MM_SRCS). An op folder's <op>_metal.cc joins
# it everywhere: its Metal plans, which the CPU kernels' offload and the MSL
# shim run too, with its glue under __APPLE__.
OP_METAL_SRCS := $(filter $(addsuffix %_metal.cc,$(OP_FOLDERS)),$(KERNEL_SRCS))
METAL_CC_SRCS := $(filter-out $(OP_METAL_SRCS),$(filter %_metal.cc kernels/metal/%.cc,$(KERNEL_SRCS)))
OP_SRCS := $(filter kernels/%_op.cc,$(KERNEL_SRCS))
CC_SRCS := $(OP_SRCS) $(filter-out %.cu.cc %_gpu.cc %_cuda.cc %_xla.cc %_op.cc $(METAL_CC_SRCS),$(KERNEL_SRCS))
# XLA kernels (docs/XLA.md): <op>_xla.cc (the XLA op kernels) join the op
# library, and <op>_cpu.cc holds their host handlers (MO_XLA=1, kernels/xla/xla_host.h);
# the CUDA handlers, in <op>_cuda.cc, join the CUDA registrations with
# kernels/xla/register_xla_gpu.cc. They use XLA's headers from the wheel
# (included as system headers: their own warnings are not ours) and symbols of
# libtensorflow_cc. Not on macOS: Metal has no XLA.
ifneq ($(UNAME_S),Darwin)
  XLA_SRCS := $(filter %_xla.cc,$(KERNEL_SRCS))
  XLA_GPU_SRCS := $(filter %_xla_gpu.cc,$(KERNEL_SRCS))
  CC_SRCS += $(XLA_SRCS)
  CUDA_TF_SRCS += $(XLA_GPU_SRCS)
  XLA_LDLIBS := -l:libtensorflow_cc.so.2
  XLA_DEFINES := -DMO_XLA=1
endif
TF_INCLUDE = $(patsubst -I%,%,$(filter -I%,$(TF_CFLAGS)))
XLA_CFLAGS = $(foreach d,. external/highwayhash external/farmhash_archive/src external/com_google_protobuf/src,-isystem $(TF_INCLUDE)/$(d))
MM_SRCS := $(wildcard kernels/*/*.mm)
METAL_SRCS := $(wildcard kernels/*/*.metal)

# Our sources build with no warning, kept so by -Werror (`make WERROR=` to
# build anyway with a newer compiler). TensorFlow's headers' own warning is
# silenced where they are included (kernels/framework/tf_eigen.h). A Mac's own build
# (Apple clang of whatever Xcode the user has, which -Werror has never met)
# shows warnings without stopping; `make metal-check` (Debian's clang, the
# macOS cross build) and Linux keep -Werror (`make WERROR=-Werror` on a Mac).
ifeq ($(UNAME_S)$(MACOS_CROSS),Darwin)
  WERROR ?=
else
  WERROR ?= -Werror
endif
WARN := -Wall -Wno-sign-compare -Wno-deprecated-declarations -Wno-attributes $(WERROR)
# -mno-avx512fp16: g++ 12 + the pip Eigen headers fail to compile
# (PacketMathFP16.h) on CPUs with AVX512-FP16 (Sapphire Rapids) under -march=native.
# -fno-trapping-math: lets g++ vectorise floorf (hash-grid cell search); no
# kernel relies on floating-point exception flags, results are unchanged.
OPT ?= -O3 -fno-trapping-math -march=native $(shell $(CXX) -mno-avx512fp16 -E -x c++ /dev/null >/dev/null 2>&1 && echo -mno-avx512fp16)
ifeq ($(UNAME_S),Darwin)
  OPT := -O3 -fno-trapping-math
endif
# PORTABLE=1 (the Linux wheel's libraries, `make isa-libs`): compiled for one
# x86-64 microarchitecture level (ISA) instead of -march=native, and linked with
# runtime/libstdcxx_compat.cc, which keeps the library within the
# libstdc++ that TensorFlow's manylinux wheel needs (docs/BUILDING.md, "Wheels").
ISA ?= x86-64-v2
ISA_TUNE ?= generic
# The optimisation flags of one level, $(call LEVEL_OPT,<level>). The
# interference size Eigen's headers align to, pinned (g++ otherwise warns that
# it follows -mtune): 64 bytes, as on every x86-64 tuning.
LEVEL_OPT = -O3 -fno-trapping-math -march=$(1) -mtune=$(ISA_TUNE) --param destructive-interference-size=64
ifeq ($(PORTABLE),1)
  OPT := $(call LEVEL_OPT,$(ISA))
  PORTABLE_SRCS := runtime/libstdcxx_compat.cc
endif
# WHEEL=1 (`make wheels`): only the rpath into site-packages, none into this
# machine's build venv (an in-tree `make isa-libs` keeps both).
ifeq ($(WHEEL),1)
  BLAS_LFLAGS := $(filter-out -Wl$(comma)-rpath$(comma)/%,$(BLAS_LFLAGS))
endif
ifeq ($(MACOS_CROSS),1)
  TARGET_PLATFORM := Darwin-arm64
else
  TARGET_PLATFORM := $(UNAME_S)-$(shell uname -m)
endif
EXTRA_CXXFLAGS ?=
EXTRA_LDFLAGS ?=
# BLAS_*: OpenBLAS from the pinned scipy-openblas32 package (the fused
# convolution's GEMM), with rpaths to it (tools/build/tf_flags.py).
CXXFLAGS := -fPIC $(OPT) -I. $(TF_CFLAGS) $(BLAS_CFLAGS) $(XLA_DEFINES) $(WARN) -MMD -MP $(EXTRA_CXXFLAGS)
LDFLAGS := -shared $(TF_LFLAGS) $(XLA_LDLIBS) $(BLAS_LFLAGS) $(EXTRA_LDFLAGS)

# Sources compiled as units (below), not one object each.
UNIT_SRCS := $(OP_SRCS) $(XLA_SRCS)
OBJS := $(patsubst %.cc,$(BUILD)/obj/%.o,$(filter-out $(UNIT_SRCS),$(CC_SRCS)) $(PORTABLE_SRCS))
# The sources whose code the CPU's instruction set does not speed up (the op
# definitions, the Metal plans, XLA's op kernels, which only build XLA's graph;
# the host handlers that run the functors are in <op>_cpu.cc) compile once
# on x86-64 Linux, at the baseline level (the first of ISA_LEVELS, below), into
# ISA_COMMON: the -march=native library and each level's library of the Linux
# wheel (`make isa-libs`) link the same objects, after their own (where both
# hold a copy of an inline function, the linker keeps the first: their own).
ISA_COMMON_SRCS := $(OP_SRCS) $(filter kernels/metal_plan/%.cc %_xla.cc $(OP_METAL_SRCS),$(CC_SRCS)) \
  $(PORTABLE_SRCS)
ifeq ($(UNAME_S)-$(shell uname -m)-$(MACOS_CROSS),Linux-x86_64-)
  ISA_COMMON ?= $(BUILD)/isa-common
  ISA_COMMON_FLAGS ?= $(BUILD)/tf_flags.mk
endif
ifneq ($(ISA_COMMON),)
  ISA_COMMON_OBJS := $(patsubst %.cc,$(ISA_COMMON)/obj/%.o,$(filter-out $(UNIT_SRCS),$(ISA_COMMON_SRCS)))
  OBJS := $(filter-out $(patsubst %.cc,$(BUILD)/obj/%.o,$(ISA_COMMON_SRCS)),$(OBJS)) $(ISA_COMMON_OBJS)
  COMMON_CXXFLAGS = $(subst $(OPT),$(call LEVEL_OPT,$(firstword $(ISA_LEVELS))),$(CXXFLAGS))
  $(ISA_COMMON)/obj/%.o: %.cc $(ISA_COMMON_FLAGS)
	@mkdir -p $(dir $@)
	$(CXX) $(COMMON_CXXFLAGS) -c $< -o $@
endif

# Units: the op definitions (kernels/<op>/<op>_op.cc) and the XLA op kernels (<op>_xla.cc)
# each compile as one translation unit, a generated file that includes them
# all. Every op definition includes TensorFlow's op registry and shape
# inference (about 6 s of g++ a file), every XLA kernel tf2xla's op kernel and
# XLA's builder (kernels/xla/xla_kernel.h, about 35 s) for a few lines of its
# own: together they take that time once (docs/BUILDING.md, "Units"). A unit's
# file is rewritten only when its list of sources changes; an edit of one
# source rebuilds its unit (the unit's dependency file, read with OBJS's,
# lists them). Where the library has common objects, the units are among
# them. A name in a source's anonymous namespace must differ from the other
# sources' of its unit.
# $(call unit_rules,<generated .cc>,<sources>,<more compiler flags>)
define unit_rules
$(1): FORCE
	@mkdir -p $$(dir $$@)
	@printf '#include "%s"\n' $(2) > $$@.tmp
	@if cmp -s $$@.tmp $$@; then rm -f $$@.tmp; else mv -f $$@.tmp $$@; fi
$(1:.cc=.o): $(1) $$(or $$(ISA_COMMON_FLAGS),$$(BUILD)/tf_flags.mk)
	$$(CXX) $$(if $$(ISA_COMMON),$$(COMMON_CXXFLAGS),$$(CXXFLAGS)) $(3) -c $$< -o $$@
endef
UNIT_DIR := $(or $(ISA_COMMON),$(BUILD))/gen
OP_UNIT := $(UNIT_DIR)/op_definitions.cc
XLA_UNIT := $(if $(XLA_SRCS),$(UNIT_DIR)/xla_kernels.cc)
UNIT_OBJS := $(patsubst %.cc,%.o,$(OP_UNIT) $(XLA_UNIT))
OBJS += $(UNIT_OBJS)
$(eval $(call unit_rules,$(OP_UNIT),$(OP_SRCS),))
$(if $(XLA_UNIT),$(eval $(call unit_rules,$(XLA_UNIT),$(XLA_SRCS),$(XLA_CFLAGS))))
BACKENDS := cpu

# The Metal shaders are compiled at run time from source embedded in the
# library (kernels/metal/embedded_sources.h): tools/build/embed_metal.py expands
# their kernels/common includes into $(GEN)/<name>.metal, which the MSL-shim
# tests compile too, and into $(GEN)/metal_sources.cc.
GEN := $(BUILD)/gen
METAL_GEN_CC := $(GEN)/metal_sources.cc
METAL_GEN_SRCS := $(addprefix $(GEN)/,$(notdir $(METAL_SRCS)))
$(METAL_GEN_CC): $(METAL_SRCS) tools/build/embed_metal.py tools/check/msl_check.py
	python3 tools/build/embed_metal.py --root . --out $(GEN) $(METAL_SRCS)
$(METAL_GEN_SRCS): $(METAL_GEN_CC)
-include $(GEN)/metal_sources.d

# Objective-C++ glue: ARC, and availability warnings for APIs newer than MACOS_MIN
# (metal-check adds -Werror; WARN's WERROR applies too).
MM_FLAGS := -fobjc-arc -ObjC++ -Wextra -Wno-unused-parameter -Wunguarded-availability-new $(METAL_WERROR)
DARWIN_FRAMEWORKS := -framework Foundation -framework CoreFoundation -framework Metal \
  -framework MetalPerformanceShaders -framework MetalPerformanceShadersGraph -lobjc
ifeq ($(UNAME_S),Darwin)
  OBJS += $(patsubst %.mm,$(BUILD)/obj/%.mm.o,$(MM_SRCS)) $(patsubst %.cc,$(BUILD)/obj/%.o,$(METAL_CC_SRCS) $(METAL_GEN_CC))
  # Undefined symbols are link errors; TensorFlow's dylibs are found through
  # the rpaths: beside an installed package (site-packages/tensorflow) or the
  # TensorFlow the library was built against.
  TF_LIB_DIR = $(patsubst -L%,%,$(firstword $(TF_LFLAGS)))
  # A wheel (WHEEL=1) gets only the rpath into site-packages: an absolute one
  # would name the build machine's directories on the user's Mac.
  DARWIN_RPATHS = -Wl,-rpath,@loader_path/../tensorflow $(if $(filter 1,$(WHEEL)),,-Wl,-rpath,$(TF_LIB_DIR))
  DARWIN_LDFLAGS = $(DARWIN_FRAMEWORKS) $(DARWIN_RPATHS) $(CROSS_LDFLAGS)
  LDFLAGS += $(DARWIN_LDFLAGS) -install_name @rpath/$(notdir $(LIB))
  BACKENDS += metal
endif

# The toolkit root: /usr/local/cuda when present (nvcc may be a wrapper script
# elsewhere on PATH), else the directory above the real nvcc binary.
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda) $(patsubst %/bin/nvcc,%,$(shell readlink -f $$(command -v $(NVCC)) 2>/dev/null)))
CUDA_ARCH_FLAGS := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
# Objects of the .cu.cc sources (`make cuda-lib` may point this at another folder).
CUOBJ ?= $(BUILD)/cuobj
NVCCFLAGS := -O3 -std=c++17 -I. --expt-relaxed-constexpr -Xcompiler -fPIC $(CUDA_ARCH_FLAGS)
ifeq ($(TF_IS_CUDA_BUILD),1)
  ifneq ($(shell command -v $(NVCC)),)
    OBJS += $(patsubst %.cc,$(BUILD)/obj/%.o,$(CUDA_TF_SRCS)) $(patsubst %.cu.cc,$(CUOBJ)/%.o,$(CU_SRCS))
    CXXFLAGS += -DGOOGLE_CUDA=1 -I$(CUDA_HOME)/include
    LDFLAGS += -L$(CUDA_HOME)/lib64 -lcudart
    BACKENDS += cuda
  endif
endif

# cuBLAS's headers (kernels/cuda/cublas_gemm.cu.cc, the CUDA convolution's
# GEMM, opens the library at run time: nothing links it). CUBLAS_HOME: a
# folder with cuBLAS's include/ (a CUDA toolkit's root, site-packages/nvidia/cublas);
# by default the pinned nvidia-cublas-cu12 wheel's, fetched once with pip
# (tools/build/cublas_headers.py). The soname opened follows the headers' major
# version: libcublas.so.12, TensorFlow 2.21's (its CUDA 12).
CUBLAS_VERSION := 12.9.3.13
CUBLAS_DEFAULT_HOME := $(BUILD)/cublas-$(CUBLAS_VERSION)
CUBLAS_HOME ?= $(CUBLAS_DEFAULT_HOME)
export CUBLAS_HOME
NVCCFLAGS += -I$(CUBLAS_HOME)/include
# Fetched when CUBLAS_HOME is the default folder, also when a parent make
# exported it (tools/build/build_wheels.sh's `make cuda-lib`); a folder of your own is used as it is.
ifeq ($(CUBLAS_HOME),$(CUBLAS_DEFAULT_HOME))
$(CUBLAS_HOME)/include/cublas_v2.h:
	python3 tools/build/cublas_headers.py --version $(CUBLAS_VERSION) --out $(CUBLAS_HOME) \
	  --python $(if $(wildcard $(PYTHON)),$(PYTHON),python3) --download-dir $(BUILD)/cublas-dl
endif
$(patsubst %.cu.cc,$(CUOBJ)/%.o,$(CU_SRCS) $(HARNESS_SRCS)): | $(CUBLAS_HOME)/include/cublas_v2.h

$(patsubst %.cc,$(BUILD)/obj/%.o,$(XLA_GPU_SRCS) $(filter %_cuda.cc,$(CUDA_TF_SRCS))): CXXFLAGS += $(XLA_CFLAGS)

$(BUILD)/obj/%.o: %.cc $(BUILD)/tf_flags.mk
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# (.mm.o: an op's <op>_metal.mm compiles beside its <op>_metal.cc, whose object is <op>_metal.o)
$(BUILD)/obj/%.mm.o: %.mm $(BUILD)/tf_flags.mk
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(MM_FLAGS) -c $< -o $@

$(CUOBJ)/%.o: %.cu.cc
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -x cu -MMD -MP -c $< -o $@

# The units first, the longest to compile; linked in OBJS's order.
$(LIB): $(UNIT_OBJS) $(OBJS)
	$(CXX) -o $@.tmp $(OBJS) $(LDFLAGS) && mv -f $@.tmp $@

$(BUILD_INFO): $(LIB) tools/build/write_build_info.py
	python3 tools/build/write_build_info.py --out $@ --backends "$(BACKENDS)" --tf-version $(TF_VERSION) \
	  --platform $(TARGET_PLATFORM) --lib $(LIB) --grappler-lib $(PLUGIN_LIB)

-include $(OBJS:.o=.d)

# ---- Grappler fusion plugin: its own library (exports TF_InitGraph), loaded by
# metal_ops.fusion.enable() after the op library. Uses libtensorflow_cc's
# Grappler C API helpers (TF_GetNodesToPreserveList, TF_NewGraphProperties).
PLUGIN_LIB := $(PKG)/_metal_ops_grappler.so
PLUGIN_OBJS := $(patsubst %.cc,$(BUILD)/obj/%.o,$(wildcard grappler/*.cc) $(PORTABLE_SRCS))
ifeq ($(UNAME_S),Darwin)
  PLUGIN_LDLIBS = -ltensorflow_cc.2 $(DARWIN_LDFLAGS) -install_name @rpath/$(notdir $(PLUGIN_LIB))
else
  PLUGIN_LDLIBS := -l:libtensorflow_cc.so.2
endif
all: $(PLUGIN_LIB)
$(PLUGIN_LIB): $(PLUGIN_OBJS)
	$(CXX) -o $@.tmp $(PLUGIN_OBJS) -shared $(TF_LFLAGS) $(PLUGIN_LDLIBS) $(EXTRA_LDFLAGS) && mv -f $@.tmp $@
-include $(PLUGIN_OBJS:.o=.d)

# ---- Runtime ISA dispatch (the Linux wheel) ------------------------------------------
# The op library compiled once per x86-64 microarchitecture level, each a
# complete library, $(PKG)/_metal_ops.<level>.so (objects in $(BUILD)/isa-<level>);
# the Grappler plugin once, for the baseline. metal_ops' loader loads the
# highest level the CPU runs (METAL_OPS_ISA forces one). `make wheels` builds
# this into build/wheel/linux/pkg; `make isa-libs` in the tree builds them beside
# the -march=native library (METAL_OPS_ISA then picks one, for benchmarks).
ISA_LEVELS ?= x86-64-v2 x86-64-v3 x86-64-v4
.PHONY: isa-libs isa-plugin $(addprefix isa-lib-,$(ISA_LEVELS))
# One level after the other (each sub-make compiles in parallel itself).
# -j on each sub-make's command line: the jobserver of a make whose makefile
# forces -j (MAKEFLAGS above) does not reach a sub-make, which would compile serially.
ISA_JOBS ?= $(JOBS)
isa-libs: $(BUILD)/tf_flags.mk
	@mkdir -p $(PKG)
	+@for level in $(ISA_LEVELS); do $(MAKE) --no-print-directory -j$(ISA_JOBS) isa-lib-$$level || exit 1; done
	+@$(MAKE) --no-print-directory -j$(ISA_JOBS) isa-plugin
	python3 tools/build/write_build_info.py --merge --out $(BUILD_INFO) --backends cpu --tf-version $(TF_VERSION) \
	  --platform $(TARGET_PLATFORM) --isa-levels "$(ISA_LEVELS)" --isa-tune $(ISA_TUNE)
$(addprefix isa-lib-,$(ISA_LEVELS)): isa-lib-%: $(BUILD)/tf_flags.mk
	+$(MAKE) --no-print-directory -j$(ISA_JOBS) PORTABLE=1 ISA=$* BUILD=$(BUILD)/isa-$* LIB=$(PKG)/_metal_ops.$*.so \
	  ISA_COMMON=$(ISA_COMMON) ISA_COMMON_FLAGS=$(ISA_COMMON_FLAGS) $(PKG)/_metal_ops.$*.so
isa-plugin: $(BUILD)/tf_flags.mk
	+$(MAKE) --no-print-directory -j$(ISA_JOBS) PORTABLE=1 BUILD=$(BUILD)/isa-plugin $(PLUGIN_LIB)

# ---- CUDA kernels for the Linux wheel (docs/BUILDING.md, "CUDA kernels in the wheel") ----
# $(PKG)/_metal_ops_cuda.so: the GPU kernel registrations (kernels/*/*_cuda.cc,
# host compiler, GOOGLE_CUDA=1, against the build venv's TensorFlow headers) and
# their launchers (kernels/*/*.cu.cc, nvcc), built against tensorflow-cpu,
# which the op library is built against too; no REGISTER_OP (the ops stay in the
# op library, which metal_ops' loader loads first). The CUDA runtime is linked
# statically and kept inside (--exclude-libs), so the library needs only the
# NVIDIA driver (libcuda, which the runtime opens when first used); -z defs: every
# other symbol is TensorFlow's or the C/C++ runtime's. Portable host code
# (PORTABLE=1 at the baseline level, the manylinux compat file).
# Built with CUDA 12, as TensorFlow 2.21 (drivers 525 and newer): CUDA_LIB_HOME,
# by default $(CUDA12_HOME), which tools/build/cuda12_toolkit.py assembles from
# PyPI's CUDA 12 wheels (requirements-cuda12.txt: ptxas, headers, the static
# runtime) and this machine's CUDA 13 nvcc/cicc (CUDA_HOME). A CUDA 12
# toolkit of your own: CUDA_LIB_HOME=/usr/local/cuda-12.x.
# TF_CUDA_CAPABILITIES: tf.sysconfig.get_build_info()["cuda_compute_capabilities"]
# of TensorFlow's CUDA wheel (tensorflow 2.21.0; keep in step with TF_VERSION);
# tools/build/cuda_archs.py turns them into -gencode flags for this nvcc, leaving out
# those it cannot compile and those below the kernels' sm_80.
# CUDA_LIB_CAPABILITIES=compute_90: one architecture (CI).
CUDA_LIB := $(PKG)/_metal_ops_cuda.so
TF_CUDA_CAPABILITIES := sm_60 sm_70 sm_80 sm_89 compute_90
CUDA_LIB_CAPABILITIES ?= $(TF_CUDA_CAPABILITIES)
CUDA12_HOME ?= $(BUILD)/cuda12
CUDA_LIB_HOME ?= $(CUDA12_HOME)
CUDA_LIB_NVCC ?= $(CUDA_LIB_HOME)/bin/nvcc
CUDA_LIB_LDLIBS = $(XLA_LDLIBS) -L$(CUDA_HOME)/lib64 -l:libcudart_static.a -ldl -lpthread -lrt -Wl,--exclude-libs,ALL -Wl,-z,defs
# The runtime's version (CUDART_VERSION of its headers: 12090 -> 12.9), which
# the loader compares with the driver's.
CUDA_LIB_RUNTIME_VERSION = $$(sed -n 's/^\#define CUDART_VERSION *\([0-9]*\).*/\1/p' $(CUDA_LIB_HOME)/include/cuda_runtime_api.h \
  | awk '{printf "%d.%d", $$1 / 1000, $$1 % 1000 / 10}')
$(CUDA12_HOME)/.installed: requirements-cuda12.txt tools/build/cuda12_toolkit.py
	python3 tools/build/cuda12_toolkit.py setup --out $(CUDA12_HOME) --cuda13 $(CUDA_HOME) \
	  --python $(if $(wildcard $(PYTHON)),$(PYTHON),python3)
	touch $@
.PHONY: cuda-lib cuda-lib-link cuda12-toolkit
cuda12-toolkit: $(CUDA12_HOME)/.installed
cuda-lib: $(BUILD)/tf_flags.mk $(if $(filter $(CUDA12_HOME),$(CUDA_LIB_HOME)),$(CUDA12_HOME)/.installed) | $(CUBLAS_HOME)/include/cublas_v2.h
	@command -v $(CUDA_LIB_NVCC) >/dev/null || { echo "cuda-lib: $(CUDA_LIB_NVCC) not found (the CUDA toolkit's compiler)" >&2; exit 1; }
	@mkdir -p $(PKG)
	+@gencode="$$(python3 tools/build/cuda_archs.py gencode --nvcc $(CUDA_LIB_NVCC) $(CUDA_LIB_CAPABILITIES))" || exit 1; \
	  cuobj=$(BUILD)/cuda-lib/cuobj-$$(echo "$(CUDA_LIB_HOME) $$gencode" | md5sum | cut -c1-8); \
	  echo "cuda-lib: CUDA $(CUDA_LIB_RUNTIME_VERSION) ($(CUDA_LIB_HOME)), $$gencode (objects in $$cuobj)"; \
	  $(MAKE) --no-print-directory -j$(ISA_JOBS) PORTABLE=1 ISA=$(firstword $(ISA_LEVELS)) BUILD=$(BUILD)/cuda-lib \
	    NVCC=$(CUDA_LIB_NVCC) CUDA_HOME=$(CUDA_LIB_HOME) CUOBJ=$$cuobj CUDA_ARCH_FLAGS="$$gencode" \
	    TF_IS_CUDA_BUILD=0 cuda-lib-link
	python3 tools/build/write_build_info.py --merge --out $(BUILD_INFO) --backends cuda --tf-version $(TF_VERSION) \
	  --platform $(TARGET_PLATFORM) --cuda-library $(CUDA_LIB) \
	  --cuda-archs "$$(python3 tools/build/cuda_archs.py describe --nvcc $(CUDA_LIB_NVCC) $(CUDA_LIB_CAPABILITIES))" \
	  --cuda-version "$(CUDA_LIB_RUNTIME_VERSION)"
CUDA_LIB_GLUE_OBJS := $(patsubst %.cc,$(BUILD)/obj/%.o,$(CUDA_TF_SRCS) $(PORTABLE_SRCS))
CUDA_LIB_CU_OBJS := $(patsubst %.cu.cc,$(CUOBJ)/%.o,$(CU_SRCS))
$(patsubst %.cc,$(BUILD)/obj/%.o,$(CUDA_TF_SRCS)): CXXFLAGS += -DGOOGLE_CUDA=1 -I$(CUDA_HOME)/include
cuda-lib-link: $(CUDA_LIB)
-include $(CUDA_LIB_GLUE_OBJS:.o=.d)
# Linked twice: the static CUDA runtime calls pthread/dl/sem functions that this
# machine's glibc (2.34+) versions above the manylinux baseline;
# tools/build/glibc_compat.py binds them to their older versions (--wrap).
MANYLINUX_GLIBC ?= 2.27
$(CUDA_LIB): $(CUDA_LIB_GLUE_OBJS) $(CUDA_LIB_CU_OBJS)
	$(CXX) -o $@.tmp $^ -shared $(TF_LFLAGS) $(CUDA_LIB_LDLIBS)
	python3 tools/build/glibc_compat.py --lib $@.tmp --max-glibc $(MANYLINUX_GLIBC) --out $(BUILD)/glibc_compat
	$(CXX) -c -o $(BUILD)/glibc_compat.o $(BUILD)/glibc_compat.S
	$(CXX) -o $@.tmp $^ $(BUILD)/glibc_compat.o -shared $(TF_LFLAGS) $(CUDA_LIB_LDLIBS) \
	  $$(cat $(BUILD)/glibc_compat.flags) && mv -f $@.tmp $@

# ---- Wheels (docs/BUILDING.md, "Wheels") --------------------------------------------
# dist/: the Linux x86_64 wheel (isa-libs above, tagged and checked for
# TensorFlow's manylinux policy) and the macOS arm64 wheel (metal-check's
# build; skipped with one line without a macOS SDK). wheel-test: the Linux
# wheel in a new venv, the test suite at every level this CPU runs.
wheels: $(VENV)/.installed
	@+PYTHON="$(PYTHON)" MACOS_SDK="$(MACOS_SDK)" MACOS_MIN="$(MACOS_MIN)" bash tools/build/build_wheels.sh
wheel-test:
	@bash tools/check/wheel_test.sh

# ---- CUDA without a GPU -----------------------------------------------------------
HARNESS_LIB := $(BUILD)/libmetal_ops_cuda.so
HARNESS_OBJS := $(patsubst %.cu.cc,$(CUOBJ)/%.o,$(CU_SRCS) $(HARNESS_SRCS))
-include $(HARNESS_OBJS:.o=.d)

HARNESS_LINK ?= $(NVCC) -shared $(CUDA_ARCH_FLAGS)
HARNESS_CUDART ?= -lcudart
cuda-harness: $(HARNESS_LIB)
$(HARNESS_LIB): $(HARNESS_OBJS)
	$(HARNESS_LINK) -o $@ $^ $(HARNESS_CUDART)
# The same harness built by `make cuda-lib`'s CUDA 12 toolkit and linked as
# `make cuda-lib` links (host compiler, no device link), with its
# runtime linked in and kept inside (--exclude-libs: its calls never bind to
# a CUDA 13 libcudart of the same process): the A/B against the CUDA 13
# build on a GPU (tools/check/gpu_check.sh cuda12-ab). Its kernel objects are those
# of `make cuda-lib CUDA_LIB_CAPABILITIES=compute_90` (the same flags).
CUDA12_HARNESS := $(BUILD)/cuda12-harness/libmetal_ops_cuda.so
.PHONY: cuda12-harness
cuda12-harness: $(if $(filter $(CUDA12_HOME),$(CUDA_LIB_HOME)),$(CUDA12_HOME)/.installed) | $(CUBLAS_HOME)/include/cublas_v2.h
	@mkdir -p $(dir $(CUDA12_HARNESS))
	+$(MAKE) --no-print-directory NVCC=$(CUDA_LIB_NVCC) CUDA_HOME=$(CUDA_LIB_HOME) \
	  CUOBJ=$(BUILD)/cuda-lib/cuobj-$$(echo "$(CUDA_LIB_HOME) $(CUDA_ARCH_FLAGS)" | md5sum | cut -c1-8) \
	  HARNESS_LIB=$(CUDA12_HARNESS) HARNESS_LINK="$(CXX) -shared" \
	  HARNESS_CUDART="-L$(CUDA_LIB_HOME)/lib64 -l:libcudart_static.a -ldl -lpthread -lrt -Wl,--exclude-libs,ALL" \
	  $(CUDA12_HARNESS)

# Compiles every CUDA source (kernels + harness) and the TF GPU registrations
# (syntax-checked against the pip headers with GOOGLE_CUDA on).
CUDA_SYNTAX_STAMPS := $(patsubst %.cc,$(BUILD)/cuda-check/%.ok,$(CUDA_TF_SRCS))
cuda-check: $(HARNESS_LIB) $(CUDA_SYNTAX_STAMPS)
	@echo "cuda-check: OK ($(words $(CU_SRCS) $(HARNESS_SRCS)) CUDA sources, $(words $(CUDA_TF_SRCS)) TF GPU registrations)"
# One registration file's syntax check (in parallel with the others and nvcc).
$(CUDA_SYNTAX_STAMPS): $(BUILD)/cuda-check/%.ok: %.cc $(BUILD)/tf_flags.mk
	@echo "syntax-check $< (GOOGLE_CUDA=1)"
	@mkdir -p $(dir $@)
	@$(CXX) -fsyntax-only -I. $(TF_CFLAGS) $(XLA_CFLAGS) $(XLA_DEFINES) $(WARN) -DGOOGLE_CUDA=1 -I$(CUDA_HOME)/include \
	  -MMD -MP -MF $(@:.ok=.d) -MT $@ $<
	@touch $@
-include $(CUDA_SYNTAX_STAMPS:.ok=.d)

# ---- Metal shaders compiled as C++ (MSL shim) for CPU-side testing ----------------
SHIM_LIB := $(BUILD)/libmetal_shim.so
SHIM_EXEC_LIB := $(BUILD)/libmetal_ops_shim_exec.so
SHIM_SRCS := $(filter-out tests/metal_shim/shim_exec% tests/metal_shim/metal_model.cc,$(wildcard tests/metal_shim/*.cc))
SHIM_DEPS := $(METAL_GEN_SRCS) $(wildcard tests/metal_shim/*.h) $(wildcard kernels/*/*.h) \
  tests/metal_shim/kernel_table.py
metal-shim: $(SHIM_LIB) $(SHIM_EXEC_LIB)
# $(METAL_GEN_CC) too: the expanded .metal files come from its recipe, and
# make does not see a new time on a target whose rule has no recipe.
$(GEN)/kernel_tables.stamp: $(METAL_GEN_CC) $(METAL_GEN_SRCS) tests/metal_shim/kernel_table.py
	python3 tests/metal_shim/kernel_table.py --out $(GEN) $(METAL_GEN_SRCS)
	@touch $@
$(SHIM_LIB): $(SHIM_SRCS) $(SHIM_DEPS) $(GEN)/kernel_tables.stamp
	@mkdir -p $(BUILD)
	$(CXX) -std=c++17 -O2 -fPIC -shared -I. -I$(GEN) -Wno-attributes $(EXTRA_CXXFLAGS) -o $@ $(SHIM_SRCS)

# The strict model of Metal (METAL_OPS_METAL=shim / shim-stream,
# tests/metal_shim/metal_model.cc): the op library's Metal host path runs
# against it, and its dispatches run the shaders compiled as C++, one object
# per shader ($(GEN)/<name>_exec.cc, generated by kernel_table.py: an adapter
# per entry point binding a dispatch's buffers to the kernel's [[buffer(N)]]
# parameters). A library of its own, never part of the op library;
# `import metal_ops` loads it for those routes (kernels/metal_plan/executor.h).
SHIM_EXEC_GEN := $(patsubst $(GEN)/%.metal,$(GEN)/%_exec.cc,$(METAL_GEN_SRCS))
SHIM_EXEC_OBJS := $(patsubst %.cc,$(BUILD)/shim_exec/%.o,$(notdir $(SHIM_EXEC_GEN)) shim_exec.cc metal_model.cc threadgroups.cc)
# The embedded sources too: the model's pipeline cache reads their language lines.
SHIM_EXEC_OBJS += $(BUILD)/shim_exec/metal_sources.o
$(BUILD)/shim_exec/metal_sources.o: $(METAL_GEN_CC)
	@mkdir -p $(dir $@)
	$(SHIM_EXEC_CXX) -c $< -o $@
$(SHIM_EXEC_GEN): $(GEN)/kernel_tables.stamp
SHIM_EXEC_CXX := $(CXX) -std=c++17 -O2 -fPIC -I. -I$(GEN) -Wno-attributes $(EXTRA_CXXFLAGS)
$(BUILD)/shim_exec/%_exec.o: $(GEN)/%_exec.cc $(SHIM_DEPS)
	@mkdir -p $(dir $@)
	$(SHIM_EXEC_CXX) -c $< -o $@
$(BUILD)/shim_exec/%.o: tests/metal_shim/%.cc $(SHIM_DEPS) $(wildcard kernels/metal_plan/*.h)
	@mkdir -p $(dir $@)
	$(SHIM_EXEC_CXX) -c $< -o $@
$(SHIM_EXEC_LIB): $(SHIM_EXEC_OBJS)
	$(CXX) -shared -o $@ $(SHIM_EXEC_OBJS)

# ---- macOS build checked on Linux (no Mac) ------------------------------------------
# tools/check/metal_check.sh: clang/lld from Debian when missing, the pinned macOS
# TensorFlow and tensorflow-metal wheels cached under $(BUILD)/macos, then this
# Makefile's own Darwin build (UNAME_S=Darwin MACOS_CROSS=1) once per macOS
# stack (TensorFlow 2.21; TensorFlow 2.19.1 + tensorflow-metal) and checks of
# the linked libraries. Without a macOS SDK in MACOS_SDK it prints why and exits 0.
# MACOS_STACKS="cpu metal" (the default) builds and checks both macOS builds.
metal-check:
	@+MACOS_SDK="$(MACOS_SDK)" MACOS_MIN="$(MACOS_MIN)" PYTHON="$(PYTHON)" WHEEL="$(WHEEL)" MACOS_STACKS="$(MACOS_STACKS)" \
	  bash tools/check/metal_check.sh
# The part metal_check.sh runs (with UNAME_S=Darwin MACOS_CROSS=1).
metal-check-build: $(LIB) $(PLUGIN_LIB) $(BUILD_INFO)

# ---- MSL rules check ------------------------------------------------------------------
# tools/check/msl_check.py compiles the embedded shader sources as C++ for OpenCL
# against a stand-in metal_stdlib (address spaces enforced) and lints what no
# flag catches; tests/test_msl_check.py runs it in `make test`. msl-clang
# installs Debian's clang when none fits (as root), else prints why the check
# is skipped.
msl-clang:
	@python3 tools/check/msl_check.py --ensure-clang
msl-check: $(METAL_GEN_SRCS) msl-clang
	python3 tools/check/msl_check.py $(METAL_GEN_SRCS)

# ---- Tests, demo, tools ---------------------------------------------------------------
test: all metal-shim msl-clang cross-tools
	$(PYTHON) -m pytest tests $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

# g++-aarch64-linux-gnu and qemu-user for tests/test_neon_qemu.py (the NEON
# paths, run under emulation); when it cannot, a banner says why and make goes
# on (the NEON tests then skip, or fail in CI: tests/test_neon_qemu.py).
cross-tools:
	@bash tools/build/install_cross_tools.sh

fuzz: all
	METAL_OPS_FUZZ_PROFILE=long $(PYTHON) -m pytest tests/fuzz $(PYTEST_ARGS)

# ASan + UBSan: the op library and the MSL shim (the Metal kernels compiled as
# C++, tests/metal_shim) are rebuilt with the sanitizers into $(ASAN_DIR) (a
# copy of the Python package beside them), so the regular build others use is
# never touched, and the CPU test suite runs against them with the runtimes
# preloaded into Python. g++ 12's -fsanitize=null/nonnull-attribute make absl's
# constexpr hash-table code fail to compile: those two checks are off (a null
# dereference still faults and ASan reports it); float-cast-overflow (not in
# g++'s `undefined` group) is on. Leak detection is off because
# TensorFlow's own start-up allocations are never freed. Reports go to
# $(ASAN_DIR)/reports/ (pytest's capture would swallow them);
# tools/check/sanitizer_reports.py prints them and fails the target on any error (not
# on ASan's swapcontext notice, which every process running the shim's fibers
# prints). Known, reported bugs are suppressed in tests/fuzz/ubsan_known_issues.supp.
# The regular metal-shim too: tests/test_metal_glue.py checks its build/gen.
ASAN_DIR := $(BUILD)/asan
ASAN_FLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize=null,nonnull-attribute,returns-nonnull-attribute -fno-sanitize-recover=undefined
asan-test: all metal-shim
	mkdir -p $(ASAN_DIR)/python
	tar -C python --exclude='*.so' --exclude='_build_info.json' --exclude='__pycache__' -cf - metal_ops | tar -C $(ASAN_DIR)/python -xf -
	$(MAKE) BUILD=$(ASAN_DIR) PKG=$(ASAN_DIR)/python/metal_ops OPT="-O1 -g -fno-omit-frame-pointer" \
	  EXTRA_CXXFLAGS="$(ASAN_FLAGS)" EXTRA_LDFLAGS="$(ASAN_FLAGS)" all metal-shim
	rm -rf $(ASAN_DIR)/reports && mkdir -p $(ASAN_DIR)/reports
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_odr_violation=0:log_path=$(CURDIR)/$(ASAN_DIR)/reports/asan \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$(CURDIR)/$(ASAN_DIR)/reports/ubsan:suppressions=$(CURDIR)/tests/fuzz/ubsan_known_issues.supp \
	  LD_PRELOAD="$$($(CXX) -print-file-name=libasan.so) $$($(CXX) -print-file-name=libubsan.so)" \
	  METAL_OPS_EXPECT_ASAN=1 METAL_OPS_SHIM_LIB=$(CURDIR)/$(ASAN_DIR)/libmetal_shim.so \
	  $(PYTHON) -m pytest tests -m "not slow" -p no:cacheprovider -o pythonpath="$(ASAN_DIR)/python python ." $(PYTEST_ARGS); rc=$$?; \
	python3 tools/check/sanitizer_reports.py $(ASAN_DIR)/reports || exit 1; \
	echo "asan-test: pytest exit status $$rc"; exit $$rc

# The GPU checks through TensorFlow's CUDA build (tools/check/gpu_check.sh): with
# TensorFlow already installed, e.g. `make gpu-check ENV=existing`.
gpu-check:
	PYTHON="$(PYTHON)" bash tools/check/gpu_check.sh $(GPU_CHECK_STEPS)

demo: all
	$(PYTHON) -m examples.nerf.train --name demo

splat-demo: all
	$(PYTHON) -m examples.splat.train --name splat_demo

bench: all
	for b in benchmarks/bench_*.py; do $(PYTHON) -m benchmarks.$$(basename $$b .py) || exit 1; done

# docs/PERFORMANCE.md and the NeRF sample's results table, from benchmarks/results (no build needed).
perf-doc: $(VENV)/.installed
	$(PYTHON) -m benchmarks.report

bazel: $(VENV)/.installed
	bash tools/build/bazel_build.sh

clean-objs:
	rm -rf $(BUILD)/obj $(LIB)

clean:
	rm -rf $(BUILD) $(LIB) $(BUILD_INFO) bazel-*
