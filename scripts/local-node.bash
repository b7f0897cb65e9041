# A real node for the local cluster (`scripts/local-cluster up --node`): containerd and runc from
# Debian's packages, kubelet, kube-proxy and kube-scheduler built from the same Kubernetes module as the
# control plane, and pod networking on CNI's bridge plugin. Sourced by scripts/local-cluster; not run
# on its own.
#
# What it is: one node named $NODE_NAME whose InternalIP is this machine's address on its default route
# ($NODE_IP). Pods get addresses in $POD_CIDR on a Linux bridge ($POD_BRIDGE) with this machine as their
# gateway, and reach the API server at the `kubernetes` Service (10.0.0.1:443), which kube-proxy's
# iptables rules send to kube-apiserver listening on $NODE_IP. The pause image every pod sandbox needs
# is compiled from Kubernetes' own build/pause/linux/pause.c and imported into containerd, since no
# registry can be reached. How it differs from a production node: docs/local-node.md.
#
# One node cluster per machine: the bridge, the iptables chains kube-proxy writes and the CNI
# addresses are the machine's, not the state directory's.

NODE_NAME=samplectl-node
POD_CIDR=10.88.0.0/16
POD_BRIDGE=samplectl0
PAUSE_IMAGE=registry.k8s.io/pause:3.10
NODE_BIN=$CACHE/kubernetes-node-$K8S_VERSION
NODE_COMPONENTS="containerd kubelet kube-proxy kube-scheduler"

node_dir() { echo "$STATE/node"; }

# This machine's address on its default route: what pods are routed to, and what the API server
# advertises in the `kubernetes` Service's endpoints.
node_ip() {
  ip -4 -o route get 192.0.2.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n 1
}

