# The shell tests' counters and their checks (sourced by test_tools.sh, test_mpi.sh and
# test_plugins.sh; status needs the caller's $tmp).
passed=0 failed=0
check() { # check NAME COMMAND...: passes when the command succeeds
  local name=$1
  shift
  if "$@"; then echo "ok - $name"; passed=$((passed + 1))
  else echo "FAIL - $name"; failed=$((failed + 1)); fi
}
# status WANT MSG_PATTERN CMD...: exit status WANT and a stderr line matching MSG_PATTERN
status() {
  local want=$1 pattern=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" != "$want" ] || ! grep -Eq -- "$pattern" "$tmp/err"; then
    echo "  exit $got (want $want); stderr: $(head -c 300 "$tmp/err")"
    return 1
  fi
}
