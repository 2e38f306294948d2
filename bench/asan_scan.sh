#!/usr/bin/env bash
# The compiled scanner (dtrace/readers/_scan.c) under AddressSanitizer and UndefinedBehaviorSanitizer.
#
# Builds the extension with -fsanitize=address,undefined into a temporary folder (the in-place
# build beside the sources is left alone), makes every interpreter started with this environment
# load that build (a sitecustomize on PYTHONPATH: the tests' subprocesses too), and runs the
# scanner's tests and the fuzz tests that read Kineto traces through it, with libasan preloaded
# and PYTHONMALLOC=malloc (so PyMem buffers are checked too, not hidden in pymalloc arenas).
# Clean: exit 0 and no sanitizer report from any process. Extra arguments go to pytest.
#
#   bench/asan_scan.sh            # from the repository root or anywhere; uses .venv if there
#   PYTHON=python3 bench/asan_scan.sh -x
#   SCAN_C=/tmp/old_scan.c bench/asan_scan.sh   # another version of the source (e.g. to see a bug caught)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
CC=${CC:-gcc}
LIBASAN=$("$CC" -print-file-name=libasan.so)
if [ "$LIBASAN" = libasan.so ] || [ ! -e "$LIBASAN" ]; then
    echo "asan_scan: $CC has no libasan.so here: AddressSanitizer is not available" >&2
    exit 77
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/asan_scan.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
INC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
SUF=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
SO="$TMP/_scan$SUF"
"$CC" -shared -fPIC -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
    -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Werror \
    -I"$INC" "${SCAN_C:-dtrace/readers/_scan.c}" -o "$SO"
cat >"$TMP/sitecustomize.py" <<EOF
# dtrace.readers._scan from the sanitized build (bench/asan_scan.sh)
import importlib.util
import sys


class _SanitizedScan:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "dtrace.readers._scan":
            return importlib.util.spec_from_file_location(name, "$SO")
        return None


sys.meta_path.insert(0, _SanitizedScan)
EOF
mkdir "$TMP/reports"
export PYTHONPATH="$TMP${PYTHONPATH:+:$PYTHONPATH}"
export LD_PRELOAD="$LIBASAN${LD_PRELOAD:+:$LD_PRELOAD}"
export PYTHONMALLOC=malloc
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:log_path=$TMP/reports/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$TMP/reports/ubsan"
export DTRACE_REQUIRE_SCANNER=1
"$PY" -c 'import sys, dtrace.readers._scan as m; assert m.__file__ == sys.argv[1], m.__file__' "$SO"
echo "asan_scan: testing $SO"
set +e
"$PY" -m pytest -q -p no:cacheprovider --no-cov \
    tests/test_scanner.py tests/test_scan_object.py \
    tests/test_fuzz.py::test_mutated_traces_never_break_the_run \
    tests/test_fuzz.py::test_invalid_utf8_in_a_small_trace \
    tests/test_fuzz.py::test_invalid_deflate_block \
    tests/test_fuzz.py::test_a_collective_kernel_twice_in_a_trace \
    tests/test_bad_input.py::test_memcpy_bytes_beyond_int64_are_unknown_not_a_failed_input \
    "$@"
rc=$?
set -e
if [ -n "$(ls -A "$TMP/reports")" ]; then
    echo "asan_scan: sanitizer reports:" >&2
    cat "$TMP"/reports/* >&2
    exit 1
fi
if [ "$rc" -ne 0 ]; then
    echo "asan_scan: the tests failed under the sanitizers (exit $rc)" >&2
    exit "$rc"
fi
echo "asan_scan: clean (no AddressSanitizer or UndefinedBehaviorSanitizer report)"
