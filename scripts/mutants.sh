#!/usr/bin/env bash
# Mutation check: applies deliberate protocol bugs one at a time, runs the
# tests meant to catch each (narrow -run filters, so the whole check takes
# minutes), expects at least one to fail, restores the file (always, by a
# trap), and prints a table: mutant -> killing tests.
#
# Run through `make mutants` (inside `fencegate dev exec`, which provides
# PostgreSQL and SeaweedFS). Each mutant is applied by replacing one
# distinctive line; if that line is gone (the code changed), the script fails
# loudly with "mutant did not apply" rather than passing vacuously.
#
#   scripts/mutants.sh            every mutant
#   scripts/mutants.sh NAME...    only these
set -euo pipefail
cd "$(dirname "$0")/.."
unset AWS_CA_BUNDLE
# The tests' build tags (the Makefile's TEST_TAGS): the failpoints.
tags=${TEST_TAGS:-failpoint}

# name # file # line to find (exact, whitespace-trimmed) # replacement (\n, \t) # package:regex ...
MUTANTS=(
  "skip-fence#gateway/write.go#func setFence(h http.Header, t lease.Try) {#func setFence(h http.Header, t lease.Try) {\n\tif true {\n\t\treturn\n\t}#./conformance:^(TestFenceRefusesWriteAfterStoreChanged|TestExpiredWriterCannotOverwrite|TestConcurrentPutsOneKeyTwoGateways|TestDeleteRacesPut)\$"
  "skip-commit-lease-check#meta/migrations/0010_guards_end_by_proof.sql#IF NOT coalesce(v_held, false) THEN#IF false THEN#./lease:^TestLostLeaseTakeoverAndRefusedCommit\$#./conformance:^(TestCommitWaitingForLockPastExpiryIsRefused|TestCommitCutBeforeItRanLeavesUnknown)\$"
  "unknown-as-failed#lease/held.go#func (l *Lease) Finish(state, reason string) {#func (l *Lease) Finish(state, reason string) {\n\tif state == StateUnknown {\n\t\tstate = StateFailed\n\t}#./lease:^(TestReconciler|TestCompetingReconcilers)#./conformance:^(TestLostPutResponseIsAdoptedBeforeRetry|TestCompleteRetryGetsSameGeneration|TestCommitCutBeforeItRanLeavesUnknown)\$"
  "supersede-on-commit#meta/migrations/0010_guards_end_by_proof.sql#IF p_release THEN#IF p_settled = p_holder AND p_settled_state = 'committed' THEN\n    UPDATE attempts SET state = 'failed', updated_at = clock_timestamp(), reason = 'superseded by generation ' || v_gen\n        WHERE bucket = p_bucket AND key = p_key AND state = 'unknown' AND op <> 'multipart';\nEND IF;\nIF p_release THEN#./lease:^TestLostLeaseTakeoverAndRefusedCommit\$#./conformance:^(TestStarGuardOutlivesLaterGenerationAndDelete|TestSameETagCommitKeepsGuard|TestClientMatchAnyDeleteKeepsGuard)\$"
  "refuse-own-holder#meta/migrations/0010_guards_end_by_proof.sql#ELSIF v_holder = p_holder AND fencegate_lease_live(v_holder, v_expires, v_session) THEN#ELSIF false THEN#./lease:^TestAcquireRepeatedByItsHolder\$"
  "keep-lost-acquire#lease/lease.go#m.release(req.Bucket, req.Key, id, Ending{State: StateFailed,#m.release(req.Bucket, req.Key, NewID(), Ending{State: StateFailed,#./lease:^TestLostAcquireAnswerFreesKey\$"
  "close-before-horizon#lease/settle.go#if a.State == StateUnknown \&\& a.ID != adopted \&\& a.InState > horizon {#if a.State == StateUnknown \&\& a.ID != adopted {#./lease:^TestGuardClosedOnlyPastItsHorizon\$#./conformance:^(TestStarGuardOutlivesLaterGenerationAndDelete)\$"
  "missing-bucket-as-busy#lease/write.go#if errors.Is(err, store.ErrNoSuchBucket) {#if false \&\& errors.Is(err, store.ErrNoSuchBucket) {#./conformance:^TestWriteToMissingBucket\$"
  "waiters-mark-only-listening#lease/lease.go#p.Wait = queued != nil#p.Wait = queued != nil \&\& false#./lease:^TestOtherGatewayGetsHotKey\$"
  "drop-entry-etag#gateway/deleteobjects.go#Version: version != \"\", EntryETag: etag},#Version: version != \"\"},#./conformance:^TestDeleteObjectsEntryETagCondition\$"
  "copy-unpinned-on-list#gateway/copy.go#h.Set(store.AttemptHeader, id)#h.Set(store.AttemptHeader, id)\nif r.hdr.has(\"x-amz-copy-source-if-match\") {\n\th.Set(\"X-Amz-Copy-Source-If-Match\", r.hdr.get(\"x-amz-copy-source-if-match\"))\n}#./conformance:^TestCopySourceConditionListPinsSource\$"
  "complete-resend-after-adopt#lease/write.go#if o, done, err := w.settledAgain(ans); done {#if o, done, err := w.settledAgain(ans); false \&\& done {#./conformance:^TestCompleteRetryOvertakenByEarlierTry\$"
  "spool-checksum-at-release#gateway/forward.go#if u.declaredChecksum == \"\" {#if false \&\& u.declaredChecksum == \"\" {#./conformance:^TestSpooledChecksumRecordedBeforeSending\$"
  "checksum-first-listed#lease/settle.go#if a, v, ok := strings.Cut(s, \":\"); ok \&\& a == alg {#if a, v, ok := strings.Cut(s, \":\"); ok \&\& (a == alg || true) {#./lease:^TestChecksumsDifferLikeWithLike\$"
  "drop-copy-source-read-check#gateway/admit.go#if !r.akey.allowed(PermRead, srcBucket) {#if false \&\& !r.akey.allowed(PermRead, srcBucket) {#./conformance:^(TestSecurityCopySourceAnyCase)\$"
  "plain-without-proof#gateway/forward.go#if !s.plainChecksums.Load() || u.trailerName != \"x-amz-checksum-crc32\" {#if u.trailerName != \"x-amz-checksum-crc32\" {#./conformance:^(TestPlainBodiesNeedTheProbesProof|TestSpooledBodyTravelsPlainOnceProbed)\$"
  "header-exact-case#gateway/admit.go#copySource := hdr.get(\"x-amz-copy-source\")#copySource := string(ctx.Request.Header.Peek(\"X-Amz-Copy-Source\"))#./conformance:^(TestSecurityCopySourceAnyCase|TestSecurityAWSCLILowerCaseHeaders|TestConditionalWritesAwsCLI)\$"
)

