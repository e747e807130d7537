# Shared by scripts/test.sh and scripts/demo.sh: installs missing Debian packages.
#
#   ensure_packages PACKAGE...   where each argument is "package" or "package:probe", and the probe is
#                                a command on PATH or an absolute file path that proves it is there.
# As root, missing packages are installed with apt-get; otherwise they are listed and the script exits 1.
ensure_packages() {
  local missing=() entry pkg probe
  for entry in "$@"; do
    pkg="${entry%%:*}"
    probe="${entry#*:}"
    if [[ "${probe}" == "${entry}" ]]; then
      dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q "install ok installed" || missing+=("${pkg}")
    elif [[ "${probe}" == /* ]]; then
      [[ -e "${probe}" ]] || missing+=("${pkg}")
    else
      command -v "${probe}" >/dev/null 2>&1 || missing+=("${pkg}")
    fi
  done
  ((${#missing[@]} == 0)) && return 0
  if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing missing packages: ${missing[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  else
    echo "error: missing packages: ${missing[*]}" >&2
    echo "install them with:" >&2
    echo "  sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
}
