#!/usr/bin/env python3
"""Compares a fixture made by golden_maker with a shipped one (shared/golden): the three binary files byte for byte,
the JSON sections that must be identical (tokenizer, chat cases, prompts, generation, teacher_forced / layers ids),
and the derived numbers (spread, tolerance) side by side.

usage: compare.py MINE_DIR SHIPPED_DIR NAME
"""
import json
import os
import sys


def load(d, name):
    with open(os.path.join(d, name + ".json"), encoding="utf-8") as f:
        return json.load(f)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    mine_dir, ship_dir, name = sys.argv[1:]
    a, b = load(mine_dir, name), load(ship_dir, name)
    bad = 0

    def check(label, x, y):
        nonlocal bad
        ok = x == y
        bad += not ok
        print(("SAME  " if ok else "DIFF  ") + label)
        return ok

    for ext in ("tf_logits.f32", "l_out.f32", "topk.f32"):
        with open(os.path.join(mine_dir, f"{name}.{ext}"), "rb") as f:
            x = f.read()
        with open(os.path.join(ship_dir, f"{name}.{ext}"), "rb") as f:
            y = f.read()
        check(f"{ext} bytes", x, y)

    check("tokenizer", a["tokenizer"], b["tokenizer"])
    strip = lambda cases: [{k: v for k, v in c.items() if not k.startswith("informational")} for c in cases]
    check("chat.cases (without informational_seed_lfm2ChatPrompt)", strip(a["chat"]["cases"]), strip(b["chat"]["cases"]))
    check("chat.chat_template", a["chat"]["chat_template"], b["chat"]["chat_template"])
    check("prompts", a["prompts"], b["prompts"])
    check("generation", a["generation"], b["generation"])
    for k in ("tokens", "argmax", "margin", "moe_layers", "expert_choices", "min_routing_gap", "sha256"):
        check(f"teacher_forced.{k}", a["teacher_forced"][k], b["teacher_forced"][k])
    for k in ("tokens", "l_out_shape", "l_out_layers", "moe_layers", "expert_choices", "routing_gap", "l_out_sha256",
              "expert_choices_sha256"):
        check(f"layers.{k}", a["layers"][k], b["layers"][k])
    for k in ("file", "bytes", "sha256", "arch", "special_ids", "n_vocab", "types"):
        check(f"model.{k}", a["model"][k], b["model"][k])
    sa, sb = a["model"]["shape"], b["model"]["shape"]
    for k in sb:
        if sa.get(k) != sb[k]:
            print(f"      shape.{k}: mine {sa.get(k)!r} shipped {sb[k]!r}")

    # derived numbers: listed, not required equal
    print("\n-- tolerance (mine | shipped)")
    ta, tb = a["tolerance"], b["tolerance"]
    for k in ("logit_abs", "argmax_margin", "routing_gap", "l_out_rel_l2", "l_out_token_rel_l2", "repack_only",
              "greedy_ids_exact"):
        print(f"  {'=' if ta.get(k) == tb.get(k) else '!'} {k}: {ta.get(k)} | {tb.get(k)}")
    for sec, k in (("teacher_forced", "positions_with_margin_above_tolerance"), ("teacher_forced", "routing_near_ties"),
                   ("layers", "routing_near_ties")):
        x, y = a[sec][k], b[sec][k]
        print(f"  {'=' if x == y else '!'} {sec}.{k}: {x if not isinstance(x, list) else len(x)} | "
              f"{y if not isinstance(y, list) else len(y)}")
    print("\n-- spread (mine | shipped)")
    spa, spb = a["spread"], b["spread"]
    n_same = n_all = 0

    def walk(x, y, path):
        nonlocal n_same, n_all
        if isinstance(y, dict):
            for k in y:
                if k in ("what", "method"):
                    continue
                walk(x.get(k) if isinstance(x, dict) else None, y[k], f"{path}.{k}")
        elif isinstance(y, list) and y and isinstance(y[0], (dict, list)):
            for i, e in enumerate(y):
                walk(x[i] if isinstance(x, list) and i < len(x) else None, e, f"{path}[{i}]")
        else:
            n_all += 1
            if x == y:
                n_same += 1
            else:
                print(f"  ! {path}: {x} | {y}")

    for k in ("repack_vs_no_repack", "all_paths", "decode_vs_batched", "paths"):
        walk(spa.get(k), spb[k], k)
    print(f"  spread leaves identical: {n_same}/{n_all}")
    print(f"\n{bad} required checks differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
