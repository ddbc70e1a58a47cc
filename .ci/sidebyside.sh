# Sourced by .ci/test and .ci/test-debian: run test passes side by side (the default), each
# into its own log (its path printed first: `tail -f` it to follow), the logs printed whole
# when all have ended; or, with SWTEL_SIDE_BY_SIDE=0, one after the other, output as it comes.
# The suite mostly waits (agents starting, a collector down for 30 s, timeouts running out), so
# side by side the C and pure-Python passes take ~18-24 min instead of ~45, and CI ~33-43 min
# instead of ~62 (docs/DEVELOPING.md: the runs that decided it, and the load flakes found).
#
#   side_by_side "TITLE ONE" func_one "TITLE TWO" func_two   # each func gets no arguments
#
# Returns non-zero when any pass failed, after every log has been printed.
side_by_side() {
  local logs names=() titles=() i rc=0 start
  start=$(date +%s)
  if [ "${SWTEL_SIDE_BY_SIDE:-1}" = 0 ]; then
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
  echo "== ${#names[@]} passes side by side: ${names[*]} (their logs follow when all have ended;"
  echo "   to follow one: tail -f $logs/NAME.log)"
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