backup=""
target=""
restore() {
  if [[ -n "$backup" && -f "$backup" ]]; then
    cp "$backup" "$target"
    rm -f "$backup"
    backup=""
  fi
}
trap restore EXIT INT TERM

apply() { # file find replace
  python3 - "$1" "$2" "$3" <<'PY'
import sys
path, find, repl = sys.argv[1], sys.argv[2].replace("\\&", "&"), sys.argv[3].replace("\\n", "\n").replace("\\t", "\t").replace("\\&", "&")
src = open(path).read()
lines = src.split("\n")
hits = [i for i, l in enumerate(lines) if l.strip() == find]
if len(hits) != 1:
    sys.exit("mutant did not apply: %d lines of %s are %r" % (len(hits), path, find))
i = hits[0]
indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
lines[i] = indent + repl.replace("\n", "\n" + indent)
open(path, "w").write("\n".join(lines))
PY
}

# A mutant's test run is bounded: a test that hangs instead of failing counts
# as a kill by timeout (named so), and should be given a deadline of its own.
MUTANT_TIMEOUT=${MUTANT_TIMEOUT:-5m}

want=("$@")
declare -a table
status=0
for m in "${MUTANTS[@]}"; do
  IFS='#' read -r -a f <<<"$m"
  name=${f[0]} file=${f[1]} find=${f[2]} repl=${f[3]}
  if ((${#want[@]})) && [[ ! " ${want[*]} " == *" $name "* ]]; then
    continue
  fi
  target=$file
  backup=$(mktemp)
  cp "$file" "$backup"
  if ! apply "$file" "$find" "$repl"; then
    restore
    echo "FAIL: mutant $name did not apply to $file" >&2
    exit 2
  fi
  if ! go build -tags "$tags" ./... 2>/dev/null; then
    restore
    echo "FAIL: mutant $name does not compile" >&2
    exit 2
  fi
  killers=()
  for spec in "${f[@]:4}"; do
    pkg=${spec%%:*} run=${spec#*:}
    echo "== $name: go test $pkg -run '$run'" >&2
    log=$(mktemp)
    rc=0
    go test -tags "$tags" -count=1 -timeout "$MUTANT_TIMEOUT" -v -run "$run" "$pkg" >"$log" 2>&1 || rc=$?
    if grep -q '\[build failed\]\|\[setup failed\]' "$log"; then
      cat "$log" >&2
      restore
      echo "FAIL: mutant $name broke the build of $pkg" >&2
      exit 2
    fi
    found=0
    while read -r tname; do killers+=("$tname"); found=1; done < <(grep -E '^\s*--- FAIL: ' "$log" | grep -v '/' | sed -E 's/^\s*--- FAIL: ([^ ]+).*/\1/')
    if ((rc != 0 && found == 0)); then
      # No test reported its failure: go test's -timeout (or a panic) ended
      # the run. That is a kill, by timeout or panic, never a survival; the
      # tests that were running are named (go test lists them on timeout).
      if grep -q '^panic: test timed out' "$log"; then
        while read -r tname; do killers+=("timeout:$tname"); found=1; done < <(sed -n '/^panic: test timed out/,/^$/p' "$log" | grep -E '^\s+Test' | grep -v '/' | awk '{print $1}')
        ((found)) || killers+=("timeout:$pkg")
      elif grep -q '^panic: ' "$log"; then
        killers+=("panic:$(grep -m1 -oE '^--- FAIL: [^ ]+|^=== RUN +[^ ]+' "$log" | tail -1 | awk '{print $NF}')")
      else
        killers+=("exit-$rc:$pkg")
      fi
    fi
    rm -f "$log"
  done
  restore
  if ((${#killers[@]})); then
    table+=("$name|KILLED|${killers[*]}")
  else
    table+=("$name|SURVIVED|-")
    status=1
  fi
done

printf '\n%-30s %-9s %s\n' MUTANT RESULT "KILLED BY"
for row in "${table[@]}"; do
  IFS='|' read -r a b c <<<"$row"
  printf '%-30s %-9s %s\n' "$a" "$b" "$c"
done
exit $status
