#!/usr/bin/env bash
# bench/scripts/disk_ceiling.sh must never write over a file it did not create (it once overwrote a 12 GB expert
# store with its test pattern): an existing file, a link to one, and a file sitting where its marker would go
# all survive byte-identical, and the script exits non-zero saying why. The refusal comes before fio is looked
# for, so this needs neither fio nor root.
# usage: test_disk_ceiling_foreign_file.sh SOURCE_DIR WORK_DIR
set -euo pipefail
script="$1/bench/scripts/disk_ceiling.sh"
work="$2"
rm -rf "$work" && mkdir -p "$work"
failures=0

# expect_refusal NAME PATTERN FILE_TO_KEEP ARGS...: the script fails, prints PATTERN, FILE_TO_KEEP is unchanged.
expect_refusal() {
    local name="$1" pattern="$2" keep="$3"
    shift 3
    cp -p "$keep" "$work/before"
    set +e
    out="$(bash "$script" "$@" --runtime-s 1 2>&1)"
    status=$?
    set -e
    if [[ "$status" -eq 0 ]]; then
        echo "FAIL $name: exit status 0, expected a refusal; output: $out"
        failures=$((failures + 1))
    elif ! grep -qF "$pattern" <<< "$out"; then
        echo "FAIL $name: the message does not say '$pattern': $out"
        failures=$((failures + 1))
    elif ! cmp -s "$keep" "$work/before"; then
        echo "FAIL $name: $keep was changed"
        failures=$((failures + 1))
    else
        echo "ok   $name: $out"
    fi
}

# An expert store's experts.bin, not made by the script (random bytes, a size that does not match --file-gib).
mkdir -p "$work/store"
head -c 1048576 /dev/urandom > "$work/store/experts.bin"
expect_refusal existing-file "was not created by this script" "$work/store/experts.bin" \
    --file "$work/store/experts.bin"
[[ ! -e "$work/store/experts.bin.disk-ceiling" ]] || {
    echo "FAIL existing-file: a marker was written beside the foreign file"
    failures=$((failures + 1))
}

ln -s "$work/store/experts.bin" "$work/link.bin"
expect_refusal symlink "is a symbolic link" "$work/store/experts.bin" --file "$work/link.bin"

# A marker forged by copying: it names another inode, so the file is still not the script's.
printf 'created by diskformer bench/scripts/disk_ceiling.sh: inode 1\n' > "$work/store/experts.bin.disk-ceiling"
expect_refusal wrong-inode-marker "was not created by this script" "$work/store/experts.bin" \
    --file "$work/store/experts.bin"
rm "$work/store/experts.bin.disk-ceiling"

# A new test file whose marker path is taken by someone else's file.
echo "notes" > "$work/new.bin.disk-ceiling"
expect_refusal marker-path-taken "is not a marker of this script" "$work/new.bin.disk-ceiling" \
    --file "$work/new.bin"

[[ "$failures" -eq 0 ]] || exit 1
echo "all refusals kept the files byte-identical"
