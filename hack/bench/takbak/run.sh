#!/usr/bin/env bash
# Benchmark backup-volume / restore-volume against tar(+sha256sum), restic and borg, and against the
# machine's own limits (single-core `openssl sha256`, `cat` of a cached file, `dd` with fsync), all in
# one run so the ratios compare like with like. Never run from tests.
#
# Usage: hack/bench/takbak/run.sh [--data DIR] [--scale F] [--only many-small,large,sparse-vm] [--keep]
#
#   --data DIR   scratch directory outside the checkout (default /var/tmp/takbak-bench); needs about
#                3x the dataset size (source + archives + restores)
#   --scale F    dataset scale (default 1.0 = 4.3 GiB real data; 0.01 gives a one-minute smoke run);
#                the datasets are written by the takbak-datasets program of e2e/bench, deterministic
#                for a seed
#   --keep       keep datasets and outputs afterwards
#
# Every operation includes its durability step: takbak syncs itself (fsync/syncfs); tar, restic and
# borg are followed by `sync -f` on their output. Caches stay warm for every tool alike.
# Prints one row per (dataset, tool, operation): wall s, CPU s, MB/s of logical data, peak RSS MiB,
# then the ratios against the targets (docs/takbak-tools.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
data=/var/tmp/takbak-bench
scale=1.0
only=many-small,large,sparse-vm
keep=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) data="$2"; shift 2 ;;
    --scale) scale="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    *) sed -n 2,18p "$0"; exit 2 ;;
  esac
