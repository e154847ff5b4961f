#!/bin/sh
# Install what ibv_coll needs to build, test and run, from Debian's archive.
# Idempotent: a machine that has everything is left alone.
#   install-deps.sh         everything (build and the full test suite)
#   install-deps.sh build   what building everything (tests included) needs
set -eu

# Building: compilers, CMake, the libraries, GoogleTest.
pkgs="build-essential cmake pkg-config libibverbs-dev libnl-3-dev libnl-route-3-dev
libspdlog-dev libgtest-dev nlohmann-json3-dev libpcap-dev"
# PMIx (the programs' rendezvous under mpirun/srun) and Open MPI (the MPI
# drop-in library builds against it; its tests and benchmark run mpirun).
pkgs="$pkgs libpmix-dev libopenmpi-dev openmpi-bin"
if [ "${1:-}" != build ]; then
	# Testing: man page lint, namespaces, a capture decoded by tshark.
	pkgs="$pkgs mandoc iproute2 iputils-ping tshark"
	# groff -ww over the man pages; the Debian packages (tests/pkg): cpack
	# runs dpkg-shlibdeps and file(1).
	pkgs="$pkgs groff-base dpkg-dev file"
	# The style check (scripts/check-format.sh, ctest label "style").
	pkgs="$pkgs clang-format-14"
	# Slurm on this host (tests/slurm, ctest label "slurm"): the daemons,
	# srun, munge, and the mpi/pmix plugin (slurm-wlm-basic-plugins).  The
	# test runs daemons of its own on free ports; the packaged services
	# that systemd may start are not used.
	pkgs="$pkgs slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge"
	# The fuzz targets (libFuzzer, ASan and UBSan runtimes, the symbolizer).
	pkgs="$pkgs clang-14 libclang-rt-14-dev llvm-14"
	# The rxe VM test (tests/rxe): QEMU, a static busybox, libibverbs' rxe
	# provider and its tools for the guest, and what builds the initramfs.
	# The kernel package itself is downloaded, not installed, by the test.
	pkgs="$pkgs qemu-system-x86 busybox-static ibverbs-providers ibverbs-utils cpio kmod
xz-utils zstd"
fi

missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# tshark asks whether non-root users may capture; the default (no) is fine.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
