# Shared by scripts/test.sh, scripts/sanitize.sh and scripts/fuzz.sh.

# stage <name> <command>...: run a command and report how long it took. The times are also appended
# to $QSDP_STAGE_LOG (one "<seconds> <name>" line each), so that the outermost script can print
# every stage's time at the end (stage_summary), nested scripts' stages included.
export QSDP_STAGE_LOG="${QSDP_STAGE_LOG:-$(mktemp -t qsdp-stages.XXXXXX)}"
stage() {
  local name="$1"
  shift
  local start=${SECONDS}
  echo "==> ${name}: $*"
  "$@"
  echo "==> ${name} finished in $((SECONDS - start))s"
  echo "$((SECONDS - start)) ${name}" >>"${QSDP_STAGE_LOG}"
}

# Prints the time of every stage run so far, in order (stages that contain others come after them).
stage_summary() {
  echo "==> stage times (seconds):"
  sed 's/^/    /' "${QSDP_STAGE_LOG}"
}

# Open MPI refuses to start as root unless told otherwise (containers).
if [[ "$(id -u)" -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
