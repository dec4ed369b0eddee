#!/usr/bin/env bash
# Makes one golden fixture: OUTDIR/NAME.json + NAME.tf_logits.f32 + NAME.l_out.f32 + NAME.topk.f32 from GGUF, with
# llama.cpp v0.4.0 (node-llama-cpp 3.21.1 prebuilt) as the reference. Builds golden_maker first when needed.
#
# usage: make_fixture.sh GGUF NAME OUTDIR [--regenerate "CMD"] [--numerics JSON] [--cpu zen4|auto|VARIANT]
#                                         [--keep-work] [--work DIR] [--reuse] [--verbose]
# e.g.   make_fixture.sh /tmp/hy_v3-tiny.gguf hy_v3-tiny out/ \
#            --regenerate "diskformer make-model --arch hy_v3 --preset tiny -o hy_v3-tiny.gguf"
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ $# -lt 3 ]; then
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
BIN="$HERE/build/golden_maker"
if [ ! -x "$BIN" ] || [ -n "$(find "$HERE" -maxdepth 1 \( -name '*.cpp' -o -name '*.h' \) -newer "$BIN")" ]; then
    "$HERE/build.sh" >&2
fi
exec "$BIN" make "$@"
