#!/bin/sh
# Builds (unless given a directory) and inspects the packages:
#   sh tests/packaging_packages.sh [PKGDIR]          inspect the packages in PKGDIR
#   sh tests/packaging_packages.sh --build [PKGDIR]  build them there first (default
#                                                    target/packages; one release build)
# The build (packaging/build-packages.sh: dpkg-buildpackage -us -uc -b, rpmbuild) counts as a
# check; lintian runs here, as a check of its own.
# - lintian clean (errors and warnings), contents of the .debs, the maintainer scripts:
#   install neither enables nor starts the server or the agent, upgrade try-restarts them,
#   purge removes the generated files; the agent's dependencies (runc | crun, conmon, CNI
#   plugins, nftables);
# - the RPMs: file lists (`rpm -qlp`) and scriptlets (`rpm -qp --scripts`) use the systemd
#   macros' helper with restart on upgrade.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
build=0
if [ "${1:-}" = --build ]; then build=1; shift; fi
dir=${1:-}
if [ -z "$dir" ]; then
    dir=$here/target/packages
    build=1
fi
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
if [ "$build" = 1 ]; then
    start=$(date +%s)
    if SKIP_LINTIAN=1 sh "$here/packaging/build-packages.sh" "$dir"; then
        ok "packaging/build-packages.sh: dpkg-buildpackage -us -uc -b and rpmbuild ($(($(date +%s) - start)) s)"
    else
        bad "packaging/build-packages.sh failed"
        echo "packages: $passed passed, $failed failed"
        exit 1
    fi
fi
check() { name=$1; shift; if "$@" >/dev/null 2>&1; then ok "$name"; else bad "$name"; fi; }
has() { printf '%s\n' "$1" | grep -q -- "$2"; }
lacks() { ! printf '%s\n' "$1" | grep -q -- "$2"; }

bin=$(ls "$dir"/litek8s_*.deb | head -n 1)
srv=$(ls "$dir"/litek8s-server_*.deb | head -n 1)
check "lintian clean" lintian --fail-on error,warning "$bin" "$srv"

c=$(dpkg-deb -c "$bin")
check "litek8s ships /usr/bin/litek8s" has "$c" ' ./usr/bin/litek8s$'
# The packaged binary is a release build without the `failpoints` feature: no fail point's
# name or variable may be in it (src/failpoints.rs).
bin_tmp=$(mktemp -d)
dpkg-deb -x "$bin" "$bin_tmp"
check "the release binary has no fail points" sh -c "! strings '$bin_tmp/usr/bin/litek8s' | grep -qi -e failpoint -e write_delay -e lose_propose_reply -e 'bootstrap::delay'"
# ...and the same grep finds them in the test build (cargo test --features failpoints), so the
# check above can fail.
if [ -x "$here/target/debug/litek8s" ]; then
    check "the test build has its fail points" sh -c "strings '$here/target/debug/litek8s' | grep -q lose_propose_reply"
fi
rm -rf "$bin_tmp"
c=$(dpkg-deb -c "$srv")
check "server ships the unit" has "$c" ' ./\(usr/\)\{0,1\}lib/systemd/system/litek8s-server.service$'
check "server ships the hook" has "$c" ' ./usr/lib/litek8s/litek8s-server-prestart$'
check "server ships /etc/default/litek8s-server" has "$c" ' ./etc/default/litek8s-server$'
check "server ships no token" lacks "$c" 'server.env'
check "defaults file is a conffile" has "$(dpkg-deb -f "$srv" Conffiles 2>/dev/null; dpkg-deb -I "$srv" conffiles)" '/etc/default/litek8s-server'
deps=$(dpkg-deb -f "$bin" Depends)
check "litek8s depends only on libc/libgcc ($deps)" sh -c "printf '%s' '$deps' | tr ',' '\n' | grep -v -e libc6 -e libgcc-s1 | grep -q . && exit 1 || exit 0"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
dpkg-deb -e "$srv" "$tmp/ctl"
postinst=$(cat "$tmp/ctl/postinst")
# --no-enable: enable only re-creates links of a unit that was installed and enabled before
# (the e2e test checks that a fresh install leaves the unit disabled).
check "postinst enables only an already enabled unit" has "$postinst" 'deb-systemd-helper debian-installed'
check "postinst starts nothing on install" lacks "$postinst" 'deb-systemd-invoke start'
check "postinst try-restarts on upgrade" has "$postinst" 'try-restart'
check "postinst registers the unit for purge bookkeeping" has "$postinst" 'deb-systemd-helper update-state'
postrm=$(cat "$tmp/ctl/postrm")
check "postrm purge removes the token" has "$postrm" 'rm -f /etc/litek8s/server.env'
check "postrm purge removes the state" has "$postrm" 'rm -rf /var/lib/litek8s/apiserver'
check "no prerm stop before upgrade" sh -c "[ ! -e '$tmp/ctl/prerm' ] || ! grep -q 'deb-systemd-invoke stop' '$tmp/ctl/prerm' || grep -q 'remove' '$tmp/ctl/prerm'"

