#!/bin/sh
# Build the Debian packages, install them into a clean root and run the
# installed programs from there.
#
# "Clean root" here: the four .debs are unpacked with dpkg-deb -x into an
# empty directory (no chroot: that would need a Debian base system and
# root).  What makes it honest instead:
#  - every NEEDED library of every ELF file in the root resolves either to
#    a file inside the root, or to a system library whose Debian package is
#    named in the Depends line of the package that ships the ELF file;
#  - the programs run from the root load libibv_coll from the root (checked
#    with the loader's own trace), never from the build tree or /usr/local,
#    and no RUNPATH points outside the root;
#  - a program compiled against the root's -dev files, found through its
#    pkg-config file and through its CMake package, runs against it.
# Usage: test_debs.sh BUILD_DIR VERSION
set -u
build=$1 version=$2
fail() {
	echo "FAIL: $*"
	exit 1
}
skip() {
	echo "SKIP: $*"
	exit 77
}
for t in cpack dpkg-deb dpkg-shlibdeps dpkg-query readelf file cc pkg-config; do
	command -v "$t" >/dev/null 2>&1 || skip "$t is missing (scripts/install-deps.sh installs it)"
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root" "$work/debs"

# 1. Build the packages.
(cd "$build" && cpack -G DEB -B "$work/debs" >"$work/cpack.log" 2>&1) ||
	{ cat "$work/cpack.log"; fail "cpack"; }
arch=$(dpkg --print-architecture)
lib=$work/debs/libibv-coll1_${version}-1_$arch.deb
dev=$work/debs/libibv-coll-dev_${version}-1_$arch.deb
utils=$work/debs/ibv-coll-utils_${version}-1_$arch.deb
nccl=$work/debs/libnccl-net-ibv-coll_${version}-1_$arch.deb
for d in "$lib" "$dev" "$utils" "$nccl"; do
	[ -f "$d" ] || { ls "$work/debs"; fail "no $(basename "$d")"; }
	echo "== $(basename "$d")"
	dpkg-deb -f "$d" Package Version Depends Section
done

# 2. What each package holds and says.
field() { dpkg-deb -f "$1" "$2"; }
files() { dpkg-deb -c "$1" | awk '{print $6}' | sed 's|^\./|/|'; }
[ "$(field "$lib" Package)" = libibv-coll1 ] || fail "library package name"
files "$lib" | grep -q "/libibv_coll\.so\.$version$" || fail "no libibv_coll.so.$version"
files "$lib" | grep -v '/$' | grep -vq "/libibv_coll\.so\.1" &&
	fail "libibv-coll1 ships more than the library: $(files "$lib" | grep -v '/$')"
dpkg-deb --ctrl-tarfile "$lib" | tar -xO ./shlibs 2>/dev/null |
	grep -q "^libibv_coll 1 libibv-coll1 (>= $version" || fail "no shlibs entry for libibv_coll 1"
for f in /include/ibv_coll/ibv_coll.h /include/ibv_coll/version.h /pkgconfig/ibv_coll.pc \
	/cmake/ibv_coll/ibv_collConfig.cmake /man3/ibv_coll_version.3 /examples/ibvc_boot.c \
	"/libibv_coll\.so$"; do
	files "$dev" | grep -q "$f" || fail "libibv-coll-dev lacks $f"
done
field "$dev" Depends | grep -q "libibv-coll1 (= $version-1)" || fail "dev Depends"
field "$dev" Depends | grep -q "libibverbs-dev" || fail "dev does not depend on libibverbs-dev"
for f in /bin/ibv_coll_devinfo /bin/ibv_coll_perf /bin/ibv_coll_run /bin/ibv_coll_allreduce \
	/sbin/ibv_coll_switchd /bin/ibv_coll_sim /man1/ibv_coll_perf.1 /man1/ibv_coll_sim.1 \
	/man8/ibv_coll_switchd.8; do
	files "$utils" | grep -q "$f$" || fail "ibv-coll-utils lacks $f"
done
field "$utils" Depends | grep -q "libibv-coll1 (= $version-1)" || fail "utils Depends"
for f in "/libnccl-net-ibv_coll\.so$" /man7/ibv_coll_nccl.7; do
	files "$nccl" | grep -q "$f" || fail "libnccl-net-ibv-coll lacks $f"
