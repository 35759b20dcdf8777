#!/bin/bash
# The K/V multicast A/B of session 26 (bench/results/kv_multicast_ab_s26_*), now one switch of
# bench/attention_switch_ab.sh. Usage: bench/kv_multicast_ab.sh <dir with the binaries> <commit> <phase>...
C=${1:?usage: bench/kv_multicast_ab.sh DIR COMMIT PHASE...}
COMMIT=${2:?usage: bench/kv_multicast_ab.sh DIR COMMIT PHASE...}
shift 2
exec "$(dirname "$0")/attention_switch_ab.sh" "$C" "$COMMIT" kv-multicast "$@"
