#!/usr/bin/env bash
# plan.sh TROUPE — `troupe plan` and `troupe train --layout auto`: the layouts ranked with
# their troupe train arguments, which run as they are; the costs measured once and then read
# from the file; --verify's measured beside the predicted; a memory limit nothing fits told
# with the smallest need; --layout auto runs the best exact layout of its ranking and says so;
# every run's --json says what was predicted of it; bad values exit 2 naming the flag.
set -u
troupe=$1
failed=0
fail() {
  echo "FAIL: $*"
  failed=1
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export TROUPE_COSTS=$dir/costs.safetensors
py() { python3 -c "$@"; }

# the table as JSON: best first, each with the arguments of its run
plan=$("$troupe" plan --model simplenet --devices host:2 --json 2>"$dir/err") ||
  fail "plan --json: exit $?: $(cat "$dir/err")"
[[ -s $TROUPE_COSTS ]] || fail "plan measured nothing into \$TROUPE_COSTS"
py '
import json, sys
p = json.loads(sys.argv[1])
ls = p["layouts"]
assert len(ls) >= 10, "%d layouts" % len(ls)
pred = [l for l in ls if l["predicted"]]
assert pred and ls[0]["predicted"], "the first layout is not predicted"
rates = [l["predicted"]["samples_per_s"] for l in pred if l["fits"]]
assert rates == sorted(rates, reverse=True), "not best first: %s" % rates
for l in pred:
    a = l["args"]
    assert a[:4] == ["--model", "simplenet", "--devices", "host:2"], a
    assert "--strategy" in a, a
    q = l["predicted"]
    assert q["step_seconds"] > 0 and len(q["peak_activation_bytes"]) == len(q["utilization"])
assert any(l["label"] == "pipeline zb1" for l in pred)
# async workers and local SGD predicted too, each with its consistency
other = {l["label"]: l for l in ls if l["label"].startswith(("async", "local"))}
assert len(other) == 5 and all(l["predicted"] for l in other.values()), other
assert other["async 2"]["consistency"] == "stale" and other["async 2 S=2"]["consistency"] == "bounded staleness", other
assert other["local"]["consistency"] == "averaged every H steps", other
assert other["async 2"]["predicted"]["staleness"] == 1, other
' "$plan" || fail "plan --json: $plan"

# the recommended arguments run as they are, and that run says what was predicted of it
args=$(py 'import json,sys; print(" ".join(json.loads(sys.argv[1])["layouts"][0]["args"]))' "$plan")
run=$("$troupe" train $args --steps 20 --json 2>"$dir/err") || fail "train $args: exit $?: $(cat "$dir/err")"
py '
import json, sys
r = json.loads(sys.argv[1])
p = r["predicted"]
assert p and p["samples_per_s"] > 0 and abs(p["error"] - (p["samples_per_s"] / r["samples_per_s"] - 1)) < 1e-3, p
assert [d["peak_activation_bytes"] for d in r["memory"]["devices"]] == p["peak_activation_bytes"], p
assert p["peak_activation_error"] == 0, p
' "$run" || fail "the recommended run's --json predicted: $run"
# an async run and a local one say what was predicted of them too: each worker's activations
for strategy in "async" "local --sync-every 4"; do
  run=$("$troupe" train --model simplenet --strategy $strategy --devices host:2 --steps 20 --json 2>/dev/null)
  py '
import json, sys
r = json.loads(sys.argv[1])
p = r["predicted"]
assert p and p["samples_per_s"] > 0 and p["peak_activation_error"] == 0, p
' "$run" || fail "$strategy's --json predicted: $run"
done

# costs measured once: the file is not written again
before=$(stat -c %Y.%s "$TROUPE_COSTS")
sleep 1
"$troupe" plan --model simplenet --devices host:2 --top 3 >"$dir/table" 2>&1 || fail "plan --top 3: exit $?"
[[ $(stat -c %Y.%s "$TROUPE_COSTS") == "$before" ]] || fail "the costs were measured again"
[[ $(grep -c '^| [0-9]' "$dir/table") == 3 ]] || fail "--top 3 printed: $(cat "$dir/table")"
grep -q '^recommended (.*): troupe train --model simplenet --devices host:2 --strategy' "$dir/table" ||
  fail "no recommended command line: $(cat "$dir/table")"

# --verify: measured beside predicted
"$troupe" plan --model simplenet --devices host:2 --top 2 --verify 1 --seconds 0.5 >"$dir/verify" 2>&1 ||
  fail "plan --verify 1: exit $?: $(cat "$dir/verify")"
grep -q '^| 1 .*| *[0-9]* | *[+-][0-9.]*% |$' "$dir/verify" || fail "--verify: $(cat "$dir/verify")"

# nothing fits: said, with the smallest need
out=$("$troupe" plan --model simplenet --devices host:2 --memory-limit 1K 2>&1)
rc=$?
((rc == 1)) || fail "plan --memory-limit 1K: exit $rc, not 1"
[[ $out == *"no layout of simplenet fits on host:2: the smallest needs "[0-9]*.[0-9]" KiB on a device"* ]] ||
  fail "plan --memory-limit 1K: $out"

# a costs file that is not one: refused by the name that gave it, once, exit 2, kept as it was
echo "my notes" > "$dir/notes"
out=$(TROUPE_COSTS=$dir/notes "$troupe" plan --model simplenet --devices host:1 2>&1 >/dev/null)
rc=$?
((rc == 2)) || fail "plan with TROUPE_COSTS a text file: exit $rc, not 2: $out"
[[ $out == *"could be predicted: costs file $dir/notes"*"(TROUPE_COSTS)"* ]] ||
  fail "plan with TROUPE_COSTS a text file: $out"
[[ $(cat "$dir/notes") == "my notes" ]] || fail "the text file TROUPE_COSTS named was changed"

# --layout auto runs the first of its own ranking (the table's, predicted again: layouts
# predicted alike may trade places) and says which and why
auto=$("$troupe" train --model simplenet --devices host:2 --layout auto --steps 20 --json 2>"$dir/err") ||
  fail "train --layout auto: exit $?: $(cat "$dir/err")"
py '
import json, re, sys
r, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
m = re.match(r"layout (.+): the fastest of (\d+) predicted \(([\d.]+) samples/s; next (.+), ([\d.]+)\)$",
             r["layout_choice"])
assert m, r["layout_choice"]
label, fastest, second = m.group(1), float(m.group(3)), float(m.group(5))
assert fastest >= second, r["layout_choice"]
chosen = [l for l in p["layouts"] if l["label"] == label and l["predicted"]]
assert chosen, (label, [l["label"] for l in p["layouts"]])
a = chosen[0]["args"]
assert r["strategy"] == a[a.index("--strategy") + 1], (r["strategy"], a)
' "$auto" "$plan" || fail "--layout auto did not run its best layout: $auto"
grep -q "· layout .*: the fastest of" "$dir/err" || fail "the summary does not say the choice: $(cat "$dir/err")"

refused() { # the exit status 2 and the flag $1 in the message of the rest
  local flag=$1
  shift
  out=$("$troupe" "$@" 2>&1)
  local rc=$?
  ((rc == 2)) || fail "$*: exit $rc, not 2: $out"
  [[ $out == *"$flag"* ]] || fail "$*: the message does not name $flag: $out"
}
refused --memory-limit plan --memory-limit lots
refused --top plan --top 0
refused --model plan --model nosuch
refused --layout train --layout manual --steps 2
refused --strategy train --layout auto --strategy dp --steps 2
refused --microbatches train --layout auto --microbatches 4 --steps 2
((failed)) || echo "ok: plan ranks and its layouts run, costs once, --verify, nothing fits, --layout auto"
exit $failed