done
field "$nccl" Depends | grep -q "libibv-coll1 (= $version-1)" || fail "nccl plugin Depends"
field "$nccl" Suggests | grep -q "libcuda1" || fail "nccl plugin Suggests (the CUDA driver)"

# 3. Into the empty root; the SONAME and the file name agree.
for d in "$lib" "$dev" "$utils" "$nccl"; do
	dpkg-deb -x "$d" "$root" || fail "dpkg-deb -x $d"
done
so=$(find "$root" -name "libibv_coll.so.$version")
[ -n "$so" ] || fail "libibv_coll.so.$version not in the root"
readelf -d "$so" | grep -q "SONAME.*\[libibv_coll\.so\.1\]" || fail "SONAME is not libibv_coll.so.1"
libdir=$(dirname "$so")

# 4. Every NEEDED library: in the root, or in a package the Depends names.
deps_of() { # the package names in a Depends field, alternatives included
	field "$1" Depends | tr ',|' '\n\n' | sed 's/(.*//; s/ //g' | grep -v '^$'
}
for d in "$lib" "$utils" "$nccl"; do
	for f in $(files "$d" | grep -v '/$'); do
		file -L "$root$f" | grep -q ELF || continue
		if readelf -d "$root$f" | grep -E "R(UN)?PATH" | grep -v '\$ORIGIN' | grep -q .; then
			fail "$f has a RUNPATH outside the root: $(readelf -d "$root$f" | grep PATH)"
		fi
		for need in $(readelf -d "$root$f" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do
			if [ -e "$libdir/$need" ]; then
				continue
			fi
			path=$(ldconfig -p | awk -v n="$need" '$1 == n && /x86-64|64bit|\(libc6\)/ {print $NF; exit}')
			[ -n "$path" ] || path=$(ldconfig -p | awk -v n="$need" '$1 == n {print $NF; exit}')
			[ -n "$path" ] || fail "$f needs $need, found neither in the root nor on the system"
			owner=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -1 | cut -d: -f1)
			[ -n "$owner" ] || owner=$(dpkg -S "$path" 2>/dev/null | head -1 | cut -d: -f1)
			[ -n "$owner" ] || fail "$f needs $need ($path), which no Debian package owns"
			# The owner, or a virtual package it provides (libspdlog1.10
			# provides libspdlog1.10-fmt9, the name its shlibs gives).
			names=$(printf '%s\n%s\n' "$owner" "$(dpkg-query -W -f='${Provides}' "$owner" |
				tr ',' '\n' | sed 's/(.*//; s/ //g')")
			ok=
			for n in $names; do
				deps_of "$d" | grep -qx "$n" && ok=1
			done
			[ -n "$ok" ] ||
				fail "$f needs $need from $owner, which $(field "$d" Package) does not depend on"
		done
	done
done
echo "every NEEDED library resolves in the root or through Depends"

# 5. Run the installed programs from the root.
bin=$root/usr/bin
export LD_LIBRARY_PATH=
# The RUNPATH ($ORIGIN/../lib) finds the root's library; a build for /usr
# on a multiarch system has none (the loader's default path has it), and
# is pointed at the root's library directory instead.
if LD_TRACE_LOADED_OBJECTS=1 "$bin/ibv_coll_devinfo" | grep -q "libibv_coll.so.1 => not found"; then
	export LD_LIBRARY_PATH=$libdir
fi
loaded=$(LD_TRACE_LOADED_OBJECTS=1 "$bin/ibv_coll_devinfo" | awk '$1 == "libibv_coll.so.1" {print $3}')
[ "$(readlink -f "$loaded")" = "$(readlink -f "$so")" ] ||
	fail "ibv_coll_devinfo loads $loaded, not the root's $so"
"$bin/ibv_coll_devinfo" --version | grep -qx "ibv_coll_devinfo (ibv_coll) $version" || fail "--version"
"$bin/ibv_coll_devinfo" -l >"$work/devs" || fail "ibv_coll_devinfo -l"
grep -qx crxe_lo "$work/devs" || { cat "$work/devs"; fail "no crxe_lo"; }
"$bin/ibv_coll_devinfo" -d crxe_lo | grep -q "hca_id:.*crxe_lo" || fail "ibv_coll_devinfo -d crxe_lo"
"$bin/ibv_coll_run" --timeout 60 -n 2 -k 2 -- "$bin/ibv_coll_allreduce" -c 4096 -I 2 \
	>"$work/ar" 2>&1 || { cat "$work/ar"; fail "2-node allreduce from the root"; }
