#!/bin/bash
# The verbs provider's tests on real kernel Soft-RoCE (rdma_rxe): boots
# Debian's kernel in QEMU (TCG) with a small busybox initramfs holding the
# modules, iproute2, libibverbs with its rxe provider and our binaries;
# the guest (guest-init.sh) makes rxe0..rxe2 on three veths bridged
# together and runs ibv_rc_pingpong between every pair, ibv_coll_devinfo,
# test_verbs and test_rc on them, and collectives (ring and switch)
# across the three through coll_node and ibv_coll_switchd.
#
#   run-rxe-vm.sh BUILD_DIR [--test-verbs PATH] [--test-rc PATH]
#                 [--rc-peer PATH] [--devinfo PATH] [--coll-node PATH]
#                 [--switchd PATH]
#
# Binaries default to their places in BUILD_DIR.  Everything goes to
# BUILD_DIR/rxe-vm/: the kernel package and its unpacked tree (cache/,
# reused), the initramfs, and guest.log, the guest's console, which is kept.
# Exits with the guest's verdict (0 or 1); 77 (what ctest reads as
# "skipped") after a "SKIP: why" line when QEMU, the kernel package (no
# network, no apt) or a needed tool is missing.
#
# Environment: RXE_KERNEL_DEB (a linux-image-*-amd64 .deb to use instead of
# downloading one), RXE_VM_TIMEOUT (seconds for the whole VM, default 240),
# RXE_VM_ACCEL (default tcg: under KVM without nested virtualisation the
# guest hangs at boot), RXE_VM_MEM (MiB, default 1024), RXE_VM_COLL=0 (skip
# the collective steps), RXE_VM_COLL_RANKS (ranks per coll_node,
# default 2), RXE_VM_{VERBS,RC,COLL}_TIMEOUT (seconds per step),
# RXE_VM_GUEST_ENV (NAME=VALUE words exported in the guest, for debugging:
# e.g. "GTEST_FILTER=Rc.* IBV_COLL_LOG_LEVEL=debug").
set -u

t_start=$(date +%s)
elapsed() { echo $(($(date +%s) - t_start)); }
log() { echo "[rxe-vm +$(elapsed)s] $*"; }
skip() {
	echo "SKIP: $*"
	exit 77
}
die() {
	echo "run-rxe-vm.sh: $*" >&2
	exit 1
}

[ $# -ge 1 ] || {
	echo "usage: $0 BUILD_DIR [--test-verbs P] [--test-rc P] [--rc-peer P] [--devinfo P] [--coll-node P] [--switchd P]" >&2
	exit 2
}
build=$(cd "$1" && pwd) || die "no build directory $1"
shift
test_verbs=$build/tests/verbs/test_verbs
test_rc=$build/tests/test_rc
rc_peer=$build/tests/rc_peer
devinfo=$build/examples/ibv_coll_devinfo
coll_node=$build/tests/coll_node
switchd=$build/emulator/ibv_coll_switchd
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || die "$1 needs a value"
	case $1 in
	--test-verbs) test_verbs=$2 ;;
	--test-rc) test_rc=$2 ;;
	--rc-peer) rc_peer=$2 ;;
	--devinfo) devinfo=$2 ;;
	--coll-node) coll_node=$2 ;;
	--switchd) switchd=$2 ;;
	*) die "unknown argument $1" ;;
	esac
	shift 2
done
here=$(cd "$(dirname "$0")" && pwd)
work=$build/rxe-vm
cache=$work/cache
coll=${RXE_VM_COLL:-1}

# ---- what the host must have --------------------------------------------------
[ "$(uname -m)" = x86_64 ] || skip "the rxe VM boots Debian's amd64 kernel; this is $(uname -m)"
qemu=$(command -v qemu-system-x86_64) ||
	skip "qemu-system-x86_64 is missing (Debian package qemu-system-x86; scripts/install-deps.sh installs it)"
[ -w /dev/null ] && [ -r /dev/urandom ] || skip "no access to /dev here (QEMU needs /dev/null and /dev/urandom)"
for t in dpkg-deb depmod modprobe cpio gzip ldd strip timeout; do
	command -v $t >/dev/null || skip "$t is missing (packages dpkg, kmod, cpio, gzip, libc-bin, binutils, coreutils)"
done
busybox=$(command -v busybox) || skip "busybox is missing (Debian package busybox-static)"
ldd "$busybox" >/dev/null 2>&1 && skip "$busybox is not static (install busybox-static)"
userland="/usr/sbin/ip /usr/bin/rdma /usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/ibv_rc_pingpong"
for b in $userland; do
	[ -x "$b" ] || skip "$b is missing (packages iproute2, ibverbs-utils)"
