#!/usr/bin/env bash
# TensorFlow's CUDA build on a GPU machine that has no network
# (docs/BUILDING.md, "TensorFlow's CUDA build on a machine without network").
#
#   tools/build/tf_cuda_offline.sh download DIR      (on a machine with PyPI)
#       Downloads the CPython 3.12 wheels into DIR/wheels, packs them into one
#       tar split into parts of PART_MB MiB (default 58), each in its own folder
#       DIR/pNN, with the tar's sha256 in DIR/p00.
#   tools/build/tf_cuda_offline.sh install PARTS... TARGET  (on the GPU machine)
#       Joins the parts (folders or files, in order), checks the sha256,
#       installs every wheel into TARGET (pip --target, no index) and prints,
#       as its last line, the `export` that puts TARGET on PYTHONPATH and its
#       CUDA libraries on LD_LIBRARY_PATH.
#
# What TensorFlow 2.21 loads at start: cudart, cuBLAS and cuBLASLt (used by
# every matmul: the real libraries are carried), cuFFT, cuSOLVER, cuSPARSE and
# cuDNN. If one is missing it registers no GPU at all. cuDNN runs every
# convolution: the install uses the cuDNN 9 it finds on the machine (CUDNN_DIR,
# or the one PyTorch's wheels installed) and otherwise one carried in the
# wheels (nvidia-cudnn-cu12). cuFFT, cuSOLVER and cuSPARSE (FFTs and linear
# solvers, which nothing in this library or its tests uses) get empty stand-in
# libraries with the right sonames unless STANDINS=0; an op that needs them then
# fails with TensorFlow's own error.
set -euo pipefail

TF_VERSION=${TF_VERSION:-2.21.0}
# The CUDA 12 libraries TensorFlow 2.21's `and-cuda` extra pins (major versions).
WHEELS=(
  "tensorflow==$TF_VERSION" "nvidia-cublas-cu12<13" "nvidia-cuda-runtime-cu12<13" "nvidia-cuda-cupti-cu12<13"
  keras optree namex gast astunparse google_pasta termcolor "protobuf>=6.31.1,<8" "ml_dtypes>=0.5.1,<1"
  "flatbuffers>=25.9.23"
)

download() {
  local dir=$1
  mkdir -p "$dir/wheels"
  local blas
  blas=$(grep -i '^scipy-openblas32' "$(dirname "$0")/../../requirements.txt")
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dir/wheels" "${WHEELS[@]}" "$blas" \
    ${EXTRA_WHEELS:-}
  (cd "$dir/wheels" && tar -cf ../wheels.tar ./*.whl)
  (cd "$dir" && sha256sum wheels.tar > wheels.tar.sha256 && split -b "${PART_MB:-58}m" -d -a 2 wheels.tar part.)
  rm "$dir/wheels.tar"
  for f in "$dir"/part.*; do
    local n=${f##*.}
    mkdir -p "$dir/p$n" && mv "$f" "$dir/p$n/"
  done
  mv "$dir/wheels.tar.sha256" "$dir/p00/"
  echo "tf_cuda_offline: $(ls -d "$dir"/p?? | wc -l) parts in $dir/p00 ... (sha256 in p00)"
}

# An empty shared library with the given soname.
standin() {
  local path=$1
  mkdir -p "$(dirname "$path")"
  [ -e "$path" ] && return
  echo 'void metal_ops_standin(void) {}' | ${CC:-cc} -x c -shared -fPIC -Wl,-soname,"$(basename "$path")" -o "$path" -
  echo "tf_cuda_offline: stand-in $(basename "$path") (empty)"
}

find_cudnn() {
  if [ -n "${CUDNN_DIR:-}" ]; then echo "$CUDNN_DIR"; return; fi
  python3 - <<'EOF' 2>/dev/null || true
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for root in roots:
    for lib in glob.glob(os.path.join(root, "nvidia", "**", "libcudnn.so.9"), recursive=True):
        print(os.path.dirname(lib))
        raise SystemExit
EOF
}

install() {
  local target=${*: -1}
  local parts=("${@:1:$#-1}")
  local tmp
  tmp=$(mktemp -d)
  local files=()
  for p in "${parts[@]}"; do
    if [ -d "$p" ]; then files+=("$p"/part.*); else files+=("$p"); fi
    [ -f "$p/wheels.tar.sha256" ] && cp "$p/wheels.tar.sha256" "$tmp/"
  done
  cat "${files[@]}" > "$tmp/wheels.tar"
  (cd "$tmp" && sha256sum -c wheels.tar.sha256)
  mkdir -p "$tmp/wheels" "$target"
  tar -C "$tmp/wheels" -xf "$tmp/wheels.tar"
  rm "$tmp/wheels.tar"
  # pip --target skips a package whose top folder exists (every nvidia-* wheel
  # has nvidia/): unpack those instead.
  for whl in "$tmp"/wheels/nvidia_*.whl; do
    [ -e "$whl" ] && python3 -m zipfile -e "$whl" "$target"
  done
  rm -f "$tmp"/wheels/nvidia_*.whl
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$target" "$tmp"/wheels/*.whl
  rm -rf "$tmp"
  local cudnn
  cudnn=$(find_cudnn)
  if [ ! -e "$target/nvidia/cudnn/lib/libcudnn.so.9" ]; then
    if [ -n "$cudnn" ]; then
      mkdir -p "$target/nvidia/cudnn"
      ln -sfn "$cudnn" "$target/nvidia/cudnn/lib"
      echo "tf_cuda_offline: cuDNN from $cudnn"
    elif [ "${STANDINS:-1}" = 1 ]; then
      standin "$target/nvidia/cudnn/lib/libcudnn.so.9"
    fi
  fi
  if [ "${STANDINS:-1}" = 1 ]; then
    standin "$target/nvidia/cufft/lib/libcufft.so.11"
    standin "$target/nvidia/cusolver/lib/libcusolver.so.11"
    standin "$target/nvidia/cusparse/lib/libcusparse.so.12"
  fi
  # TensorFlow's RUNPATH names most nvidia/*/lib folders but not cuSOLVER's.
  local libs
  libs=$(find "$target/nvidia" -mindepth 2 -maxdepth 2 -name lib | sort | tr '\n' ':')
  echo "export PYTHONPATH=$target\${PYTHONPATH:+:\$PYTHONPATH} LD_LIBRARY_PATH=${libs}\${LD_LIBRARY_PATH:-}"
}

case "${1:-}" in
  download) shift; download "$@" ;;
  install) shift; install "$@" ;;
  *) echo "usage: $0 download DIR | install PARTS... TARGET" >&2; exit 2 ;;
esac
