# Sourced by integration tests after preamble.sh: a real etcd cluster (Debian's etcd-server) on
# free loopback ports, its data in $work, its members stopped by pid.
#   etcd_cluster_start N [--tls] [--auth]
#       starts N members and waits (at most 20 s) until the cluster answers. Exports
#       ETCD_ENDPOINTS (host:port,...), ETCD_PIDS (array); with --tls (client certificates
#       required): ETCD_CA, ETCD_CERT, ETCD_KEY and ETCD_WRONG_CA (a CA that signed nothing);
#       with --auth: ETCD_USER and ETCD_PASSWORD (etcd's root user is set up too).
#   etcd_leader          the index of the member that leads now
#   etcd_kill_member I   kill -9 of member I (0-based)
#   etcd_cluster_stop    stops every member (also done at exit)
# shellcheck shell=bash
command -v etcd >/dev/null && command -v etcdctl >/dev/null ||
  die "etcd and etcdctl are missing (scripts/setup.sh installs etcd-server and etcd-client)"

ETCD_PIDS=()
etcd_cluster_count=0

etcd_make_certs() {  # <dir>: a CA, a server certificate for 127.0.0.1, a client one, another CA
  local dir=$1
  mkdir -p "$dir"
  (
    cd "$dir"
    for ca in ca wrong-ca; do
      openssl req -x509 -newkey rsa:2048 -nodes -keyout "$ca.key" -out "$ca.pem" -days 2 \
        -subj "/CN=dtrun-test-$ca" >/dev/null 2>&1
    done
    for who in server client; do
      openssl req -newkey rsa:2048 -nodes -keyout "$who.key" -out "$who.csr" \
        -subj "/CN=dtrun-test-$who" >/dev/null 2>&1
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' \
        >"$who.ext"
      openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile "$who.ext" -out "$who.pem" >/dev/null 2>&1
    done
  ) || die "openssl could not make the test certificates"
}

etcd_cluster_start() {
  local n=$1 tls=0 auth=0 i
  shift
  for arg in "$@"; do
    case $arg in --tls) tls=1 ;; --auth) auth=1 ;; *) die "etcd_cluster_start: unknown $arg" ;; esac
  done
  etcd_cluster_count=$((etcd_cluster_count + 1))
  local dir=$work/etcd$etcd_cluster_count scheme=http
  mkdir -p "$dir"
  local tls_args=()
  if [[ $tls -eq 1 ]]; then
    etcd_make_certs "$dir/certs"
    scheme=https
    ETCD_CA=$dir/certs/ca.pem ETCD_CERT=$dir/certs/client.pem ETCD_KEY=$dir/certs/client.key
    ETCD_WRONG_CA=$dir/certs/wrong-ca.pem
    tls_args=(--cert-file "$dir/certs/server.pem" --key-file "$dir/certs/server.key"
      --trusted-ca-file "$ETCD_CA" --client-cert-auth)
  fi
  local clients=() peers=() cluster=()
  for ((i = 0; i < n; i++)); do
    clients[i]=$(free_port)
    peers[i]=$(free_port)
    cluster+=("m$i=http://127.0.0.1:${peers[i]}")
  done
  local initial
  initial=$(IFS=,; echo "${cluster[*]}")
  ETCD_PIDS=()
  ETCD_DIR=$dir
  for ((i = 0; i < n; i++)); do
    # Small timings: a lost member's successor leader within a second; no fsync pressure beyond
    # what a test needs (the data dir is the test's own).
    local member=(etcd --name "m$i" --data-dir "$dir/m$i" --logger zap --log-level error
      --listen-client-urls "$scheme://127.0.0.1:${clients[i]}"
      --advertise-client-urls "$scheme://127.0.0.1:${clients[i]}"
      --listen-peer-urls "http://127.0.0.1:${peers[i]}"
      --initial-advertise-peer-urls "http://127.0.0.1:${peers[i]}"
      --initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token "t$$"
      --heartbeat-interval 50 --election-timeout 500 --quota-backend-bytes 67108864
      "${tls_args[@]}")
    printf '%q ' "${member[@]}" >"$dir/m$i.cmd"  # for etcd_restart_member
    "${member[@]}" >"$dir/m$i.log" 2>&1 &
    ETCD_PIDS[i]=$!
    pids+=("$!")
  done
  ETCD_ENDPOINTS=$(for ((i = 0; i < n; i++)); do printf '127.0.0.1:%s\n' "${clients[i]}"; done |
    paste -sd,)
  local ctl=(env ETCDCTL_API=3 etcdctl --endpoints="$ETCD_ENDPOINTS" --dial-timeout=2s)
  [[ $tls -eq 0 ]] || ctl+=(--cacert="$ETCD_CA" --cert="$ETCD_CERT" --key="$ETCD_KEY")
  local until=$((SECONDS + 20))
  until "${ctl[@]}" endpoint health >/dev/null 2>&1; do
    ((SECONDS < until)) || { tail -n 5 "$dir"/m*.log >&2; die "etcd cluster of $n did not start within 20 s"; }
    sleep 0.2
  done
  if [[ $auth -eq 1 ]]; then
    ETCD_USER=dtrun ETCD_PASSWORD=pw-$$-$RANDOM
    "${ctl[@]}" user add root:root-$$ >/dev/null &&
      "${ctl[@]}" user grant-role root root >/dev/null &&
      "${ctl[@]}" user add "$ETCD_USER:$ETCD_PASSWORD" >/dev/null &&
      "${ctl[@]}" role add dtrun >/dev/null &&
      "${ctl[@]}" role grant-permission dtrun --prefix=true readwrite /dtrun/ >/dev/null &&
      "${ctl[@]}" user grant-role "$ETCD_USER" dtrun >/dev/null &&
      "${ctl[@]}" auth enable >/dev/null || die "could not set up etcd's users"
  fi
  export ETCD_ENDPOINTS
}

# The index of the member that leads now (its position in ETCD_ENDPOINTS); nothing when none.
etcd_leader() {
  ETCDCTL_API=3 etcdctl --endpoints="$ETCD_ENDPOINTS" endpoint status -w json 2>/dev/null |
    "$PYTHON" -c '
import json, sys
for i, e in enumerate(json.load(sys.stdin)):
    if e["Status"]["header"]["member_id"] == e["Status"]["leader"]:
        print(i)'
}

etcd_kill_member() {
  kill -9 "${ETCD_PIDS[$1]}" 2>/dev/null || true
  wait "${ETCD_PIDS[$1]}" 2>/dev/null || true
}

# Member i, killed before, starts again on its ports and data (etcd restarted by its supervisor).
etcd_restart_member() {
  eval "$(cat "$ETCD_DIR/m$1.cmd")" >>"$ETCD_DIR/m$1.log" 2>&1 &
  ETCD_PIDS[$1]=$!
  pids+=("$!")
}

etcd_cluster_stop() {
  local pid
  for pid in "${ETCD_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${ETCD_PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
    forget "$pid"
  done
  ETCD_PIDS=()
}
