#!/usr/bin/env bash
# Runs the ceph/s3-tests suite (its basic profile) through fencegate: starts
# the whole local stack the way `make run` does (PostgreSQL + SeaweedFS + the
# gateway), in its own folder bin/s3-tests/stack, runs the suite with
# $S3TESTS_DIR/run.sh, stops the stack, then prints the counts, the
# regressions against the store alone ($S3TESTS_DIR/outcomes-seaweedfs-direct.txt:
# tests that pass straight against SeaweedFS and not through fencegate) and
# the tests fencegate passes that the store alone does not.
#
# Knobs (environment):
#   S3TESTS_DIR   the suite and its runner (default ../shared/s3-tests; stays outside the project)
#   S3TESTS_ARGS  extra pytest arguments, e.g. "-k atomic_dual_write"
#   OUT_DIR       results (default bin/s3-tests/<UTC time>; bin/s3-tests/latest points at it)
#   KEXPR, PROFILE, TEST_TIMEOUT, RUN_TIMEOUT, ...: passed to run.sh as they are
#   S3TESTS_LOG_LEVEL     the gateway's log level in OUT_DIR/stack.log (default warn; info logs every request)
#   S3TESTS_KEEP_STACK=1  keep bin/s3-tests/stack (PostgreSQL and SeaweedFS data) afterwards
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

S3TESTS_DIR=${S3TESTS_DIR:-../shared/s3-tests}
if [ ! -x "$S3TESTS_DIR/run.sh" ] || [ ! -f "$S3TESTS_DIR/outcomes-seaweedfs-direct.txt" ]; then
	echo "s3-tests: no ceph/s3-tests suite at $S3TESTS_DIR (want run.sh and outcomes-seaweedfs-direct.txt there);" >&2
	echo "s3-tests: set S3TESTS_DIR to the folder holding it" >&2
	exit 2
fi
S3TESTS_DIR=$(cd "$S3TESTS_DIR" && pwd)
BASELINE=$S3TESTS_DIR/outcomes-seaweedfs-direct.txt
BIN=$ROOT/bin/fencegate
[ -x "$BIN" ] || { echo "s3-tests: $BIN missing (make build)" >&2; exit 2; }
unset AWS_CA_BUNDLE

# ---- Python packages the suite needs (Debian's) ------------------------------
PYTHON=${PYTHON:-/usr/bin/python3}
export PYTHON
pymods() { "$PYTHON" -c 'import pytest, boto3, botocore, munch, isodate, pytz, dateutil, pytest_timeout' 2>/dev/null; }
if ! pymods; then
	pkgs="python3-pytest python3-boto3 python3-munch python3-isodate python3-tz python3-dateutil python3-pytest-timeout"
	if [ "$(id -u)" = 0 ]; then
		SUDO=
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		SUDO=sudo
	else
		echo "s3-tests: missing Python packages; install them (as root: apt-get install $pkgs)" >&2
		exit 1
	fi
	echo "s3-tests: installing $pkgs"
	$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $pkgs >/dev/null || exit 1
	pymods || { echo "s3-tests: $PYTHON still cannot import the suite's modules" >&2; exit 1; }
fi

