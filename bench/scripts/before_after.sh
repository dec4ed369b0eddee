#!/usr/bin/env bash
# Before/after speed of two builds, alternated: diskformer bench --resident on lfm2-small and the lfm2-24b shape
# (make-model presets), 1 and 2 threads. Binaries: $BIN_DIR/diskformer-before and -after; models in $MODEL_DIR.
for model in lfm2-small lfm2-24b; do
  for rep in 1 2; do
    for bin in before after; do
      for t in 1 2; do
        line=$(${BIN_DIR:-/work/models}/diskformer-$bin bench -m ${MODEL_DIR:-/work/models}/$model.gguf --resident -p 64 -n 32 -t $t --json 2>/dev/null | tail -1)
        echo "$model rep $rep $bin t$t $(echo "$line" | python3 -c 'import json,sys; j=json.load(sys.stdin); print("prefill %.1f decode %.1f rss %.0f MiB" % (j["prefill_tps"], j["decode_tps"], j["peak_rss_bytes"]/2**20))')"
      done
    done
  done
done
