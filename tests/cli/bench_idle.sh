#!/usr/bin/env bash
# bench_idle.sh TROUPE — `troupe bench` keeps where the pipelines' devices were idle: in JSON,
# every pipelined row has bubble_schedule and the devices' mean idle kinds (each a fraction of
# the window, together no more than the bubble), and no other row has them; the Markdown has
# their table after the strategies'. Every row has troupe plan's prediction beside it, the
# elastic rows too (their layout with one worker fewer), and the predictor's medians over them.
set -u
troupe=$1
failed=0
fail() { echo "FAIL: $*"; failed=1; }

json=$("$troupe" bench --model simplenet --devices host:2 --seconds 0.2 --format json 2>/dev/null)
python3 - "$json" <<'PY' || failed=1
import json, sys
d = json.loads(sys.argv[1])
piped = [r for r in d["rows"] if "bubble_fraction" in r]
names = {r["strategy"] for r in piped}
assert {"mp", "pipeline 1f1b", "pipeline zb1"} <= names, names
kinds = ["edge", "credit", "loader", "step", "handover", "handling", "os"]
for r in piped:
    idle = r["idle"]
    assert sorted(idle) == sorted(kinds), idle
    assert all(0 <= idle[k] <= 1 for k in kinds), (r["strategy"], idle)
    # the kinds are the idle time less `other` (the window's ends): within the bubble
    assert sum(idle.values()) <= r["bubble_fraction"] + 0.02, (r["strategy"], idle)
    assert 0 <= r.get("bubble_schedule", 0) <= 1, r
for r in d["rows"]:
    assert "predicted" in r and r["predicted"]["samples_per_s"] > 0, r
    if "bubble_fraction" not in r:
        assert "idle" not in r, r
# the predictor's figures are the medians over these rows: of the error, and of the error
# of ×single (each row's predicted multiple of single's rate against its measured multiple)
def median(v):
    v = sorted(v)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2
rows = [r for r in d["rows"] if "error" not in r]
err = [r["predicted"]["samples_per_s"] / r["samples_per_s"] - 1 for r in rows]
assert rows[0]["strategy"] == "single", rows[0]
vs = [abs((1 + e) / (1 + err[0]) - 1) for e in err[1:]]
p = d["predictor"]
assert abs(p["median_abs_error_samples_per_s"] - median([abs(e) for e in err])) < 2e-4, p
assert abs(p["median_abs_error_vs_single"] - median(vs)) < 2e-4, (p, median(vs))
PY
md=$("$troupe" bench --model simplenet --devices host:2 --seconds 0.2 2>/dev/null)
[[ $md == *"Where the pipelines' devices were idle"*"| pipeline 1f1b "* ]] ||
  fail "bench's Markdown has no idle table: $md"
exit $failed
