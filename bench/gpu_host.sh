#!/usr/bin/env bash
# A short stretch on a GPU host that has Python, torch and NVIDIA's CUDA wheels but no TVM and no
# network: everything is built here first and carried there as a kit, in two parts that each fit
# one transfer (the compiler library alone is 59 MB as xz, so it travels in two pieces).
#
#   here:               bash bench/gpu_host.sh kit BATCH KIT [EARLIER]  # BATCH: from datagen pack, or -
#   GPU host, first:    bash bench/gpu_host.sh measure KIT/measure RESULTS [SECONDS]
#   GPU host, second:   bash bench/gpu_host.sh tune KIT/tune RESULTS SECONDS [BENCH_ARGS...]
#   here:               datagen ingest BATCH --results RESULTS/results.jsonl --dataset DATASET
#                       tar -xJf RESULTS/tuning.tar.xz -C bench/results/GPU-FOLDER
#
# `measure` times the packed batch with the TVM runtime alone (`datagen.batch_measure`) and keeps
# the first compiler piece on the host (stopped after SECONDS, if given: the same command goes on
# from what was measured; a kit made with BATCH `-`, for a stretch that only tunes, has no
# batch, and `measure` then unpacks the runtime and keeps the piece, no more); `tune`, on the
# same host, joins the compiler again and runs the tuning bench's part gpu for at most
# SECONDS, its finished pairs (and the runs' databases) written to RESULTS/tuning.tar.xz every
# 20 s and at the end, so a stretch cut short keeps every pair finished before. EARLIER, a
# folder holding an earlier stretch's unpacked `tuning-gpu/` (its pairs and finished runs,
# measured on the same kind of GPU), travels in the kit and is where `tune` starts from, so a
# comparison goes on over several stretches.
# BENCH_ARGS replace the default tuning arguments (with `--out` added): on a CPU the rehearsal
# passes a command that runs there.
# A package the host lacks is installed from the kit's wheels into the host's temporary site;
# one it has is used as it is. Exit status: the measuring's or the bench's (2 for a lost device);
# 2 with one line for a step stopped at its SECONDS, what it finished kept.
set -euo pipefail
shopt -s nullglob  # a kit without wheels installs none

HOST_DIR=${GPU_HOST_DIR:-/tmp/gpu-host}
SITE=$HOST_DIR/site
STASH=$HOST_DIR/stash
PYTHON=${PYTHON:-python3}
TUNE_ARGS=(--parts gpu --target nvidia/nvidia-h100 --seeds 0 --trials 64
           --tuners bo ms-xgb-pretrained ms-default --jobs 6)

die() { echo "error: $*" >&2; exit 2; }
timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }  # timeout's statuses: stopped, killed

# wheel names to import names: install a carried wheel only where the host lacks its package
install_missing() {
    local wheel module
    for wheel in "$@"; do
        case "$(basename "$wheel")" in
            apache_tvm_ffi-*) module=tvm_ffi ;;
            xgboost_cpu-*|xgboost-*) module=xgboost ;;
            lightgbm-*) module=lightgbm ;;
            *) die "$wheel: no import name known for this wheel" ;;
        esac
        local version
        version=$(PYTHONPATH=$SITE "$PYTHON" -c "import $module; print($module.__version__)" \
                  2>/dev/null) || version=""
        if [ -n "$version" ]; then
            echo "host has $module: $version"
        else
            "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
                --upgrade --target "$SITE" "$wheel" || die "$wheel does not install here"
            echo "installed $(basename "$wheel")"
        fi
    done
}

host_facts() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
        || echo "no nvidia-smi: no NVIDIA GPU here"
    "$PYTHON" - <<'EOF'
import importlib, platform, os
print("python", platform.python_version(), "cores", len(os.sched_getaffinity(0)))
for name in ("numpy", "torch", "torch_geometric", "lightning", "pandas", "pyarrow", "scipy",
             "ml_dtypes", "xgboost", "lightgbm", "tvm_ffi"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as err:  # a fact to report, not a failure
        print(name, "missing:", type(err).__name__)
EOF
}

kit() {
    local batch=$1 out=$2 earlier=${3:-} tmp
    [ "$batch" = - ] || [ -f "$batch/manifest.json" ] \
        || die "$batch is not a packed batch (no manifest.json); give - for a kit without one"
    [ -z "$earlier" ] || [ -d "$earlier/tuning-gpu" ] || die "$earlier holds no tuning-gpu folder of an earlier stretch"
    [ ! -e "$out" ] || die "$out exists: give a new folder for the kit"
    tmp=$(mktemp -d "$out.tmp-XXXXXX")
    trap 'rm -rf "$tmp"' EXIT  # a kit is whole or absent
    mkdir -p "$tmp/measure/wheels" "$tmp/tune/wheels"
    local lib
    lib=$("$PYTHON" -c "import os, tvm; print(os.path.join(os.path.dirname(tvm.__file__), 'lib', 'libtvm_compiler.so'))")
    datagen runtime-bundle "$tmp/measure/tvm-runtime.tar.xz"
    echo "compressing $lib (a few minutes)"
    xz -9e -T1 -c "$lib" | split -b 30000000 -d -a 2 - "$tmp/compiler.xz."
    mv "$tmp/compiler.xz.00" "$tmp/measure/"
    mv "$tmp/compiler.xz.01" "$tmp/tune/"
    [ ! -e "$tmp/compiler.xz.02" ] || die "the compiler did not fit two pieces"
    [ "$batch" = - ] || tar -cJf "$tmp/measure/batch.tar.xz" --exclude pending.parquet \
        --exclude results.jsonl -C "$(dirname "$batch")" "$(basename "$batch")"
    local pip=("$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12
               --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
               --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64)
    "${pip[@]}" -d "$tmp/measure/wheels" apache-tvm-ffi==0.1.14.post1
    "${pip[@]}" -d "$tmp/tune/wheels" xgboost-cpu==3.2.0 lightgbm==4.7.0
    [ -z "$earlier" ] || tar -cJf "$tmp/tune/earlier.tar.xz" --exclude logs -C "$earlier" tuning-gpu
    mv "$tmp" "$out"
    trap - EXIT
    du -sh "$out/measure" "$out/tune"
}

