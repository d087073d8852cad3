#!/usr/bin/env bash
# Build the frozen program (packaging/fp16studio.spec) and check it: every command, `trace`
# (the bundled Python and --python), the window (opens; a Run and a traced script in it).
#
#   packaging/smoke.sh                            build into a new temporary folder, then check
#   packaging/smoke.sh dist/fp16studio/fp16studio  check a build that is already there
#
# Run from anywhere, in the environment the build uses (CPU torch, pyinstaller installed).
# PYTHON (default: python3) is "your own Python" for `trace --python`: it needs torch,
# transformers, datasets and pytest (which the bundle leaves out). SMOKE_KEEP=1 keeps the
# temporary folder (the build is about 1.4 GB). Prints one line per check and a summary with
# the figures packaging/README.md quotes; exits 1 if any check failed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fp16studio-smoke.XXXXXX")
T="$WORK/t"
mkdir -p "$T"
FAILED=0
SUMMARY=()
cleanup() { [ "${SMOKE_KEEP:-0}" = 1 ] && echo "kept: $WORK" || rm -rf "$WORK"; }
trap cleanup EXIT

# Nothing from this user's folders: config (trust store, recent files, autosave), demo cache,
# desktop entries all go to the temporary folder.
export FP16STUDIO_CONFIG_DIR="$T/config" FP16STUDIO_CACHE="$T/cache" XDG_DATA_HOME="$T/share"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

