#!/usr/bin/env bash
# Builds the lab's control-plane binaries from their Go modules into a cache outside
# the repository, keyed by version. Re-running with a warm cache does nothing.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
CACHE_ROOT="${KUBEVIRT_OPS_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-ops-lab}"
BIN="$CACHE_ROOT/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}/bin"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
LDFLAGS_BASE="-s -w"

if [ "${1:-}" = "--print-bin" ]; then echo "$BIN"; exit 0; fi

# Sets need=(...) to what is missing from the cache.
find_missing() {
  need=()
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    [ -x "$BIN/$b" ] || need+=("$b")
  done
  [ -d "$BIN/../stages" ] || need+=(kwok-stages)
}
find_missing
if [ ${#need[@]} -eq 0 ]; then echo "$BIN"; exit 0; fi

command -v go >/dev/null || { echo "lab build: Go is required (go1.26 or newer) to build the lab binaries" >&2; exit 1; }
mkdir -p "$BIN"
# Several labs may start at once on a fresh machine: one build, the others wait for it.
exec 9>"$BIN/../.build.lock"
flock 9
find_missing  # a build that held the lock may have produced everything meanwhile
if [ ${#need[@]} -eq 0 ]; then echo "$BIN"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

if [ ! -x "$BIN/etcd" ]; then
  echo "lab build: etcd $ETCD_VERSION" >&2
  mkdir -p "$work/etcd" && cd "$work/etcd"
  go mod init lab.local/etcd >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1
  go build -ldflags "$LDFLAGS_BASE" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
fi

if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ] || [ ! -x "$BIN/kube-scheduler" ]; then
  echo "lab build: kube-apiserver, kube-controller-manager, kube-scheduler $K8S_VERSION" >&2
  mkdir -p "$work/k8s" && cd "$work/k8s"
  go mod init lab.local/k8s >/dev/null 2>&1
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  staging_ver="v0.${K8S_VERSION#v1.}"
  {
    echo "require k8s.io/kubernetes $K8S_VERSION"
    grep -E '=> \./staging/src/' "$gomod" | awk -v v="$staging_ver" '{print "replace " $1 " => " $1 " " v}'
  } >> go.mod
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
  go mod tidy -e >/dev/null 2>&1 || true
  go get "k8s.io/kubernetes@$K8S_VERSION" >/dev/null 2>&1 || true
  ver="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  mkdir -p out
  go build -ldflags "$LDFLAGS_BASE $ver" -o out/ k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
  for b in kube-apiserver kube-controller-manager kube-scheduler; do mv "out/$b" "$BIN/$b"; done
fi

if [ ! -x "$BIN/kwok" ] || [ ! -d "$BIN/../stages" ]; then
  echo "lab build: kwok $KWOK_VERSION" >&2
  GOBIN="$work/gobin" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$work/gobin/kwok" "$BIN/kwok"
  # The stages ship in the module; keep a copy next to the binary.
  stage_dir="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
  mkdir -p "$BIN/../stages" && cp -r "$stage_dir"/. "$BIN/../stages/" && chmod -R u+w "$BIN/../stages"
fi

echo "lab build: done in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
