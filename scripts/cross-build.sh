#!/usr/bin/env bash
# Cross-builds the edge profile for another architecture into build-ARCH/, without LibTorch
# (-DPLEXUS_EDGE_TORCH=OFF: clients train with the portable trainer, which gives the same bits on
# every architecture), after installing what it needs: Debian's cross compiler, qemu-user-static
# and the ARCH libraries the client links. Runs the build's unit tests under qemu-user (riscv64:
# without the rapidcheck property suites, see below; compute_test's KnownBitsOnEveryArchitecture
# checks hashes computed on x86-64). Then, when the host's full build exists (build/), runs the `cross` ctest
# label there with this build's client under qemu (unless PLEXUS_CROSS_FEDERATION=0): a two-round mTLS federation beside an x86-64
# client, and a one-round federation that must publish the very model an x86-64 client's does.
#   aarch64  64-bit ARM: Debian bookworm's arm64 packages, installed beside the host's (multiarch)
#   riscv64  64-bit RISC-V: bookworm has no riscv64 port, so the libraries come from Debian
#            trixie's riscv64 packages, downloaded with a private APT configuration (its own state
#            and cache under build-riscv64-sysroot/, the host's APT untouched) and unpacked there
#            as a sysroot (edge/toolchains/riscv64-linux-gnu.cmake says how it is linked)
# usage: scripts/cross-build.sh aarch64|riscv64
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
if [ $# -ne 1 ]; then echo "cross-build.sh: needs one ARCH (aarch64 or riscv64); see $0 --help" >&2; exit 2; fi
arch=$1
case "$arch" in
  aarch64) debian_arch=arm64 triple=aarch64-linux-gnu emulator=qemu-aarch64-static ;;
  riscv64) debian_arch=riscv64 triple=riscv64-linux-gnu emulator=qemu-riscv64-static ;;
  *) echo "cross-build.sh: unknown ARCH '$arch' (aarch64 or riscv64); see $0 --help" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."

host_packages=("g++-$triple" qemu-user-static)
# riscv64 builds GoogleTest from Debian's source package (see below).
if [ "$arch" = riscv64 ]; then host_packages+=(googletest); fi
target_packages=(libgrpc++-dev libprotobuf-dev libssl-dev zlib1g-dev libspdlog-dev libfmt-dev libtomlplusplus-dev
  libgtest-dev libgmock-dev librapidcheck-dev)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
