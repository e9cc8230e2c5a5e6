#!/usr/bin/env bash
# Regenerate the committed kubelet device-plugin stubs
#   src/xpushare/kubernetes/proto/deviceplugin_pb2.py
#   src/xpushare/kubernetes/proto/deviceplugin_pb2_grpc.py
# from src/xpushare/kubernetes/proto/deviceplugin.proto.
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
PROTO_REL="xpushare/kubernetes/proto/deviceplugin.proto"
PKG_DIR="$ROOT/src/xpushare/kubernetes/proto"
CACHE="${XPUSHARE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/xpushare-tools}"
VENV="$CACHE/grpcio-tools-$GRPCIO_TOOLS_VERSION"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import grpc_tools" 2>/dev/null; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: \
        "grpcio-tools==$GRPCIO_TOOLS_VERSION"
fi

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

# -I src makes the descriptor's file name "xpushare/kubernetes/proto/deviceplugin.proto", unique in
# protobuf's default descriptor pool, while the proto package stays "v1beta1" (the wire contract).
(cd "$ROOT/src" && "$VENV/bin/python" -m grpc_tools.protoc -I . \
    --python_out="$OUT" --grpc_python_out="$OUT" --pyi_out="$OUT" "$PROTO_REL")

GEN="$OUT/xpushare/kubernetes/proto"
# Relative import fix: the grpc stub imports the messages by their top-level path; make it a
# package-relative import so the stubs work wherever the package is installed or vendored.
sed -i 's/^from xpushare\.kubernetes\.proto import deviceplugin_pb2 as /from . import deviceplugin_pb2 as /' \
    "$GEN/deviceplugin_pb2_grpc.py"
grep -q '^from \. import deviceplugin_pb2 as ' "$GEN/deviceplugin_pb2_grpc.py" || {
    echo "regen_proto.sh: relative import fix did not apply" >&2; exit 1; }

if [ "${1:-}" = "--check" ]; then
    rc=0
    for f in deviceplugin_pb2.py deviceplugin_pb2_grpc.py deviceplugin_pb2.pyi; do
        diff -u "$PKG_DIR/$f" "$GEN/$f" || rc=1
    done
    [ $rc -eq 0 ] && echo "stubs are up to date"
    exit $rc
fi

for f in deviceplugin_pb2.py deviceplugin_pb2_grpc.py deviceplugin_pb2.pyi; do
    cp "$GEN/$f" "$PKG_DIR/$f"
done
echo "regenerated $PKG_DIR/deviceplugin_pb2{.py,.pyi,_grpc.py} with grpcio-tools $GRPCIO_TOOLS_VERSION"
