# Sourced by the install scripts: apt_prepare WHAT HINT makes apt-get usable (root or sudo, no prompts,
# package lists fresh) and sets SUDO, or says in one line that WHAT needs installing by hand (HINT) and exits.
apt_prepare() {
  command -v apt-get >/dev/null 2>&1 || { echo "$1: no apt-get here; $2" >&2; exit 1; }
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
}
