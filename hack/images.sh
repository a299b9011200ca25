#!/usr/bin/env bash
# Builds every daemon and tool as a static binary (glibc, crt-static) and packages each one in an
# image FROM scratch with buildah (deploy/images/Containerfile): ghcr.io/cozy-backups/<bin>:<version>.
#
#   hack/images.sh            build the images (release profile) and print their sizes
#   hack/images.sh --check    also prove that they run: mount each image's root and run its
#                             entrypoint there with chroot as the image's user (`--help`), then
#                             run a daemon from its image against the API emulator until /ready,
#                             reaching it by a host name (name resolution inside the image root)
#
# Options: --profile P (cargo profile, default release), --push REGISTRY (buildah push each image).
# Needs root and buildah (Debian's package; `apt-get install -y buildah`); containers cannot be
# started on every machine, so the check runs the image roots with chroot instead of a runtime.
set -euo pipefail
cd "$(dirname "$0")/.."

BINS=(strategy-renderer credentials-projector backup-runner restore-orchestrator retention-cleaner
      apidef-restarter lease-server backup-volume restore-volume cozy-backups-ctl)
TRIPLE=x86_64-unknown-linux-gnu
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
REPO=ghcr.io/cozy-backups
profile=release check=0 push=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --check) check=1 ;;
    --profile) profile=$2; shift ;;
    --push) push=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $(id -u) == 0 ]] || { echo "hack/images.sh: needs root (buildah with the vfs driver)" >&2; exit 1; }
command -v buildah >/dev/null || { echo "hack/images.sh: buildah is missing (apt-get install -y buildah)" >&2; exit 1; }
B=(buildah --storage-driver vfs)
say() { printf '==> %s\n' "$*"; }

say "static binaries (profile $profile, target $TRIPLE)"
pkgs=()
for b in "${BINS[@]}"; do pkgs+=(-p "$b"); done
RUSTFLAGS="-C target-feature=+crt-static" cargo build --locked --profile "$profile" \
  --target "$TRIPLE" "${pkgs[@]}" --bins
dir=$profile; [[ $profile == dev ]] && dir=debug
target="${CARGO_TARGET_DIR:-target}"
out="$target/$TRIPLE/$dir"

work=$(mktemp -d)
cleanup() {
  [[ -n "${emulator_pid:-}" ]] && kill "$emulator_pid" 2>/dev/null || true
  for c in "${containers[@]:-}"; do [[ -n "$c" ]] && "${B[@]}" rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
containers=()
trap cleanup EXIT

for b in "${BINS[@]}"; do
  if ldd "$out/$b" >/dev/null 2>&1 && ! ldd "$out/$b" 2>&1 | grep -q 'statically linked'; then
    echo "$out/$b is not static:" >&2; ldd "$out/$b" >&2; exit 1
  fi
  mkdir -p "$work/ctx-$b"
  cp "$out/$b" "$work/ctx-$b/$b"
  # Symbols and debug info stay in target/; the image gets the stripped binary.
  command -v strip >/dev/null && strip --strip-all "$work/ctx-$b/$b"
  "${B[@]}" bud --quiet --layers=false -f deploy/images/Containerfile \
    --build-arg BIN="$b" --build-arg VERSION="$VERSION" -t "$REPO/$b:$VERSION" "$work/ctx-$b" >/dev/null
  c=$("${B[@]}" from "$REPO/$b:$VERSION")
  "${B[@]}" config --entrypoint "[\"/usr/local/bin/$b\"]" --cmd '' "$c"
  "${B[@]}" commit --quiet --rm "$c" "$REPO/$b:$VERSION" >/dev/null
done
say "images"
"${B[@]}" images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep "$REPO/" | sort

if [[ $check == 1 ]]; then
  say "each image's entrypoint runs in its own root as its own user"
  for b in "${BINS[@]}"; do
    c=$("${B[@]}" from "$REPO/$b:$VERSION"); containers+=("$c")
    root=$("${B[@]}" mount "$c")
    user=$("${B[@]}" inspect --format '{{.OCIv1.Config.User}}' "$REPO/$b:$VERSION")
    entry=$("${B[@]}" inspect --format '{{index .OCIv1.Config.Entrypoint 0}}' "$REPO/$b:$VERSION")
    [[ $user == 65532:65532 ]] || { echo "$b: user is '$user'" >&2; exit 1; }
    [[ $entry == /usr/local/bin/$b ]] || { echo "$b: entrypoint is '$entry'" >&2; exit 1; }
    files=$(cd "$root" && find . -mindepth 1 ! -type d)
    [[ $files == "./usr/local/bin/$b" ]] || { echo "$b: the root holds more than the binary: $files" >&2; exit 1; }
    help=$(chroot --userspec="$user" "$root" "$entry" --help)
    grep -q "^Usage: $b" <<<"$help" || { echo "$b --help in its image root printed:" >&2; echo "$help" >&2; exit 1; }
    echo "ok  $b: $entry --help as $user in an empty root"
  done

  say "a daemon from its image against the API emulator, until /ready"
  cargo build --locked -p kube-emulator --bin kube-emulator
  "$target"/debug/kube-emulator --port 0 --kubeconfig-out "$work/kubeconfig" --crds deploy/crds \
    >"$work/emulator.log" 2>&1 &
  emulator_pid=$!
  for _ in $(seq 1 100); do [[ -s "$work/kubeconfig" ]] && break; sleep 0.1; done
  [[ -s "$work/kubeconfig" ]] || { cat "$work/emulator.log" >&2; exit 1; }
  c=$("${B[@]}" from "$REPO/retention-cleaner:$VERSION"); containers+=("$c")
  root=$("${B[@]}" mount "$c")
  # What the kubelet would provide: /etc/hosts, a writable scratch dir, the client config. The API
  # server is named `localhost`, so the static binary must resolve a name inside the image root.
  mkdir -p "$root/etc" "$root/run/check"
  printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
  # The emulator's kubeconfig: https with its CA embedded (its certificate names localhost) and the
  # admin token.
  sed -E 's#(https?)://127.0.0.1:#\1://localhost:#' "$work/kubeconfig" >"$root/run/check/kubeconfig"
  chown -R 65532:65532 "$root/run/check"
  grep -Eq 'https?://localhost:' "$root/run/check/kubeconfig"
  chroot --userspec=65532:65532 "$root" /usr/local/bin/retention-cleaner --kubeconfig /run/check/kubeconfig \
    --admin-addr 127.0.0.1:0 --admin-addr-file /run/check/admin \
    >"$work/daemon.log" 2>&1 &
  daemon_pid=$!
  ready=0
  for _ in $(seq 1 300); do
    if [[ -s "$root/run/check/admin" ]] && curl -fsS "http://$(cat "$root/run/check/admin")/ready" >/dev/null 2>&1; then
      ready=1; break
    fi
    sleep 0.1
  done
  kill "$daemon_pid" 2>/dev/null || true
  wait "$daemon_pid" 2>/dev/null || true
  if [[ $ready != 1 ]]; then echo "retention-cleaner from its image never became ready:" >&2; cat "$work/daemon.log" >&2; exit 1; fi
  echo "ok  retention-cleaner from its image root reached /ready (its watches listed) against http://localhost:<port>"
fi

if [[ -n $push ]]; then
  for b in "${BINS[@]}"; do "${B[@]}" push "$REPO/$b:$VERSION" "docker://$push/$b:$VERSION"; done
fi