done
case "$data" in "$root"|"$root"/*) echo "--data must be outside the checkout" >&2; exit 2 ;; esac

need=()
command -v restic >/dev/null || need+=(restic)
command -v borg >/dev/null || need+=(borgbackup)
[[ -x /usr/bin/time ]] || need+=(time)
if [[ ${#need[@]} -gt 0 ]]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target-takbak}"
(cd "$root" && cargo build --release -q -p backup-volume -p restore-volume \
  && cargo build --release -q -p bench --no-default-features --bin takbak-datasets)
B="$CARGO_TARGET_DIR/release/backup-volume"
R="$CARGO_TARGET_DIR/release/restore-volume"
G="$CARGO_TARGET_DIR/release/takbak-datasets"

mkdir -p "$data"
results="$data/results.tsv"
: > "$results"
ds_dir="$data/datasets"
mkdir -p "$ds_dir"
"$G" "$ds_dir" --only "$only" --scale "$scale" --force

# measure DATASET TOOL OP BYTES -- command...   (appends wall, cpu, rss to results.tsv)
measure() {
  local ds="$1" tool="$2" op="$3" bytes="$4"; shift 5
  local tf; tf="$(mktemp)"
  /usr/bin/time -f "%e %U %S %M" -o "$tf" bash -c "$*" >/dev/null 2>"$data/last.err" || {
    echo "FAILED: $ds $tool $op (see $data/last.err)" >&2; cat "$data/last.err" >&2; rm -f "$tf"; return 1; }
  read -r wall user sys rss < <(tail -n1 "$tf")
  rm -f "$tf"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$ds" "$tool" "$op" "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" "$bytes" "$rss" >> "$results"
}

# Machine limits.
big="$data/limit.bin"
head -c $((1 << 30)) /dev/urandom > "$big"
cat "$big" > /dev/null
measure machine openssl sha256 $((1 << 30)) -- "openssl sha256 '$big'"
measure machine cat cached $((1 << 30)) -- "cat '$big' > /dev/null"
measure machine dd fsync $((1 << 30)) -- "dd if='$big' of='$data/dd.out' bs=1M conv=fsync status=none"
rm -f "$big" "$data/dd.out"

cat > "$data/id.json" <<'J'
{"volume": "rv-bench", "generation": "g1", "claimUID": "c1"}
J
cat > "$data/id2.json" <<'J'
{"volume": "rv-bench-restored", "generation": "g2", "claimUID": "c2"}
J
cat > "$data/rec.json" <<'J'
{"version": 1, "purpose": "backup-quiesced", "source": {"volume": "rv-bench", "generation": "g1", "claimUID": "c1"},
 "recordID": "bench", "operator": "bench", "method": "benchmark", "evidenceReference": "none", "operatorAcknowledged": true}
J
sed 's/backup-quiesced/restore-isolated/' "$data/rec.json" > "$data/rec2.json"
export RESTIC_PASSWORD=bench BORG_PASSPHRASE="" BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes BORG_RELOCATED_REPO_ACCESS_IS_OK=yes

IFS=, read -ra sets <<< "$only"
for ds in "${sets[@]}"; do
  src="$ds_dir/$ds"
  bytes=$(du -sb --apparent-size "$src" | cut -f1)
  w="$data/work-$ds"; rm -rf "$w"; mkdir -p "$w"
  measure "$ds" takbak backup "$bytes" -- "'$B' --root '$src' --archive '$w/a.takbak' --identity '$data/id.json' --record '$data/rec.json'"
  measure "$ds" takbak verify "$bytes" -- "'$B' --verify --archive '$w/a.takbak'"
  mkdir "$w/dst-takbak"
  measure "$ds" takbak restore "$bytes" -- "'$R' --root '$w/dst-takbak' --archive '$w/a.takbak' --identity '$data/id2.json' --record '$data/rec2.json'"
  rm -rf "$w/dst-takbak" "$w/a.takbak"

  measure "$ds" tar backup "$bytes" -- "tar --sparse -cf '$w/a.tar' -C '$src' . && sync -f '$w/a.tar' && sha256sum '$w/a.tar'"
  measure "$ds" tar verify "$bytes" -- "sha256sum '$w/a.tar' && tar -tf '$w/a.tar' > /dev/null"
  mkdir "$w/dst-tar"
  measure "$ds" tar restore "$bytes" -- "tar --sparse -xpf '$w/a.tar' --numeric-owner -C '$w/dst-tar' && sync -f '$w/dst-tar'"
  rm -rf "$w/dst-tar" "$w/a.tar"

  restic -r "$w/restic" init -q >/dev/null
  measure "$ds" restic backup "$bytes" -- "cd '$src' && restic -r '$w/restic' backup -q . && sync -f '$w/restic'"
  measure "$ds" restic verify "$bytes" -- "restic -r '$w/restic' check -q --read-data"
  mkdir "$w/dst-restic"
  measure "$ds" restic restore "$bytes" -- "restic -r '$w/restic' restore -q latest --target '$w/dst-restic' && sync -f '$w/dst-restic'"
  rm -rf "$w/dst-restic" "$w/restic"

  borg init -e none "$w/borg" >/dev/null 2>&1
  measure "$ds" borg backup "$bytes" -- "cd '$src' && borg create --sparse '$w/borg::a' . && sync -f '$w/borg'"
  measure "$ds" borg verify "$bytes" -- "borg check --verify-data '$w/borg'"
  mkdir "$w/dst-borg"
  measure "$ds" borg restore "$bytes" -- "cd '$w/dst-borg' && borg extract --sparse --numeric-ids '$w/borg::a' && sync -f ."
  rm -rf "$w"
done

python3 - "$results" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
R = {(d, t, o): dict(wall=float(w), cpu=float(c), bytes=int(b), rss=int(r) / 1024) for d, t, o, w, c, b, r in rows}
print(f"{'dataset':<11} {'tool':<8} {'op':<8} {'wall s':>8} {'cpu s':>8} {'MB/s':>9} {'RSS MiB':>8}")
for (d, t, o), v in R.items():
    mbs = v["bytes"] / 1e6 / max(v["wall"], 1e-3)
    print(f"{d:<11} {t:<8} {o:<8} {v['wall']:>8.2f} {v['cpu']:>8.2f} {mbs:>9.1f} {v['rss']:>8.1f}")
def g(*k):
    return R.get(k)
print("\nTargets (ratios from this run):")
def check(name, ok, detail):
    print(f"  [{'ok' if ok else 'MISS'}] {name}: {detail}")
L = g("large", "takbak", "backup"); B = g("large", "borg", "backup"); O = g("machine", "openssl", "sha256")
if L and B:
    check("large backup >= 3x borg", B["wall"] / L["wall"] >= 3, f"{B['wall'] / L['wall']:.2f}x")
if L and O:
    r = (L["bytes"] / L["wall"]) / (O["bytes"] / O["wall"])
    check("large backup >= 0.7x openssl sha256", r >= 0.7, f"{r:.2f}x")
M = g("many-small", "takbak", "backup"); T = g("many-small", "tar", "backup")
if M and T:
    check("many-small backup <= 0.5x tar+sha256sum time", M["wall"] <= 0.5 * T["wall"], f"{M['wall'] / T['wall']:.2f}x")
S = g("sparse-vm", "takbak", "backup"); SB = g("sparse-vm", "borg", "backup")
if S and SB:
    check("sparse-vm backup no slower than borg", S["wall"] <= SB["wall"], f"{S['wall'] / SB['wall']:.2f}x of borg")
for d in ("many-small", "large", "sparse-vm"):
    a, b = g(d, "takbak", "restore"), g(d, "tar", "restore")
    if a and b:
        check(f"{d} restore <= 1.25x tar -x + syncfs", a["wall"] <= 1.25 * b["wall"], f"{a['wall'] / b['wall']:.2f}x")
for (d, t, o), v in R.items():
    if t == "takbak":
        check(f"{d} {o} peak RSS <= 64 MiB", v["rss"] <= 64, f"{v['rss']:.1f} MiB")
PY
[[ $keep == 1 ]] || rm -rf "$ds_dir"