done
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
rxe_prov=$(ls /usr/lib/$multiarch/libibverbs/librxe-rdmav*.so 2>/dev/null | head -1)
[ -n "$rxe_prov" ] && [ -f /etc/libibverbs.d/rxe.driver ] ||
	skip "libibverbs' rxe provider is missing (package ibverbs-providers)"
ours="$test_verbs $test_rc $rc_peer $devinfo"
for b in $ours; do
	[ -x "$b" ] || die "$b is not built"
done
# coll_node and ibv_coll_switchd go in too; the collective steps need them.
for b in "$coll_node" "$switchd"; do
	if [ -x "$b" ]; then
		ours="$ours $b"
	elif [ "$coll" = 1 ]; then
		die "$b is not built (RXE_VM_COLL=1 needs it)"
	else
		log "note: $b is not built; the collective steps (off) could not run"
	fi
done
# test_rc starts the peer at the path it was compiled with; the initramfs
# holds every binary at its host path, so that must be this rc_peer.
grep -qaF "$rc_peer" "$test_rc" || die "$test_rc was not built with RC_PEER_PATH=$rc_peer"

# ---- the kernel: Debian's package, unpacked, never installed --------------------
mkdir -p "$cache" || die "cannot write $cache"
deb=${RXE_KERNEL_DEB:-}
if [ -z "$deb" ]; then
	# The version linux-image-amd64 points at; else whatever the cache has.
	kpkg=""
	command -v apt-cache >/dev/null &&
		kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
			awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	[ -n "$kpkg" ] && deb=$(ls "$cache/${kpkg}_"*.deb 2>/dev/null | tail -1)
	if [ -z "$deb" ] && [ -n "$kpkg" ]; then
		log "downloading $kpkg"
		# Bounded: without a network apt may wait on each mirror.
		(cd "$cache" && timeout 120 apt-get download "$kpkg" >apt-download.log 2>&1) ||
			echo "apt-get download $kpkg failed: $(tail -1 "$cache/apt-download.log")"
		deb=$(ls "$cache/${kpkg}_"*.deb 2>/dev/null | tail -1)
	fi
	[ -n "$deb" ] || deb=$(ls "$cache"/linux-image-*-amd64_*.deb 2>/dev/null | tail -1)
fi
[ -n "$deb" ] && [ -f "$deb" ] ||
	skip "no Debian kernel package: apt-get download linux-image-<version>-amd64 failed or apt knows no linux-image-amd64 (no network, no apt, stale apt lists?) and $cache has none; set RXE_KERNEL_DEB=/path/to/linux-image-*.deb"
kver=$(dpkg-deb -f "$deb" Package) || skip "$deb is not a Debian package"
kver=${kver#linux-image-}
kdir=$cache/kernel-$kver
if [ ! -f "$kdir/lib/modules/$kver/modules.dep" ]; then
	log "unpacking $(basename "$deb")"
	rm -rf "$kdir" "$kdir.tmp"
	dpkg -x "$deb" "$kdir.tmp" || skip "cannot unpack $deb"
	# The package's modules.dep comes from its postinst: make one.
	depmod -b "$kdir.tmp" "$kver" || die "depmod failed"
	mv "$kdir.tmp" "$kdir"
fi
vmlinuz=$kdir/boot/vmlinuz-$kver
[ -f "$vmlinuz" ] || skip "$deb holds no /boot/vmlinuz-$kver"
for m in rdma_rxe veth bridge; do
	modprobe -d "$kdir" -S "$kver" --show-depends $m >/dev/null 2>&1 ||
		skip "kernel $kver has no $m module"
done
log "kernel $kver"

# ---- the initramfs ------------------------------------------------------------
root=$work/initramfs
rm -rf "$root"
mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$root"/{etc/libibverbs.d,proc,sys,dev,run,tmp} || die mkdir
for d in bin sbin lib lib64; do ln -s usr/$d "$root/$d"; done

# Modules in load order: crc32_generic first, which rxe needs for its
# "crc32" hash without declaring it; bridge (with stp, llc) for the switch
# the three veths hang on.
moddir=$kdir/lib/modules/$kver
: >"$root/etc/rxe-modules.list"
for m in crc32_generic rdma_rxe veth bridge; do
	modprobe -d "$kdir" -S "$kver" --show-depends $m | awk '$1 == "insmod" {print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
	rel=${ko#"$moddir"/}
	mkdir -p "$root/lib/modules/$kver/$(dirname "$rel")"
	case $ko in
	*.ko.xz) xz -dc "$ko" >"$root/lib/modules/$kver/${rel%.xz}" && rel=${rel%.xz} ;;
	*.ko.zst) zstd -qdc "$ko" >"$root/lib/modules/$kver/${rel%.zst}" && rel=${rel%.zst} ;;
	*) cp "$ko" "$root/lib/modules/$kver/$rel" ;;
	esac || die "cannot copy $ko"
	echo "$rel" >>"$root/etc/rxe-modules.list"
