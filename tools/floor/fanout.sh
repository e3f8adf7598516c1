#!/usr/bin/env bash
# Runs udp_fanout (unicast, then multicast, interleaved ROUNDS times) inside a private network
# namespace whose loopback carries IP multicast, and prints one JSON line per run. Needs root and gcc.
#   bash tools/floor/fanout.sh [RECEIVERS=9] [SIZE=8000] [SECS=3] [ROUNDS=3]
set -euo pipefail
receivers=${1:-9} size=${2:-8000} secs=${3:-3} rounds=${4:-3}
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d)/udp_fanout
gcc -O2 -o "$bin" "$here/udp_fanout.c"
ns=isis-fanout-$$
ip netns add "$ns"
trap 'ip netns del "$ns" 2>/dev/null || true; rm -rf "$(dirname "$bin")"' EXIT
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" ip link set lo multicast on
ip netns exec "$ns" ip route add 224.0.0.0/4 dev lo
for _ in $(seq "$rounds"); do
  for mode in unicast multicast; do
    ip netns exec "$ns" "$bin" "$mode" "$receivers" "$size" "$secs"
  done
done
