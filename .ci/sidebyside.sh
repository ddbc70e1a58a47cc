# Sourced by .ci/test and .ci/test-debian: run test passes side by side, each into its own
# log, and print the logs whole, one after the other, when all have ended. The suite mostly
# waits (agents starting, a collector down for 30 s, timeouts running out), so passes at once
# take little more than the longest. SWTEL_SERIAL=1 runs them one after the other instead,
# output as it comes.
#
#   side_by_side "TITLE ONE" func_one "TITLE TWO" func_two   # each func gets no arguments
#
# Returns non-zero when any pass failed, after every log has been printed.
side_by_side() {
  local logs names=() titles=() i rc=0 start
  start=$(date +%s)
  if [ -n "${SWTEL_SERIAL:-}" ]; then
    while [ $# -gt 0 ]; do
      echo "$1"; local t=$(date +%s)
      "$2" || rc=1
      echo "-- $2: $(( $(date +%s) - t ))s"
      shift 2
    done
    return $rc
  fi
  logs=$(mktemp -d /tmp/swtel-passes.XXXXXX)
  while [ $# -gt 0 ]; do
    titles+=("$1"); names+=("$2")
    ( t=$(date +%s); code=0; "$2" >"$logs/$2.log" 2>&1 || code=$?
      echo $code >"$logs/$2.rc"; echo $(( $(date +%s) - t )) >"$logs/$2.s" ) &
    shift 2
  done
  echo "== ${#names[@]} passes side by side: ${names[*]} (their logs follow when all have ended)"
  wait
  for i in "${!names[@]}"; do
    echo "${titles[$i]}"
    cat "$logs/${names[$i]}.log"
    echo "-- ${names[$i]}: exit $(cat "$logs/${names[$i]}.rc") after $(cat "$logs/${names[$i]}.s")s"
    [ "$(cat "$logs/${names[$i]}.rc")" = 0 ] || rc=1
  done
  echo "-- side by side: all ended after $(( $(date +%s) - start ))s"
  rm -rf "$logs"
  return $rc
}
