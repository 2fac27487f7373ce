#!/usr/bin/env bash
# tensor.sh CASE TROUPE PARAMS_DIFF — tensor groups (--tensor) in a job across two MPI ranks
# (Open MPI, oversubscribed on a small machine):
#   dp, pipeline    each rank's two devices a tensor group, the replicas (the stages) across
#                   the ranks: final parameters within 1e-5 of one device's
#   refused         a tensor group of one device of each rank: refused before training,
#                   naming the flag and the ranks
set -u
case_=$1 troupe=$(realpath "$2") params_diff=$(realpath "$3")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
common=(--model mlp --steps 6 --quiet --deterministic)

fail() { printf 'FAIL tensor %s: %s\n' "$case_" "$*"; exit 1; }

same_as_single() {
  "$troupe" train "${common[@]}" --checkpoint single.ckpt || fail "the single-device run"
  timeout 120 "${mpirun[@]}" -np 2 "$troupe" train "${common[@]}" "$@" --checkpoint run.ckpt \
    >out.txt 2>err.txt || fail "mpirun exit $?: $(cat err.txt)"
  "$params_diff" run.ckpt single.ckpt 1e-5 || fail "parameters differ from one device's"
  printf 'ok   tensor %s\n' "$case_"
}

case $case_ in
  dp)       same_as_single --strategy dp --tensor 2 --devices host:2 ;;
  pipeline) same_as_single --strategy pipeline --tensor 2 --devices host:2 ;;
  refused)
    timeout 60 "${mpirun[@]}" -np 2 "$troupe" train "${common[@]}" --strategy tp \
      --devices host:1 >out.txt 2>err.txt && fail "a tensor group across the ranks ran"
    grep -q -- "--tensor 2: the tensor group of devices 0 to 1 spans ranks 0 and 1" err.txt ||
      fail "the refusal does not name the flag and the ranks: $(cat err.txt)"
    printf 'ok   tensor %s\n' "$case_" ;;
  *) fail "no such case" ;;
esac
