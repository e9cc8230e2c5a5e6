#!/usr/bin/env bash
# Regenerate the committed kubelet API stubs
#   src/xpushare/kubernetes/proto/<name>_pb2.py, <name>_pb2.pyi, <name>_pb2_grpc.py
# from every src/xpushare/kubernetes/proto/<name>.proto (the device-plugin API, plugin
# registration, the DRA plugin API v1 and v1beta1).
#
# The generator is pinned: grpcio-tools 1.63.0 carries protoc 26.1, whose Python gencode
# ("Protobuf Python Version: 5.26.1") runs on every protobuf runtime >= 5.26 (pyproject's floor),
# and whose grpc stub asks for grpcio >= 1.63.0 (a RuntimeWarning below that).
# Newer grpcio-tools would raise both floors (protobuf's runtime version check refuses gencode
# newer than the runtime), so bump the pin only together with pyproject.toml.
#
# The tool is installed into a throwaway venv (cache dir), so the project's environment is untouched.
# Usage: tools/regen_proto.sh            (regenerate in place)
#        tools/regen_proto.sh --check    (regenerate into a temp dir and diff; exit 1 if stale)
set -euo pipefail

GRPCIO_TOOLS_VERSION="1.63.0"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROTO_REL_DIR="xpushare/kubernetes/proto"
PKG_DIR="$ROOT/src/xpushare/kubernetes/proto"
CACHE="${XPUSHARE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/xpushare-tools}"
VENV="$CACHE/grpcio-tools-$GRPCIO_TOOLS_VERSION"
PYTHON="${PYTHON:-python3}"

mkdir -p "$CACHE"
if command -v flock >/dev/null 2>&1; then  # one install at a time (parallel test workers)
    exec 9>"$CACHE/.grpcio-tools.lock"
    flock 9
fi
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import grpc_tools" 2>/dev/null; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: \
        "grpcio-tools==$GRPCIO_TOOLS_VERSION"
fi

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

NAMES=()
for proto in "$PKG_DIR"/*.proto; do
    NAMES+=("$(basename "$proto" .proto)")
done

# -I src makes each descriptor's file name "xpushare/kubernetes/proto/<name>.proto", unique in
# protobuf's default descriptor pool, while the proto packages stay those of the wire contract.
(cd "$ROOT/src" && "$VENV/bin/python" -m grpc_tools.protoc -I . \
    --python_out="$OUT" --grpc_python_out="$OUT" --pyi_out="$OUT" \
    $(for n in "${NAMES[@]}"; do printf '%s ' "$PROTO_REL_DIR/$n.proto"; done))

GEN="$OUT/xpushare/kubernetes/proto"
FILES=()
for n in "${NAMES[@]}"; do
    # Relative import fix: the grpc stub imports the messages by their top-level path; make it a
    # package-relative import so the stubs work wherever the package is installed or vendored.
    sed -i "s/^from xpushare\.kubernetes\.proto import ${n}_pb2 as /from . import ${n}_pb2 as /" \
        "$GEN/${n}_pb2_grpc.py"
    grep -q "^from \. import ${n}_pb2 as " "$GEN/${n}_pb2_grpc.py" || {
        echo "regen_proto.sh: relative import fix did not apply to ${n}_pb2_grpc.py" >&2; exit 1; }
    FILES+=("${n}_pb2.py" "${n}_pb2_grpc.py" "${n}_pb2.pyi")
done

if [ "${1:-}" = "--check" ]; then
    rc=0
    for f in "${FILES[@]}"; do
        if [ -f "$PKG_DIR/$f" ]; then
            diff -u "$PKG_DIR/$f" "$GEN/$f" || rc=1
        else
            echo "--- missing: $PKG_DIR/$f"; rc=1
        fi
    done
    [ $rc -eq 0 ] && echo "stubs are up to date"
    exit $rc
fi

for f in "${FILES[@]}"; do
    cp "$GEN/$f" "$PKG_DIR/$f"
done
echo "regenerated the stubs of ${NAMES[*]} in $PKG_DIR with grpcio-tools $GRPCIO_TOOLS_VERSION"
