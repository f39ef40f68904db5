# Shared helpers for the booted-Debian tests: the cached bookworm rootfs, per-test copies,
# booting them with systemd-nspawn, and running commands inside. POSIX-ish bash, sourced.
# Every wait is bounded; every container started here is registered for cleanup.

set -euo pipefail

: "${LITEK8S_TEST_CACHE:=/var/cache/litek8s-test}"
: "${LITEK8S_TEST_SUITE:=bookworm}"
: "${LITEK8S_TEST_MIRROR:=http://deb.debian.org/debian}"
: "${LITEK8S_TEST_WORK:=/var/tmp/litek8s-test}"
# Packages the rootfs needs beyond minbase: systemd as PID 1, dbus for systemctl, iproute2
# (ss, used by the prestart hook), procps for debugging, what litek8s-agent depends on
# (the containers have no network to fetch it: crun, conmon, the CNI plugins, nftables), and
# openssh-server for `litek8s cluster apply` (the apply scenario gives each copy its own keys).
ROOTFS_INCLUDE=systemd,systemd-sysv,dbus,iproute2,procps,ca-certificates,crun,conmon,containernetworking-plugins,nftables,openssh-server

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

need_tools() {
    local missing=()
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
    command -v nsenter >/dev/null || missing+=(util-linux)
    if ((${#missing[@]})); then
        log "installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# The bookworm rootfs, debootstrapped once and reused. A stamp file holding the package list
# marks a complete one, so an interrupted debootstrap, or one made for another list, is redone
# instead of being used.
ensure_rootfs() {
    local root="$LITEK8S_TEST_CACHE/$LITEK8S_TEST_SUITE"
    if [ -f "$root/.litek8s-complete" ] && [ "$(cat "$root/.litek8s-complete")" = "$ROOTFS_INCLUDE" ]; then
        printf '%s\n' "$root"
        return
    fi
    need_tools
    rm -rf "$root"
    mkdir -p "$LITEK8S_TEST_CACHE"
    log "debootstrapping $LITEK8S_TEST_SUITE into $root (once; cached afterwards)"
    timeout 1800 debootstrap --variant=minbase --include="$ROOTFS_INCLUDE" \
        "$LITEK8S_TEST_SUITE" "$root" "$LITEK8S_TEST_MIRROR" >"$LITEK8S_TEST_CACHE/debootstrap.log" 2>&1 \
        || die "debootstrap failed, see $LITEK8S_TEST_CACHE/debootstrap.log"
    # An empty machine-id makes every copy generate its own at first boot (like a golden image).
    : >"$root/etc/machine-id"
    # debootstrap copies the host's hostname; without it each container is named by -M.
    rm -f "$root/etc/hostname"
    rm -f "$root/var/lib/dbus/machine-id"
    # No network inside: apt must never try to fetch.
    : >"$root/etc/apt/sources.list"
    printf '%s' "$ROOTFS_INCLUDE" >"$root/.litek8s-complete"
    printf '%s\n' "$root"
}

CONTAINERS=()   # "name pid dir" of every booted container, for cleanup
SCRATCH=()      # directories to remove on cleanup (rootfs copies never booted)

# copy_rootfs NAME -> prints the path of a fresh copy of the cached rootfs
copy_rootfs() {
    local name=$1 src dst
    src=$(ensure_rootfs)
    dst="$LITEK8S_TEST_WORK/$name"
    rm -rf "$dst"
    mkdir -p "$LITEK8S_TEST_WORK"
    cp -a --reflink=auto "$src" "$dst"
    printf '%s\n' "$dst"
}

# boot NAME DIR [extra nspawn args...] -> sets BOOT_PID (the container's PID 1, seen from here)
boot() {
    local name=$1 dir=$2; shift 2
    local logf="$LITEK8S_TEST_WORK/$name.console.log"
    # --keep-unit/--register=no: no machined needed; --private-network isolates the container
    # unless the caller passes --network-namespace-path (the 3-server variant).
    systemd-nspawn --boot --register=no --keep-unit --quiet -M "$name" -D "$dir" "$@" \
        >"$logf" 2>&1 </dev/null &
    local nspawn_pid=$!
    CONTAINERS+=("$name $nspawn_pid $dir")
    # The container's init ends up as nspawn's child (nspawn is a subreaper; an intermediate
    # child exists briefly): wait (bounded) for a child running systemd.
    local i p pid=""
    for i in $(seq 1 100); do
        for p in $(pgrep -P "$nspawn_pid" 2>/dev/null || true); do
            [ "$(cat "/proc/$p/comm" 2>/dev/null)" = systemd ] && pid=$p
        done
        [ -n "$pid" ] && break
        kill -0 "$nspawn_pid" 2>/dev/null || die "nspawn for $name exited early, see $logf"
        sleep 0.1
    done
    [ -n "$pid" ] || die "container $name did not start within 10 s, see $logf"
    BOOT_PID=$pid
    # Wait for the boot to settle (bounded): running or degraded both mean systemd is up.
    local state=""
    for i in $(seq 1 120); do
        state=$(in_ct "$pid" systemctl is-system-running 2>/dev/null || true)
        case $state in running|degraded) break ;; esac
        sleep 0.5
    done
    case $state in running|degraded) log "$name booted (pid $pid, $state)" ;;
        *) die "container $name did not finish booting within 60 s (state '$state'), see $logf" ;;
    esac
}

# in_ct PID CMD... : run a command inside the container (all its namespaces), bounded.
in_ct() {
    local pid=$1; shift
    timeout 120 nsenter -t "$pid" -a -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}

cleanup_containers() {
    local c name pid dir
    for c in "${CONTAINERS[@]:-}"; do
        [ -n "$c" ] || continue
        read -r name pid dir <<<"$c"
        if kill -0 "$pid" 2>/dev/null; then
            # SIGRTMIN+4 to PID 1 = poweroff for systemd in a container; nspawn forwards SIGTERM
            # as a poweroff too. Escalate after 20 s.
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
            kill -KILL "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
        [ "${LITEK8S_TEST_KEEP:-0}" = 1 ] || rm -rf "$dir"
    done
    CONTAINERS=()
    if [ "${LITEK8S_TEST_KEEP:-0}" != 1 ]; then
        for dir in "${SCRATCH[@]:-}"; do [ -n "$dir" ] && rm -rf "$dir"; done
    fi
    SCRATCH=()
}

# --- machines on a bridge -----------------------------------------------------------------
# Each container has its own network namespace $NET_NS-N holding one end of a veth pair whose
# other end is a port of the bridge $NET_BRIDGE here ($NET_PREFIX.254); member N is
# $NET_PREFIX.N with a default route through the bridge, so the prestart hook finds its node IP
# the way it does on a real host. (tests/netns_lab uses 10.77.0.0/24 and lkpbr; this stays
# clear of it.) Used by tests/systemd/run.sh and bench/systemd.sh. The three names can be
# overridden (LITEK8S_NET_BRIDGE, LITEK8S_NET_PREFIX, LITEK8S_NET_NS) so that a second run of
# another scenario does not take the first one's network. net_up N makes N members (default 3,
# at most NET_MAX).
NET_BRIDGE=${LITEK8S_NET_BRIDGE:-lksdbr}
NET_PREFIX=${LITEK8S_NET_PREFIX:-10.78.0}
NET_NS=${LITEK8S_NET_NS:-lksd}
NET_MAX=6
net_up() {
    local count=${1:-3}
    net_down
    ip link add "$NET_BRIDGE" type bridge
    ip addr add "$NET_PREFIX.254/24" dev "$NET_BRIDGE"
    ip link set "$NET_BRIDGE" up
    local n
    for n in $(seq 1 "$count"); do
        ip netns add "$NET_NS-$n"
        ip link add "$NET_NS$n-h" type veth peer name "$NET_NS$n-c"
        ip link set "$NET_NS$n-h" master "$NET_BRIDGE"
        ip link set "$NET_NS$n-h" up
        ip link set "$NET_NS$n-c" netns "$NET_NS-$n"
        ip -n "$NET_NS-$n" link set "$NET_NS$n-c" name eth0
        ip -n "$NET_NS-$n" addr add "$NET_PREFIX.$n/24" dev eth0
        ip -n "$NET_NS-$n" link set eth0 up
        ip -n "$NET_NS-$n" link set lo up
        ip -n "$NET_NS-$n" route add default via "$NET_PREFIX.254"
    done
}
net_down() {
    local n
    for n in $(seq 1 "$NET_MAX"); do
        ip netns del "$NET_NS-$n" 2>/dev/null || true
        ip link del "$NET_NS$n-h" 2>/dev/null || true
    done
    ip link del "$NET_BRIDGE" 2>/dev/null || true
}
