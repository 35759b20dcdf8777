#!/bin/bash
# Builds one set of attention binaries a commit, for timing kernel changes against each other on
# the device (bench/attention_builds_ab.sh runs them). Only the kernel sources (kernels/cuda) come
# from each commit; everything else is this checkout's, so each set costs one incremental build of
# the changed .cu files (seconds) instead of a fresh tree (minutes on 2 cores). A commit whose
# other compiled sources differ from HEAD's is refused: its binaries would not be that commit's.
#
# Usage: bench/attention_builds.sh ARCHIVE NAME:COMMIT...
#   e.g. bench/attention_builds.sh .carry/b.tar.xz old:e6e8b6d new:f0ba458
# Needs a configured build directory ($BUILD, default build-gpu) and a clean kernels/cuda.
# ARCHIVE (tar.xz) holds NAME/{bench_attention,bench_cuda_decode,kernels_cuda_attention_test},
# stripped, and builds.txt with one "NAME COMMIT" line a set.
set -euo pipefail
usage="usage: bench/attention_builds.sh ARCHIVE NAME:COMMIT..."
archive=${1:?$usage}
shift
[ $# -gt 0 ] || { echo "attention_builds: name at least one NAME:COMMIT ($usage)" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
cd "$root"
build=${BUILD:-build-gpu}
[ -f "$build/build.ninja" ] || { echo "attention_builds: $build is not a configured Ninja build directory" >&2; exit 2; }
kernels=kernels/cuda
if [ -n "$(git status --porcelain --untracked-files=all -- "$kernels")" ]; then
  echo "attention_builds: $kernels has uncommitted or untracked files; commit or stash them first" >&2
  exit 2
fi
targets=(bench_attention bench_cuda_decode kernels_cuda_attention_test)
# Compiled files outside kernels/cuda: a commit may differ from HEAD in docs, scripts and tools,
# not in these. Build rules (CMakeLists.txt) may differ (a test added, say): the sets are built
# with HEAD's, and the script says which differ.
compiled=(':(glob)**/*.cpp' ':(glob)**/*.h' ':(glob)**/*.cu' ':(glob)**/*.cuh' ":(exclude)$kernels" ':(exclude)tools')
rules=(':(glob)**/CMakeLists.txt' ':(glob)**/*.cmake')
for pair in "$@"; do
  name=${pair%%:*}
  commit=${pair#*:}
  [[ $pair == *:* && -n $name && -n $commit && $name =~ ^[A-Za-z0-9_]+$ ]] ||
    { echo "attention_builds: '$pair' is not NAME:COMMIT (NAME letters, digits, _)" >&2; exit 2; }
  git rev-parse --verify -q "$commit^{commit}" > /dev/null ||
    { echo "attention_builds: '$commit' is not a commit" >&2; exit 2; }
  if ! git diff --quiet HEAD "$commit" -- "${compiled[@]}"; then
    echo "attention_builds: $commit differs from HEAD outside $kernels in compiled files:" >&2
    git diff --name-only HEAD "$commit" -- "${compiled[@]}" | sed 's/^/  /' >&2
    exit 2
  fi
  if ! git diff --quiet HEAD "$commit" -- "${rules[@]}"; then
    echo "attention_builds: note: $commit's build rules differ from HEAD's, which its set is built with:" \
      "$(git diff --name-only HEAD "$commit" -- "${rules[@]}" | tr '\n' ' ')" >&2
  fi
done

stage=$(mktemp -d)
# restore --staged --worktree makes index and files match the source, removing what it lacks.
restore() {
  git restore --source=HEAD --staged --worktree -- "$kernels"
  rm -rf "$stage"
}
trap restore EXIT
names=()
for pair in "$@"; do
  name=${pair%%:*}
  commit=$(git rev-parse --short "${pair#*:}")
  git restore --source="$commit" --staged --worktree -- "$kernels"
  echo "attention_builds: $name = $commit: building ${targets[*]}"
  ninja -C "$build" "${targets[@]/#/bin/}" > "$stage/$name.log" 2>&1 ||
    { tail -20 "$stage/$name.log" >&2; echo "attention_builds: the build of $commit failed" >&2; exit 1; }
  mkdir -p "$stage/$name"
  for t in "${targets[@]}"; do strip -o "$stage/$name/$t" "$build/bin/$t"; done
  echo "$name $commit" >> "$stage/builds.txt"
  names+=("$name")
done
mkdir -p "$(dirname "$archive")"
tar cf - -C "$stage" builds.txt "${names[@]}" | xz -T2 -6 > "$archive.tmp"
mv "$archive.tmp" "$archive"
echo "attention_builds: $archive ($(du -h "$archive" | cut -f1)): $(tr '\n' ' ' < "$stage/builds.txt")"
