# Shared by scripts/test.sh, scripts/sanitize.sh and scripts/fuzz.sh.

# stage <name> <command>...: run a command and report how long it took.
stage() {
  local name="$1"
  shift
  local start=${SECONDS}
  echo "==> ${name}: $*"
  "$@"
  echo "==> ${name} finished in $((SECONDS - start))s"
}

# Open MPI refuses to start as root unless told otherwise (containers).
if [[ "$(id -u)" -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
