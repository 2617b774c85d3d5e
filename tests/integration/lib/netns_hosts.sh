# "Hosts" as network namespaces on one bridge, for tests sourcing this file after preamble.sh
# (whose exit stops the processes in pids, then runs at_exit commands, then removes work). The
# caller sets
#   tag    a namespace prefix of its own; hosts  (host names)
# then calls netns_hosts_up A.B (the test's own range): it claims a subnet A.B.C (claim_subnet:
# sets subnet) with a blackhole route first (a stray packet from the root
# namespace fails at once), a bridge namespace "$tag-sw", and one namespace "$tag-<host>" per
# host at $subnet.(11 + index). On exit the namespaces and the route are removed.
# Without root, iproute2 or namespaces it prints SKIP and exits 0.
made=()

netns_hosts_cleanup() {
  local ns
  for ns in "${made[@]}"; do ip netns delete "$ns" 2>/dev/null || true; done
  [[ -z ${subnet:-} ]] || ip route del blackhole "$subnet.0/24" 2>/dev/null || true
}

netns_hosts_up() {
  at_exit netns_hosts_cleanup
  claim_subnet "$1" || { echo "$TEST_NAME: SKIP: cannot add a route"; exit 0; }
  sw=$tag-sw
  if ! ip netns add "$sw" 2>/dev/null; then
    echo "$TEST_NAME: SKIP: cannot create network namespaces here"
    exit 0
  fi
  made+=("$sw")
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  ip -n "$sw" link set lo up
  local i h ns
  for i in "${!hosts[@]}"; do
    h=${hosts[$i]}
    ns=$tag-$h
    ip netns add "$ns"
    made+=("$ns")
    ip -n "$ns" link set lo up
    ip link add eth0 netns "$ns" type veth peer name "v-$h" netns "$sw"
    ip -n "$sw" link set "v-$h" master br0 up
    ip -n "$ns" addr add "$subnet.$((11 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
}
