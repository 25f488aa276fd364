#!/usr/bin/env bash
# Builds a PostgreSQL image for the container tests on a machine that cannot reach any image
# registry: a minimal Debian root file system (debootstrap, from the Debian mirror apt is
# configured with), Debian's PostgreSQL server package installed in it without a cluster, the
# entrypoint next to this script, and `docker import`.
#
#   images/postgres/build.sh 15    # Debian 12 (bookworm), PostgreSQL 15 → tenure-postgres:15
#   images/postgres/build.sh 17    # Debian 13 (trixie),   PostgreSQL 17 → tenure-postgres:17
#
# Idempotent: a tag built from this very recipe (its digest is in the image's environment) is
# left as it is; one built from an older recipe is replaced. Needs root, debootstrap, a Docker
# engine and the Debian mirror. Environment: DEBIAN_MIRROR (default: the first Debian URI in
# apt's sources).
# `cargo xtask pg-image` runs this script; docs/testing.md tells its caveats.
set -euo pipefail

version="${1:?usage: build.sh 15|17}"
case "$version" in
  15) suite=bookworm ;;
  17) suite=trixie ;;
  *) echo "build.sh: no recipe for PostgreSQL $version (known: 15, 17)" >&2; exit 2 ;;
esac
tag="tenure-postgres:$version"
here="$(cd "$(dirname "$0")" && pwd)"

# The image carries the digest of its recipe: a tag built from another recipe is rebuilt.
recipe="$(cat "$here/build.sh" "$here/entrypoint.sh" | sha256sum | cut -c1-16)"
if docker image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$tag" 2>/dev/null \
  | grep -qx "TENURE_PG_RECIPE=$recipe"; then
  echo "pg-image: $tag is already built (recipe $recipe)"
  exit 0
fi
# The image this build replaces, removed once the new one has its tag.
previous="$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
for tool in debootstrap docker chroot tar; do
  command -v "$tool" >/dev/null || { echo "pg-image: $tool is missing" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "pg-image: debootstrap and chroot need root" >&2; exit 1; }

apt_mirror() {
  local files=(/etc/apt/sources.list.d/*.sources /etc/apt/sources.list)
  for file in "${files[@]}"; do
    [ -r "$file" ] || continue
    sed -n -e 's/^URIs: *//p' -e 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' "$file"
  done | tr ' ' '\n' | grep -E '/debian/?$' | head -n 1 || true
}
mirror="${DEBIAN_MIRROR:-$(apt_mirror)}"
mirror="${mirror:-http://deb.debian.org/debian}"

root="$(mktemp -d /var/tmp/tenure-pg-image.XXXXXX)"
chmod 0755 "$root" # the image's / : others must be able to enter it
log="$root.log"
cleanup() {
  umount "$root/proc" 2>/dev/null || true
  rm -rf --one-file-system "$root" "$log"
}
trap cleanup EXIT
# Runs a step with its output in the log, shown only if the step fails.
quietly() {
  "$@" >>"$log" 2>&1 || { tail -n 30 "$log" >&2; echo "pg-image: failed: $*" >&2; exit 1; }
}

started=$SECONDS
echo "pg-image: debootstrap $suite from $mirror"
quietly debootstrap --variant=minbase "$suite" "$root" "$mirror"

echo "pg-image: installing postgresql-$version (no cluster)"
mkdir -p "$root/etc/postgresql-common/createcluster.d"
echo "create_main_cluster = false" >"$root/etc/postgresql-common/createcluster.d/tenure.conf"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
mount -t proc proc "$root/proc"
quietly chroot "$root" /bin/sh -c "
  set -e
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends postgresql-$version
  apt-get clean
  rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/*
  rm -f /usr/sbin/policy-rc.d
"
umount "$root/proc"
install -m 0755 "$here/entrypoint.sh" "$root/usr/local/bin/docker-entrypoint.sh"
bin="/usr/lib/postgresql/$version/bin"
[ -x "$root$bin/postgres" ] || { echo "pg-image: $bin/postgres is missing" >&2; exit 1; }

echo "pg-image: importing $tag"
tar --numeric-owner -C "$root" -c . | docker import \
  --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
  --change 'CMD ["postgres"]' \
  --change 'EXPOSE 5432' \
  --change "ENV PATH=$bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change 'ENV PGDATA=/var/lib/postgresql/data' \
  --change 'ENV LANG=C.UTF-8' \
  --change "ENV TENURE_PG_RECIPE=$recipe" \
  - "$tag" >/dev/null
if [ -n "$previous" ]; then
  docker rmi "$previous" >/dev/null 2>&1 || true
fi
echo "pg-image: built $tag in $((SECONDS - started)) s"