snapshot() {  # RESULTS/NAME from a folder, replaced whole
    local from=$1 to=$2
    [ -d "$from" ] || return 0
    tar -cJf "$to.tmp" -C "$from" . 2>/dev/null && mv "$to.tmp" "$to"
}

measure() {
    local kit=$1 results=$2 seconds=${3:-0}
    mkdir -p "$SITE" "$STASH" "$HOST_DIR/batch" "$results"
    host_facts
    tar -xJf "$kit/tvm-runtime.tar.xz" -C "$SITE"
    install_missing "$kit"/wheels/*.whl
    cp "$kit"/compiler.xz.00 "$STASH/"  # for `tune`, on this host
    if [ ! -f "$kit/batch.tar.xz" ]; then
        echo "no batch in this kit: the runtime unpacked and the compiler piece kept for tune"
        return 0
    fi
    tar -xJf "$kit/batch.tar.xz" -C "$HOST_DIR/batch"
    local batch
    batch=$(find "$HOST_DIR/batch" -mindepth 1 -maxdepth 1 -type d | head -1)
    ( while sleep 10; do cp "$batch/results.jsonl" "$results/results.jsonl.tmp" 2>/dev/null \
        && mv "$results/results.jsonl.tmp" "$results/results.jsonl"; done ) &
    local copier=$! rc=0
    # TERM: each line is written whole and flushed as it is measured, so ending at once loses
    # nothing (on INT its pool of compiling processes held it up past the grace time)
    PYTHONPATH=$SITE:$PWD TVM_USE_RUNTIME_LIB=1 timeout --kill-after=10 "$seconds" \
        "$PYTHON" -m datagen.batch_measure "$batch" || rc=$?
    kill "$copier" 2>/dev/null || true
    cp "$batch/results.jsonl" "$results/results.jsonl" 2>/dev/null || true
    timed_out $rc && die "stopped after $seconds s: every line measured is in $results/results.jsonl and in the batch; on this host the same command goes on from there"
    return $rc
}

tune() {
    local kit=$1 results=$2 seconds=$3
    shift 3
    [ -f "$STASH/compiler.xz.00" ] || die "no compiler piece kept on this host: run measure first, on the same host"
    [ -f "$SITE/tvm/__init__.py" ] || die "no TVM runtime unpacked on this host: run measure first"
    mkdir -p "$results" "$HOST_DIR/results"
    if [ -f "$kit/earlier.tar.xz" ] && [ ! -d "$HOST_DIR/results/tuning-gpu" ]; then
        tar -xJf "$kit/earlier.tar.xz" -C "$HOST_DIR/results"  # an earlier stretch's pairs and runs
    fi
    cat "$STASH/compiler.xz.00" "$kit/compiler.xz.01" | xz -dc > "$SITE/tvm/lib/libtvm_compiler.so.tmp"
    mv "$SITE/tvm/lib/libtvm_compiler.so.tmp" "$SITE/tvm/lib/libtvm_compiler.so"
    install_missing "$kit"/wheels/*.whl
    # the shipped checkpoints are the package costmodel.checkpoints once installed; run from
    # the source tree, that package is the checkpoints folder
    [ -e costmodel/checkpoints ] || ln -s ../checkpoints costmodel/checkpoints
    local args=("$@")
    [ ${#args[@]} -gt 0 ] || args=("${TUNE_ARGS[@]}")
    ( while sleep 20; do snapshot "$HOST_DIR/results" "$results/tuning.tar.xz"; done ) &
    local copier=$! rc=0
    PYTHONPATH=$SITE:$PWD timeout --signal=INT --kill-after=20 "$seconds" \
        "$PYTHON" bench/tuning_vs_metaschedule.py "${args[@]}" --out "$HOST_DIR/results" || rc=$?
    kill "$copier" 2>/dev/null || true
    snapshot "$HOST_DIR/results" "$results/tuning.tar.xz"
    timed_out $rc && die "stopped after $seconds s: the pairs and runs finished before are in $results/tuning.tar.xz; on this host the same command goes on from them"
    return $rc
}

case "${1:-}" in
    kit) [ $# -eq 3 ] || [ $# -eq 4 ] || die "usage: gpu_host.sh kit BATCH KIT [EARLIER]"
         kit "$2" "$3" "${4:-}" ;;
    measure) [ $# -eq 3 ] || [ $# -eq 4 ] || die "usage: gpu_host.sh measure KIT/measure RESULTS [SECONDS]"
             measure "$2" "$3" "${4:-0}" ;;
    tune) [ $# -ge 4 ] || die "usage: gpu_host.sh tune KIT/tune RESULTS SECONDS [BENCH_ARGS...]"
          tune "$2" "$3" "$4" "${@:5}" ;;
    *) die "usage: gpu_host.sh kit|measure|tune ... (see the head of this script)" ;;
esac
