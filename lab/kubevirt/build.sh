#!/usr/bin/env bash
# Builds virt-controller, virt-api and kubevirt-manifests (our generator calling
# virt-operator's own components package) of one KubeVirt release from the Go module proxy
# into a cache outside the repository, keyed by version. A warm cache does nothing.
#
# kubevirt.io/kubevirt replaces kubevirt.io/api and kubevirt.io/client-go with local staging
# directories that its module zip leaves empty, so a wrapper module requires it, points those
# two at their published modules of the same version and copies every other replace line.
set -euo pipefail

KUBEVIRT_VERSION="${KUBEVIRT_VERSION:-v1.7.0}"
case "$KUBEVIRT_VERSION" in v*) ;; *) KUBEVIRT_VERSION="v$KUBEVIRT_VERSION" ;; esac
CACHE_ROOT="${KUBEVIRT_OPS_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevirt-ops-lab}"
BIN="$CACHE_ROOT/kubevirt-${KUBEVIRT_VERSION}/bin"
HERE="$(cd "$(dirname "$0")" && pwd)"
PROGRAMS=(virt-controller virt-api kubevirt-manifests)

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false -mod=mod"

if [ "${1:-}" = "--print-bin" ]; then echo "$BIN"; exit 0; fi

# The generator is ours: a change of its sources rebuilds it (build.sh included, which writes part of it).
GENERATOR_SUM=$(cat "$HERE"/manifests/* "$HERE/build.sh" | sha256sum | cut -c1-16)
find_missing() {
  need=()
  for b in "${PROGRAMS[@]}"; do [ -x "$BIN/$b" ] || need+=("$b"); done
  if [ -x "$BIN/kubevirt-manifests" ] && [ "$(cat "$BIN/kubevirt-manifests.sum" 2>/dev/null)" != "$GENERATOR_SUM" ]; then
    rm -f "$BIN/kubevirt-manifests"
    need+=(kubevirt-manifests)
  fi
}
find_missing
if [ ${#need[@]} -eq 0 ]; then echo "$BIN"; exit 0; fi

command -v go >/dev/null || { echo "kubevirt build: Go is required (go1.26 or newer) to build KubeVirt $KUBEVIRT_VERSION" >&2; exit 1; }
mkdir -p "$BIN"
exec 9>"$BIN/../.build.lock"
flock 9
find_missing
if [ ${#need[@]} -eq 0 ]; then echo "$BIN"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
echo "kubevirt build: virt-controller, virt-api, kubevirt-manifests $KUBEVIRT_VERSION (a cold build takes several minutes)" >&2

cd "$work"
go mod init lab.local/kubevirt >/dev/null 2>&1
if ! info=$(go mod download -json "kubevirt.io/kubevirt@$KUBEVIRT_VERSION" 2>&1); then
  echo "kubevirt build: the Go module proxy did not serve kubevirt.io/kubevirt@$KUBEVIRT_VERSION: $(echo "$info" | tail -1)" >&2
  exit 1
fi
gomod=$(echo "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
moddir=$(echo "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
python3 - "$gomod" "$KUBEVIRT_VERSION" >> go.mod <<'PY'
import re, sys
text = open(sys.argv[1]).read()
version = sys.argv[2]
print(f"require kubevirt.io/kubevirt {version}")
# Every replace of kubevirt's go.mod, block or single line.
lines = []
for block in re.findall(r"^replace \((.*?)^\)", text, re.S | re.M):
    lines += block.splitlines()
lines += re.findall(r"^replace (\S.*=>.*)$", text, re.M)
for line in lines:
    line = line.strip()
    if not line or line.startswith("//"):
        continue
    old, new = [part.strip() for part in line.split("=>")]
    if new.startswith("./staging/src/"):
        module = old.split()[0]
        new = f"{module} {version}"
    print(f"replace {old} => {new}")
PY
# Modules a release requires that the Go module proxy does not serve, and the nearest
# served version the same code builds with (only monitoring helpers for now).
case "$KUBEVIRT_VERSION" in
  v1.8.*|v1.9.*) echo "replace github.com/rhobs/operator-observability-toolkit => github.com/rhobs/operator-observability-toolkit v0.0.29" >> go.mod ;;
esac
mkdir -p manifests
cp "$HERE/manifests/main.go" manifests/
# The CRDs virt-operator installs differ by release: take the list from its install strategy.
python3 - "$moddir/pkg/virt-operator/resource/generate/install/strategy.go" > manifests/crds_list.go <<'PY'
import re, sys
names = []
for name in re.findall(r"components\.(New\w+Crd)\b", open(sys.argv[1]).read()):
    if name not in names and name != "NewKubeVirtCrd":
        names.append(name)
print("package main\n")
print('import (\n\textv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"\n')
print('\t"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"\n)\n')
print("// installedCRDs: the CRD constructors install/strategy.go of this release calls.")
print("func installedCRDs() []func() (*extv1.CustomResourceDefinition, error) {")
print("\treturn []func() (*extv1.CustomResourceDefinition, error){")
for name in names:
    print("\t\tcomponents.%s," % name)
print("\t}\n}")
PY
# GetAllController gained a second argument in 1.8.
if grep -q "func GetAllController(namespace string)" "$moddir/pkg/virt-operator/resource/generate/rbac/controller.go"; then
  cp "$HERE/manifests/rbac_controller_v1.go.in" manifests/rbac_controller.go
else
  cp "$HERE/manifests/rbac_controller_v2.go.in" manifests/rbac_controller.go
fi
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "kubevirt.io/kubevirt/cmd/virt-api"
	_ "kubevirt.io/kubevirt/cmd/virt-controller"
)
GO
if ! go mod tidy -e > tidy.log 2>&1; then
  echo "kubevirt build: go mod tidy failed for kubevirt.io/kubevirt@$KUBEVIRT_VERSION; $(tail -3 tidy.log)" >&2
  exit 1
fi
# virt-api and virt-controller report this version (client-go's version/base.go).
ldflags="-s -w -X kubevirt.io/client-go/version.gitVersion=$KUBEVIRT_VERSION -X kubevirt.io/client-go/version.gitTreeState=clean -X kubevirt.io/client-go/version.gitCommit=$KUBEVIRT_VERSION"
mkdir -p out
commands=()
for b in virt-controller virt-api; do
  [ -x "$BIN/$b" ] || commands+=("kubevirt.io/kubevirt/cmd/$b")
done
if [ ${#commands[@]} -gt 0 ]; then go build -ldflags "$ldflags" -o out/ "${commands[@]}"; fi
[ -x "$BIN/kubevirt-manifests" ] || go build -ldflags "-s -w" -o out/kubevirt-manifests ./manifests
for b in "${PROGRAMS[@]}"; do [ -f "out/$b" ] && mv "out/$b" "$BIN/$b"; done
echo "$GENERATOR_SUM" > "$BIN/kubevirt-manifests.sum"
echo "kubevirt build: done in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