node_packages() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v buildah >/dev/null || missing+=(buildah)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v gcc >/dev/null || missing+=(gcc libc6-dev)
  [ ${#missing[@]} -eq 0 ] && return
  [ "$(id -u)" = 0 ] || die "--node needs root, and these packages: ${missing[*]}"
  say "installing ${missing[*]} from Debian's packages"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >"$CACHE/build/node-apt.log" 2>&1 ||
    { tail -n 20 "$CACHE/build/node-apt.log" >&2; die "apt-get install failed; log: $CACHE/build/node-apt.log"; }
}

build_node() {
  [ -x "$NODE_BIN/kubelet" ] && [ -x "$NODE_BIN/kube-proxy" ] && [ -x "$NODE_BIN/kube-scheduler" ] && return
  build_kubernetes
  go_env
  local work=$CACHE/build/kubernetes-$K8S_VERSION log=$CACHE/build/kubernetes-node-$K8S_VERSION.log minor ldflags p
  : >"$log"
  mkdir -p "$NODE_BIN.tmp"
  say "building kubelet, kube-proxy and kube-scheduler $K8S_VERSION from the control plane's module (log: $log)"
  # The wrapper module the control plane was built from already resolves every package of k8s.io/kubernetes.
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  build_with_progress "$work" "$log" "$NODE_BIN.tmp" "$ldflags" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kube-scheduler
  "$NODE_BIN.tmp/kubelet" --version >&2
  rm -rf "$NODE_BIN" && mv "$NODE_BIN.tmp" "$NODE_BIN"
}

# The pause image as an OCI archive, built once: pause.c from the Kubernetes module, linked statically,
# alone in an image from scratch (as upstream's build/pause/Dockerfile makes it).
build_pause() {
  local archive=$NODE_BIN/pause-3.10.tar src work
  [ -s "$archive" ] && return
  go_env
  src=$(cd "$CACHE/build/kubernetes-$K8S_VERSION" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  [ -f "$src" ] || die "no pause.c in the Kubernetes module ($src)"
  work=$(mktemp -d)
  gcc -Os -Wall -Werror -static -DVERSION="$K8S_VERSION" -o "$work/pause" "$src" || die "pause.c did not compile"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$work/Containerfile"
  buildah bud --quiet -f "$work/Containerfile" -t "$PAUSE_IMAGE" "$work" >/dev/null || die "buildah could not build the pause image"
  buildah push --quiet "$PAUSE_IMAGE" "oci-archive:$archive.tmp:$PAUSE_IMAGE" || die "buildah could not write the pause image"
  mv "$archive.tmp" "$archive"
  rm -rf "$work"
}

node_pki() { # the node's certificates, signed by the cluster's CA
  local d=$STATE/pki
  (
    cd "$d"
    exec 2>>"$STATE/pki.log" >&2
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=clientAuth" >client.ext
    for who in "kubelet:/O=system:nodes/CN=system:node:$NODE_NAME" "scheduler:/CN=system:kube-scheduler" \
      "proxy:/CN=system:kube-proxy"; do
      openssl req -new -newkey rsa:2048 -nodes -keyout "${who%%:*}.key" -out "${who%%:*}.csr" -subj "${who#*:}"
      openssl x509 -req -in "${who%%:*}.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
        -extfile client.ext -out "${who%%:*}.crt"
    done
    # The kubelet's serving certificate, which the API server checks when it proxies logs and exec.
    openssl req -new -newkey rsa:2048 -nodes -keyout kubelet-serving.key -out kubelet-serving.csr -subj "/CN=$NODE_NAME"
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth" "subjectAltName=IP:$NODE_IP,DNS:$NODE_NAME" >serving.ext
    openssl x509 -req -in kubelet-serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
      -extfile serving.ext -out kubelet-serving.crt
    rm -f ./*.csr ./*.ext ca.srl
  ) || die "the node's certificate generation failed; see $STATE/pki.log"
  write_kubeconfig "$STATE/kubelet.kubeconfig" kubelet "system:node:$NODE_NAME"
  write_kubeconfig "$STATE/scheduler.kubeconfig" scheduler kube-scheduler
  write_kubeconfig "$STATE/proxy.kubeconfig" proxy kube-proxy
  # Components on the node reach the API server at its advertised address, as pods do.
  sed -i "s|https://127.0.0.1:$API_PORT|https://$NODE_IP:$API_PORT|" "$STATE/kubelet.kubeconfig" "$STATE/proxy.kubeconfig"
}

# True when this machine lets root lower a process's OOM score, as a production node does.
can_lower_oom_score() {
  local bounding
  bounding=$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status)
  (( (16#$bounding >> 24) & 1 ))
}

write_node_config() {
  local n RESTRICT_OOM=false
  n=$(node_dir)
  can_lower_oom_score || RESTRICT_OOM=true
  mkdir -p "$n/containerd" "$n/cni" "$n/kubelet" "$n/pod-logs"
  cat >"$n/containerd.toml" <<EOF
version = 2
root = "$n/containerd/root"
state = "$n/containerd/state"
[grpc]
  address = "$n/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # No process here may lower its OOM score (CAP_SYS_RESOURCE is not in this machine's bounding set), and
  # the kubelet asks -998 for every sandbox: containerd then gives no score below its own.
  restrict_oom_score_adj = $RESTRICT_OOM
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$n/cni"
EOF
  cat >"$n/cni/10-samplectl.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "samplectl", "plugins": [
  {"type": "bridge", "bridge": "$POD_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$n/cni-ipam", "ranges": [[{"subnet": "$POD_CIDR"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
EOF
  cat >"$n/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $STATE/pki/kubelet-serving.crt
tlsPrivateKeyFile: $STATE/pki/kubelet-serving.key
containerRuntimeEndpoint: unix://$n/containerd.sock
cgroupDriver: cgroupfs
# This machine's cgroups are v1; kubelet 1.35 and later refuse them unless told not to.
failCgroupV1: false
failSwapOn: false
podLogsDir: $n/pod-logs
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
serializeImagePulls: false
# Images are imported, never pulled: the kubelet must not collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%"}
EOF
  cat >"$n/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
conntrack: {maxPerCore: 0}
EOF
}

node_ready() {
  [ "$("$K8S_BIN/kubectl" --kubeconfig "$STATE/kubeconfig" get node "$NODE_NAME" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

ctr_() { ctr -a "$(node_dir)/containerd.sock" -n k8s.io "$@"; }

start_node() {
  local n other
  n=$(node_dir)
  other=$(pgrep -af "$NODE_BIN/kubelet" | grep -v -- "--root-dir=$n/kubelet" | head -n 1 || true)
  [ -z "$other" ] || fail_start kubelet "cannot start: another node runs on this machine (one per machine: the bridge and kube-proxy's rules are shared): $other"
  # What a node killed without \`down\` left behind: its bridge, and kube-proxy's rules.
  ip link delete "$POD_BRIDGE" 2>/dev/null || true
  "$NODE_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  node_pki
  write_node_config
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 >/dev/null 2>&1 || true
  start containerd --config "$n/containerd.toml"
  wait_for containerd ctr_ version
  ctr_ images import "$NODE_BIN/pause-3.10.tar" >/dev/null || fail_start containerd "did not import the pause image"
  start kube-scheduler --kubeconfig="$STATE/scheduler.kubeconfig" --leader-elect=false \
    --authentication-kubeconfig="$STATE/scheduler.kubeconfig" --authorization-kubeconfig="$STATE/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --v=1
  start kube-proxy --config="$n/kube-proxy.yaml" --v=1
  start kubelet --config="$n/kubelet.yaml" --kubeconfig="$STATE/kubelet.kubeconfig" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --root-dir="$n/kubelet" --v=1
  wait_for kube-scheduler curl -fsSk --max-time 2 "https://127.0.0.1:$SCHED_PORT/healthz"
  wait_for kube-proxy curl -fsS --max-time 2 "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz"
  wait_for kubelet node_ready
}

# Everything the node leaves on the machine beyond its processes: pods' containers, their mounts, the
# bridge and kube-proxy's rules.
clean_node() {
  local n m
  n=$(node_dir)
  if [ -S "$n/containerd.sock" ] && is_running containerd; then
    for m in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$m" >/dev/null 2>&1 || true; done
  fi
  for c in kubelet kube-proxy kube-scheduler containerd; do stop_one "$c"; done
  # runc's shims outlive containerd; they and the containers they hold go with the node.
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $n/containerd.sock" 2>/dev/null || true
  if [ -d "$n" ]; then
    grep -o " $n/[^ ]*" /proc/self/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  fi
  ip link delete "$POD_BRIDGE" 2>/dev/null || true
  [ -x "$NODE_BIN/kube-proxy" ] && "$NODE_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
}
