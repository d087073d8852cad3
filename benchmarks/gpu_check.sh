#!/usr/bin/env bash
# The GPU check in one call (issues 29 and 30), for a session that has a device machine:
# tests/gpu, the bench's timing against torch.utils.benchmark and the user's plain loop on
# BERT-base and a 1.1B Llama (built from configs), `fp16studio bench --json` with its verdicts,
# the traced pass against the plain one, and FP8 on the GPU's own FP8 matmul. Each phase has its
# own timeout (8 minutes in all) and writes its log and figures into $OUT as it goes, so a phase
# cut short leaves what it measured. Name phases to run only those (a rerun of what failed, or
# `steps`, a training step's time in bfloat16 and FP8, 5 minutes more):
#     bash benchmarks/gpu_check.sh fp8 app
#
# The device image lacks datasets, dill, multiprocess, torchao and soundfile (with cffi and
# pycparser; the demo writes its audio clips with it): they travel as wheels. Here,
# once (network to PyPI needed; build/ is ignored by git, so nothing is committed):
#     bash benchmarks/gpu_check.sh --fetch
# Then through the device tool (docs/gpu.md):
#     run(command="bash benchmarks/gpu_check.sh", carry=["build/gpu-wheels"], timeout_s=540)
set -u
cd "$(dirname "$0")/.."
WHEELS=build/gpu-wheels

if [ "${1:-}" = "--fetch" ]; then
    # The versions this checkout is tested with; the device's Python is 3.12.
    exec python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
        -d "$WHEELS" datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 torchao==0.18.0 \
        soundfile==0.14.0 cffi==2.0.0 pycparser==3.0
fi

OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/gpu-check-site "$WHEELS"/*.whl || { echo "no wheels in $WHEELS: run --fetch here first"; exit 2; }
export PYTHONPATH=/tmp/gpu-check-site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
    TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

# phase NAME SECONDS COMMAND...: the command's output into $OUT/NAME.log (no pipe, no `wait`:
# a timeout ends it and the next phase starts), then the end of the log here.
phase() {
    local name=$1 limit=$2
    shift 2
    echo "== $name (at most ${limit}s)"
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "== $name: exit $? after ${SECONDS}s in all"
    grep -v -e '^USDT' -e 'Warning' "$OUT/$name.log" | tail -n 30
}

# tests: the demo's files are built first (about 40 s on the H100's host). steps runs only when
# named: its compiles alone take minutes (docs/gpu.md has its figures).
declare -A LIMIT=([tests]=150 [bench]=150 [app]=60 [trace]=50 [fp8]=60 [steps]=300)
for name in ${@:-tests bench app trace fp8}; do
    case $name in
        tests) phase tests "${LIMIT[tests]}" python3 -m pytest tests/gpu -m gpu -q -p no:cacheprovider ;;
        bench|app|trace|fp8|steps) phase "$name" "${LIMIT[$name]}" python3 benchmarks/gpu_check.py "$name" "$OUT" ;;
        *) echo "unknown phase $name (tests, bench, app, trace, fp8, steps)"; exit 2 ;;
    esac
done