done
for m in rdma_rxe veth bridge; do
	grep -q "/$m.ko" "$root/etc/rxe-modules.list" || die "$m did not make it into the initramfs"
done

# put FILE: FILE at its own path in the initramfs (its real file, and the
# path as a link to it), debug info stripped from ELF files.
put() {
	local src=$1 real
	real=$(readlink -f "$src")
	if [ ! -e "$root$real" ]; then
		mkdir -p "$(dirname "$root$real")"
		strip --strip-debug -o "$root$real" "$real" 2>/dev/null || cp "$real" "$root$real" ||
			die "cannot copy $real"
	fi
	if [ "$src" != "$real" ] && [ ! -e "$root$src" ] && [ ! -L "$root$src" ]; then
		mkdir -p "$(dirname "$root$src")"
		ln -s "$real" "$root$src"
	fi
}
for f in $userland $ours "$rxe_prov" /etc/libibverbs.d/rxe.driver; do put "$f"; done
# Every library the binaries and the provider load (libibv_coll.so from the
# build tree among them).
for f in $userland $ours "$rxe_prov"; do
	ldd "$f" | awk '/=> \// {print $3} /^\t\// {print $1}'
done | sort -u | while read -r lib; do put "$lib"; done
for f in $ours; do
	ldd "$f" | grep -q 'not found' && die "$f: $(ldd "$f" | grep 'not found')"
done
# busybox and its applets last, where nothing else is: /usr/sbin/ip is
# /usr/bin/ip, iproute2's, not the applet.
cp "$busybox" "$root/usr/bin/busybox"
for a in $("$busybox" --list); do
	[ -e "$root/usr/bin/$a" ] || [ -L "$root/usr/bin/$a" ] || ln -s busybox "$root/usr/bin/$a"
done
# The kernel's request_module() runs /sbin/modprobe.
[ -e "$root/usr/sbin/modprobe" ] || ln -s ../bin/busybox "$root/usr/sbin/modprobe"
"$root/usr/bin/ip" -V 2>&1 | grep -q iproute2 || die "the initramfs's ip is not iproute2's"

