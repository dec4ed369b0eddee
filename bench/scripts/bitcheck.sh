#!/usr/bin/env bash
# Bitwise before/after of two diskformer binaries (a refactoring must not change one bit): the residual stream
# after every layer of every step (--dump-layers) and the greedy ids of every golden model, resident and streamed
# (1 MiB cache, lookahead 2), prompt in one batch and in chunks of 7. usage: bitcheck.sh BEFORE_BIN AFTER_BIN
set -uo pipefail
before=$1 after=$2 g=${DF_GOLDEN:-$(cd "$(dirname "$0")/../../.." && pwd)/shared/golden} out=${OUT:-/tmp/df-bitcheck}
rm -rf $out; mkdir -p $out
fails=0
for m in lfm2moe-tiny lfm2moe-medium lfm2moe-tiny-f16 qwen3moe-tiny gpt-oss-tiny; do
  ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$g/$m.json'))['teacher_forced']['tokens'])))")
  for mode in resident stream; do
    for tag in before after; do
      bin=$before; [ $tag = after ] && bin=$after
      extra="--resident"; [ $mode = stream ] && extra="--store $out/store-$m-$tag --expert-cache 1M --lookahead 2"
      XDG_CACHE_HOME=$out/xdg $bin run -m $g/$m.gguf $extra --prompt-ids $ids -n 8 --temp 0 --ignore-eos --print-ids -t 2 \
        --dump-layers $out/$m-$mode-$tag > $out/$m-$mode-$tag.ids 2>/dev/null || echo "run failed $m $mode $tag"
      XDG_CACHE_HOME=$out/xdg $bin run -m $g/$m.gguf $extra --prompt-ids $ids -n 8 --temp 0 --ignore-eos --print-ids -t 2 -b 7 \
        > $out/$m-$mode-$tag.b7.ids 2>/dev/null || echo "run failed b7 $m $mode $tag"
    done
    if cmp -s $out/$m-$mode-before.ids $out/$m-$mode-after.ids && cmp -s $out/$m-$mode-before.b7.ids $out/$m-$mode-after.b7.ids \
       && diff -rq $out/$m-$mode-before $out/$m-$mode-after >/dev/null; then
      echo "same bits: $m $mode ($(ls $out/$m-$mode-after | wc -l) dump files)"
    else
      echo "DIFFERENT: $m $mode"; fails=$((fails+1))
    fi
  done
done
echo "bitcheck: $fails differing"
