#!/usr/bin/env bash
# Render the plain manifests (deploy/manifests/xpushare.yaml) from the Helm chart, for
# `kubectl apply -f deploy/manifests/xpushare.yaml`.
#
# Usage: tools/render_manifests.sh           (rewrite the file)
#        tools/render_manifests.sh --check   (exit 1 if the file differs from a fresh render)
# Env:   HELM=/path/to/helm (default: the helm that tools/fetch_helm.sh installs)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/deploy/manifests/xpushare.yaml"
HELM="${HELM:-$("$ROOT/tools/fetch_helm.sh")}"

render() {
    cat <<'HEADER'
# XPUShare: plain manifests rendered from deploy/helm/xpushare with default values.
# Do not edit: regenerate with tools/render_manifests.sh, which runs
#   helm template xpushare deploy/helm/xpushare --namespace xpushare-system --set namespace.create=true \
#     --set image.repository=registry.example.com/xpushare/xpushare
# Apply (docs/install.md), with the repository you pushed the image to in place of the example's:
#   sed 's|registry.example.com/xpushare/xpushare|REGISTRY/REPOSITORY|' deploy/manifests/xpushare.yaml | kubectl apply -f -
HEADER
    (cd "$ROOT" && "$HELM" template xpushare deploy/helm/xpushare \
        --namespace xpushare-system --set namespace.create=true \
        --set image.repository=registry.example.com/xpushare/xpushare)
}

if [ "${1:-}" = "--check" ]; then
    if diff -u "$OUT" <(render); then
        echo "deploy/manifests/xpushare.yaml matches the chart"
    else
        echo "deploy/manifests/xpushare.yaml is stale: run tools/render_manifests.sh" >&2
        exit 1
    fi
    exit 0
fi

render > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "wrote $OUT"