# The agent package: its binary, unit, hook and defaults, the runtime's packages as dependencies,
# nothing started at install, a running agent restarted on upgrade, purge removing the token
# and the credential.
agt=$(ls "$dir"/litek8s-agent_*.deb | head -n 1)
check "lintian clean (agent)" lintian --fail-on error,warning "$agt"
c=$(dpkg-deb -c "$agt")
check "agent ships the unit" has "$c" ' ./\(usr/\)\{0,1\}lib/systemd/system/litek8s-agent.service$'
check "agent ships the hook" has "$c" ' ./usr/lib/litek8s/litek8s-agent-prestart$'
check "agent ships /etc/default/litek8s-agent" has "$c" ' ./etc/default/litek8s-agent$'
check "agent ships docs/agent.md" has "$c" ' ./usr/share/doc/litek8s-agent/agent.md$'
check "agent ships /usr/bin/litek8s-agent" has "$c" ' ./usr/bin/litek8s-agent$'
check "agent ships its man page" has "$c" ' ./usr/share/man/man1/litek8s-agent.1.gz$'
agt_tmp=$(mktemp -d)
dpkg-deb -x "$agt" "$agt_tmp"
check "the agent binary has no fail points" sh -c "! strings '$agt_tmp/usr/bin/litek8s-agent' | grep -qi -e failpoint -e write_delay -e lose_propose_reply"
check "the agent binary answers --version" sh -c "'$agt_tmp/usr/bin/litek8s-agent' --version | grep -qx 'litek8s-agent [0-9.]*'"
rm -rf "$agt_tmp"
check "agent ships no token" lacks "$c" 'agent.env'
deps=$(dpkg-deb -f "$agt" Depends)
for dep in 'runc | crun' conmon containernetworking-plugins nftables 'litek8s (='; do
    check "agent depends on $dep" has "$deps" "$dep"
done
dpkg-deb -e "$agt" "$tmp/agent-ctl"
postinst=$(cat "$tmp/agent-ctl/postinst")
check "agent postinst starts nothing on install" lacks "$postinst" 'deb-systemd-invoke start'
check "agent postinst try-restarts on upgrade" has "$postinst" 'try-restart'
postrm=$(cat "$tmp/agent-ctl/postrm")
check "agent postrm purge removes the token" has "$postrm" 'rm -f /etc/litek8s/agent.env'
check "agent postrm purge removes the credential" has "$postrm" 'rm -rf /var/lib/litek8s/node-agent/credentials'

if ls "$dir"/*.rpm >/dev/null 2>&1; then
    rbin=$(ls "$dir"/litek8s-0*.rpm | head -n 1)
    rsrv=$(ls "$dir"/litek8s-server-*.rpm | head -n 1)
    check "rpm litek8s ships /usr/bin/litek8s" has "$(rpm -qlp "$rbin" 2>/dev/null)" '^/usr/bin/litek8s$'
    l=$(rpm -qlp "$rsrv" 2>/dev/null)
    check "rpm server ships the unit" has "$l" '^/usr/lib/systemd/system/litek8s-server.service$'
    check "rpm server ships the hook" has "$l" '^/usr/lib/litek8s/litek8s-server-prestart$'
    check "rpm server ships /etc/sysconfig/litek8s-server" has "$l" '^/etc/sysconfig/litek8s-server$'
    check "rpm sysconfig is %config(noreplace)" has "$(rpm -qcp "$rsrv" 2>/dev/null)" '/etc/sysconfig/litek8s-server'
    s=$(rpm -qp --scripts "$rsrv" 2>/dev/null)
    check "rpm %post applies presets on install" has "$s" 'install-system-units litek8s-server.service'
    check "rpm %preun disables on erase" has "$s" 'remove-system-units litek8s-server.service'
    check "rpm %postun restarts on upgrade" has "$s" 'mark-restart-system-units litek8s-server.service'
    ragt=$(ls "$dir"/litek8s-agent-*.rpm | head -n 1)
    l=$(rpm -qlp "$ragt" 2>/dev/null)
    check "rpm agent ships the unit" has "$l" '^/usr/lib/systemd/system/litek8s-agent.service$'
    check "rpm agent ships /usr/bin/litek8s-agent" has "$l" '^/usr/bin/litek8s-agent$'
    check "rpm agent ships the hook" has "$l" '^/usr/lib/litek8s/litek8s-agent-prestart$'
    check "rpm agent ships /etc/sysconfig/litek8s-agent" has "$l" '^/etc/sysconfig/litek8s-agent$'
    r=$(rpm -qp --requires "$ragt" 2>/dev/null)
    for dep in '(runc or crun)' conmon containernetworking-plugins nftables; do
        check "rpm agent requires $dep" has "$r" "$dep"
    done
    s=$(rpm -qp --scripts "$ragt" 2>/dev/null)
    check "rpm agent %postun restarts on upgrade" has "$s" 'mark-restart-system-units litek8s-agent.service'
else
    bad "no .rpm in $dir"
fi

echo "packages: $passed passed, $failed failed"
[ "$failed" = 0 ]