wanted=("${host_packages[@]}")
if [ "$arch" = aarch64 ]; then wanted+=("${target_packages[@]/%/:$debian_arch}"); fi
missing=()
for p in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then missing+=("$p"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "cross-build: installing ${missing[*]}"
  if [ "$arch" = aarch64 ] && ! dpkg --print-foreign-architectures | grep -qx "$debian_arch"; then
    $SUDO dpkg --add-architecture "$debian_arch"
  fi
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -q
  $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
fi
scripts/setup.sh >/dev/null  # the host's own packages: protoc and the gRPC plugin run on the host

extra=()
if [ "$arch" = riscv64 ]; then
  sysroot=$PWD/build-riscv64-sysroot/root
  if [ ! -f "$sysroot/.complete" ]; then
    echo "cross-build: the riscv64 sysroot from Debian trixie's packages"
    apt_dir=$PWD/build-riscv64-sysroot/apt
    rm -rf "$sysroot" "$apt_dir"
    mkdir -p "$apt_dir"/{state/lists/partial,cache/archives/partial,etc/sources.list.d,etc/preferences.d,etc/apt.conf.d}
    touch "$apt_dir/state/status"  # nothing installed: every dependency is downloaded
    echo "deb [arch=riscv64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
      >"$apt_dir/etc/sources.list"
    cat >"$apt_dir/apt.conf" <<CONF
Dir::State "$apt_dir/state";
Dir::State::status "$apt_dir/state/status";
Dir::Cache "$apt_dir/cache";
Dir::Etc::SourceList "$apt_dir/etc/sources.list";
Dir::Etc::SourceParts "$apt_dir/etc/sources.list.d";
Dir::Etc::Preferences "$apt_dir/etc/preferences";
Dir::Etc::PreferencesParts "$apt_dir/etc/preferences.d";
Dir::Etc::Parts "$apt_dir/etc/apt.conf.d";
APT::Architecture "riscv64";
APT::Architectures { "riscv64"; };
APT::Install-Recommends "false";
CONF
    APT_CONFIG=$apt_dir/apt.conf apt-get -q update >/dev/null
    # No GoogleTest or rapidcheck: bookworm's linker crashes on trixie's static test archives.
    # GoogleTest is built from the host's source package instead; rapidcheck has none, so the
    # property suites are left out of the riscv64 build (PLEXUS_GTEST_SOURCE).
    APT_CONFIG=$apt_dir/apt.conf apt-get -q -y install --download-only libgrpc++-dev libprotobuf-dev libssl-dev \
      zlib1g-dev libspdlog-dev libfmt-dev libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libstdc++-14-dev >/dev/null
    mkdir -p "$sysroot"
    for deb in "$apt_dir"/cache/archives/*.deb; do dpkg -x "$deb" "$sysroot"; done
    ln -sfn usr/lib "$sysroot/lib"  # trixie is merged-/usr
    # glibc's linker script names its files by absolute path: point it into the sysroot.
    sed -i "s| /lib/| $sysroot/lib/|g; s| /usr/lib/| $sysroot/usr/lib/|g" "$sysroot/usr/lib/riscv64-linux-gnu/libc.so"
    # gRPC's CMake config insists that its plugins exist beside its libraries: the host's run.
    mkdir -p "$sysroot/usr/bin"
    for plugin in /usr/bin/grpc_*_plugin; do ln -sf "$plugin" "$sysroot/usr/bin/"; done
    touch "$sysroot/.complete"
  fi
  extra=(-DPLEXUS_SYSROOT="$sysroot" -DPLEXUS_GTEST_SOURCE=/usr/src/googletest -DPLEXUS_BUILD_TESTS=ON)
  emulator_args="-L $sysroot"
else
  emulator_args=""
fi

dir=build-$arch
# Configured every time (quick when nothing changed), so that a build folder from an older
# script gets this one's settings.
# Without debug information (-O2 as RelWithDebInfo, no -g): these binaries only run under qemu here,
# and -g took half the compile time of a gRPC file (aarch64: 18.5 s against 8.5 s). -g never changes
# the code generated, so the bits the tests check are the same.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" \
  -DPLEXUS_PROFILE=edge -DPLEXUS_EDGE_TORCH=OFF -DCMAKE_TOOLCHAIN_FILE="$PWD/edge/toolchains/$triple.cmake" "${extra[@]}" >/dev/null
cmake --build "$dir" -j "${PLEXUS_JOBS:-2}"
file "$dir/apps/plexus/plexus" 2>/dev/null || true
echo "cross-build: unit tests of $dir under $emulator"
ctest --test-dir "$dir" -L unit --output-on-failure -j 2 --no-tests=error
if [ "${PLEXUS_CROSS_FEDERATION:-1}" = 0 ]; then
  echo "cross-build: PLEXUS_CROSS_FEDERATION=0: the cross federation test is left to the caller"
elif [ -x build/apps/plexus/plexus ]; then
  echo "cross-build: the cross federation test (host server, $arch client under $emulator)"
  cmake --build build -j "${PLEXUS_JOBS:-2}" --target cross_test plexus
  PLEXUS_CROSS_CLIENT="$(command -v "$emulator") $emulator_args $PWD/$dir/apps/plexus/plexus" \
    ctest --test-dir build -L cross --output-on-failure --no-tests=error
else
  echo "cross-build: no host build in build/: the cross federation test did not run (scripts/build.sh builds it)"
fi