now() { date +%s.%N; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
note() { SUMMARY+=("$1"); echo "  $1"; }

# check NAME EXPECTED_EXIT COMMAND...: runs it (stdout, stderr kept as $T/NAME.out/.err) and
# compares the exit status; then `expect` and `refute` look into what it printed.
check() {
    local name=$1 want=$2
    shift 2
    local start end code
    start=$(now)
    "$@" >"$T/$name.out" 2>"$T/$name.err" </dev/null
    code=$?
    end=$(now)
    LAST="$name"
    if [ "$code" = "$want" ]; then
        printf 'ok    %-28s exit %-3s %6s s\n' "$name" "$code" "$(seconds "$start" "$end")"
    else
        printf 'FAIL  %-28s exit %s, expected %s (%s s)\n' "$name" "$code" "$want" "$(seconds "$start" "$end")"
        tail -n 5 "$T/$name.err" | sed 's/^/      /'
        FAILED=1
    fi
    TIMES["$name"]=$(seconds "$start" "$end")
}
expect() {  # expect PATTERN [out|err]: what the last check printed matches
    if ! grep -qE -- "$1" "$T/$LAST.${2:-out}"; then
        echo "FAIL  $LAST: no line matching '$1' on std${2:-out}"
        FAILED=1
    fi
}
refute() {
    if grep -qE -- "$1" "$T/$LAST.${2:-out}"; then
        echo "FAIL  $LAST: a line matching '$1' on std${2:-out}:"
        grep -E -- "$1" "$T/$LAST.${2:-out}" | head -n 3 | sed 's/^/      /'
        FAILED=1
    fi
}
json() {  # json EXPRESSION: a Python expression over `d`, the last check's stdout as JSON
    if ! "$PYTHON" -c "import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" \
            "$T/$LAST.out"; then
        echo "FAIL  $LAST: the JSON document does not satisfy: $1"
        FAILED=1
    fi
}
declare -A TIMES

# -- the build ------------------------------------------------------------------------------------
if [ $# -ge 1 ]; then
    APP=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
    echo "checking $APP"
else
    echo "building into $WORK (about 3 to 5 minutes)"
    cd "$ROOT" || exit 1
    start=$(now)
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -v -o "$WORK/build.time" pyinstaller --noconfirm --distpath "$WORK/dist" \
            --workpath "$WORK/build" packaging/fp16studio.spec >"$WORK/build.log" 2>&1
    else
        pyinstaller --noconfirm --distpath "$WORK/dist" --workpath "$WORK/build" \
            packaging/fp16studio.spec >"$WORK/build.log" 2>&1
    fi
    code=$?
    end=$(now)
    if [ $code != 0 ]; then
        tail -n 20 "$WORK/build.log"
        echo "FAIL  the build (exit $code); its log: $WORK/build.log"
        SMOKE_KEEP=1
        exit 1
    fi
    peak=""
    [ -f "$WORK/build.time" ] && peak=", $(awk '/Maximum resident/ { printf "%.1f GB", $NF / 1048576 }' "$WORK/build.time") peak memory"
    note "build: $(seconds "$start" "$end") s wall$peak (pyinstaller $(pyinstaller --version))"
    APP="$WORK/dist/fp16studio/fp16studio"
fi
[ -x "$APP" ] || { echo "FAIL  no program at $APP"; exit 1; }
FOLDER=$(dirname "$APP")
note "folder: $(du -sh "$FOLDER" | cut -f1), $(find "$FOLDER" -type f | wc -l) files"
note "largest parts: $(du -s "$FOLDER"/_internal/* 2>/dev/null | sort -rn | head -n 6 \
    | awk '{ n = split($2, p, "/"); printf "%s%s %d MB", (NR > 1 ? ", " : ""), p[n], $1 / 1024 }')"
missing_sources=$(ls "$FOLDER/_internal/fp16studio/core/script/runner.py" "$FOLDER/_internal/fp16studio/__main__.py" 2>&1 >/dev/null)
[ -z "$missing_sources" ] || { echo "FAIL  the bundle lacks fp16studio's sources (trace --python needs them): $missing_sources"; FAILED=1; }
bundled_xcb=$(cd "$FOLDER/_internal" && ls libxcb-cursor.so* libxcb-icccm.so* libxcb-keysyms.so* libxcb-image.so* \
    libxcb-render-util.so* libxcb-shape.so* libxcb-randr.so* libxcb-xkb.so* libxkbcommon-x11.so* 2>/dev/null | wc -l)
note "xcb libraries the window needs, in the bundle: $bundled_xcb of 9"

# -- every command --------------------------------------------------------------------------------
echo "commands:"
check version 0 "$APP" --version
expect '^fp16studio [0-9]'
check help 0 "$APP" --help
check bad-command 2 "$APP" frobnicate
check demo 0 "$APP" demo "$T/demo"
expect 'wrote the demo'
check diagnose-healthy 0 "$APP" diagnose demo:healthy
check diagnose-json 1 "$APP" diagnose demo:map-cast --json
json 'd["findings"][0]["code"] == "dtype-mismatch" and not d["ok"]'
check diagnose-file 1 "$APP" diagnose "$T/demo/map-cast.json"
check diagnose-missing 2 "$APP" diagnose "$T/nope.json"
start=$(now)
count=0
for spec in "$T"/demo/*.json; do   # every demo the program writes: a verdict, never 2 or 3
    "$APP" diagnose "$spec" >"$T/all.out" 2>"$T/all.err" </dev/null
    code=$?
    count=$((count + 1))
    if [ $code != 0 ] && [ $code != 1 ]; then
        echo "FAIL  diagnose $(basename "$spec"): exit $code: $(tail -n 1 "$T/all.err")"
        FAILED=1
    fi
done
echo "ok    diagnose each of $count demos       $(seconds "$start" "$(now)") s"
check fix 0 "$APP" fix demo:map-cast -o "$T/fixed.json"
check fix-rerun 0 "$APP" diagnose "$T/fixed.json"
check bench 0 "$APP" bench demo:healthy --variants float32,bfloat16 --warmup 0 --min-iterations 1 \
    --min-seconds 0 --min-rounds 1 --json
json '[v["name"] for v in d["variants"]] == ["float32", "bfloat16"]'
check drift 0 "$APP" drift demo:healthy --json
json 'd["ok"] and d["modules"]'
check fp8 0 "$APP" fp8 demo:blind-half --json
json 'd["converted"] and d["emulated"]'
check export 0 "$APP" export demo:map-cast -o "$T/exported.py"
if "$PYTHON" -c "import torch, transformers, datasets" 2>/dev/null; then
    check exported-runs-in-python 1 "$PYTHON" "$T/exported.py"   # the pipeline as written: it fails
    expect 'HalfTensor' err
fi
check inspect 0 "$APP" inspect "$T/demo/models/tiny-resnet" --json
json 'd["parameters"] > 0'
check report 1 "$APP" report demo:map-cast -o "$T/report.html"
expect 'wrote'
check install-desktop 0 "$APP" --install-desktop
expect 'installed .*\.desktop'
# The window's engine is this program too: its protocol on stdin/stdout, garbage refused.
check engine-stdio 0 "$APP" engine --stdio
check engine-garbage 2 bash -c 'echo garbage | "$0" engine --stdio' "$APP"
expect "fp16studio engine: not a frame" err
# remote-install: no wheel to send (a frozen program has no source to build one from) or a host
# that cannot be reached is one line and exit 2.
check remote-install 2 "$APP" remote-install nosuchhost.invalid
expect "fp16studio: " err
# Each document's JSON Schema, shipped with the program; an unknown name is one line.
check schema 0 "$APP" schema trace
expect '"\$schema"'
check schema-unknown 2 "$APP" schema nope
# A reader that went away (`| head`): exit 141, silently (the frozen program's stdout is
# block-buffered: it meets the closed pipe late).
check closed-pipe 141 bash -c 'set -o pipefail; "$0" diagnose demo:healthy --json | head -n 0' "$APP"
refute '.' err

# -- trace ----------------------------------------------------------------------------------------
echo "trace:"
check trace-demo 1 "$APP" trace demo:map-cast --json
json 'd["findings"][0]["code"] == "dtype-mismatch" and d["error"]["source"]["line"] > 0 and d["spec"]'
expect '^Traceback' err
refute 'File "(fp16studio/|.*/_internal/fp16studio/)' err   # as python prints it: no frames of ours
check trace-own-model 1 "$APP" trace "$ROOT/tests/scripts/own_model.py"
expect 'dtype-mismatch'
check trace-args 0 "$APP" trace "$ROOT/tests/scripts/needs_args.py" -- --width 3
check trace-missing 2 "$APP" trace "$T/nope.py"

# Line by line: the script prints its second line only once its first has come out here.
cat >"$T/talks.py" <<EOF
import os, time
print("first")
deadline = time.monotonic() + 30
while not os.path.exists("$T/flag") and time.monotonic() < deadline:
    time.sleep(0.05)
print("second" if os.path.exists("$T/flag") else "nobody read the first line")
EOF
stream() { "$APP" trace "$T/talks.py" | while IFS= read -r line; do
    [ "$line" = first ] && touch "$T/flag"; echo "$line"; done; }
check trace-streams 0 stream
expect '^second$'

# The bundled Python has fp16studio's libraries, not the user's (pytest is left out of the
# bundle): the trace says so and names --python; under the user's own Python the script runs.
printf 'import pytest\nprint("pytest", pytest.__version__)\n' >"$T/yours.py"
check trace-bundled-python 1 "$APP" trace "$T/yours.py"
expect "No module named 'pytest'.*trace --python"
if "$PYTHON" -c "import torch, transformers, datasets, pytest" 2>/dev/null; then
    check trace-your-python 0 "$APP" trace --python "$(command -v "$PYTHON")" "$T/yours.py"
    expect '^pytest [0-9]'
    check trace-your-python-model 1 "$APP" trace --python "$(command -v "$PYTHON")" \
        "$ROOT/tests/scripts/own_model.py"
    expect 'dtype-mismatch'
else
    echo "skip  trace --python: $PYTHON lacks torch, transformers, datasets or pytest"
fi
check trace-python-missing 2 "$APP" trace --python "$T/no-python" "$T/yours.py"
expect '^fp16studio: --python .*: no such interpreter$' err
printf '#!/bin/sh\nexit 1\n' >"$T/quits-python"
chmod +x "$T/quits-python"
check trace-python-broken 2 "$APP" trace --python "$T/quits-python" "$T/yours.py"
expect 'cannot run the tracer under it' err
refute 'the script ended its process' err

# -- the window -----------------------------------------------------------------------------------
echo "window:"
check gui-no-display 2 env -u DISPLAY -u WAYLAND_DISPLAY QT_QPA_PLATFORM= "$APP" gui
expect 'no display' err
# Still up after 20 s (stopped by timeout: 124), nothing said on the way.
check gui-offscreen 124 env QT_QPA_PLATFORM=offscreen FP16STUDIO_CONFIG_DIR="$T/config-gui" \
    timeout 20 "$APP" gui
refute 'Traceback|fp16studio:|rror' err
if command -v xvfb-run >/dev/null; then   # a real X server: the xcb plugin and its libraries
    check gui-xvfb 124 env -u QT_QPA_PLATFORM FP16STUDIO_CONFIG_DIR="$T/config-xvfb" \
        xvfb-run -a timeout 20 "$APP" gui
    refute 'Traceback|fp16studio:|xcb' err
fi
check window-run 0 env QT_QPA_PLATFORM=offscreen FP16STUDIO_CONFIG_DIR="$T/config-run" \
    "$APP" trace --timeout 400 "$ROOT/packaging/smoke_window.py"
expect '^smoke-window: ok$'
grep '^window:' "$T/window-run.out" | sed 's/^/      /'

# -- summary --------------------------------------------------------------------------------------
echo "figures:"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
echo "  start (--version): ${TIMES[version]} s; diagnose demo:healthy: ${TIMES[diagnose-healthy]} s;" \
     "trace demo:map-cast: ${TIMES[trace-demo]} s; window Run + trace: ${TIMES[window-run]} s"
if [ $FAILED = 0 ]; then echo "smoke: all checks passed"; else echo "smoke: FAILED"; fi
exit $FAILED
