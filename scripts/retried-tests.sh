#!/usr/bin/env bash
# Reads a `ctest --repeat until-pass:2` log and names every test that failed once and then passed on
# its retry (each is a bug to fix), and every test that failed both times.
# Usage: scripts/retried-tests.sh CTEST_LOG
set -euo pipefail
log="${1:?usage: $0 CTEST_LOG}"
# ctest prints "N/M Test #K: NAME ....***Failed  1.2 sec" (or ***Timeout, ***Exception, ...) for a
# failed run and "Test #K: NAME .... Passed" for a passing one; a retry prints the name again.
# "***Skipped" (GTEST_SKIP: a case that does not apply) is neither.
awk '
  match($0, /Test +#[0-9]+: [^ ]+ /) {
    name = substr($0, RSTART, RLENGTH); sub(/Test +#[0-9]+: /, "", name); sub(/ $/, "", name)
    if ($0 ~ /\*\*\*Skipped/) next
    if ($0 ~ /\*\*\*/) failed[name] = 1
    else if ($0 ~ / Passed /) passed[name] = 1
  }
  END {
    n = 0; m = 0
    for (t in failed) if (t in passed) { retried[n++] = t } else { lost[m++] = t }
    if (n == 0) print "cloister: no test needed its retry"
    else { print "cloister: " n " test(s) needed their retry (bugs to fix):"; for (i = 0; i < n; i++) print "  retried: " retried[i] }
    for (i = 0; i < m; i++) print "  failed twice: " lost[i]
  }' "$log"
