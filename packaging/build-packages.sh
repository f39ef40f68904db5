#!/bin/sh
# Builds the Debian and RPM packages of litek8s from this checkout, in one command:
#
#   packaging/build-packages.sh [OUTDIR]      (default: target/packages)
#   packaging/build-packages.sh --release-build-only
#       (only the copy and the release build below, e.g. started early in the background by
#       tests/run-all.sh, so that the packaging step's build finds nothing left to do)
#
# The tracked and untracked-but-not-ignored files are copied (mtimes kept) to a stable
# build directory under $CARGO_TARGET_DIR (or target/), so cargo's fingerprints stay valid and
# the release build is done once for both formats. Then:
#   dpkg-buildpackage -us -uc -b  → OUTDIR/*.deb, checked with lintian (errors and warnings fail)
#   rpmbuild -bb rpm/litek8s.spec → OUTDIR/*.rpm (systemd macros vendored in rpm/macros.systemd)
# Needs: dpkg-dev, debhelper, lintian, rpm; cargo on PATH or in ~/.cargo/bin. No network.
# Set SKIP_LINTIAN=1 or SKIP_RPM=1 to skip a part.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
build_only=0
if [ "${1:-}" = --release-build-only ]; then
    build_only=1
    shift
fi
out=${1:-$repo/target/packages}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n 1)
build=$CARGO_TARGET_DIR/pkgbuild
src=$build/litek8s-$version

die() { echo "build-packages: $*" >&2; exit 1; }
for tool in dpkg-buildpackage dh rpmbuild git; do
    command -v "$tool" >/dev/null || die "missing $tool (apt-get install dpkg-dev debhelper rpm git)"
done

step() { echo "== $* ($(date +%H:%M:%S))"; }

step "copying the checkout to $src"
rm -rf "$src"
mkdir -p "$src"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
    | xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' _ \
    | tar --null -T - -cf -) | tar -xf - -C "$src"

# dpkg-buildpackage sets SOURCE_DATE_EPOCH from debian/changelog, and ring's build script
# reruns when it changes: use the same value for every build so none redoes the others' work
# (and the builds are reproducible).
SOURCE_DATE_EPOCH=$(cd "$src" && dpkg-parsechangelog -STimestamp)
export SOURCE_DATE_EPOCH

step "cargo build --release --locked --offline (litek8s, litek8s-agent)"
(cd "$src" && env -u CFLAGS -u CXXFLAGS -u CPPFLAGS -u LDFLAGS PATH="$PATH:$HOME/.cargo/bin" \
    cargo build --release --locked --offline --bin litek8s --bin litek8s-agent)
[ "$build_only" = 0 ] || exit 0

step "dpkg-buildpackage -us -uc -b"
rm -f "$build"/litek8s*_"$version"_*.deb "$build"/litek8s*_"$version"_*.changes "$build"/litek8s*_"$version"_*.buildinfo
(cd "$src" && dpkg-buildpackage -us -uc -b >"$build/dpkg-buildpackage.log" 2>&1) \
    || { tail -n 30 "$build/dpkg-buildpackage.log" >&2; die "dpkg-buildpackage failed, log: $build/dpkg-buildpackage.log"; }
rm -f "$out"/*.deb "$out"/*.ddeb "$out"/*.rpm
cp "$build"/*_"$version"_*.deb "$out"/
changes=$(ls "$build"/litek8s_"$version"_*.changes)

if [ "${SKIP_LINTIAN:-0}" != 1 ]; then
    step "lintian"
    command -v lintian >/dev/null || die "missing lintian (apt-get install lintian)"
    lintian --fail-on error,warning --info "$changes" || die "lintian found errors or warnings"
fi

if [ "${SKIP_RPM:-0}" != 1 ]; then
    step "rpmbuild -bb"
    macros=
    # Debian's rpm has no systemd macros: load the vendored ones.
    if [ -z "$(rpm --eval '%{?systemd_post:yes}')" ]; then
        macros=$repo/rpm/macros.systemd
    fi
    rpmtop=$build/rpmbuild
    rm -rf "$rpmtop"
    mkdir -p "$rpmtop"
    rpmbuild -bb --nodeps \
        ${macros:+--load "$macros"} \
        --define "_topdir $rpmtop" \
        --define "srcdir $src" \
        "$src/rpm/litek8s.spec" >"$build/rpmbuild.log" 2>&1 \
        || { tail -n 30 "$build/rpmbuild.log" >&2; die "rpmbuild failed, log: $build/rpmbuild.log"; }
    find "$rpmtop/RPMS" -name '*.rpm' -exec cp {} "$out"/ \;
fi

step "done"
ls -l "$out"