# ---- the stack ----------------------------------------------------------------
OUT_DIR=${OUT_DIR:-$ROOT/bin/s3-tests/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd)
case $OUT_DIR in "$ROOT"/bin/s3-tests/*) ln -sfn "$OUT_DIR" "$ROOT/bin/s3-tests/latest" ;; esac
STACK_DIR=$ROOT/bin/s3-tests/stack
mkdir -p "$STACK_DIR"
rm -f "$STACK_DIR/env"

echo "s3-tests: starting PostgreSQL + SeaweedFS + fencegate in $STACK_DIR (log: $OUT_DIR/stack.log)"
"$BIN" dev run --dir "$STACK_DIR" --log-level "${S3TESTS_LOG_LEVEL:-warn}" >"$OUT_DIR/stack.log" 2>&1 &
STACK_PID=$!
stop_stack() {
	if kill -0 "$STACK_PID" 2>/dev/null; then
		kill -TERM "$STACK_PID" 2>/dev/null
		for _ in $(seq 60); do kill -0 "$STACK_PID" 2>/dev/null || break; sleep 0.5; done
		kill -0 "$STACK_PID" 2>/dev/null && kill -KILL "$STACK_PID" 2>/dev/null
		wait "$STACK_PID" 2>/dev/null
	fi
	[ "${S3TESTS_KEEP_STACK:-0}" = 1 ] || rm -rf "$STACK_DIR"
}
trap stop_stack EXIT
trap 'exit 130' INT TERM

# `dev run` writes the env file once the gateway listens (building SeaweedFS
# first on a fresh machine: up to ~12 minutes).
deadline=$(( $(date +%s) + 1200 ))
until [ -s "$STACK_DIR/env" ]; do
	if ! kill -0 "$STACK_PID" 2>/dev/null; then
		echo "s3-tests: the stack exited before it was up; $OUT_DIR/stack.log:" >&2
		tail -20 "$OUT_DIR/stack.log" >&2
		exit 1
	fi
	[ "$(date +%s)" -lt "$deadline" ] || { echo "s3-tests: the stack did not come up in 20 minutes" >&2; exit 1; }
	sleep 1
done
# shellcheck disable=SC1091
. "$STACK_DIR/env"
for _ in $(seq 120); do
	curl -fsS "$FENCEGATE_ADMIN_ENDPOINT/readyz" >/dev/null 2>&1 && break
	sleep 0.5
done
curl -fsS "$FENCEGATE_ADMIN_ENDPOINT/readyz" >/dev/null || { echo "s3-tests: $FENCEGATE_ADMIN_ENDPOINT/readyz never answered ready" >&2; exit 1; }
hostport=${FENCEGATE_ENDPOINT#http://}
HOST=${hostport%:*} PORT=${hostport##*:}
echo "s3-tests: fencegate at $FENCEGATE_ENDPOINT"

# ---- the suite ------------------------------------------------------------------
# S3TESTS_ARGS is split as the shell would ("-k 'a or b'" is two arguments).
eval "PYTEST_ARGS=(${S3TESTS_ARGS:-})" || { echo "s3-tests: cannot parse S3TESTS_ARGS" >&2; exit 2; }
# One key for both of the suite's users, as in the run straight against SeaweedFS.
OUT_DIR=$OUT_DIR "$S3TESTS_DIR/run.sh" "$S3TESTS_DIR" "$HOST" "$PORT" \
	"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" -- "${PYTEST_ARGS[@]}"
rc=$?
stop_stack
trap - EXIT
[ "$rc" = 0 ] || exit "$rc"
[ -f "$OUT_DIR/outcomes.txt" ] || { echo "s3-tests: no outcomes.txt in $OUT_DIR" >&2; exit 1; }

# ---- comparison -------------------------------------------------------------------
join <(awk '$2=="passed"{print $1}' "$BASELINE" | sort) \
	<(awk '$2!="passed"{print $1}' "$OUT_DIR/outcomes.txt" | sort) >"$OUT_DIR/regressions.txt"
join <(awk '$2!="passed"{print $1}' "$BASELINE" | sort) \
	<(awk '$2=="passed"{print $1}' "$OUT_DIR/outcomes.txt" | sort) >"$OUT_DIR/gains.txt"
nreg=$(wc -l <"$OUT_DIR/regressions.txt")
ngain=$(wc -l <"$OUT_DIR/gains.txt")
{
	echo "through fencegate: $(cat "$OUT_DIR/summary.txt")"
	echo "straight against SeaweedFS (baseline, same tests): $(join <(sort "$BASELINE") <(awk '{print $1}' "$OUT_DIR/outcomes.txt" | sort) |
		awk '{c[$2=="error"?"failed":$2]++} END {printf "%d passed, %d failed, %d skipped", c["passed"], c["failed"], c["skipped"]}')"
	echo
	echo "regressions ($nreg: pass against the store alone, not through fencegate):"
	sed 's/^/  /' "$OUT_DIR/regressions.txt"
	echo
	echo "gains ($ngain: pass through fencegate, not against the store alone):"
	sed 's/^/  /' "$OUT_DIR/gains.txt"
} | tee "$OUT_DIR/report.txt"
echo "s3-tests: results in $OUT_DIR (outcomes.txt, report.txt, pytest.log)"
