#!/bin/sh
# check-tailcall.sh LIB - check that libnvshare's dlsym hands names it does not intercept to the
# real dlsym with a TRUE TAIL CALL (a jump, not a call). glibc derives RTLD_NEXT from the return
# address of its dlsym; a tail call leaves the caller's return address in place, so RTLD_NEXT keeps
# its meaning for the caller (e.g. another LD_PRELOAD library after ours).
#
# What it checks in `objdump -d` of LIB:
#   - dlsym@@GLIBC_2.34 and dlsym@GLIBC_2.2.5 (or @GLIBC_2.17 on aarch64) are the same function;
#   - its body contains an indirect jump through a register (x86_64 `jmp *%reg`, aarch64 `br xN`),
#     which is the hand-over to the real dlsym, and no indirect call at all;
#   - its cold part (first-call resolution of the real dlsym), if any, jumps back into the body.
# Run: native/tools/check-tailcall.sh build/libnvshare.so   (or: cmake --build DIR --target check-tailcall)
set -eu
lib=${1:?usage: check-tailcall.sh path/to/libnvshare.so}
fail() { echo "check-tailcall: FAIL: $*" >&2; exit 1; }

dis=$(objdump -d --no-show-raw-insn "$lib")
fn() { printf '%s\n' "$dis" | awk -v h="<$1>:" '$2 == h {p = 1; next} p && /^$/ {exit} p'; }

body=$(fn 'dlsym@@GLIBC_2.34')
[ -n "$body" ] || fail "no dlsym@@GLIBC_2.34 in $lib"

syms=$(nm -D --defined-only "$lib")
new=$(printf '%s\n' "$syms" | awk '$3 == "dlsym@@GLIBC_2.34" {print $1}')
old=$(printf '%s\n' "$syms" | awk '$3 ~ /^dlsym@GLIBC_2\.(2\.5|17)$/ {print $1}')
[ -n "$old" ] || fail "no dlsym@GLIBC_2.2.5 (or @GLIBC_2.17) export"
[ "$new" = "$old" ] || fail "the two dlsym versions are different functions ($new vs $old)"

case $(uname -m) in
aarch64 | arm64) jmp='br[[:space:]]+x[0-9]+'; icall='blr[[:space:]]' ;;
*) jmp='jmp[[:space:]]+\*%r'; icall='call[[:space:]]+\*' ;;
esac
printf '%s\n' "$body" | grep -Eq "$jmp" || fail "no indirect tail jump in dlsym:
$body"
if printf '%s\n' "$body" | grep -Eq "$icall"; then fail "dlsym makes an indirect call:
$body"; fi

cold=$(fn 'nvs_dlsym.cold')
if [ -n "$cold" ]; then
    printf '%s\n' "$cold" | tail -n 1 | grep -Eq '(jmp|b)[[:space:]]+[0-9a-f]+ <dlsym@@GLIBC_2\.34\+' ||
        fail "the cold part of dlsym does not return into the tail jump:
$cold"
fi
echo "check-tailcall: OK: dlsym ends in a tail jump to the real dlsym:"
printf '%s\n' "$body" | grep -E "$jmp" | sed 's/^/    /'
