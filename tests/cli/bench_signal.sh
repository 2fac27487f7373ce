#!/usr/bin/env bash
# bench_signal.sh TROUPE — Ctrl-C in the middle of `troupe bench` ends it: the row running
# stops after its step in flight, the rows after it are not run, the table of those run is
# still printed (valid JSON here), and the exit status is SIGINT's, 130, as troupe train's.
set -u
python3 - "$1" <<'PY'
import json, signal, subprocess, sys
p = subprocess.Popen([sys.argv[1], "bench", "--model", "simplenet", "--devices", "host:2",
                      "--seconds", "2", "--format", "json"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
for line in p.stderr:  # the signal once the second row runs
    if line.startswith("troupe: bench: dp ..."):
        break
p.send_signal(signal.SIGINT)
out, _ = p.communicate(timeout=60)
assert p.returncode == 130, p.returncode
rows = {r["strategy"]: r for r in json.loads(out)["rows"]}
assert "error" not in rows["single"], rows["single"]
assert "stopped by SIGINT" in rows["dp"]["error"], rows["dp"]
assert rows["mp"]["error"] == "not run: a signal ended the bench", rows["mp"]
print("ok   bench_signal")
PY