[ -d /etc/libnl ] && cp -r /etc/libnl "$root/etc/"
printf '127.0.0.1 localhost\n10.0.0.1 veth0\n10.0.0.2 veth1\n10.0.0.3 veth2\n' >"$root/etc/hosts"
echo 'root:x:0:0:root:/:/bin/sh' >"$root/etc/passwd"
limit=${RXE_VM_TIMEOUT:-240}
{
	echo "KVER='$kver'"
	echo "TEST_VERBS='$test_verbs'"
	echo "TEST_RC='$test_rc'"
	echo "RC_PEER='$rc_peer'"
	echo "DEVINFO='$devinfo'"
	echo "COLL_NODE='$coll_node'"
	echo "SWITCHD='$switchd'"
	echo "RXE_VM_COLL='$coll'"
	echo "MTU=${RXE_VM_MTU:-9000}"
	echo "COLL_RANKS='${RXE_VM_COLL_RANKS:-2}'"
	echo "STEP_TIMEOUT_VERBS=${RXE_VM_VERBS_TIMEOUT:-60}"
	echo "STEP_TIMEOUT_RC=${RXE_VM_RC_TIMEOUT:-120}"
	echo "STEP_TIMEOUT_COLL=${RXE_VM_COLL_TIMEOUT:-90}"
	# Guest uptime by which the steps must be over, so that a verdict
	# comes before QEMU's own limit (guest uptime ~ QEMU's run time).
	echo "DEADLINE=$((limit - 15))"
	# A sanitizer build's options reach the guest too, and whatever
	# RXE_VM_GUEST_ENV names (NAME=VALUE words, e.g. GTEST_FILTER=Rc.*).
	for v in ASAN_OPTIONS UBSAN_OPTIONS IBV_COLL_LOG_LEVEL; do
		[ -n "${!v:-}" ] && echo "export $v='${!v}'"
	done
	for w in ${RXE_VM_GUEST_ENV:-}; do
		case $w in
		[A-Za-z_]*=*) echo "export ${w%%=*}='${w#*=}'" ;;
		*) die "RXE_VM_GUEST_ENV: $w is not NAME=VALUE" ;;
		esac
	done
} >"$root/etc/rxe-vm.env"
cp "$here/guest-init.sh" "$root/init" && chmod 755 "$root/init" || die "no guest-init.sh"
initrd=$work/initrd.img
(cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 >"$initrd" || die "cannot build the initramfs"
log "initramfs $(du -h "$initrd" | cut -f1)"

# ---- boot ---------------------------------------------------------------------
accel=${RXE_VM_ACCEL:-tcg}
guest_log=$work/guest.log
qemu_err=$work/qemu.stderr
log "booting QEMU (accel $accel, at most ${limit}s); console in $guest_log"
t_boot=$(date +%s)
# The console goes to our output as it comes (so a hang shows how far it
# got) and, without the serial line's carriage returns, to guest.log.
timeout -k 10 "$limit" "$qemu" -accel "$accel" -m "${RXE_VM_MEM:-1024}" -smp 2 \
	-kernel "$vmlinuz" -initrd "$initrd" \
	-append "console=ttyS0 quiet panic=-1" \
	-display none -monitor none -serial stdio -no-reboot -nodefaults \
	</dev/null 2>"$qemu_err" | tr -d '\r' | tee "$guest_log"
qrc=${PIPESTATUS[0]}
boot_secs=$(($(date +%s) - t_boot))
log "QEMU exited with $qrc after ${boot_secs}s"

# ---- verdict --------------------------------------------------------------------
if ! grep -q '^RXEVM init start' "$guest_log"; then
	# The guest never ran our /init.  QEMU that failed without a word
	# from the guest could not run here; a guest that said something and
	# stopped (a panic, a hang) is a failure.
	if [ "$qrc" != 0 ] && [ "$qrc" != 124 ] && [ "$qrc" != 137 ] && [ ! -s "$guest_log" ]; then
		cat "$qemu_err" >&2
		skip "QEMU could not start the guest (exit $qrc): $(tail -1 "$qemu_err")"
	fi
	cat "$qemu_err" >&2
	die "FAIL: the guest did not reach /init (QEMU exit $qrc after ${boot_secs}s); see $guest_log"
fi
echo "==== summary (guest log: $guest_log)"
# Device states, errors, and each gtest run's totals and failures (the
# list at its end, not the lines with times).
grep -E '^RXEVM (port|gid|error)|^\[  (PASSED|FAILED|SKIPPED) *\]|test suites? ran|^RXEVM_VERDICT' "$guest_log" |
	grep -vE '^\[  (FAILED|SKIPPED) *\] .*\([0-9]+ ms\)$'

echo "==== steps (seconds; guest under TCG)"
awk 'function up(i) { for (i = 1; i <= NF; i++) if ($i ~ /^guest_uptime=/) return substr($i, 14) }
function row(name, res, secs, extra) { printf "  %-28s %-5s %7.1f%s\n", name, res, secs, extra }
/^RXEVM init start/ { t0 = up(); row("boot to /init", "", t0, "") }
/^RXEVM devices ready/ { row("/init to rxe devices ready", "", up() - t0, "") }
/^RXEVM_STEP [^ ]+ (PASS|FAIL) / {
	s = 0; x = ""
	for (i = 4; i <= NF; i++)
		if ($i ~ /^secs=/) s = substr($i, 6); else if ($i != "rc=0") x = x " " $i
	row($2, $3, s, x)
}
/^RXEVM_VERDICT/ { row("guest total", "", up(), "") }' "$guest_log"
verdict=$(grep '^RXEVM_VERDICT' "$guest_log" | tail -1)
echo "  VM ${boot_secs}s, whole run $(elapsed)s"
case $verdict in
"RXEVM_VERDICT PASS"*)
	echo "PASS: verbs provider tests on rdma_rxe (kernel $kver)"
	exit 0
	;;
"RXEVM_VERDICT FAIL"*)
	echo "FAIL: $verdict"
	exit 1
	;;
*)
	[ "$qrc" = 124 ] && echo "FAIL: the guest timed out after ${limit}s (RXE_VM_TIMEOUT) without a verdict"
	echo "FAIL: no verdict in $guest_log (QEMU exit $qrc)"
	exit 1
	;;
esac
