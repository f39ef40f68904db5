#!/usr/bin/env bash
# Writes a busybox test image as an archive, offline, for tests that drop it into an agent's
# <node-dir>/images/ (the booted nspawn tests, shell scenarios):
#
#   tests/support/busybox-image.sh OUT.tar [oci|docker] [NAME]
#
# The image is the one tests/support/images.rs builds (the host's static busybox as
# /bin/busybox, applet symlinks, /etc/passwd and /etc/group, Cmd ["sh"]), in one layer: a tar
# with uid/gid 0 and mtime 0, gzip without name or time, so the same host gives the same
# digests every time (GNU tar's bytes differ from the Rust builder's: not the same digests).
# NAME defaults to docker.io/library/busybox:test. Needs bash, GNU tar, gzip, sha256sum and
# busybox-static.
set -euo pipefail

out=${1:?usage: busybox-image.sh OUT.tar [oci|docker] [NAME]}
format=${2:-oci}
name=${3:-docker.io/library/busybox:test}
case "$format" in oci | docker) ;; *)
    echo "format must be oci or docker, not $format" >&2
    exit 2
    ;;
esac
busybox=""
for candidate in /bin/busybox /usr/bin/busybox; do
    [ -x "$candidate" ] && busybox=$candidate && break
done
if [ -z "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
    echo "a static busybox is needed (apt-get install busybox-static)" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,dev,etc,proc,root,sys,tmp,var/www}
chmod 755 "$root" "$root"/{bin,dev,etc,proc,root,sys,var,var/www}
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
chmod 755 "$root/bin/busybox"
for applet in sh sleep httpd nc wget nslookup cat echo ls env id true false hostname ps kill \
    mkdir rm touch test timeout ip ping tar; do
    ln -s busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
chmod 644 "$root/etc/passwd" "$root/etc/group"

tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu \
    -C "$root" -cf "$work/layer.tar" .
gzip -n -1 -c "$work/layer.tar" >"$work/layer.tar.gz"

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
diff_id=$(sha "$work/layer.tar")
layer=$(sha "$work/layer.tar.gz")

printf '{"architecture":"amd64","os":"linux","config":{"Cmd":["sh"],"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$diff_id" >"$work/config.json"
config=$(sha "$work/config.json")

pack=$work/pack
mkdir -p "$pack"
if [ "$format" = oci ]; then
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
        "$config" "$(size "$work/config.json")" "$layer" "$(size "$work/layer.tar.gz")" >"$work/manifest.json"
    manifest=$(sha "$work/manifest.json")
    mkdir -p "$pack/blobs/sha256"
    cp "$work/config.json" "$pack/blobs/sha256/$config"
    cp "$work/layer.tar.gz" "$pack/blobs/sha256/$layer"
    cp "$work/manifest.json" "$pack/blobs/sha256/$manifest"
    printf '{"imageLayoutVersion":"1.0.0"}' >"$pack/oci-layout"
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
        "$manifest" "$(size "$work/manifest.json")" "$name" "${name##*:}" >"$pack/index.json"
else
    mkdir -p "$pack/$diff_id"
    cp "$work/layer.tar" "$pack/$diff_id/layer.tar"
    cp "$work/config.json" "$pack/$config.json"
    printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' \
        "$config" "$name" "$diff_id" >"$pack/manifest.json"
fi
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$pack" -cf "$out.partial" .
mv "$out.partial" "$out"
