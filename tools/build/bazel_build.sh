#!/usr/bin/env bash
# `make bazel`: builds the op library from WORKSPACE/BUILD with Bazel, then
# loads the result in the venv's TensorFlow and runs ZeroOut (tools/check/check_op_library.py).
#
# Linux: Debian's bazel-bootstrap (Bazel 4.2.3, `bazel-4`), installed with
#   apt-get when missing, building offline (--config=offline: @rules_cc and
#   @rules_java come from the shims in third_party/).
# macOS: bazelisk (or a bazel on PATH), which reads .bazelversion; online.
#
# Environment:
#   PYTHON                   interpreter whose TensorFlow is built against (default .venv/bin/python)
#   BAZEL                    Bazel binary to use (default: see above)
#   BAZEL_OUTPUT_USER_ROOT   Bazel's output root (default /tmp/tf_metal_ops_bazel_<uid>)
#   BAZEL_JOBS, BAZEL_RAM_MB resource bounds (default 2 jobs, 4096 MB)
#   BAZEL_EXTRA_ARGS         extra `bazel build` arguments
#
# `tools/build/bazel_build.sh --write-rc` only writes build/bazel-offline.bazelrc
# (the `offline` config, which needs this checkout's absolute path).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

log() { echo "[bazel_build] $*" >&2; }

write_offline_rc() {
  mkdir -p build
  local rc=build/bazel-offline.bazelrc tmp
  tmp="$(mktemp build/.bazel-offline.XXXXXX)"
  {
    echo "# Written by tools/build/bazel_build.sh for $ROOT (imported by .bazelrc)."
    for cmd in build fetch query cquery sync; do
      for repo in rules_cc rules_java; do
        echo "$cmd:offline --override_repository=$repo=$ROOT/third_party/$repo"
      done
    done
  } >"$tmp"
  mv -f "$tmp" "$rc"
}

if [[ "${1:-}" == "--write-rc" ]]; then
  write_offline_rc
  log "wrote build/bazel-offline.bazelrc"
  exit 0
fi

PYTHON="${PYTHON:-.venv/bin/python}"
if [[ "$PYTHON" != /* ]] && [[ "$PYTHON" == */* ]]; then
  PYTHON="$ROOT/$PYTHON"
fi
PYTHON="$(command -v "$PYTHON" || true)"
if [[ -z "$PYTHON" ]] || ! "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('tensorflow') is None)"; then
  log "no Python with TensorFlow found (PYTHON=${PYTHON:-unset}); run \`make venv\` first or set PYTHON"
  exit 1
fi

# Something that changes when TensorFlow is reinstalled or upgraded, without
# importing it (slow): re-runs the @local_tf repository rule when it changes.
TF_STAMP="$("$PYTHON" - <<'EOF'
import importlib.util, os
spec = importlib.util.find_spec("tensorflow")
init = spec.origin
print(f"{os.path.dirname(init)}:{os.stat(init).st_mtime_ns}")
EOF
)"

# The same for scipy-openblas32 (@local_openblas).
OPENBLAS_STAMP="$("$PYTHON" -c "from importlib import metadata; print(metadata.version('scipy-openblas32'))" 2>/dev/null || echo none)"

UNAME_S="$(uname -s)"
CONFIGS=()
TARGETS=(//:_metal_ops.so)
if [[ "$UNAME_S" == "Darwin" ]]; then
  if [[ -z "${BAZEL:-}" ]]; then
    BAZEL="$(command -v bazelisk || command -v bazel || true)"
  fi
  if [[ -z "$BAZEL" ]]; then
    log "no bazelisk/bazel on PATH: \`brew install bazelisk\` (it downloads the version in .bazelversion)"
    exit 1
  fi
  CONFIGS=(--config=macos)
else
  if [[ -z "${BAZEL:-}" ]]; then
    if ! command -v bazel-4 >/dev/null 2>&1; then
      log "bazel-4 not found: installing Debian's bazel-bootstrap (Bazel 4.2.3)"
      SUDO=()
      if [[ "$(id -u)" != 0 ]]; then SUDO=(sudo -n); fi
      if ! command -v apt-get >/dev/null 2>&1; then
        log "no apt-get here: install Bazel 4.2.3 (or bazelisk) yourself and set BAZEL=..."
        exit 1
      fi
      export DEBIAN_FRONTEND=noninteractive
      "${SUDO[@]}" apt-get update -q >&2
      "${SUDO[@]}" apt-get install -y -q --no-install-recommends bazel-bootstrap >&2
    fi
    # Call bazel-4 directly: Debian's /usr/bin/bazel wrapper reads .bazelversion
    # (the bazelisk pin for macOS) and would look for that version instead.
    BAZEL="$(command -v bazel-4)"
  fi
  write_offline_rc
  CONFIGS=(--config=offline)
fi

# The Grappler plugin, once there are sources for it (as the Makefile's PLUGIN_LIB).
if compgen -G "grappler/*.cc" >/dev/null; then
  TARGETS+=(//:_metal_ops_grappler.so)
fi

OUTPUT_USER_ROOT="${BAZEL_OUTPUT_USER_ROOT:-/tmp/tf_metal_ops_bazel_$(id -u)}"
mkdir -p build
STARTUP=(--output_user_root="$OUTPUT_USER_ROOT" --max_idle_secs=120)
BUILD_ARGS=(
  "${CONFIGS[@]}"
  --repo_env=PYTHON_BIN_PATH="$PYTHON"
  --repo_env=METAL_OPS_TF_VERSION="$TF_STAMP"
  --repo_env=METAL_OPS_OPENBLAS_VERSION="$OPENBLAS_STAMP"
  --jobs="${BAZEL_JOBS:-2}"
  --local_ram_resources="${BAZEL_RAM_MB:-4096}"
  --symlink_prefix=build/bazel-
  --color=no
  --curses=no
)
# shellcheck disable=SC2206
EXTRA=(${BAZEL_EXTRA_ARGS:-})

log "$("$BAZEL" "${STARTUP[@]}" --version 2>/dev/null || echo "$BAZEL") ${CONFIGS[*]} ${TARGETS[*]}"
start=$SECONDS
"$BAZEL" "${STARTUP[@]}" build "${BUILD_ARGS[@]}" "${EXTRA[@]}" "${TARGETS[@]}"
log "bazel build took $((SECONDS - start)) s"

LIB="$ROOT/build/bazel-bin/_metal_ops.so"
if [[ ! -f "$LIB" ]]; then
  log "expected $LIB after the build; not found"
  exit 1
fi

CHECK_ARGS=("$LIB")
PLUGIN="$ROOT/build/bazel-bin/_metal_ops_grappler.so"
if [[ " ${TARGETS[*]} " == *" //:_metal_ops_grappler.so "* ]]; then
  CHECK_ARGS+=(--plugin "$PLUGIN")
fi

# Load the Bazel-built library in a fresh process (never next to make's copy
# of the same ops) and run ZeroOut.
TF_CPP_MIN_LOG_LEVEL=3 "$PYTHON" tools/check/check_op_library.py "${CHECK_ARGS[@]}"
log "OK: $LIB"
