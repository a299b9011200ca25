# Sourced by the hack/install-*.sh scripts: apt_install PKG… installs Debian packages
# (as root, or through sudo), quietly.
apt_install() {
  (($# == 0)) && return 0
  echo "installing $* (apt-get)" >&2
  local sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
