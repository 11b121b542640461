#!/usr/bin/env bash
# Renders the base and every overlay with `kubectl kustomize`, validates every object against
# the Kubernetes 1.30 schemas offline (PyPI kubernetes-validate, which ships them; --strict
# refuses unknown fields), then checks the rules these manifests exist to keep (check.py).
#
#   bash deploy/kubernetes/validate.sh     # writes target/kubernetes/<name>.yaml
#
# Needs kubectl (Debian: kubernetes-client) and target/pyenv with kubernetes-validate (.ci/run
# installs both).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${IUID_ROUTER_PYENV:-target/pyenv}/bin
out=target/kubernetes
mkdir -p "$out"
for dir in deploy/kubernetes/base deploy/kubernetes/overlays/*/; do
  name=$(basename "$dir")
  # The fields kustomize v5 calls deprecated (bases, commonLabels, patchesStrategicMerge) are
  # the ones Debian's kubectl 1.20 (kustomize v2.0) understands; its warnings are left out.
  kubectl kustomize "$dir" 2> >(grep -v "is deprecated" >&2) > "$out/$name.yaml"
  "$py/kubernetes-validate" --strict --quiet --kubernetes-version 1.30.0 "$out/$name.yaml"
  "$py/python" deploy/kubernetes/check.py "$out/$name.yaml"
done
