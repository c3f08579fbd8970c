#!/usr/bin/env bash
# Build times of one revision, measured the way the layered crates are
# judged: a clean release build of the server; then, on a warm debug build,
# an incremental `cargo build` and `cargo test --no-run` after a one-line
# change in each of billing's invoices, the order service and the catalog's
# prices. Run it for two revisions in the same hour on the same machine and
# compare the ratios.
#
# Usage: scripts/build-times.sh REVISION [WORK_DIR]
# The revision is checked out in a worktree under WORK_DIR (default
# target/build-times) with a target directory of its own.
set -euo pipefail
cd "$(dirname "$0")/.."

revision=${1:?usage: scripts/build-times.sh REVISION [WORK_DIR]}
work=${2:-target/build-times}
name=$(git rev-parse --short "$revision")
tree="$work/$name"
mkdir -p "$work"
if [ ! -d "$tree" ]; then
  git worktree add --detach "$tree" "$revision" >/dev/null
fi
export CARGO_TARGET_DIR="$PWD/$tree/target"

seconds() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  end=$(date +%s.%N)
  python3 -c "print(f'{$end - $start:.1f}')"
}

# The file of `domain` named `file`, wherever this revision keeps it.
file_of() {
  git -C "$tree" ls-files | grep -E "(^|/)$1/(src/)?$2\$" | head -n 1
}

cd "$tree"
rm -rf "$CARGO_TARGET_DIR"
echo "revision $name ($(git log -1 --format=%cs)), $(nproc) cores"
echo "clean release build (gantry-server): $(seconds cargo build --release --locked -p gantry-server) s"
seconds cargo build --locked >/dev/null
seconds cargo test --workspace --locked --no-run >/dev/null
for target in "billing invoices.rs" "orders service.rs" "catalog prices.rs"; do
  read -r domain file <<<"$target"
  path=$(file_of "$domain" "$file")
  cp "$path" "$path.orig"
  echo "// a one-line change" >>"$path"
  build=$(seconds cargo build --locked)
  tests=$(seconds cargo test --workspace --locked --no-run)
  mv "$path.orig" "$path"
  seconds cargo test --workspace --locked --no-run >/dev/null
  echo "after a one-line change in $path: cargo build ${build} s, cargo test --no-run ${tests} s"
done
