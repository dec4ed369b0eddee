#!/usr/bin/env bash
# Models with shapes and seeds the fixtures never had, against llama.cpp under the golden rule: for each line of
# LIST ("label|make-model arguments"), make-model writes the model, golden_maker makes its fixture, and the
# architecture's golden test binary runs it under the fixture's usual name (DF_GOLDEN_OVERRIDE, tests/golden_json.h).
# One line per variant on stdout: the test's exit code and its teacher-forced figures.
#
# usage: try_variants.sh NAME TEST_BINARY LIST [WORKDIR]
# e.g.   try_variants.sh hy_v3-tiny build/tests/test_models_hy_v3_golden tools/golden_maker/variants/hy_v3.txt
set -uo pipefail
[ $# -ge 3 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
name=$1 test_bin=$2 list=$3 work=${4:-$(mktemp -d)}
here="$(cd "$(dirname "$0")" && pwd)"
diskformer=${DISKFORMER:-$(dirname "$test_bin")/../diskformer}
failed=0
while IFS='|' read -r label args; do
  [[ -z "$label" || "$label" == \#* ]] && continue
  dir="$work/$label"
  mkdir -p "$dir"
  # shellcheck disable=SC2086  # the arguments are a make-model command line
  if ! "$diskformer" make-model $args -q -o "$dir/$name.gguf"; then
    echo "$label: make-model failed"; failed=1; continue
  fi
  if ! "$here/make_fixture.sh" "$dir/$name.gguf" "$name" "$dir" --regenerate "diskformer make-model $args" \
      > "$dir/maker.log" 2>&1; then
    echo "$label: golden_maker failed (see $dir/maker.log)"; failed=1; continue
  fi
  DF_GOLDEN_OVERRIDE="$dir" "$test_bin" > "$dir/test.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || failed=1
  figures=$(grep -E 'teacher-forced: max' "$dir/test.log" | sed 's/.*teacher-forced: //')
  echo "$label ($args): exit $rc; $figures; $(grep -c 'allowed divergence' "$dir/test.log") greedy early stops"
done < "$list"
exit $failed
