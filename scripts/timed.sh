#!/usr/bin/env bash
# Run one test tier and print its wall time at its end, whatever its outcome:
#   scripts/timed.sh NAME COMMAND [ARGS...]   -> "tier NAME: 123 s (exit 0)"; exits as COMMAND.
# make test uses it for every tier, so CI's log says where its minutes went.
set -u
name=$1; shift
start=$(date +%s)
"$@"
rc=$?
echo "tier $name: $(( $(date +%s) - start )) s (exit $rc)"
exit $rc