cat "$work/ar"
# ibv_coll_run prefixes each line with [node]; columns: collective count
# ranks ran avg_us GB/s #wrong.
[ "$(sed 's/^\[[0-9]*\] //' "$work/ar" | awk '$3 == 4 && $NF == 0' | wc -l)" -eq 6 ] ||
	fail "not six collectives of 4 ranks with 0 wrong"
# And through the root's switch.
"$root/usr/sbin/ibv_coll_switchd" -p 0 -P "$work/port" >"$work/sw" 2>&1 &
sw=$!
i=0
while [ ! -s "$work/port" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -s "$work/port" ] || { kill "$sw"; cat "$work/sw"; fail "the switch did not start"; }
"$bin/ibv_coll_run" --timeout 60 -n 2 -- "$bin/ibv_coll_allreduce" -c 4096 -I 1 -o allreduce \
	-s "127.0.0.1:$(cat "$work/port")" >"$work/arsw" 2>&1
rc=$?
kill "$sw"
wait "$sw" 2>/dev/null
cat "$work/arsw"
[ "$rc" -eq 0 ] && grep -q "ALLREDUCE .* switch .* 0$" "$work/arsw" ||
	fail "allreduce through the root's switch"

# 6. Build against the root's -dev files: pkg-config, then CMake.
pc=$(find "$root" -name ibv_coll.pc)
export PKG_CONFIG_PATH=$(dirname "$pc")
cflags=$(pkg-config --cflags ibv_coll) libs=$(pkg-config --libs ibv_coll) || fail "pkg-config"
echo "pkg-config: $cflags | $libs"
case $cflags in *libnl*) fail "pkg-config --cflags leaks libnl: $cflags" ;; esac
[ "$(pkg-config --modversion ibv_coll)" = "$version" ] || fail "pkg-config version"
cat >"$work/v.c" <<'CEOF'
#include <ibv_coll/ibv_coll.h>
#include <ibv_coll/version.h>
#include <stdio.h>
#include <string.h>
#if IBV_COLL_VERSION < IBV_COLL_VERSION_NUM(1, 1, 0)
#error "too old"
#endif
int main(void)
{
	int n = 0;
	struct ibv_coll_device **l = ibv_get_coll_device_list(&n);
	printf("%s %s %d\n", IBV_COLL_VERSION_STRING, ibv_coll_version(), n > 0);
	ibv_free_coll_device_list(l);
	return strcmp(IBV_COLL_VERSION_STRING, ibv_coll_version()) != 0;
}
CEOF
# shellcheck disable=SC2086
cc -Wall -Werror $cflags "$work/v.c" -o "$work/v" $libs || fail "compile with pkg-config"
[ "$(LD_LIBRARY_PATH=$libdir "$work/v")" = "$version $version 1" ] || fail "the program built with pkg-config"
if command -v cmake >/dev/null; then
	mkdir -p "$work/cm"
	cat >"$work/cm/CMakeLists.txt" <<'CEOF'
cmake_minimum_required(VERSION 3.20)
project(use_ibv_coll C)
find_package(ibv_coll 1.1 REQUIRED)
add_executable(v v.c)
target_link_libraries(v PRIVATE ibv_coll::ibv_coll)
CEOF
	cp "$work/v.c" "$work/cm/"
	(cmake -S "$work/cm" -B "$work/cm/b" -DCMAKE_PREFIX_PATH="$root/usr" >"$work/cm.log" 2>&1 &&
		cmake --build "$work/cm/b" >>"$work/cm.log" 2>&1) || { cat "$work/cm.log"; fail "CMake package"; }
	[ "$(LD_LIBRARY_PATH=$libdir "$work/cm/b/v")" = "$version $version 1" ] ||
		fail "the program built with the CMake package"
fi
# 7. The plugin from the root: NCCL's loader finds its tables by name.
plugin=$(find "$root" -name libnccl-net-ibv_coll.so)
[ -n "$plugin" ] || fail "no plugin in the root"
syms=$(nm -D --defined-only "$plugin" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$syms" = "ncclCollNetPlugin_v10 ncclCollNetPlugin_v11 ncclCollNetPlugin_v12 ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v12 " ] ||
	fail "the plugin exports: $syms"

echo "PASS: packages built, installed into $root and run from there"
