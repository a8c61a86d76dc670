# The shell tests' counters and their check (sourced by test_tools.sh and test_mpi.sh).
passed=0 failed=0
check() { # check NAME COMMAND...: passes when the command succeeds
  local name=$1
  shift
  if "$@"; then echo "ok - $name"; passed=$((passed + 1))
  else echo "FAIL - $name"; failed=$((failed + 1)); fi
}
